# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The roll filters as templates call them: host_facts over hostvars, then a decision."""

import collections.abc

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.roll import FilterModule

FILTERS = FilterModule().filters()


class HostVars(collections.abc.Mapping):
    """Like Ansible's HostVars: an unknown host gives an undefined value, not a KeyError."""

    def __init__(self, hosts):
        self.hosts = hosts

    def __getitem__(self, host):
        return self.hosts.get(host, "undefined marker")

    def __contains__(self, host):
        return host in self.hosts

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self):
        return len(self.hosts)


HOSTVARS = HostVars({"a": {"__vllm_model_switch_plan": {"action": "switch"}, "ip": "10.0.0.1"},
                     "b": {"__vllm_model_switch_plan": {"action": "none"}}})


def test_filter_names():
    assert sorted(FILTERS) == [
        "batch_leaving", "ephemeral_cover", "firewall_plans", "host_facts", "replica_action",
        "replica_blue_labels", "replica_failures", "replica_hosts", "replica_members",
        "replica_refusals", "replica_scope", "switch_stops_model"]


def test_host_facts_one_name_is_none_where_a_host_lacks_it():
    facts = FILTERS["host_facts"](HOSTVARS, ["b", "a", "ghost"], "__vllm_model_switch_plan")
    assert facts == {"b": {"action": "none"}, "a": {"action": "switch"}, "ghost": None}
    assert list(facts) == ["b", "a", "ghost"]


def test_host_facts_several_names_keep_only_those_set():
    assert FILTERS["host_facts"](HOSTVARS, ["a", "b", "ghost"], ["ip", "interface"]) == {
        "a": {"ip": "10.0.0.1"}, "b": {}, "ghost": {}}


def test_batch_leaving_from_hostvars():
    plans = FILTERS["host_facts"](HOSTVARS, ["a", "b"], "__vllm_model_switch_plan")
    assert FILTERS["batch_leaving"](plans) == ["a"]


def test_errors_name_the_filter():
    with pytest.raises(AnsibleFilterError, match=r"^replica_action: 'action'"):
        FILTERS["replica_action"]({"a": {"failed": True}})
