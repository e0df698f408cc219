# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The host's periodic probe: N failures, the startup window, the switch marker (fresh and
stale), an inactive unit, and the state kept between runs (a real state file, real marker)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils import probe, switch_lock
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.health import HttpResult

UNIT = "vllm-tiny_gqa.service"
URL = "http://127.0.0.1:8011"
WALL = 1_800_000_000.0
ACTIVE = {"model": "tiny_gqa", "unit": UNIT, "url": URL, "served_model_name": "tiny-gqa",
          "startup_timeout_s": 600}


class Host:
    """systemctl show/restart and a vLLM server that is healthy or not."""

    def __init__(self, healthy=True, active_state="active", up_s=3600.0, invocation="inv-1"):
        self.healthy = healthy
        self.active_state = active_state
        self.sub_state = "running" if active_state == "active" else "dead"
        self.invocation = invocation
        self.monotonic_now = 100_000.0
        self.entered = self.monotonic_now - up_s
        self.calls = []
        self.restart_rc = 0

    def run_command(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            props = {"LoadState": "loaded", "ActiveState": self.active_state,
                     "SubState": self.sub_state, "InvocationID": self.invocation,
                     "ActiveEnterTimestampMonotonic": str(int(self.entered * 1e6))}
            return 0, "".join(f"{k}={props[k]}\n" for k in probe.SHOW), ""
        if argv[:2] == ["systemctl", "restart"]:
            err = "Failed to restart: access denied" if self.restart_rc else ""
            return self.restart_rc, "", err
        return 127, "", "not found"

    def request(self, method, url, payload=None, timeout=10.0):
        if url.endswith("/health"):
            return HttpResult(200, "")
        if url.endswith("/v1/models"):
            return HttpResult(200, json.dumps({"data": [{"id": "tiny-gqa"}]}))
        if self.healthy:
            return HttpResult(200, json.dumps({"choices": [{"text": " hi"}],
                                               "usage": {"completion_tokens": 4}}))
        return HttpResult(error="timed out")

    def restarts(self):
        return [c for c in self.calls if c[:2] == ["systemctl", "restart"]]


@pytest.fixture
def files(tmp_path):
    record = tmp_path / "vllm_fleet.fact"
    record.write_text(json.dumps({"active": ACTIVE}))
    return {"record": str(record), "state": str(tmp_path / "state" / "probe.json"),
            "marker": str(tmp_path / "switching.json")}


def settings(files, **kwargs):
    return probe.Settings(files["record"], files["state"], marker=files["marker"], **kwargs)


def run(files, host, wall=WALL, **kwargs):
    out = io.StringIO()
    outcome = probe.run(settings(files, **kwargs), run_command=host.run_command,
                        request=host.request, wall=lambda: wall,
                        monotonic=lambda: host.monotonic_now, out=out)
    return outcome, out.getvalue()


def test_healthy_model_is_left_alone_and_says_nothing(files):
    host = Host()
    outcome, printed = run(files, host, failures=2)
    assert (outcome.verdict, printed) == ("ok", "")
    assert host.restarts() == []
    assert json.loads(Path(files["state"]).read_text()) == {
        "unit": UNIT, "failures": 0, "healthy_invocation": "inv-1"}


def test_n_consecutive_failures_restart_the_unit_once_and_say_why(files):
    host = Host(healthy=False)
    first, said1 = run(files, host, failures=3)
    second, said2 = run(files, host, failures=3)
    assert (first.verdict, second.verdict) == ("failed", "failed")
    assert said1 == (f"{UNIT} failed its health probe at completion: POST /v1/completions: "
                     "timed out (failure 1 of 3)\n")
    assert "(failure 2 of 3)" in said2
    assert host.restarts() == []
    third, said3 = run(files, host, failures=3)
    assert third.verdict == "restarted"
    assert said3 == (f"restarting {UNIT}: 3 failed probes in a row, the last: {UNIT} failed "
                     "its health probe at completion: POST /v1/completions: timed out\n")
    assert host.restarts() == [["systemctl", "restart", "--no-block", UNIT]]
    # The count starts again after a restart.
    assert json.loads(Path(files["state"]).read_text())["failures"] == 0


def test_a_healthy_probe_between_failures_resets_the_count(files):
    host = Host(healthy=False)
    run(files, host, failures=2)
    host.healthy = True
    outcome, said = run(files, host, failures=2)
    assert outcome.verdict == "ok"
    assert said == f"{UNIT}: healthy again (4 completion tokens: ' hi')\n"
    host.healthy = False
    outcome, _said = run(files, host, failures=2)
    assert outcome.verdict == "failed"
    assert host.restarts() == []


def test_inside_the_startup_window_failures_are_not_counted(files):
    host = Host(healthy=False, up_s=120.0)  # startup_timeout_s is 600
    for _run in range(5):
        outcome, said = run(files, host, failures=2)
    assert outcome.verdict == "skipped"
    assert said == (f"{UNIT}: starting (120 s of its 600 s startup window, not healthy yet: "
                    "completion: POST /v1/completions: timed out); not counted\n")
    assert host.restarts() == []


def test_the_startup_window_ends_at_the_first_healthy_probe(files):
    host = Host(healthy=True, up_s=60.0)
    run(files, host, failures=2)
    host.healthy = False
    run(files, host, failures=2)
    outcome, _said = run(files, host, failures=2)
    assert outcome.verdict == "restarted"
    assert len(host.restarts()) == 1


def test_a_new_start_opens_a_new_window(files):
    """Healthy in start inv-1; systemd starts it again (inv-2): its window is open again."""
    host = Host(healthy=True, up_s=60.0)
    run(files, host, failures=1)
    host.invocation, host.healthy = "inv-2", False
    outcome, _said = run(files, host, failures=1)
    assert outcome.verdict == "skipped"
    host.entered = host.monotonic_now - 601.0  # past its startup timeout, never healthy
    outcome, _said = run(files, host, failures=1)
    assert outcome.verdict == "restarted"


def test_a_fresh_switch_marker_holds_the_probe_off(files):
    host = Host(healthy=False)
    Path(files["marker"]).write_text(json.dumps({"model": "tiny_mla", "action": "switch"}))
    mtime = os.stat(files["marker"]).st_mtime
    for _run in range(4):
        outcome, said = run(files, host, wall=mtime + 100, failures=2)
    assert outcome.verdict == "skipped"
    assert said == (f"{UNIT}: a cutover holds {files['marker']} (switch of tiny_mla, 100 s ago): "
                    "not probing\n")
    assert host.restarts() == []
    assert not [c for c in host.calls if c[:2] == ["systemctl", "show"]]


def test_the_held_switch_lock_holds_the_probe_off_and_its_release_lets_it_probe(files, tmp_path):
    """The cutover's flock (switch_lock.py) dies with its holder: while a switch holds it the
    probe leaves the unit alone, whatever the marker says; once released, it probes again."""
    lock = str(tmp_path / "cutover.lock")
    host = Host(healthy=False)
    with switch_lock.switch_lock(lock, "tiny_mla", 1, now=lambda: "2027-01-01T00:00:00"):
        for _run in range(3):
            outcome, said = run(files, host, failures=2, lock=lock)
    assert outcome.verdict == "skipped"
    assert said == (f"{UNIT}: the switch to tiny_mla (pid {os.getpid()}, since "
                    f"2027-01-01T00:00:00) holds {lock}: not probing\n")
    assert host.restarts() == []
    run(files, host, failures=2, lock=lock)
    outcome, said = run(files, host, failures=2, lock=lock)
    assert outcome.verdict == "restarted"
    assert len(host.restarts()) == 1


def test_a_stale_switch_marker_does_not_block_forever(files):
    host = Host(healthy=False)
    Path(files["marker"]).write_text("{}")
    mtime = os.stat(files["marker"]).st_mtime
    run(files, host, wall=mtime + 7201, failures=2)
    outcome, said = run(files, host, wall=mtime + 7231, failures=2)
    assert outcome.verdict == "restarted"
    assert said.startswith(f"ignoring the stale switch marker {files['marker']}: 7231 s old, "
                           "older than 7200 s (a cutover that died?); restarting ")
    assert len(host.restarts()) == 1


def test_an_inactive_active_model_counts_as_failed(files):
    """vLLM exits 0 once its engine died: Restart=on-failure does nothing."""
    host = Host(active_state="inactive")
    run(files, host, failures=2)
    outcome, said = run(files, host, failures=2)
    assert outcome.verdict == "restarted"
    assert said == (f"restarting {UNIT}: 2 failed probes in a row, the last: {UNIT} is inactive "
                    "(dead) while the deployment record names it the active model\n")


@pytest.mark.parametrize("state", ["activating", "deactivating"])
def test_a_unit_systemd_is_acting_on_is_skipped(files, state):
    host = Host(healthy=False, active_state=state)
    for _run in range(3):
        outcome, _said = run(files, host, failures=1)
    assert outcome.verdict == "skipped"
    assert host.restarts() == []


def test_no_active_model_nothing_to_probe(files):
    Path(files["record"]).write_text(json.dumps({"active": None}))
    host = Host()
    outcome, said = run(files, host)
    assert (outcome.verdict, said, host.calls) == ("idle", "", [])


def test_another_active_model_starts_its_own_count(files):
    host = Host(healthy=False)
    run(files, host, failures=2)
    Path(files["record"]).write_text(json.dumps({"active": dict(ACTIVE, unit="vllm-x.service")}))
    outcome, _said = run(files, host, failures=2)
    assert outcome.verdict == "failed"  # failure 1 of vllm-x, not 2 of the old unit
    assert host.restarts() == []


def test_a_failed_restart_is_reported(files):
    host = Host(healthy=False)
    host.restart_rc = 1
    outcome, said = run(files, host, failures=1)
    assert outcome.verdict == "failed"
    assert said.endswith("1 failed probes in a row; systemctl restart failed (rc=1): "
                         "Failed to restart: access denied\n")


def test_the_shipped_script_runs_alone_beside_health_py(files, tmp_path):
    """As the role installs it: probe.py and health.py in one folder, no Ansible on the path."""
    root = Path(probe.__file__).parent
    folder = tmp_path / "lib"
    folder.mkdir()
    for name in ("probe.py", "health.py", "switch_lock.py", "replica_watch.py"):
        (folder / name).write_text((root / name).read_text())
    Path(files["record"]).write_text(json.dumps({"active": None}))
    proc = subprocess.run(
        [sys.executable, "-S", str(folder / "probe.py"), "--record", files["record"],
         "--state", files["state"], "--lock", str(tmp_path / "cutover.lock"),
         "--marker", files["marker"], "--marker-max-age", "7800",
         "--failures", "2", "--timeout", "10"],
        capture_output=True, text=True, check=False, env={"PATH": os.environ["PATH"]})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert json.loads(Path(files["state"]).read_text()) == {}
