# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The smoke test's real script and its hard timeout, run on this machine (no GPU):
the all-reduce with torch's gloo backend on CPU processes, and a hung child killed
with its whole process group."""

import os
import sys
import time

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_smoke as sm


def test_real_script_all_reduces_on_cpu_with_gloo():
    pytest.importorskip("torch")
    result = sm.run_smoke(
        sys.executable, [0, 1], size_bytes=2**20, iterations=3, timeout_s=300, backend="gloo"
    )
    assert result["gpus"] == [0, 1]
    assert result["size_bytes"] == 2**20
    assert result["time_per_all_reduce_s"] > 0
    assert result["bus_bandwidth_bytes_per_s"] == pytest.approx(
        result["algorithm_bandwidth_bytes_per_s"]  # 2(n-1)/n is 1 for two ranks
    )
    assert [d["name"] for d in result["devices"]] == ["cpu", "cpu"]
    assert result["can_access_peer"] == {}
    assert result["msg"].startswith("GLOO all-reduce across GPUs 0,1: 1 MiB in ")
    assert result["torch_version"].split("+")[0] == __import__("torch").__version__.split("+")[0]


def _process_state(pid, started):
    """The state letter of process `pid` if it is still the one that started at `started`
    (/proc/<pid>/stat field 22), else "gone" (exited and reaped, or the pid reused)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return "gone"
    return fields[0] if fields[19] == started else "gone"


def test_a_hung_run_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    code = (
        "import subprocess, time\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        "started = open(f'/proc/{p.pid}/stat').read().rsplit(')', 1)[1].split()[19]\n"
        f"open({str(marker)!r}, 'w').write(f'{{p.pid}} {{started}}')\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    rc, _out, _err, timed_out = sm.run_with_timeout(
        [sys.executable, "-c", code], dict(os.environ), 10
    )
    assert timed_out is True
    assert rc == sm.TIMED_OUT
    assert time.monotonic() - start < 60
    child, started = marker.read_text().split()
    # Killed with the group: gone, or a zombie waiting for init to reap it. The run
    # returns once the child has closed its pipes, which it does on its way out, while
    # the kernel still shows it running ("R"; seen once in a full pytest run on busy
    # cores): it has a few seconds to finish dying.
    deadline = time.monotonic() + 10
    state = _process_state(int(child), started)
    while state not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
        state = _process_state(int(child), started)
    assert state in ("gone", "Z")


def test_a_run_that_finishes_is_not_killed():
    rc, out, _err, timed_out = sm.run_with_timeout(
        [sys.executable, "-c", "print('done')"], dict(os.environ), 60
    )
    assert (rc, out, timed_out) == (0, "done\n", False)
