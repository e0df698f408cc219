# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""playbooks/status.yml's fleet table, rendered by Ansible's Templar from the playbook itself.

Issue 35 item 3: a sleeping model is a state - the table names each model of a
host's record as serving, sleeping or stopped (the record's `sleeping` list as
the warm switch writes it).
"""

from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.vllm_fleet.fleet.plugins.filter.frontdoor import FilterModule
from repo_paths import ROOT

PLAYS = yaml.safe_load(Path(ROOT / "playbooks" / "status.yml").read_text())
TABLE_TASK = next(play for play in PLAYS if play["hosts"] == "localhost")["tasks"][0]


def table(hostvars):
    variables = {key: trust_as_template(value) for key, value in TABLE_TASK["vars"].items()}
    variables.update(hostvars=hostvars, groups={"vllm_hosts": list(hostvars)})
    templar = Templar(loader=DataLoader(), variables=variables)
    for name, function in FilterModule().filters().items():
        templar._engine.environment.filters[f"vllm_fleet.fleet.{name}"] = function
    return templar.template(trust_as_template("{{ __status_table }}"))


def test_the_table_names_each_model_serving_sleeping_or_stopped():
    warm = {"active": {"model": "tiny_mla", "revision": "b" * 40, "since": "T2"},
            "sleeping": [{"model": "tiny_gqa", "level": 1, "since": "T2", "main_pid": 42}],
            "previous": {"model": "tiny_gqa"}}
    cold = {"active": {"model": "tiny_gqa", "revision": "a" * 40, "since": "T1"},
            "previous": {"model": "tiny_mla"}}
    rows = table({"h1": {"ansible_local": {"vllm_fleet": warm}, "__status_chat": {"status": 200}},
                  "h2": {"ansible_local": {"vllm_fleet": cold}, "__status_chat": {"status": 200}}})
    assert rows == [
        "host  model@revision         health  since  models",
        "h1    tiny_mla@bbbbbbbbbbbb  ok      T2     tiny_mla serving, tiny_gqa sleeping",
        "h2    tiny_gqa@aaaaaaaaaaaa  ok      T1     tiny_gqa serving, tiny_mla stopped"]
