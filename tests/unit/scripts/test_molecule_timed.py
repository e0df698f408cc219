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

    def fake_run_logged(argv, out, echo):
        # a lane of a stage of several writes only to its log; a lone lane echoes too
        calls.append((argv[1:], echo))
        out.write(f"output of {' '.join(argv[1:])}\n")
        if argv[-1] == "nvidia_driver_host" and argv[1] == "test":
            out.write("TASK [Check the driver] ***\nfatal: [h]: FAILED! => changed=false\n"
                      "  msg: wanted 570 or newer, found 535.104.05\n")
            return 1
        return 0

    monkeypatch.setattr(molecule_timed, "run_logged", fake_run_logged)
    monkeypatch.setattr(molecule_timed.yaml, "safe_load",
                        lambda _text: {"budgets_min": {"total": 60}})
    rc = molecule_timed.main(["default,nvidia_driver_host", "fleet+multinode"])
    out = capsys.readouterr().out
    assert rc == 1  # nvidia_driver_host failed
    assert (["test", "-s", "default"], False) in calls
    assert (["test", "-s", "nvidia_driver_host"], False) in calls
    assert (["test", "-s", "fleet", "--destroy", "never"], True) in calls
    assert (tmp_path / "molecule-default.log").read_text() == "output of test -s default\n"
    assert (tmp_path / "molecule-multinode.log").read_text() == "output of test -s multinode\n"
    assert "output of test -s nvidia_driver_host" in out
    table = (tmp_path / "molecule-times.txt").read_text()
    assert [line.split()[:2] for line in table.splitlines()[1:5]] == [
        ["default", "ok"], ["nvidia_driver_host", "FAILED"], ["fleet", "ok"], ["multinode", "ok"]]
    # after the table, why the failed one failed: what a CI log's tail shows
    tail = out[out.index("Molecule time table"):]
    assert ("== why molecule test -s nvidia_driver_host failed (whole output: "
            ".lab/molecule-nvidia_driver_host.log)\nTASK [Check the driver]\n"
            "fatal: [h]: FAILED! => changed=false\n"
            "  msg: wanted 570 or newer, found 535.104.05\n") in tail
    assert "why molecule test -s default" not in tail


def test_a_lone_lane_shows_the_output_as_it_comes_and_keeps_it(tmp_path, monkeypatch, capsys):
    log = tmp_path / "out.log"
    monkeypatch.setattr(molecule_timed, "ROOT", tmp_path)
    with open(log, "w") as out:
        rc = molecule_timed.run_logged(
            ["sh", "-c", "echo one; echo two >&2; exit 3"], out, echo=True)
    assert rc == 3
    assert log.read_text() == "one\ntwo\n"
    assert capsys.readouterr().out == "one\ntwo\n"


def test_the_makefile_runs_the_driver_scenarios_and_cutover_beside_default():
    makefile = (ROOT / "Makefile").read_text()
    line = next(text for text in makefile.splitlines() if text.startswith("MOLECULE_SCENARIOS"))
    assert [sorted(stage.split(",")) for stage in line.split("=", 1)[1].split()] == [
        ["cutover", "default", "nvidia_driver_container", "nvidia_driver_host"],
        ["fleet+multinode"]]


# The fixture is real ansible-playbook output (its first line says which
# ansible-core) of this playbook, run with ansible.cfg's callback settings:
#   - ansible.builtin.command: "false"                  (ignore_errors: true)
#   - ansible.builtin.command: "test {{ item }} -ne 2"  loop [1, 2], ignore_errors: true
#   - name: Roll under load
#     ansible.builtin.command: "sh -c 'for i in 1 2 3; do echo sample $i healthy=2; done;
#       echo MISSED: 1 sample with no healthy host >&2; exit 1'"
FAILED_PLAY = (ROOT / "tests/unit/scripts/fixtures/ansible-failed-play.txt").read_text()


def test_the_excerpt_of_a_real_failed_play_is_its_failed_task_not_the_ignored_ones():
    excerpt = molecule_timed.failure_excerpt(FAILED_PLAY)
    lines = excerpt.splitlines()
    assert lines[0] == "TASK [Roll under load]"
    assert lines[1] == "fatal: [localhost]: FAILED! => "
    assert "    stderr: 'MISSED: 1 sample with no healthy host'" in lines
    assert lines[-5:] == ["    stdout: |-", "        sample 1 healthy=2",
                          "        sample 2 healthy=2", "        sample 3 healthy=2",
                          "    stdout_lines: <omitted>"]
    assert "Ignored failure" not in excerpt
    assert "(item=2)" not in excerpt
    assert "PLAY RECAP" not in excerpt


