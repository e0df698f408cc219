# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The host's switch lock, with real flocks held by real other processes.

A second process (python, as the async job of an earlier cutover would be) takes the
lock; these tests wait for it, time out on it, and see it vanish when that process is
killed - a flock cannot outlive its holder.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import switch_lock
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.switch_lock import (
    SwitchBusyError,
    in_progress,
)

HOLDER = textwrap.dedent("""
    import fcntl, json, os, sys, time
    path, seconds = sys.argv[1], float(sys.argv[2])
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "model": "tiny_mla", "since": "then"}).encode())
    print("held", flush=True)
    time.sleep(seconds)
""")


@pytest.fixture
def hold(tmp_path):
    procs = []

    def start(seconds):
        path = tmp_path / "run" / "cutover.lock"
        path.parent.mkdir(exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "held\n"
        procs.append(proc)
        return path, proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_no_switch_in_progress_without_a_file_or_a_holder(tmp_path):
    path = tmp_path / "cutover.lock"
    assert in_progress(str(path)) is None
    with switch_lock.switch_lock(str(path), "tiny_gqa", 5) as got:
        assert got == {"waited_s": 0.0, "waited_for": None}
        holder = json.loads(path.read_text())
        assert (holder["pid"], holder["model"]) == (os.getpid(), "tiny_gqa")
    assert in_progress(str(path)) is None  # released; the file says who had it last


def test_a_second_switch_waits_for_the_first_and_says_whose_it_was(hold):
    path, proc = hold(1.0)
    assert in_progress(str(path)) == {"pid": proc.pid, "model": "tiny_mla", "since": "then"}
    seen = []
    start = time.monotonic()
    with switch_lock.switch_lock(str(path), "tiny_gqa", 30,
                                 on_wait=lambda h, s: seen.append((h["model"], s)),
                                 poll_s=0.05) as got:
        waited = time.monotonic() - start
        assert json.loads(path.read_text())["model"] == "tiny_gqa"
    assert 0.5 < waited < 10
    assert got["waited_for"] == {"pid": proc.pid, "model": "tiny_mla", "since": "then"}
    assert 0.5 < got["waited_s"] < 10
    assert seen
    assert seen[0][0] == "tiny_mla"


def test_a_switch_that_holds_too_long_fails_the_wait_and_changes_nothing(hold):
    path, proc = hold(30)
    before = path.read_text()
    with pytest.raises(SwitchBusyError) as caught, \
            switch_lock.switch_lock(str(path), "tiny_gqa", 0.3, poll_s=0.05):
        pytest.fail("the lock was taken while another process held it")
    assert caught.value.msg == (f"the switch to tiny_mla (pid {proc.pid}, since then) still holds "
                                f"{path} after 0.3 s of waiting; nothing was changed")
    assert caught.value.holder["pid"] == proc.pid
    assert path.read_text() == before


def test_a_killed_holder_leaves_no_lock_behind(hold):
    path, proc = hold(30)
    assert in_progress(str(path))["pid"] == proc.pid
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert in_progress(str(path)) is None
    assert json.loads(path.read_text())["pid"] == proc.pid  # only information now
    with switch_lock.switch_lock(str(path), "tiny_gqa", 1) as got:
        assert got["waited_for"] is None


def test_wait_limit_is_the_option_or_the_longest_switch():
    # Unset: a switch that rolls back starts two models (2 x 900), drains (60), plus 300.
    assert switch_lock.wait_limit(None, 900, 60.0) == 2 * 900 + 60 + 300
    assert switch_lock.wait_limit(None, 30, 2.5) == 60 + 2 + 300
    assert switch_lock.wait_limit(45, 900, 60.0) == 45
    assert switch_lock.wait_limit(0, 900, 60.0) == 0
