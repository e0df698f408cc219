# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46, case 1: a replica change takes the model-switch lock before it stops models.

roles/vllm_service/tasks/firewall.yml removes the replica's firewall from a host that serves
no replica any more; stopping that unit stops the ranks bound to it (BindsTo=), so it is a
model stop, and before the fix it ran beside another operator's switch. Now flock(1) holds
the cutover's lock (plugins/module_utils/switch/switch_lock.py) while systemctl stops and disables
the unit. This machine runs no systemd: the task's own argv, rendered from the role's
defaults and vars with a lock file in tmp_path, runs with `systemctl` on PATH replaced by a
script that writes down its arguments and the lock's holder at that moment (what a switch
waiting then would read).
"""

import os
import subprocess
import threading
import time

import jinja2
import yaml
from ansible.plugins.filter.core import quote
from ansible_collections.vllm_fleet.fleet.plugins.filter.host_path import host_path
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import switch_lock
from repo_paths import ROOT

ROLE = ROOT / "roles" / "vllm_service"
BLOCK = "Remove the replica's firewall from a host that serves no replica"
TASK = "Unload the replica's table and stop loading it at boot, holding the model-switch lock"


def block_tasks():
    tasks = yaml.safe_load((ROLE / "tasks" / "firewall.yml").read_text())
    return next(task for task in tasks if task.get("name") == BLOCK)["block"]


def argv(lock, wait_s):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)  # noqa: S701 - a command line
    env.filters["quote"] = quote
    env.filters["vllm_fleet.fleet.host_path"] = host_path
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    assert env.from_string(values["vllm_service_switch_lock"]).render() == switch_lock.LOCK_FILE
    values.update(vllm_service_switch_lock=str(lock), vllm_service_switch_lock_wait_s=wait_s)
    task = next(t for t in block_tasks() if t["name"] == TASK)
    return [env.from_string(str(word)).render(values)
            for word in task["ansible.builtin.command"]["argv"]]


def systemctl_double(tmp_path, lock):
    """A `systemctl` that writes its arguments and who holds the lock as it runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$*" > {tmp_path}/systemctl.args\n'
                      f"cat {lock} > {tmp_path}/systemctl.holder\n")
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


def test_the_firewall_stops_only_through_the_locked_command():
    tasks = block_tasks()
    assert not [t for t in tasks if "ansible.builtin.systemd_service" in t], \
        "a stop of the replica firewall outside the lock"
    names = [t["name"] for t in tasks]
    assert names.index("Create the switch lock's folder") < names.index(TASK)


def test_the_stop_waits_for_a_switch_in_progress_then_runs_holding_the_lock(tmp_path):
    lock = tmp_path / "cutover.lock"
    env = systemctl_double(tmp_path, lock)
    done = {}
    with switch_lock.switch_lock(str(lock), "tiny_mla", 1):
        start = time.monotonic()
        runner = threading.Thread(target=lambda: done.update(
            rc=subprocess.run(argv(lock, 30), env=env, check=False, timeout=60).returncode,
            at=time.monotonic()))
        runner.start()
        time.sleep(1.0)
        assert not (tmp_path / "systemctl.args").exists(), "it stopped the ranks mid-switch"
    runner.join(60)
    assert done["rc"] == 0
    assert done["at"] - start >= 1.0
    assert (tmp_path / "systemctl.args").read_text().split() == [
        "disable", "--now", "vllm-fleet-replica-firewall.service"]
    holder = yaml.safe_load((tmp_path / "systemctl.holder").read_text())
    assert switch_lock.describe(holder) == (
        "the switch to a replica change (vllm_service: the replica firewall leaves the host) "
        "(pid ?, since ?)")
    assert switch_lock.in_progress(str(lock)) is None  # given back once systemctl returned


def test_past_its_wait_it_stops_nothing(tmp_path):
    lock = tmp_path / "cutover.lock"
    env = systemctl_double(tmp_path, lock)
    with switch_lock.switch_lock(str(lock), "tiny_mla", 1):
        done = subprocess.run(argv(lock, 1), env=env, check=False, timeout=30)
    assert done.returncode == 1  # flock -w timed out: the task fails, the ranks run on
    assert not (tmp_path / "systemctl.args").exists()
