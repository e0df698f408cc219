# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The host's periodic probe: N failures, the startup window, the switch marker (fresh and
stale), an inactive unit, and the state kept between runs (a real state file, real marker);
busy is not dead: a saturated engine that steps (vLLM's real /metrics page, fake host) is
never restarted, a stalled or unreadable one is."""

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import HttpResult
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import switch_lock
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import probe

from unit.fake_host import (
    CONN_REFUSED,
    HANG,
    HEALTHY,
    REAL_PAGE,
    SATURATED,
    STALLED,
    VLLM_UID,
    FakeHost,
    FakeProc,
)

UNIT = "vllm-tiny_gqa.service"
URL = "http://127.0.0.1:8011"
WALL = 1_800_000_000.0
PORT = 8011
MAIN_PID = 4242
CGROUP = f"/system.slice/{UNIT}"
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
        self.requests = []
        self.restart_rc = 0
        # /proc: the unit's main process listens on the model's port while it runs
        self.proc = FakeProc()
        if active_state == "active":
            self.proc.listen(MAIN_PID, PORT, "127.0.0.1", VLLM_UID, CGROUP, "vllm")

    def run_command(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            props = {"LoadState": "loaded", "ActiveState": self.active_state,
                     "SubState": self.sub_state, "InvocationID": self.invocation,
                     "ActiveEnterTimestampMonotonic": str(int(self.entered * 1e6)),
                     "ControlGroup": CGROUP if self.active_state == "active" else ""}
            return 0, "".join(f"{k}={props[k]}\n" for k in probe.SHOW), ""
        if argv[:2] == ["systemctl", "restart"]:
            err = "Failed to restart: access denied" if self.restart_rc else ""
            return self.restart_rc, "", err
        return 127, "", "not found"

    def request(self, method, url, payload=None, timeout=10.0):
        self.requests.append(url)
        if url.endswith("/metrics"):  # a stand-in, not vLLM: its progress is unknown
            return HttpResult(404, "Not Found")
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
                        request=host.request, wall=lambda: wall, proc=host.proc,
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
                     "timed out; no progress known: /metrics answered HTTP 404 "
                     "(failure 1 of 3)\n")
    assert "(failure 2 of 3)" in said2
    assert host.restarts() == []
    third, said3 = run(files, host, failures=3)
    assert third.verdict == "restarted"
    assert said3 == (f"restarting {UNIT}: 3 failed probes in a row, the last: {UNIT} failed "
                     "its health probe at completion: POST /v1/completions: timed out; "
                     "no progress known: /metrics answered HTTP 404\n")
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
    """As the role installs it: the files its task copies (probe.py, health.py, ...) in one
    folder, no Ansible on the path."""
    root = Path(probe.__file__).parents[1]  # plugins/module_utils: the task's paths are below it
    folder = tmp_path / "lib"
    folder.mkdir()
    tasks = yaml.safe_load((root.parents[1] / "roles/vllm_service/tasks/probe.yml").read_text())
    shipped = next(t["loop"] for t in tasks if t["name"].startswith("Install the probe's script"))
    assert {"watch/probe.py", "engine/health.py", "common/durable.py"} <= set(shipped)
    for path in shipped:  # one flat folder, as the task's dest (item | basename)
        (folder / Path(path).name).write_text((root / path).read_text())
    Path(files["record"]).write_text(json.dumps({"active": None}))
    proc = subprocess.run(
        [sys.executable, "-S", str(folder / "probe.py"), "--record", files["record"],
         "--state", files["state"], "--lock", str(tmp_path / "cutover.lock"),
         "--marker", files["marker"], "--marker-max-age", "7800",
         "--failures", "2", "--timeout", "10"],
        capture_output=True, text=True, check=False, env={"PATH": os.environ["PATH"]})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert json.loads(Path(files["state"]).read_text()) == {}


# -- busy is not dead (issue 33): vLLM's progress, read from its real 0.32 /metrics page ------

INTERVAL_S = 30.0  # the timer's interval; the probe's timeout is 30 s as well


def test_the_parser_reads_a_real_vllm_0_32_page():
    """The counters the probe compares exist in vLLM 0.32's page (tests/fixtures/vllm_metrics,
    idle after one completion: 1 prompt token, 4 generated, 4 engine steps)."""
    reading, error = probe.read_progress(URL, lambda *_a, **_k: HttpResult(
        200, REAL_PAGE.read_text()), 10.0)
    assert error == ""
    assert reading == {"running": 0, "waiting": 0, "counters": {
        "vllm:iteration_tokens_total_count": 4.0, "vllm:generation_tokens_total": 4.0,
        "vllm:prompt_tokens_total": 1.0}}


def fleet_host(behaviour, requests=297, steps_per_s=7.0):
    """The active model on the fake host, up for hours, with `requests` in flight (256 run,
    the rest wait) and an engine that steps `steps_per_s` times a second while it runs."""
    host = FakeHost()
    host.now = 10_000.0
    unit = host.unit(UNIT, URL, "tiny-gqa", active=True, behaviour=behaviour,
                     steps_per_s=steps_per_s, real_metrics=True,
                     behaviour_after_restart=HEALTHY)
    unit.started_at = 1.0
    unit.inflight = [1e12] * requests
    return host, unit


def probe_on(files, host, failures=3):
    """One timer interval, then one probe run (its completion may move the clock on)."""
    host.sleep(INTERVAL_S)
    out = io.StringIO()
    outcome = probe.run(settings(files, failures=failures, timeout_s=30.0),
                        run_command=host.run_command, request=host.request, wall=host.wall,
                        monotonic=host.clock, out=out, proc=host.proc)
    return outcome, out.getvalue()


def kept(files):
    return json.loads(Path(files["state"]).read_text())


def test_a_saturated_server_that_steps_is_busy_never_restarted(files):
    """256 running, 41 waiting, the completion answered after the probe's timeout on 5
    probes in a row, the iteration counter rising by 420 between probes: 0 restarts."""
    host, _unit = fleet_host(SATURATED)
    verdicts = []
    for _run in range(5):
        outcome, said = probe_on(files, host)
        verdicts.append(outcome.verdict)
    assert verdicts == ["busy"] * 5
    assert host.state_calls() == []
    assert said == (f"{UNIT}: busy, not counted: it failed its health probe at completion: "
                    "POST /v1/completions: timed out, but its engine made progress in 60 s: "
                    "running 256, waiting 41; +420 iterations, +107520 generation tokens, "
                    "+0 prompt tokens (failure count stays 0 of 3)\n")
    state = kept(files)
    assert (state["failures"], state["busy"]["running"], state["busy"]["waiting"]) == (0, 256, 41)
    # 5 timer intervals and 5 completions' waits of 30 s, 210 steps each
    assert state["progress"]["counters"]["vllm:iteration_tokens_total_count"] == 10 * 210


def test_a_saturated_server_that_stops_stepping_is_restarted_after_failures(files):
    host, unit = fleet_host(SATURATED)
    for _run in range(5):
        probe_on(files, host)
    unit.behaviour = STALLED  # still not answering, and now no engine step either
    first, said1 = probe_on(files, host)
    second, _said2 = probe_on(files, host)
    assert (first.verdict, second.verdict) == ("failed", "failed")
    assert said1 == (f"{UNIT} failed its health probe at completion: POST /v1/completions: "
                     "timed out; no progress in 30 s: running 256, waiting 41; +0 iterations, "
                     "+0 generation tokens, +0 prompt tokens (failure 1 of 3)\n")
    assert "busy" not in kept(files)
    assert host.state_calls() == []
    third, said3 = probe_on(files, host)
    assert third.verdict == "restarted"
    assert said3.startswith(f"restarting {UNIT}: 3 failed probes in a row, the last: ")
    assert host.state_calls() == [("restart", UNIT)]


def test_an_unreadable_metrics_page_with_a_failing_gate_is_restarted_after_failures(files):
    """A dead API server (active, port closed): no answer and no progress to read."""
    host, _unit = fleet_host(HANG)
    outcomes = [probe_on(files, host) for _run in range(3)]
    assert [o.verdict for o, _said in outcomes] == ["failed", "failed", "restarted"]
    assert outcomes[0][1] == (f"{UNIT} failed its health probe at health: GET /health: "
                              f"{CONN_REFUSED}; no progress known: /metrics answered "
                              f"{CONN_REFUSED} (failure 1 of 3)\n")
    assert host.state_calls() == [("restart", UNIT)]


def test_an_idle_server_that_fails_its_completion_is_a_failure(files):
    host, _unit = fleet_host(STALLED, requests=0)
    outcomes = [probe_on(files, host, failures=2) for _run in range(2)]
    assert [o.verdict for o, _said in outcomes] == ["failed", "restarted"]
    assert outcomes[0][1] == (f"{UNIT} failed its health probe at completion: POST "
                              "/v1/completions: timed out; no progress in 0 s: running 0, "
                              "waiting 0; +0 iterations, +0 generation tokens, +0 prompt "
                              "tokens (failure 1 of 2)\n")


def test_busy_then_answering_resets_the_count(files):
    """A stalled probe (failure 1), the engine steps again but still too slow (busy: the
    count stays at 1), then it answers: healthy again, count 0, not busy; the next stall is
    failure 1 again."""
    host, unit = fleet_host(STALLED)
    outcome, _said = probe_on(files, host)
    assert (outcome.verdict, kept(files)["failures"]) == ("failed", 1)
    unit.behaviour = SATURATED
    for _run in range(4):
        outcome, said = probe_on(files, host)
        assert outcome.verdict == "busy"
    assert said.endswith("(failure count stays 1 of 3)\n")
    assert kept(files)["failures"] == 1
    unit.behaviour = HEALTHY
    outcome, said = probe_on(files, host)
    assert outcome.verdict == "ok"
    assert said == f"{UNIT}: healthy again (4 completion tokens: ' world')\n"
    state = kept(files)
    assert (state["failures"], "busy" in state) == (0, False)
    unit.behaviour = STALLED
    outcome, said = probe_on(files, host)
    assert said.endswith("(failure 1 of 3)\n")
    assert host.state_calls() == []


# --- a sleeping model is a state, not a fault (issue 35 item 3) ----------------

SLEEPER = dict(ACTIVE, level=1, since="2026-12-05T06:00:00+00:00", main_pid=4242)


def test_a_model_the_record_lists_sleeping_is_never_probed_nor_restarted(files):
    """vLLM's /sleep pauses the scheduler: a completion hangs (measured on the lab: not answered
    within 5 s), so the probe must not ask; the record's `sleeping` says so (issue 35)."""
    Path(files["record"]).write_text(json.dumps({"active": ACTIVE, "sleeping": [SLEEPER]}))
    host = Host(healthy=False)  # a completion would time out, as a sleeping server's does
    for _run in range(4):
        outcome, said = run(files, host, failures=2)
    assert outcome.verdict == "sleeping"
    assert said == f"{UNIT}: sleeping (level 1 since 2026-12-05T06:00:00+00:00), not probed\n"
    assert host.calls == []  # neither systemctl nor a request
    assert json.loads(Path(files["state"]).read_text())["failures"] == 0