def test_a_long_result_is_cut_in_the_middle_and_only_the_last_failures_are_kept():
    result = "\n".join(f"    line {n}" for n in range(100))
    text = "\n".join(f"TASK [Task {n}] ***\nfatal: [h]: FAILED! =>\n{result}\n" for n in range(6))
    blocks = molecule_timed.failure_excerpt(text, head=2, tail=3, last=2).split("\n\n")
    assert blocks[0] == "[4 earlier failed results left out]"
    assert blocks[1].splitlines() == ["TASK [Task 4]", "fatal: [h]: FAILED! =>", "    line 0",
                                      "    [... 96 lines ...]", "    line 97", "    line 98",
                                      "    line 99"]
    assert blocks[2].startswith("TASK [Task 5]\n")


def test_nothing_failed_gives_an_empty_excerpt():
    assert molecule_timed.failure_excerpt("TASK [A] ***\nok: [h]\n\nPLAY RECAP ***\n") == ""


# Public Molecule and Ansible output pasted in READMEs, each file's first line says where
# (a helper trying failure_excerpt on output its author did not make found these cases).
def fixture(name):
    return (ROOT / "tests/unit/scripts/fixtures" / name).read_text()


def test_an_error_raised_outside_a_task_result_is_kept_before_ansible_2_19_and_since():
    old = molecule_timed.failure_excerpt(fixture("public-02-bosone-role-not-found.log"))
    assert old.splitlines()[0].startswith(
        "ERROR! the role 'ansible-clickhouse' was not found in /home/bosone/")
    assert old.split("\n\n")[1].startswith("CRITICAL Ansible return code was 2")
    new = molecule_timed.failure_excerpt(fixture("ansible-role-not-found.txt"))
    assert new.startswith("[ERROR]: the role 'no_such_role' was not found in ")
    # 2.19's "[ERROR]: Task failed" heads a result that follows: only the result is kept
    assert "[ERROR]: Task failed" not in molecule_timed.failure_excerpt(FAILED_PLAY)


def test_a_loops_failed_items_are_left_out_when_the_task_was_ignoring_them():
    # three failed items, "...ignoring" after the last only; the run itself succeeded
    text = fixture("public-04-shoelace-219-yaml-loop-ignored.log")
    assert text.count("failed: [localhost] (item=") == 3
    assert molecule_timed.failure_excerpt(text) == ""


def test_the_idempotence_failure_keeps_its_list_of_tasks():
    assert molecule_timed.failure_excerpt(fixture("public-05-burlakov-idempotence.log")) == (
        "CRITICAL Idempotence test failed because of the following tasks:\n"
        "* [Ubuntu] => vector-role : Copy distrib to working catalog\n"
        "* [Centos8] => vector-role : Copy distrib to working catalog\n"
        "* [Ubuntu] => vector-role : Copy configuration file  for Vector\n"
        "* [Centos8] => vector-role : Copy configuration file  for Vector")


def test_molecules_message_written_twice_is_kept_once():
    text = ("CRITICAL Ansible return code was 2, command was: ansible-playbook x.yml\n"
            "ERROR    [fleet > side_effect] Executed: Failed\n"
            "ERROR    Ansible return code was 2, command was: ansible-playbook x.yml\n")
    assert molecule_timed.failure_excerpt(text) == (
        "CRITICAL Ansible return code was 2, command was: ansible-playbook x.yml\n\n"
        "ERROR    [fleet > side_effect] Executed: Failed")


def test_molecule_runs_without_colours_whatever_the_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr(molecule_timed, "ROOT", tmp_path)
    with open(tmp_path / "out.log", "w") as out:
        molecule_timed.run_logged(["sh", "-c", 'echo "$PY_COLORS $NO_COLOR"'], out, echo=False)
    assert (tmp_path / "out.log").read_text() == "0 1\n"


def test_a_scenario_past_its_budget_is_marked_and_does_not_fail_the_run(
        tmp_path, monkeypatch, capsys):
    """A speed figure, never a failure (CI-B, 91bb1b9: default 25.6 and cutover 29.9 minutes
    against budgets of 24, every scenario passing, on a machine 30-35 % slower that day)."""
    monkeypatch.setattr(molecule_timed, "LOGS", tmp_path)
    rc = molecule_timed.report([("default", 0, 25.6), ("cutover", 0, 29.9), ("fleet", 0, 20.0)],
                               wall=75.5, budgets={"default": 24, "cutover": 24, "fleet": 28,
                                                   "total": 70})
    out = capsys.readouterr().out
    table = (tmp_path / "molecule-times.txt").read_text().splitlines()
    assert rc == 0
    assert table[1].split() == ["default", "ok", "25.6", "24", "OVER", "BUDGET"]
    assert table[3].split() == ["fleet", "ok", "20.0", "28"]
    assert ("over budget (a finding to trim, not a failure): ['default', 'cutover', 'total']"
            in out)
    (tmp_path / "molecule-fleet.log").write_text("TASK [Roll] ***\nfatal: [h]: FAILED! =>\n")
    failed = molecule_timed.report([("fleet", 2, 20.0)], wall=20.0, budgets={"fleet": 28})
    assert failed == 1
