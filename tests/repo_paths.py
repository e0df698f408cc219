# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Paths the tests share; tests/ is on sys.path through tests/conftest.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# The model catalog and the model configs the fit reads (role defaults / files).
CATALOG = ROOT / "roles" / "vllm_model" / "defaults" / "main" / "catalog.yml"
MODEL_CONFIGS = ROOT / "roles" / "vllm_model" / "files" / "model_configs"
