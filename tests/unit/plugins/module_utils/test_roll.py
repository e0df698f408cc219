# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The roll's decisions: who leaves the balancers, and the replica switch across hosts."""

import base64

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import roll

WHOLE = "not in this run: a replica switches whole (run it with --limit covering all its hosts)."
SAME = "every rank must run the same."


def part(action, **more):
    return {"action": action, "green": "tiny_gqa@aaa", "blue": None, "green_group": None,
            "green_ranks": [], "blue_ranks": [], "green_revision": "aaa",
            "green_vllm": "0.32.0-cpu", **more}


def test_only_a_switch_that_stops_the_model_takes_the_host_out():
    plans = {"h1": {"action": "switch"}, "h2": {"action": "none"}, "h3": {"action": "record"},
             "h4": {"action": "frontdoor"}, "h5": {"action": "start"},
             "h6": {"skipped": True}, "h7": None}
    assert roll.batch_leaving(plans) == ["h1", "h5"]
    assert roll.switch_stops_model({"action": "heal"}) is True
    assert roll.switch_stops_model(None) is False


def test_replica_hosts_in_the_groups_order_with_blanks_for_what_is_not_set():
    facts = {"lab1": {"vllm_fleet_replica_ip": "172.31.250.11",
                      "vllm_fleet_replica_interface": "eth0"},
             "lab2": {"vllm_fleet_replica_ip": "172.31.250.12"}}
    assert roll.replica_hosts(facts) == [
        {"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
        {"name": "lab2", "ip": "172.31.250.12", "interface": ""}]


def test_ephemeral_cover_spans_every_hosts_range_and_the_default_where_unread():
    def read(text):
        return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}

    assert roll.ephemeral_cover({"a": read("40000\t50000\n"), "b": read("35000 45000\n")}) \
        == [35000, 50000]
    assert roll.ephemeral_cover({"a": read("40000 50000"), "b": {"skipped": True}}) \
        == [32768, 60999]
    assert roll.ephemeral_cover({}) == [32768, 60999]
    with pytest.raises(ValueError, match="'LOW HIGH', got '40000'"):
        roll.ephemeral_cover({"a": read("40000")})


def test_firewall_plans_are_greens_and_the_replica_served_now():
    green = {"model": "big", "members": [{"name": "a"}]}
    serving = {"model": "old", "replica": {"group": "old_replica", "role": "worker"}}
    assert roll.firewall_plans(green, serving, "big", "a") == [
        green, {"model": "old", "members": [{"group": "old_replica", "role": "worker",
                                             "name": "a"}]}]
    assert roll.firewall_plans(green, dict(serving, model="big"), "big", "a") == [green]
    assert roll.firewall_plans(None, {"model": "old", "replica": None}, "small", "a") == []
    assert roll.firewall_plans(None, None, "small", "a") == []


def test_members_are_the_hosts_whose_plan_ran():
    parts = {"a": part("switch"), "b": {"failed": True, "msg": "no record"}, "c": None,
             "d": part("none")}
    assert roll.replica_members(parts) == ["a", "d"]


def test_scope_is_the_host_and_its_replicas_ranks_in_the_switch():
    mine = part("switch", green_ranks=["a", "b"], blue_ranks=["a", "c", "gone"])
    assert roll.replica_scope(mine, "a", ["a", "b", "c", "d"]) == ["a", "b", "c"]
    assert roll.replica_scope(None, "a", ["b"]) == []


@pytest.mark.parametrize(("actions", "action"), [
    (["none", "none"], "none"),
    (["none", "commit"], "commit"),
    (["commit"], "commit"),
    (["commit", "switch", "none"], "switch"),
])
def test_scope_action(actions, action):
    assert roll.replica_action({f"h{i}": part(one) for i, one in enumerate(actions)}) == action


def test_refusals_name_each_missing_rank_refused_part_and_split_replica():
    parts = {
        "a": part("switch", green_group="r1", green_ranks=["a", "b", "x"]),
        "b": part("switch", green_group="r1", green_ranks=["a", "b", "x"],
                  green_revision="bbb", green_vllm="0.33.0-cpu",
                  blue="old@111", blue_ranks=["b", "y"], refused="port 8001 is taken"),
    }
    assert roll.replica_refusals(parts) == [
        f"a's green tiny_gqa@aaa is a replica with x, {WHOLE}",
        f"b's green tiny_gqa@aaa is a replica with x, {WHOLE}",
        f"b's blue old@111 is a replica with y, {WHOLE}",
        "b refuses its part: port 8001 is taken.",
        f"The ranks of replica r1 would run different revisions (aaa, bbb); {SAME}",
        f"The ranks of replica r1 would run different vLLMs (0.32.0-cpu, 0.33.0-cpu); {SAME}",
    ]
    assert roll.replica_refusals({"a": part("switch", green_group="r1", green_ranks=["a"])}) == []


def test_replicas_are_checked_in_name_order_and_ignore_case_as_jinja_did():
    parts = {"a": part("none", green_group="rB", green_revision="1"),
             "b": part("none", green_group="rB", green_revision="2"),
             "c": part("none", green_group="ra", green_vllm="A"),
             "d": part("none", green_group="RA", green_vllm="a")}
    # ra and RA are one replica; its vLLMs A and a are one build (Ansible's unique)
    assert roll.replica_refusals(parts) == [
        f"The ranks of replica rB would run different revisions (1, 2); {SAME}"]


def test_failures_name_the_host_and_its_message_and_hosts_that_left():
    results = {"a": {"stop": {"changed": True}, "start": {"failed": True, "msg": "no health"}},
               "b": {"stop": {"failed": True}}, "c": {}}
    assert roll.replica_failures(results, batch=["a", "b"]) == [
        "a: no health", "b: failed",
        "c: left the run during the switch (unreachable, or a task failed)"]
    assert roll.replica_failures(results) == ["a: no health", "b: failed"]
    assert roll.replica_failures({"a": {"stop": {"skipped": True}}}, batch=["a"]) == []


def test_blue_labels_once_each_and_nothing_where_no_model_served():
    parts = {"a": part("switch", blue="old@111"), "b": part("switch", blue="OLD@111"),
             "c": part("switch"), "d": None}
    assert roll.replica_blue_labels(parts) == "old@111, nothing"
