# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The balancer refuses every route the front door never forwards (one list, two proxies).

A new-user trial found the balancer's list shorter: /invocations, /load and
/kv_event_sources (and paths under any listed route) passed its preflight while the
front door refused them. The preflight itself runs against real HAProxy in
tests/integration/test_balancer_access.py.
"""

import pathlib

import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.vllm_engine import NEVER_FORWARDED

ROLE = pathlib.Path(__file__).resolve().parents[2] / "roles" / "vllm_balancer"
NEVER = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__vllm_balancer_never_paths"]


def test_the_balancer_refuses_what_the_front_door_never_forwards():
    assert set(NEVER_FORWARDED) <= set(NEVER)


def test_the_balancer_refuses_its_own_health_and_one_hosts_metrics_and_nothing_else():
    assert set(NEVER) - set(NEVER_FORWARDED) == {"/health", "/metrics"}