def test_a_count_from_before_the_sleep_is_forgotten_and_a_woken_model_is_probed_again(files):
    host = Host(healthy=False)
    run(files, host, failures=2)  # failure 1 of 2
    Path(files["record"]).write_text(json.dumps({"active": ACTIVE, "sleeping": [SLEEPER]}))
    assert run(files, host, failures=2)[0].verdict == "sleeping"
    Path(files["record"]).write_text(json.dumps({"active": ACTIVE, "sleeping": []}))
    outcome, said = run(files, host, failures=2)
    assert outcome.verdict == "failed"
    assert said.endswith("(failure 1 of 2)\n")
    assert host.restarts() == []


def test_another_models_sleeper_does_not_stop_the_active_ones_probe(files):
    other = dict(SLEEPER, model="tiny_mla", unit="vllm-tiny_mla.service")
    Path(files["record"]).write_text(json.dumps({"active": ACTIVE, "sleeping": [other]}))
    outcome, said = run(files, Host(), failures=2)
    assert (outcome.verdict, said) == ("ok", "")


# --- blind is not dead (issue 44 item 5): a real loopback server, the probe's own urllib ------

# What vLLM's /metrics keeps with --disable-log-stats (or on an API server of several that
# does not own the counters): the Python process's metrics, none of vLLM's.
BLIND_PAGE = ("# HELP python_gc_objects_collected_total Objects collected during gc\n"
              "# TYPE python_gc_objects_collected_total counter\n"
              'python_gc_objects_collected_total{generation="0"} 12345.0\n'
              "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
              "# TYPE process_resident_memory_bytes gauge\n"
              "process_resident_memory_bytes 2.1e+09\n")
