# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Make the repository importable as the collection vllm_fleet.fleet.

The repository root is the collection; collections/ansible_collections/
vllm_fleet/fleet is a symlink to it, so `ansible_collections.vllm_fleet.fleet`
resolves once collections/ is on sys.path, exactly as Ansible itself finds it.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))
FIXTURES = ROOT / "tests" / "fixtures"
