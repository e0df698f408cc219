# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""scripts/molecule_timed.py: `a+b` keeps scenario a's instances for scenario b."""

import importlib.util

from repo_paths import ROOT

_spec = importlib.util.spec_from_file_location("molecule_timed",
                                               ROOT / "scripts" / "molecule_timed.py")
molecule_timed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(molecule_timed)


def test_a_chain_keeps_the_instances_until_its_last_scenario():
    assert list(molecule_timed.runs(["default", "fleet+multinode", "nvidia_driver_host"])) == [
        ("default", []), ("fleet", ["--destroy", "never"]), ("multinode", []),
        ("nvidia_driver_host", [])]


def test_the_makefile_chains_the_fleet_scenario_into_the_multinode_one():
    makefile = (ROOT / "Makefile").read_text()
    line = next(text for text in makefile.splitlines() if text.startswith("MOLECULE_SCENARIOS"))
    assert "fleet+multinode" in line.split()
