# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""host_path and replica_rank_file: the roles read host paths from the code that owns them."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.host_path import FilterModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import replica_watch
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import frontdoor
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import switch_lock

FILTERS = FilterModule().filters()


def test_each_name_is_its_owners_constant():
    assert FILTERS["host_path"]("record") == record.RECORD_FILE == (
        "/etc/ansible/facts.d/vllm_fleet.fact")
    assert FILTERS["host_path"]("rank_dir") == replica_watch.RANK_DIR == "/run/vllm-fleet/ranks"
    assert FILTERS["host_path"]("switch_lock") == switch_lock.LOCK_FILE == (
        "/run/vllm-fleet/cutover.lock")
    assert FILTERS["host_path"]("frontdoor_own_key") == frontdoor.OWN_KEY_FILE == (
        "/etc/nginx/vllm-fleet/own.key")


def test_an_unknown_name_is_refused_naming_the_known_ones():
    with pytest.raises(AnsibleFilterError) as caught:
        FILTERS["host_path"]("records")
    assert str(caught.value) == (
        "host_path: no host path named 'records'; known: frontdoor_own_key, rank_dir, record, "
        "switch_lock, venv_lock")


def test_rank_file_is_replica_watchs():
    assert FILTERS["replica_rank_file"]("tiny_gqa") == "/run/vllm-fleet/ranks/tiny_gqa.json"
    assert FILTERS["replica_rank_file"]("tiny_gqa") == replica_watch.rank_file("tiny_gqa")