# The same page with vLLM's counters, flat: nothing runs and nothing steps.
FLAT_PAGE = BLIND_PAGE + (
    'vllm:num_requests_running{engine="0",model_name="tiny-gqa"} 0.0\n'
    'vllm:num_requests_waiting{engine="0",model_name="tiny-gqa"} 0.0\n'
    'vllm:iteration_tokens_total_count{engine="0",model_name="tiny-gqa"} 77.0\n'
    'vllm:generation_tokens_total{engine="0",model_name="tiny-gqa"} 1234.0\n'
    'vllm:prompt_tokens_total{engine="0",model_name="tiny-gqa"} 567.0\n')
HEALTH_HANG_S = 1.5  # longer than the probe's timeout below


class _Hanging(BaseHTTPRequestHandler):
    """/metrics answers the server's page at once; /health answers after HEALTH_HANG_S."""

    page = BLIND_PAGE

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            time.sleep(HEALTH_HANG_S)
        body = (self.page if self.path == "/metrics" else "").encode()
        with contextlib.suppress(OSError):  # the probe gave up on /health and closed
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


@contextlib.contextmanager
def loopback(page):
    handler = type("Handler", (_Hanging,), {"page": page})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def probe_loopback(files, page, runs=3):
    host = Host()
    outcomes = []
    with loopback(page) as url:
        host.proc.listen(MAIN_PID, int(url.rsplit(":", 1)[1]), "127.0.0.1", VLLM_UID, CGROUP)
        Path(files["record"]).write_text(json.dumps({"active": dict(ACTIVE, url=url)}))
        for _run in range(runs):
            out = io.StringIO()
            outcomes.append((probe.run(settings(files, failures=3, timeout_s=0.3),
                                       run_command=host.run_command, wall=lambda: WALL,
                                       monotonic=lambda: host.monotonic_now, out=out,
                                       proc=host.proc),
                             out.getvalue()))
    return host, outcomes


