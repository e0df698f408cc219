# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The roll's decisions as filters give what their Jinja gave, rendered by Ansible's Templar.

roles/vllm_model/vars/main.yml held the roll's and the replica switch's decisions as Jinja
until issue 31 moved them to module_utils/fleet/roll.py. Its old text is a fixture
(tests/fixtures/roles/vllm_model_vars_main.e3ac45b.yml); each decision is rendered from it
and from today's vars/main.yml over the same hosts' facts, and the two must be equal. The
worlds below reach every branch of the old Jinja; test_roll.py states the values themselves.
"""

import base64
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.vllm_fleet.fleet.plugins.filter.roll import FilterModule
from repo_paths import FIXTURES, ROOT

OLD = yaml.safe_load(Path(FIXTURES / "roles" / "vllm_model_vars_main.e3ac45b.yml").read_text())
NEW = yaml.safe_load(Path(ROOT / "roles" / "vllm_model" / "vars" / "main.yml").read_text())
ROLL_DECISIONS = ["__vllm_model_leaves_balancer", "__vllm_model_batch_leaving"]
REPLICA_DECISIONS = ["__vllm_model_replica_hosts", "__vllm_model_replica_ephemeral",
                     "__vllm_model_replica_members_live", "__vllm_model_replica_scope_now",
                     "__vllm_model_replica_action", "__vllm_model_replica_refusals",
                     "__vllm_model_replica_failures", "__vllm_model_replica_failed",
                     "__vllm_model_replica_restore_failures", "__vllm_model_replica_blue_labels"]


def render(source, name, world):
    """`name` from `source` (a vars file's values) for host world['inventory_hostname']."""
    own = world["hostvars"][world["inventory_hostname"]]
    variables = {key: trust_as_template(value) if isinstance(value, str) else value
                 for key, value in source.items()}
    templar = Templar(loader=DataLoader(), variables={**variables, **own, **world})
    # pytest imports the collection from collections/ on sys.path, without Ansible's collection
    # loader: the filters are handed to this Templar's Jinja environment by their FQCN
    # (Templar.environment is deprecated in 2.19; its engine's is the same object).
    for filter_name, function in FilterModule().filters().items():
        templar._engine.environment.filters[f"vllm_fleet.fleet.{filter_name}"] = function
    return templar.template(trust_as_template("{{ %s }}" % name))


def sysctl(text):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def part(action, green="m@aaa", blue=None, **more):
    return {"action": action, "changed": action != "none", "role": "single", "green": green,
            "blue": blue, "green_group": None, "green_ranks": [], "blue_ranks": [],
            "green_revision": "aaa", "green_vllm": "0.32.0-cpu", **more}


FAILED = {"failed": True, "msg": "the unit did not start"}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
ROLL = {"hostvars": {
    "h1": {"__vllm_model_switch_plan": {"action": "switch"}},
    "h2": {"__vllm_model_switch_plan": {"action": "none"}},
    "h3": {"__vllm_model_switch_plan": {"action": "record"}},
    "h4": {"__vllm_model_switch_plan": {"action": "frontdoor"}},
    "h5": {"__vllm_model_switch_plan": SKIPPED},
    "h6": {},  # its plan never ran
    "h7": {"__vllm_model_switch_plan": {"action": "start"}},  # not in the batch
}, "ansible_play_batch": ["h1", "h2", "h3", "h4", "h5", "h6"],
    "vllm_fleet_balancers": ["lb1"], "ansible_check_mode": False}
REPLICA = {"hostvars": {
    # green ra on a (head) and b (worker), on two revisions (and one vLLM: unique ignores
    # case); b's blue is a replica with z, not in the run; green Rb (sorted after ra) on c
    # and d has a rank y not in the run and two vLLMs; c refuses; e's plan failed.
    "a": {"__vllm_model_replica_part": part("switch", green_group="ra", green_ranks=["a", "b"],
                                            blue="old@111", green_vllm="0.32.0-CPU"),
          "__vllm_model_replica_stop": {"changed": True},
          "__vllm_model_replica_start_head": FAILED, "__vllm_model_replica_gate_job": SKIPPED,
          "__vllm_model_replica_unwind": {"failed": True},
          "__vllm_model_ephemeral_read": sysctl("32768\t60999\n"),
          "vllm_fleet_replica_ip": "10.0.0.1", "vllm_fleet_replica_interface": "eth0"},
    "b": {"__vllm_model_replica_part": part("commit", green_group="ra", green_ranks=["a", "b"],
                                            blue_ranks=["b", "z"], blue="old@222",
                                            green_revision="bbb"),
          "__vllm_model_ephemeral_read": sysctl("10000 50000\n"),
          "vllm_fleet_replica_ip": "10.0.0.2"},
    "c": {"__vllm_model_replica_part": part("none", green_group="Rb", green_ranks=["c", "d", "y"],
                                            refused="green's port 8001 is taken"),
          "__vllm_model_replica_stop": {"failed": True, "msg": None},
          "__vllm_model_ephemeral_read": SKIPPED},
    "d": {"__vllm_model_replica_part": part("none", green_group="Rb", green_ranks=["c", "d", "y"],
                                            blue="OLD@111", green_vllm="0.33.0-cpu")},
    "e": {"__vllm_model_replica_part": {"failed": True, "msg": "no record"}},
    "z": {"__vllm_model_replica_part": part("switch"), "__vllm_model_replica_gate": FAILED},
}, "ansible_play_batch": ["a", "b", "c", "d", "e"], "groups": {"replica": ["a", "b", "c"]},
    "vllm_fleet_replica_group": "replica",
    "__vllm_model_replica_hosts_of_switch": ["a", "b", "c", "d"]}


def world(base, host, **more):
    hostvars = {name: {"inventory_hostname": name, **facts}
                for name, facts in base["hostvars"].items()}
    return {**base, "hostvars": hostvars, "inventory_hostname": host, **more}


ROLL_WORLDS = {
    "a host whose switch stops its model, in a fleet": world(ROLL, "h1"),
    "a host whose switch keeps its model serving": world(ROLL, "h3"),
    "a host whose plan was skipped, out of a fleet": world(ROLL, "h5", vllm_fleet_balancers=[]),
}
# Each with its scope as the set_fact fixed it: a whole switch with a host that left the
# run (z), a commit (b, and c with nothing to do), a scope of nones (c, d), an empty one
# with no replica group.
REPLICA_WORLDS = {
    "a replica head whose scope switches":
        world(REPLICA, "a", __vllm_model_replica_scope=["a", "b", "z"]),
    "a replica worker whose scope commits":
        world(REPLICA, "b", __vllm_model_replica_scope=["b", "c"]),
    "a host whose scope does nothing": world(REPLICA, "c", __vllm_model_replica_scope=["c", "d"]),
    "a host whose plan failed, with no replica group":
        world(REPLICA, "e", vllm_fleet_replica_group="", __vllm_model_replica_scope=[]),
}
# The firewall's plans: green's when it spans nodes, and the replica the host serves now
# unless it is green's model (ansible_local is the record).
GREEN_PLAN = {"model": "big", "members": [{"name": "a", "role": "head"}]}
BLUE_REPLICA = {"group": "old_replica", "role": "worker", "node_rank": 1, "peers": ["10.0.0.1"]}
FIREWALL = {"hostvars": {"a": {}}, "vllm_model_name": "big",
            "__vllm_model_replica_plan": GREEN_PLAN}
FIREWALL_WORLDS = {
    "a single-host model on a host that served nothing":
        world(FIREWALL, "a", __vllm_model_multinode=False),
    "a single-host model on a replica's rank":
        world(FIREWALL, "a", __vllm_model_multinode=False,
              ansible_local={"vllm_fleet": {"active": {"model": "old", "replica": BLUE_REPLICA}}}),
    "a replica on a rank of another replica":
        world(FIREWALL, "a", __vllm_model_multinode=True,
              ansible_local={"vllm_fleet": {"active": {"model": "old", "replica": BLUE_REPLICA}}}),
    "a replica on a rank of itself":
        world(FIREWALL, "a", __vllm_model_multinode=True,
              ansible_local={"vllm_fleet": {"active": {"model": "big", "replica": BLUE_REPLICA}}}),
    "a replica on a host serving alone":
        world(FIREWALL, "a", __vllm_model_multinode=True,
              ansible_local={"vllm_fleet": {"active": {"model": "old", "replica": None}}}),
}
FIREWALL_DECISIONS = ["vllm_service_replica_plans"]
CASES = [(case, facts, name) for worlds, names in ((ROLL_WORLDS, ROLL_DECISIONS),
                                                   (REPLICA_WORLDS, REPLICA_DECISIONS),
                                                   (FIREWALL_WORLDS, FIREWALL_DECISIONS))
         for case, facts in worlds.items() for name in names]


@pytest.mark.parametrize(("case", "facts", "name"), CASES,
                         ids=[f"{case}: {name}" for case, _facts, name in CASES])
def test_filter_gives_what_the_old_jinja_gave(case, facts, name):
    assert render(NEW, name, facts) == render(OLD, name, facts), case


def test_before_the_scope_is_fixed_failures_look_at_the_host_itself():
    facts = world(REPLICA, "z")
    for name in ("__vllm_model_replica_failures", "__vllm_model_replica_restore_failures",
                 "__vllm_model_replica_blue_labels"):
        assert render(NEW, name, facts) == render(OLD, name, facts)
    assert render(NEW, "__vllm_model_replica_failures", facts) == [
        "z: left the run during the switch (unreachable, or a task failed)",
        "z: the unit did not start"]


def test_vars_main_holds_each_decision_as_a_filter_call():
    for name in ROLL_DECISIONS + REPLICA_DECISIONS + FIREWALL_DECISIONS:
        assert "{%" not in NEW[name], name
        assert "vllm_fleet.fleet." in NEW[name] or name == "__vllm_model_replica_failed", name
