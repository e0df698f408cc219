# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 33 (a new user's driver roll, offline): `ansible-playbook playbooks/driver.yml
--check` over two standalone hosts (no vllm_balancers group) plans every host without the
network, says what a fresh host would download and that its version is not checked against
a repository not configured yet, names an empty installed driver `(none)`, says each
standalone host's outage and the wait for its model (the deployment record's active model,
bounded by its startup_timeout_s), and reports a host whose plan fails at the end without
hiding the next host.

Run as an operator would (ansible-playbook, the role's real tasks), on this machine with a
local connection: the GPUs are the synthetic 8x RTX PRO 6000 capture (tests/fixtures/gpu/,
as the Molecule scenario nvidia_driver_host uses); the CUDA repository URL points at a
closed loopback port (no network). This machine runs no systemd: a stand-in `systemctl`
on PATH answers the check-mode queries of the role's unit tasks, as a host's would."""

import json
import os
import subprocess
import sys
from pathlib import Path

from repo_paths import FIXTURES, ROOT

FAKE_SYSTEMCTL = """#!/bin/sh
# stand-in for systemctl on a machine without systemd: check mode only reads units
for a in "$@"; do case "$a" in
  show) printf 'Id=x.service\\nLoadState=loaded\\nActiveState=active\\n'
        printf 'SubState=running\\nUnitFileState=enabled\\n'; exit 0;;
  is-enabled) echo enabled; exit 0;;
  is-active) echo active; exit 0;;
esac; done
exit 0
"""
# The record the cutover writes (plugins/module_utils/common/record.py; the probe reads
# active.url and active.startup_timeout_s, plugins/module_utils/watch/probe.py): Kimi INT4's
# 36-minute start (issue 33).
GPUS = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"
ALL_STEPS = ["1/5 drain", "2/5 change", "3/5 reboot", "4/5 GPU check", "5/5 back in"]
RECORD = {"vllm_fleet": {"active": {"model": "kimi-k2.5-int4", "url": "http://127.0.0.1:8190",
                                    "startup_timeout_s": 2160}}}


def roll(tmp_path, hosts, extra=None):
    tmp_path.mkdir(exist_ok=True)
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bindir / "systemctl").chmod(0o755)
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "ansible_become": False,
                 "vllm_fleet_gpu_facts_fixture_dir": str(GPUS),
                 "nvidia_driver_hardware_steps": False,
                 "nvidia_driver_secure_boot_state": "SecureBoot disabled",
                 "nvidia_driver_expected_gpu_count": 8,
                 "nvidia_driver_expected_compute_capability": "12.0",
                 # a closed port: any download fails at once
                 "nvidia_driver_repo_base_url": "http://127.0.0.1:9/cuda"},
        "children": {"vllm_hosts": {"hosts": hosts}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "extra.json").write_text(
        json.dumps({"nvidia_driver_version": "580.105.08", **(extra or {})}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), PATH=f"{bindir}:{os.environ['PATH']}")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "--check", "-i",
         str(tmp_path / "inventory.json"), "-e", f"@{tmp_path / 'extra.json'}",
         str(ROOT / "playbooks" / "driver.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def steps(out, host):
    return [step for step in ALL_STEPS if f"driver change, {host} {step}" in out]


def test_check_mode_plans_every_standalone_host_offline(tmp_path):
    """No deployment record on either host."""
    rc, out = roll(tmp_path, {"host-a": {}, "host-b": {}})
    assert rc == 0, out[-4000:]
    for host in ("host-a", "host-b"):
        assert steps(out, host) == ALL_STEPS, out[-4000:]
        assert (f"driver change, {host} 2/5 change: would move the driver (none) -> 580.105.08"
                in out)
        # step 1 says what happens without a balancer: nothing waits for its requests
        assert (f"driver change, {host} 1/5 drain: no balancer (not a fleet): nothing is drained; "
                "the host serves until the reboot (3/5) ends its requests in flight") in out
    assert "urlopen error" not in out
    assert out.count("would download http://127.0.0.1:9/cuda/debian12/x86_64/"
                     "cuda-keyring_1.1-1_all.deb") == 2
    assert ("host-a: driver (none) -> 580.105.08 (nvidia_driver_version is 580.105.08): drain, "
            "change, reboot, GPU check, back in; standalone (no balancer): no model deployed "
            "(no deployment record): nothing to wait for; 580.105.08 not checked: repository "
            "not configured yet") in out
    assert ("driver change, host-a 5/5 back in: no model deployed (no deployment record): "
            "nothing to wait for, no balancer (not a fleet): then the next host") in out


def test_a_host_whose_plan_fails_does_not_hide_the_next(tmp_path):
    """host-a's inventory expects 4 GPUs where 8 answer: its plan fails in the role's GPU check.
    Both hosts serve Kimi INT4 (the record, as an extra var: it outranks the gathered fact)."""
    rc, out = roll(tmp_path, {"host-a": {"nvidia_driver_expected_gpu_count": 4}, "host-b": {}},
                   {"ansible_local": RECORD})
    assert rc == 2, out[-4000:]
    assert steps(out, "host-a") == ["1/5 drain", "2/5 change"], out[-4000:]
    assert steps(out, "host-b") == ALL_STEPS, out[-4000:]
    assert "host-a: the plan stops here: Assert the GPU count the inventory expects:" in out
    recap = out[out.rindex("PLAY RECAP"):]
    assert recap.split("host-b")[0].split("failed=")[1].startswith("1 "), recap
    assert recap.split("host-b")[1].split("failed=")[1].startswith("0 "), recap
    assert ("host-b: driver (none) -> 580.105.08 (nvidia_driver_version is 580.105.08): drain, "
            "change, reboot, GPU check, back in; standalone (no balancer): it serves nothing from "
            "the reboot until kimi-k2.5-int4 answers /health again (up to 2160 s, its "
            "startup_timeout_s), and the next host waits for that; 580.105.08 not checked: "
            "repository not configured yet") in out
    assert ("driver change, host-b 5/5 back in: would wait up to 2160 s (the startup_timeout_s of "
            "kimi-k2.5-int4) for its front door to answer /health, no balancer (not a fleet): "
            "then the next host") in out