def test_metrics_without_vllms_counters_and_a_hanging_health_is_blind_never_restarted(files):
    host, outcomes = probe_loopback(files, BLIND_PAGE, runs=4)
    assert [o.verdict for o, _said in outcomes] == ["blind"] * 4
    assert host.restarts() == []
    assert outcomes[-1][1] == (
        f"{UNIT}: cannot tell busy from dead, not counted: it failed its health probe at "
        "health: GET /health: timed out, and /metrics answers without vLLM's counters "
        "(vllm:num_requests_running, vllm:iteration_tokens_total_count ...: "
        "--disable-log-stats or --api-server-count > 1 remove them); not restarted on "
        "timeouts alone (failure count stays 0 of 3)\n")
    state = kept(files)
    assert (state["failures"], state["blind"]) == (0, probe.BLIND_WHY)


def test_flat_counters_at_0_running_and_a_hanging_health_restart_as_before(files):
    host, outcomes = probe_loopback(files, FLAT_PAGE)
    assert [o.verdict for o, _said in outcomes] == ["failed", "failed", "restarted"]
    assert outcomes[0][1] == (f"{UNIT} failed its health probe at health: GET /health: timed "
                              "out; no progress in 0 s: running 0, waiting 0; +0 iterations, "
                              "+0 generation tokens, +0 prompt tokens (failure 1 of 3)\n")
    assert host.restarts() == [["systemctl", "restart", "--no-block", UNIT]]
    assert "blind" not in kept(files)


def test_a_blind_probe_that_answers_says_so_once_per_start(files):
    state = {"unit": UNIT, "failures": 0, "healthy_invocation": "inv-1"}
    page = HttpResult(200, BLIND_PAGE)
    host = Host()

    def request(method, url, payload=None, timeout=10.0):
        return page if url.endswith("/metrics") else host.request(method, url, payload, timeout)

    said = []
    for _run in range(2):
        outcome = probe.decide(settings(files), {"active": ACTIVE}, state,
                               run_command=host.run_command, request=request,
                               wall=lambda: WALL, monotonic=lambda: host.monotonic_now,
                               proc=host.proc)
        state = outcome.state
        said.append((outcome.verdict, outcome.message))
    assert said == [("ok", (f"{UNIT}: cannot tell busy from dead: {probe.BLIND_WHY}; a "
                            "timed-out probe will not be counted")), ("ok", "")]


# -- only the unit's own process is trusted on its port (issue 45 case 2) -------------------

INTRUDER = "/user.slice/user-4343.slice/session-3.scope"


def test_an_intruder_on_the_port_fails_the_probe_named_even_inside_the_startup_window(files):
    """The unit restarted (its startup window) and another uid listened first: the probe
    names it, counts it, and asks for nothing at its port."""
    host = Host(up_s=60.0)
    host.proc = FakeProc()  # the unit's own server never got to listen
    host.proc.listen(7777, PORT, "127.0.0.1", 4343, INTRUDER, "nc")
    outcome, said = run(files, host, failures=3)
    assert outcome.verdict == "failed"
    assert said == (
        f"{UNIT} failed its health probe at listener: port {PORT} on 127.0.0.1 is held by "
        f"pid 7777 (uid 4343, nc, {INTRUDER}), not by {UNIT}'s processes (cgroup {CGROUP}): "
        "refused (failure 1 of 3)\n")
    assert host.requests == []


def test_an_answer_the_units_process_is_not_seen_giving_is_not_healthy_nor_counted(files):
    host = Host()
    host.proc = FakeProc()  # nobody seen listening (a reader that cannot see it)
    outcome, said = run(files, host, failures=1)
    assert outcome.verdict == "skipped"
    assert said == (f"{UNIT}: answered its health probe (4 completion tokens: ' hi') but nothing "
                    f"listens on port {PORT} on 127.0.0.1 (/proc/net/tcp, tcp6); not counted "
                    "(failure count stays 0 of 1)\n")
    assert host.restarts() == []
    assert kept(files).get("healthy_invocation") is None
