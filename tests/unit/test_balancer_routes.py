# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The balancer refuses every route the front door never forwards (one list, two proxies).

A new-user trial found the balancer's list shorter: /invocations, /load and
/kv_event_sources (and paths under any listed route) passed its preflight while the
front door refused them. The balancer's list now comes from the front door's owner
(module_utils/engine/vllm_engine.py: NEVER_FORWARDED) through the never_forwarded filter; the
preflight itself runs against real HAProxy in tests/integration/test_balancer_access.py.
"""

import pathlib

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.frontdoor import FilterModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.vllm_engine import (
    NEVER_FORWARDED,
)

ROLE = pathlib.Path(__file__).resolve().parents[2] / "roles" / "vllm_balancer"
NEVER_FORWARDED_FILTER = FilterModule().filters()["never_forwarded"]


def test_the_balancer_takes_its_list_from_the_front_doors_owner():
    never = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__vllm_balancer_never_paths"]
    assert never == "{{ ['/health', '/metrics'] | vllm_fleet.fleet.never_forwarded }}"


def test_the_list_is_the_front_doors_with_the_balancers_own_paths():
    never = NEVER_FORWARDED_FILTER(["/health", "/metrics"])
    assert set(never) - set(NEVER_FORWARDED) == {"/health", "/metrics"}
    assert set(NEVER_FORWARDED) <= set(never)
    assert never == sorted(never)
    assert {"/invocations", "/load", "/kv_event_sources", "/sleep", "/wake_up"} <= set(never)


def test_a_path_counts_once():
    assert NEVER_FORWARDED_FILTER(["/sleep"]) == sorted(NEVER_FORWARDED)


@pytest.mark.parametrize("own", ["/health", ["health"], [None]])
def test_anything_but_a_list_of_paths_is_refused_by_name(own):
    with pytest.raises(AnsibleFilterError, match="never_forwarded wants a list of paths"):
        NEVER_FORWARDED_FILTER(own)
