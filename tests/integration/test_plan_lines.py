# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The plan and the warm switch plan read as lines under either result format of Ansible's
default callback (issue 47 item 6): the checkout's ansible.cfg (yaml) prints each as one block,
as before; Ansible's own default (json, what an installed collection gets without an
ansible.cfg) prints one list item per line, never a string of \\n escapes. playbooks/plan.yml
run for real, no network (the models' config.json ship in the role)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from repo_paths import ROOT

TASKS = ("Show the candidates side by side", "Show the warm switch plan")


def plan_stdout(tmp_path, result_format):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_CALLBACK_RESULT_FORMAT=result_format, ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), HF_HOME=str(tmp_path / "hf"),
               HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-e",
         f"ansible_python_interpreter={sys.executable}", "-e", "models=kimi_k25_nvfp4,minimax_m25",
         "-e", "hardware=rtx_pro_6000_x8_pcie", "-e", "vllm_fleet_switch_mode=warm",
         str(ROOT / "playbooks" / "plan.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


def result(stdout, task, start):
    """The text of `task`'s result, from the callback's `ok: [localhost] =>` to the next task."""
    found = re.search(r"^TASK \[[^\n]*" + re.escape(task) + r"\][^\n]*\nok: \[localhost\] =>"
                      r"(.*?)\n\n", stdout, re.MULTILINE | re.DOTALL)
    assert found, f"no result of {task!r} in:\n{stdout[-4000:]}"
    assert found.group(1).startswith(start), found.group(1)[:200]
    return found.group(1)


def test_json_results_print_one_item_per_line(tmp_path):
    stdout = plan_stdout(tmp_path, "json")
    assert "\\n" not in stdout
    plan, warm = (json.loads(result(stdout, task, " {"))["msg"] for task in TASKS)
    table = plan[:plan.index("")]
    assert table == (ROOT / "docs" / "plan-example.txt").read_text().splitlines()
    assert warm[:2] == [
        ("Warm switches kimi_k25_nvfp4 <-> minimax_m25: host memory 512.00 GiB less a reserve of "
         "32.00 GiB; at most 1 sleeper(s) per host"),
        "first switch: kimi_k25_nvfp4 -> minimax_m25: COLD"]
    assert "" not in warm  # no empty item at its end


def test_yaml_results_print_one_block_as_before(tmp_path):
    stdout = plan_stdout(tmp_path, "yaml")
    plan, warm = (result(stdout, task, " \n    msg: |-\n") for task in TASKS)
    table = [line.removeprefix(" " * 8) for line in plan.splitlines()[2:30]]
    assert table == (ROOT / "docs" / "plan-example.txt").read_text().splitlines()
    assert warm.splitlines()[3] == "        first switch: kimi_k25_nvfp4 -> minimax_m25: COLD"
