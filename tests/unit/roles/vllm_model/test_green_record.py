# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Green's record fields (vllm_cutover's `record`) as roles/vllm_model/vars/main.yml renders them.

Issue 35 item 1: a warm model's record says `sleep_mode: true` (its unit has the
sleep routes; the switch may put it to sleep); a cold model's record is what it
was before (no key), so a re-run of a cold deployment still finds the same
deployment (module_utils/common/record.py same_deployment) and changes nothing.
"""

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.vllm_fleet.fleet.plugins.filter.serve_args import FilterModule
from repo_paths import ROOT

VARS = yaml.safe_load(Path(ROOT / "roles" / "vllm_model" / "vars" / "main.yml").read_text())


def green_record(entry, fleet_mode):
    variables = {"__vllm_model_sleep": trust_as_template(VARS["__vllm_model_sleep"]),
                 "record": trust_as_template(VARS["__vllm_model_cutover_params"]["record"]),
                 "__vllm_model_served_entry": entry, "vllm_fleet_switch_mode": fleet_mode,
                 "model_download_commit": "a" * 40, "vllm_install_version": "0.32.0",
                 "vllm_install_variant": entry["vllm"]["variant"],
                 "vllm_install_bin": "/opt/vllm/0.32.0-cpu/bin/vllm",
                 "vllm_install_facts": {"lock_digest": "3f0c9a61d2b84e07"}}
    templar = Templar(loader=DataLoader(), variables=variables)
    # The filters by their FQCN, as tests/unit/plugins/filter/test_roll_equivalence.py does.
    for name, function in FilterModule().filters().items():
        templar._engine.environment.filters[f"vllm_fleet.fleet.{name}"] = function
    return templar.template(trust_as_template("{{ record }}"))


BASE = {"repo_id": "vllm-fleet-lab/tiny-gqa", "revision": "a" * 40,
        "vllm_version": "0.32.0-cpu", "vllm_bin": "/opt/vllm/0.32.0-cpu/bin/vllm",
        # Issue 42: the digest of the lock the virtualenv was installed from (venv_facts).
        "vllm_lock": "3f0c9a61d2b84e07"}


@pytest.mark.parametrize(("entry", "fleet", "expected"), [
    ({}, "cold", BASE),
    ({}, "warm", {**BASE, "sleep_mode": True}),
    ({"switch_mode": "warm"}, "cold", {**BASE, "sleep_mode": True}),
    ({"switch_mode": "cold"}, "warm", BASE),
])
def test_greens_record_says_sleep_mode_only_for_a_warm_model(entry, fleet, expected):
    entry = {"repo_id": "vllm-fleet-lab/tiny-gqa", "vllm": {"variant": "cpu"}, **entry}
    assert green_record(entry, fleet) == expected
