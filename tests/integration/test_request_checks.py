# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 32: the request phase (roles/vllm_model/tasks/request.yml, run by ansible-playbook
on this machine) refuses what a catalog entry cannot set, and bad front-door keys, before
the role's download: main.yml imports preflight.yml (whose first task imports request.yml,
tagged always) before download.yml."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repo_paths import ROOT

TASKS = ROOT / "roles" / "vllm_model" / "tasks"
PLAY = """
- name: Check a request the way the role's preflight does
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the role's request checks
      ansible.builtin.import_role:
        name: vllm_fleet.fleet.vllm_model
        tasks_from: request.yml
"""
GOOD_KEY = "k3y-for-client-one-0123456789"


def playbook(tmp_path, extra):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({"vllm_fleet_frontdoor": True,
                                     "vllm_frontdoor_api_keys": [GOOD_KEY], **extra}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-e",
         f"ansible_python_interpreter={sys.executable}", "-e", f"@{variables}", str(play)],
        capture_output=True, text=True, env=env, check=False, timeout=120)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def hostile(change):
    return {"model": "tiny_gqa",
            "vllm_fleet_catalog_local": {"tiny_gqa": change}}


@pytest.mark.parametrize(("extra", "message"), [
    (hostile({"extra_args": ["--host", "0.0.0.0"]}),  # noqa: S104 - the hostile value
     ("catalog entry tiny_gqa: extra_args[0] holds '--host', which vLLM reads as --host: the"
      " product owns it")),
    (hostile({"serve": {"served-model-name": "x"}}),
     "catalog entry tiny_gqa: serve.served-model-name is vLLM's --served-model-name"),
    (hostile({"env": {"VLLM_SERVER_DEV_MODE": "1"}}),
     "catalog entry tiny_gqa: env.VLLM_SERVER_DEV_MODE is set"),
    (hostile({"profiles": {"sm90": {"extra_args": ["--api_key=x"]}}}),
     "catalog entry tiny_gqa (profile sm90): extra_args[0] holds '--api_key=x'"),
    ({"model": "fleet-probe", "vllm_fleet_catalog_local": {"fleet-probe": {
        "repo_id": "o/m", "served_model_name": "p", "port": 8090}}},
     "would name its unit vllm-fleet-probe.service"),
    ({"model": "tiny_gqa",
      "vllm_frontdoor_api_keys": ["REPLACE-with-a-long-random-key-for-client-one"]},
     "vllm_frontdoor_api_keys[0] is the placeholder from a vault.yml.example file"),
])
def test_the_request_refuses_before_any_download(tmp_path, extra, message):
    rc, out = playbook(tmp_path, extra)
    assert rc == 2, out[-3000:]
    assert message in out, out[-3000:]


def test_a_clean_request_and_keys_differing_in_case_pass(tmp_path):
    rc, out = playbook(tmp_path, {"model": "tiny_gqa",
                                  "vllm_frontdoor_api_keys": [GOOD_KEY, GOOD_KEY.upper()]})
    assert rc == 0, out[-3000:]


def test_the_request_checks_run_before_the_download():
    main = [task.get("ansible.builtin.import_tasks") for task in
            yaml.safe_load((TASKS / "main.yml").read_text())]
    assert main.index("preflight.yml") < main.index("download.yml")
    preflight = yaml.safe_load((TASKS / "preflight.yml").read_text())
    assert preflight[0]["ansible.builtin.import_tasks"] == "request.yml"
    assert preflight[0]["tags"] == ["always"]  # runs with --tags download too
    names = [task["name"] for task in yaml.safe_load((TASKS / "request.yml").read_text())]
    assert "Check every value the model's unit will carry" in names
    assert "Check the front door's API keys" in names
