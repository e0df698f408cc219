# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46, case 1: the driver role's reboot takes the model-switch lock first.

playbooks/driver.yml reboots a host through roles/nvidia_driver/tasks/host.yml. Before the
fix it took no lock, so it could cut another operator's switch mid-way. Now a block takes the
cutover's lock (the flock of plugins/module_utils/switch/switch_lock.py) through a transient unit
that holds it until the host goes down, waits until the lock file names the reboot, and only
then reboots. This machine runs no systemd: the test runs the task's own command after
systemd-run's `--` (flock, the holder's shell) as the unit would, rendered from the role's
defaults and vars with a lock file in tmp_path, against the cutover's own switch_lock code.
"""

import os
import re
import signal
import subprocess
import time

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import quote
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import switch_lock
from repo_paths import ROOT

ROLE = ROOT / "roles" / "nvidia_driver"
BLOCK = "Reboot into the new kernel module, holding the model-switch lock"


def reboot_block():
    tasks = yaml.safe_load((ROLE / "tasks" / "host.yml").read_text())
    found = [task for task in tasks if task.get("name") == BLOCK]
    assert found, f"host.yml has no task {BLOCK!r}"
    return found[0]


def by_name(block, name):
    return next(task for task in block["block"] if task["name"] == name)


def values(lock, wait_s):
    out = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    out.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    out.update(nvidia_driver_switch_lock_file=str(lock), nvidia_driver_switch_lock_wait_s=wait_s)
    return out


def holder_argv(lock, wait_s):
    """The lock task's argv after systemd-run's `--`, rendered as Ansible would."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)  # noqa: S701 - a command line
    env.filters["quote"] = quote
    task = by_name(reboot_block(), "Take the model-switch lock (waits for a switch in progress)")
    argv = task["ansible.builtin.command"]["argv"]
    assert argv[:2] == ["systemd-run", "--unit=vllm-fleet-reboot-lock"]
    rendered = [env.from_string(str(word)).render(values(lock, wait_s)) for word in argv]
    return rendered[rendered.index("--") + 1:]


def test_the_reboot_comes_after_the_lock_in_one_block_and_gives_it_back_on_failure():
    block = reboot_block()
    names = [task["name"] for task in block["block"]]
    assert names.index("Take the model-switch lock (waits for a switch in progress)") < \
        names.index("Wait until the lock is the reboot's") < \
        names.index("Reboot into the new kernel module")
    assert "ansible.builtin.reboot" in by_name(block, "Reboot into the new kernel module")
    rescue = block["rescue"][0]["ansible.builtin.systemd_service"]
    assert rescue == {"name": "vllm-fleet-reboot-lock.service", "state": "stopped"}
    tasks = yaml.safe_load((ROLE / "tasks" / "host.yml").read_text())
    assert not [task for task in tasks if "ansible.builtin.reboot" in task], \
        "a reboot outside the locked block"


def test_the_holder_takes_the_cutovers_lock_and_a_switch_then_waits_naming_it(tmp_path):
    lock = tmp_path / "cutover.lock"
    # Its own process group, as the unit's cgroup: the holder's shell execs sleep, which
    # keeps flock's descriptor (and with it the lock) after flock itself.
    proc = subprocess.Popen(holder_argv(lock, 5), start_new_session=True)
    try:
        regex = by_name(reboot_block(), "Wait until the lock is the reboot's")[
            "ansible.builtin.wait_for"]["search_regex"]
        deadline = time.monotonic() + 10
        while not (lock.exists() and re.search(regex, lock.read_text())):
            assert time.monotonic() < deadline, "the holder did not write the lock file"
            time.sleep(0.05)
        holder = switch_lock.in_progress(str(lock))
        assert holder == {"pid": None, "since": None,
                          "model": "a reboot (nvidia_driver: kernel module changed)"}
        with pytest.raises(switch_lock.SwitchBusyError, match="the switch to a reboot"), \
                switch_lock.switch_lock(str(lock), "tiny_mla", 0.3, poll_s=0.05):
            pass
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the shutdown stops the unit's whole cgroup
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while switch_lock.in_progress(str(lock)) is not None:  # the flock dies with its holders
        assert time.monotonic() < deadline, "the lock outlived the holder's processes"
        time.sleep(0.05)


def test_the_holder_waits_for_a_switch_in_progress_and_takes_nothing_past_its_wait(tmp_path):
    lock = tmp_path / "cutover.lock"
    with switch_lock.switch_lock(str(lock), "tiny_mla", 1):
        start = time.monotonic()
        done = subprocess.run(holder_argv(lock, 1), capture_output=True, check=False,
                              timeout=30)
        assert done.returncode == 1  # flock -w: timed out; the unit fails, no reboot
        assert time.monotonic() - start >= 0.9
        assert switch_lock.read_holder(str(lock))["model"] == "tiny_mla"
