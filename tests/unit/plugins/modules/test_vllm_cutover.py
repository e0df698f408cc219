# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The vllm_cutover module end to end: real AnsibleModule, its real JSON output.

systemctl/journalctl/ss go to the fake host (unit/fake_host.py) through
AnsibleModule.run_command; HTTP is real: the module's own urllib client talks to
loopback servers that answer as the fake host's units would (503 while a unit
is down, since a listening socket cannot refuse).
"""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils import basic
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.record import (
    write as write_record,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    upstream_conf,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import (
    listener as listener_mod,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import units as units_mod
from ansible_collections.vllm_fleet.fleet.plugins.modules import vllm_cutover
from ports import free_port
from repo_paths import FIXTURES

from unit.fake_host import CRASH, HANG, FakeHost
from unit.module_harness import run_module

B, G = "vllm-blue.service", "vllm-green.service"
JOURNAL = ["INFO Loading weights", "ERROR CUDA out of memory"]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length)) if length else None
        res = self.server.host.request(method, self.server.base + self.path, payload)
        body = (res.error or res.body).encode()
        self.send_response(503 if res.error else res.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self._answer("POST")


@pytest.fixture(scope="module")
def servers():
    """Three loopback servers, blue's, green's and the front door's; each test points them at
    its fake host."""
    started = []
    for _unused in range(3):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        started.append(srv)
    yield started
    for srv in started:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def port():
    """Green's TCP port: free, so the preflight's probe finds nothing there."""
    return free_port()


@pytest.fixture
def world(servers, tmp_path, monkeypatch, port):
    host = FakeHost()
    for srv in servers:
        srv.host = host
    blue_srv, green_srv, door_srv = servers
    host.cgroup_root = str(tmp_path / "cgroup")
    monkeypatch.setattr(units_mod, "CGROUP_ROOT", host.cgroup_root)
    # who listens on a port: the fake host's units (the real servers here are pytest's own)
    monkeypatch.setattr(listener_mod, "live_proc", lambda: host.proc)
    # the ports nginx proxies to are the catalog's; the fake routes them to these servers
    host.unit(B, blue_srv.base, "blue-model", active=True, port=8101, worker_pids=[4301])
    host.unit(G, green_srv.base, "green-model", journal=JOURNAL, port=port)
    upstream = tmp_path / "nginx" / "upstream.conf"
    upstream.parent.mkdir()
    upstream.write_text(upstream_conf(8101, model="blue"))
    host.frontdoor(door_srv.base, upstream).loaded = 8101
    host.frontdoor_args = {"upstream_file": str(upstream), "url": door_srv.base}
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda _self, argv, **_kw: host.run_command(argv))
    # The fake host has systemd, iproute2 and nginx; no NVIDIA driver.
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda _self, name, **_kw: (
        f"/usr/bin/{name}" if name in ("systemctl", "journalctl", "ss", "nginx") else None))
    host.state_file = tmp_path / "vllm_fleet.fact"
    host.args = {"model": "green", "unit": G, "url": green_srv.base,
                 "served_model_name": "green-model", "port": port,
                 "state_file": str(host.state_file), "health_interval": 0.01,
                 "lock_file": str(tmp_path / "run" / "cutover.lock"),
                 "record": {"repo_id": "org/green", "revision": "b" * 40}}
    host.blue = {"model": "blue", "unit": B, "url": blue_srv.base, "port": 8101,
                 "served_model_name": "blue-model", "startup_timeout_s": 900,
                 "since": "2027-01-01T00:00:00+00:00"}
    return host


def run_cutover(args):
    result = run_module(vllm_cutover.main, args)
    result["module_rc"] = result.get("rc")  # what a failed command returned, if the module says
    result["rc"] = result.exit_code
    return result


def test_first_deploy_switches_and_shows_the_diff(world):
    result = run_cutover({**world.args, "_ansible_diff": True})
    assert result["rc"] == 0
    assert (result["changed"], result["action"], result["active_before"],
            result["active_after"], result["rolled_back"]) == (True, "switch", None, "green", False)
    assert result["diff"] == {"before": "active model: None\n", "after": "active model: green\n"}
    assert result["green_health"]["ok"] is True
    assert result["green_health"]["detail"] == "4 completion tokens: ' world'"
    assert world.state_calls() == [("reset-failed", G), ("start", G), ("enable", G)]
    active = json.loads(world.state_file.read_text())["active"]
    since = active.pop("since")
    assert since.endswith("+00:00")
    assert active == {"model": "green", "unit": G, "url": world.args["url"],
                      "port": world.args["port"], "served_model_name": "green-model",
                      "startup_timeout_s": 900, "startup_stall_s": 600, "repo_id": "org/green",
                      "revision": "b" * 40, "gpus": []}

    # The same run again: green is active, running and unchanged.
    world.calls.clear()
    again = run_cutover({**world.args, "_ansible_diff": True})
    assert (again["rc"], again["changed"], again["action"]) == (0, False, "none")
    assert again["diff"]["before"] == again["diff"]["after"] == "active model: green\n"
    assert world.state_calls() == []


def test_sequential_switch_from_blue(world):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    # blue's worker exits at SIGTERM, its API server later (the module runs on the real clock,
    # the fake's stands still: only the blocking stop moves it on to blue's exit)
    world.units[B].release_s, world.units[B].exit_s = 0.0, 0.433
    result = run_cutover(world.args)
    assert (result["rc"], result["changed"], result["active_before"], result["active_after"]) == (
        0, True, "blue", "green")
    assert world.active_at_start[G] == []
    assert world.holders_at_start[G] == {}
    # Blue is stopped without waiting (--no-block); green starts once blue's worker is gone,
    # and blue's stop is waited for before it is disabled.
    assert world.state_calls() == [("reset-failed", G), ("stop", B), ("start", G),
                                   ("enable", G), ("stop", B), ("disable", B)]
    assert [c for c in world.calls if c[:2] == ["systemctl", "stop"]] == [
        ["systemctl", "stop", B, "--no-block"], ["systemctl", "stop", B]]
    assert result["blue_released_early"] is True
    saved = json.loads(world.state_file.read_text())
    assert saved["previous"] == world.blue
    assert saved["history"] == [world.blue]


def test_check_mode_touches_nothing(world):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    before = world.state_file.read_bytes()
    result = run_cutover({**world.args, "_ansible_check_mode": True,
                          "_ansible_diff": True})
    assert (result["rc"], result["changed"], result["action"], result["blue"]) == (
        0, True, "switch", "blue")
    assert result["diff"] == {"before": "active model: blue\n", "after": "active model: green\n"}
    assert {argv[1] for argv in world.calls} == {"show"}
    assert world.state_file.read_bytes() == before
    assert world.units[B].active_state == "active"


def test_green_failure_fails_with_the_rollback_fields(world):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    before = world.state_file.read_bytes()
    world.units[G].behaviour = CRASH
    result = run_cutover(world.args)
    assert result["rc"] == 1
    assert result["failed"] is True
    assert result["changed"] is True  # blue was stopped and started again
    assert result["msg"] == (
        "cutover to green failed: green green failed its health gate at process: "
        "vllm-green.service failed (failed). Rolled back: blue is serving again.")
    assert (result["rolled_back"], result["active_before"], result["active_after"]) == (
        True, "blue", "blue")
    assert result["journal"] == JOURNAL
    assert result["green_health"]["stage"] == "process"
    assert result["blue_health"]["ok"] is True
    assert sorted(result["phases"]) == ["drain_blue", "preflight", "rollback", "start_green",
                                        "stop_blue"]
    assert world.units[B].active_state == "active"
    assert world.state_file.read_bytes() == before


def test_startup_stall_fails_a_silent_green_before_its_startup_timeout(world):
    """The option reaches the gate: green prints nothing after its start and is given up
    after 1 s of its 30 s timeout (real clock), then blue serves again."""
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    world.units[G].behaviour = HANG
    result = run_cutover(dict(world.args, strategy="parallel", startup_timeout=30,
                              startup_stall=1))
    assert result["failed"] is True
    assert result["msg"].startswith(
        "cutover to green failed: green green failed its health gate at stall: "
        "vllm-green.service printed nothing for 1.")
    assert "wanted a new journal line at least every 1 s (startup_stall_s)" in result["msg"]
    assert result["msg"].endswith("Rolled back: blue is serving again.")
    # Real clock: at the stall (1 s), long before the timeout (30 s). The bound was 2.0,
    # one second of slack for a whole module run on a machine that may be busy.
    assert 1.0 <= result["green_health"]["seconds"] < 5.0
    assert world.units[G].active_state == "inactive"
    assert world.units[B].active_state == "active"


def test_refusal_before_anything_changes_reports_changed_false(world):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    world.units[G].installed = False
    result = run_cutover(world.args)
    assert (result["rc"], result["failed"], result["changed"]) == (1, True, False)
    assert result["msg"] == ("cutover to green refused before any change: green unit "
                             "vllm-green.service is not installed (LoadState=not-found). "
                             "blue is still serving.")
    assert (result["rolled_back"], result["active_after"]) == (False, "blue")
    assert world.state_calls() == []


def test_unreadable_record_fails_cleanly(world):
    world.state_file.write_text("active: blue\n")
    result = run_cutover(world.args)
    assert (result["rc"], result["failed"], result["changed"]) == (1, True, False)
    assert result["msg"].startswith(f"deployment record {world.state_file} is not JSON: ")
    assert world.calls == []


def test_restart_option_restarts_the_running_active_model(world):
    green = {"model": "green", "unit": G, "url": world.args["url"], "port": world.args["port"],
             "served_model_name": "green-model", "startup_timeout_s": 900,
             "repo_id": "org/green", "revision": "b" * 40, "since": "2027-01-01T00:00:00+00:00"}
    write_record(str(world.state_file), {"active": green, "previous": world.blue,
                                         "history": [world.blue]})
    world.run_command(["systemctl", "start", G])
    world.calls.clear()
    result = run_cutover({**world.args, "restart": True})
    assert (result["rc"], result["changed"], result["action"]) == (0, True, "restart")
    assert world.state_calls() == [("reset-failed", G), ("restart", G), ("enable", G)]
    saved = json.loads(world.state_file.read_text())
    assert (saved["previous"], saved["history"]) == (world.blue, [world.blue])


def test_bad_strategy_is_refused_by_the_argument_spec(world):
    result = run_cutover({**world.args, "strategy": "blue-green"})
    assert result["failed"] is True
    assert result["msg"] == ("value of strategy must be one of: sequential, parallel, auto, "
                             "got: blue-green")
    assert world.calls == []


# -- front door, drain, auto, foreign GPU processes -------------------------------------------
def recorded_blue(world, gpus=(0, 1, 2, 3)):
    write_record(str(world.state_file), {"active": dict(world.blue, gpus=list(gpus)),
                                         "previous": None, "history": []})


def test_sequential_switch_through_the_front_door(world):
    recorded_blue(world)
    world.units[B].inflight = [900.0, 900.0]  # the fake's clock stands still: they never finish
    result = run_cutover({**world.args, "frontdoor": world.frontdoor_args,
                          "drain_timeout": 0})
    assert (result["rc"], result["changed"], result["strategy"], result["active_after"]) == (
        0, True, "sequential", "green")
    port = world.args["port"]
    assert world.events() == [
        f"reset-failed {G}", "nginx -t", "reload nginx: none",
        f"metrics {B}: running=2 waiting=0", f"stop {B}", f"start {G}",
        f"completion {G}: 4 tokens",
        "nginx -t", f"reload nginx: {port}", f"enable {G}", f"disable {B}"]
    drained = result["blue_drain"]
    assert (drained["drained"], drained["running"], drained["waiting"]) == (False, 2, 0)
    assert 0.0 <= drained["seconds"] < 1.0
    # real seconds on the module's own clock, rounded to 0.01: a fast switch reads 0.0
    # (test_cutover_frontdoor.py checks the value on a fake clock)
    assert isinstance(result["downtime_s"], float)
    assert 0.0 <= result["downtime_s"] < 5.0
    assert result["phases"]["frontdoor"] >= 0.0
    with open(world.frontdoor_args["upstream_file"], encoding="utf-8") as handle:
        assert handle.read() == upstream_conf(port, model="green")
    assert world.nginx.loaded == port
    saved = json.loads(world.state_file.read_text())
    assert saved["active"]["frontdoor_url"] == world.frontdoor_args["url"]


def test_strategy_auto_with_disjoint_gpus_switches_in_parallel(world):
    recorded_blue(world, gpus=[0, 1, 2, 3])
    result = run_cutover({**world.args, "strategy": "auto", "gpus": [4, 5, 6, 7],
                          "frontdoor": world.frontdoor_args})
    assert (result["rc"], result["strategy"], result["downtime_s"]) == (0, "parallel", 0.0)
    assert world.active_at_start[G] == [B]
    assert [port for _t, port in world.nginx.switches] == [world.args["port"]]
    assert json.loads(world.state_file.read_text())["active"]["gpus"] == [4, 5, 6, 7]


def test_gpu_processes_foreign_to_both_units_refuse_the_switch(world, tmp_path):
    """nvidia-smi is read when the switch decides (here through gpu_facts' fixture seam)."""
    recorded_blue(world)
    smi = tmp_path / "smi"
    smi.mkdir()
    gpus = (FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie" / "nvidia-smi-query-gpu.csv")
    (smi / "nvidia-smi-query-gpu.csv").write_text(gpus.read_text())
    uuid = "GPU-5e7a0e00-0000-4000-8000-00000000000{}"
    (smi / "nvidia-smi-query-compute-apps.csv").write_text(
        f"4301, {80 * 1024}, {uuid.format(4)}\n"    # blue's worker (MiB)
        f"31337, 1024, {uuid.format(5)}\n")          # a process of no model service
    result = run_cutover({**world.args, "gpus": [4, 5], "gpu_facts_fixture_dir": str(smi),
                          "frontdoor": world.frontdoor_args})
    assert (result["rc"], result["failed"], result["changed"]) == (1, True, False)
    assert result["msg"] == ("cutover to green refused before any change: green green cannot "
                             "start: processes that belong to no model service hold memory on "
                             "its GPUs (pid 31337 holds 1073741824 bytes on GPU 5). blue is still "
                             "serving.")
    assert (result["rolled_back"], result["active_after"]) == (False, "blue")
    assert world.timeline == []
    assert world.units[B].active_state == "active"


def test_check_mode_with_a_front_door_touches_nothing(world):
    recorded_blue(world)
    upstream = world.frontdoor_args["upstream_file"]
    with open(upstream, encoding="utf-8") as handle:
        before = handle.read()
    result = run_cutover({**world.args, "frontdoor": world.frontdoor_args,
                          "_ansible_check_mode": True})
    assert (result["rc"], result["changed"], result["action"]) == (0, True, "switch")
    assert world.timeline == []
    assert {argv[1] for argv in world.calls} == {"show"}
    with open(upstream, encoding="utf-8") as handle:
        assert handle.read() == before


def test_front_door_failure_on_the_active_model_fails_cleanly(world):
    green = {"model": "green", "unit": G, "url": world.args["url"], "port": world.args["port"],
             "served_model_name": "green-model", "startup_timeout_s": 900,
             "startup_stall_s": 600, "repo_id": "org/green", "revision": "b" * 40, "gpus": [],
             "frontdoor_url": world.frontdoor_args["url"], "since": "2027-01-01T00:00:00+00:00"}
    write_record(str(world.state_file), {"active": green, "previous": None, "history": []})
    world.run_command(["systemctl", "start", G])
    world.nginx.active = False
    result = run_cutover({**world.args, "frontdoor": world.frontdoor_args})
    assert (result["rc"], result["failed"], result["action"]) == (1, True, "frontdoor")
    assert result["msg"] == ("green is running, but the front door was not switched to it: "
                             "reloading nginx failed (systemctl reload nginx rc=1): "
                             "nginx.service is not active, cannot reload.")
    # what systemctl said travels as fail_json's rc/stderr, not only inside the message
    assert (result["module_rc"], result["stderr"].strip()) == (
        1, "nginx.service is not active, cannot reload.")
    assert [c for c in world.state_calls() if c[0] in ("stop", "start")] == [("start", G)]


# An earlier cutover's job: holds the host's switch lock for argv[2] seconds.
HOLDER = """
import fcntl, json, os, sys, time
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, json.dumps({"pid": os.getpid(), "model": "green", "since": "s"}).encode())
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_rerun_waits_for_the_switch_in_progress_then_converges_from_its_record(
        world, tmp_path):
    """Issue 12 case 8: the controller died mid-switch; its job on the host goes on. The
    re-run's cutover waits on the host's lock, reads the record that job left and has
    nothing to do."""
    first = run_cutover(world.args)
    assert (first["rc"], first["action"]) == (0, "switch")
    lock = world.args["lock_file"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, lock, "1.0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        world.calls.clear()
        progress = tmp_path / "progress.json"
        again = run_cutover({**world.args, "progress_file": str(progress),
                             "progress_interval": 0.2})
    finally:
        holder.kill()
        holder.wait()
    assert (again["rc"], again["changed"], again["action"]) == (0, False, "none")
    assert again["waited_for_switch"]["pid"] == holder.pid
    assert again["waited_for_switch"]["model"] == "green"
    assert 0.5 < again["waited_for_switch"]["waited_s"] < 10
    assert world.state_calls() == []
    said = json.loads(progress.read_text())
    assert said["phase"] == "waiting for"
    assert said["model"].startswith(f"the switch to green (pid {holder.pid}")


def test_a_switch_in_progress_past_the_wait_fails_without_a_change(world):
    lock = world.args["lock_file"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, lock, "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        result = run_cutover({**world.args, "lock_timeout": 1})
        check = run_cutover({**world.args, "_ansible_check_mode": True})
    finally:
        holder.kill()
        holder.wait()
    assert (result["rc"], result["changed"]) == (1, False)
    assert result["msg"].startswith("cutover to green did not start: ")
    assert result["msg"].endswith("after 1 s of waiting; nothing was changed")
    assert world.state_calls() == []
    assert not world.state_file.exists()
    # Check mode does not wait: it plans from the record as it is and names the switch.
    assert (check["rc"], check["action"]) == (0, "switch")
    assert check["waited_for_switch"]["waited_s"] == 0.0


# -- one host's phases of a replica switch (module_utils/fleet/replica_cutover.py) -----
REPLICA_HEAD = {"group": "lab_replica", "role": "head", "node_rank": 0, "nodes": 2,
                "head": "h1", "ranks": [{"name": "h1", "role": "head", "state_url": ""},
                                        {"name": "h2", "role": "worker", "state_url": ""}]}


def test_the_phases_of_a_replica_head_through_the_module(world, tmp_path):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    marker = str(tmp_path / "run" / "switching.json")
    args = dict(world.args, replica=REPLICA_HEAD, switch_marker=marker)
    plan = run_cutover(dict(args, phase="plan", _ansible_check_mode=True))
    assert (plan["rc"], plan["action"], plan["role"], plan["blue_role"]) == (
        0, "switch", "head", "single")
    assert plan["green_ranks"] == ["h1", "h2"]
    # The other phases are not run in check mode.
    skipped = run_cutover(dict(args, phase="stop", _ansible_check_mode=True))
    assert (skipped["changed"], skipped["msg"]) == (
        False, "check mode: phase stop is not run (only plan is)")
    assert world.units[B].active_state == "active"
    stop = run_cutover(dict(args, phase="stop"))
    assert (stop["rc"], stop["stopped"]) == (0, [B])
    start = run_cutover(dict(args, phase="start"))
    assert (start["rc"], start["started"], start["invocation"]) == (0, G, f"{G}-inv-1")
    gate = run_cutover(dict(args, phase="gate"))
    assert (gate["rc"], gate["ok"], gate["green_health"]["stage"]) == (0, True, "ok")
    commit = run_cutover(dict(args, phase="commit"))
    assert (commit["rc"], commit["changed"]) == (0, True)
    saved = json.loads(world.state_file.read_text())
    assert saved["active"]["replica"] == REPLICA_HEAD
    assert saved["previous"]["model"] == "blue"
    assert not (tmp_path / "run" / "switching.json").exists()


def test_a_failed_gate_phase_fails_the_task_with_the_stage(world, tmp_path):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    world.units[G].behaviour = CRASH
    args = dict(world.args, replica=REPLICA_HEAD,
                switch_marker=str(tmp_path / "run" / "switching.json"))
    for phase in ("stop", "start"):
        assert run_cutover(dict(args, phase=phase))["rc"] == 0
    gate = run_cutover(dict(args, phase="gate"))
    assert (gate["rc"], gate["failed"], gate["ok"]) == (1, True, False)
    assert gate["msg"] == (f"green green@bbbbbbbbbbbb failed its gate on this host at process: "
                           f"{G} failed (failed)")
    assert gate["journal"] == JOURNAL


def test_warm_switch_sleeps_blue_and_the_switch_back_wakes_it(world, servers):
    """switch_mode=warm end to end: blue (recorded able to sleep) sleeps, green starts; the
    switch back to blue wakes it (no start, its main process the same). The sleep routes
    are the fake's model of vLLM 0.32's (unit/fake_host.py)."""
    world.units[B].sleep_mode = world.units[G].sleep_mode = True
    blue = dict(world.blue, sleep_mode=True)
    write_record(str(world.state_file), {"active": blue, "previous": None, "history": []})
    warm = {"switch_mode": "warm", "sleep_mode": True, "sleep_level": 1}
    result = run_cutover({**world.args, **warm})
    assert (result["rc"], result["switch"], result["woke"]) == (0, "warm", False)
    assert (world.units[B].active_state, world.units[B].asleep) == ("active", 1)
    assert ("stop", B) not in world.state_calls()
    saved = json.loads(world.state_file.read_text())
    assert saved["active"]["sleep_mode"] is True
    assert [(s["model"], s["level"], s["main_pid"]) for s in saved["sleeping"]] == [
        ("blue", 1, 4242)]

    world.calls.clear()
    back = {**world.args, **warm, "model": "blue", "unit": B, "url": servers[0].base,
            "served_model_name": "blue-model", "port": 8101, "record": {},
            "startup_timeout": 30}
    result = run_cutover(back)
    assert (result["rc"], result["switch"], result["woke"]) == (0, "warm", True)
    assert not [c for c in world.state_calls() if c[0] in ("start", "restart")]
    assert (world.units[B].asleep, world.units[B].main_pid) == (0, 4242)
    assert world.units[G].asleep == 1
    saved = json.loads(world.state_file.read_text())
    assert [s["model"] for s in saved["sleeping"]] == ["green"]


def test_warm_options_are_checked(world):
    result = run_cutover({**world.args, "sleep_level": 3})
    assert result["rc"] == 1
    assert "sleep_level" in result["msg"]
    assert "1, 2" in result["msg"]
