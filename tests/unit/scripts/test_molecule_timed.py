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
    lanes = [lane for stage in line.split("=", 1)[1].split() for lane in stage.split(",")]
    assert "fleet+multinode" in lanes


def test_a_stage_runs_its_lanes_at_the_same_time_and_prints_each_log_whole(
        tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(molecule_timed, "LOGS", tmp_path)

    def fake_call(argv, cwd, stdout=None, stderr=None):
        # each lane writes to its own log; molecule's own output goes there
        calls.append((argv[1:], stdout is not None))
        if stdout is not None:
            stdout.write(f"output of {' '.join(argv[1:])}\n")
        return 1 if argv[-1] == "nvidia_driver_host" and argv[1] == "test" else 0

    monkeypatch.setattr(molecule_timed.subprocess, "call", fake_call)
    monkeypatch.setattr(molecule_timed.yaml, "safe_load",
                        lambda _text: {"budgets_min": {"total": 60}})
    rc = molecule_timed.main(["default,nvidia_driver_host", "fleet+multinode"])
    out = capsys.readouterr().out
    assert rc == 1  # nvidia_driver_host failed
    assert (["test", "-s", "default"], True) in calls
    assert (["test", "-s", "nvidia_driver_host"], True) in calls
    assert (["test", "-s", "fleet", "--destroy", "never"], False) in calls
    assert (tmp_path / "molecule-default.log").read_text() == "output of test -s default\n"
    assert "output of test -s nvidia_driver_host" in out
    table = (tmp_path / "molecule-times.txt").read_text()
    assert [line.split()[:2] for line in table.splitlines()[1:5]] == [
        ["default", "ok"], ["nvidia_driver_host", "FAILED"], ["fleet", "ok"], ["multinode", "ok"]]


def test_the_makefile_runs_the_driver_scenarios_beside_default():
    makefile = (ROOT / "Makefile").read_text()
    line = next(text for text in makefile.splitlines() if text.startswith("MOLECULE_SCENARIOS"))
    assert [sorted(stage.split(",")) for stage in line.split("=", 1)[1].split()] == [
        ["default", "nvidia_driver_container", "nvidia_driver_host"], ["cutover"],
        ["fleet+multinode"]]
