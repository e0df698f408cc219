# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The blue/green switch, driven on a fake host (units, servers, clock; see unit/fake_host.py).

Port probes are real: the green port is a free loopback port, and "port taken"
holds a real listening socket on it.
"""

import json
import os
import socket
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as record_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import units as units_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Host,
    Settings,
    plan,
)
from ports import free_port

from unit.fake_host import (
    CONN_REFUSED,
    CRASH,
    EXITS,
    HANG,
    HEALTHY,
    RESTART_LOOP,
    START_FAILS,
    WRONG_MODEL,
    FakeHost,
    FakeProc,
)

B, G = "vllm-blue.service", "vllm-green.service"
BLUE_PORT = 8101
JOURNAL = ["Loading safetensors checkpoint shards: 100%",
           "torch.OutOfMemoryError: CUDA out of memory"]
# What the switch's message adds from green's journal (units.journal_cause).
CAUSE = " (its journal: torch.OutOfMemoryError: CUDA out of memory)"
EMPTY = {"active": None, "previous": None, "history": []}


def spec(name, port, revision="a" * 40):
    return {"model": name, "unit": f"vllm-{name}.service", "url": f"http://127.0.0.1:{port}",
            "port": port, "served_model_name": f"{name}-model", "startup_timeout_s": 60,
            "repo_id": f"org/{name}", "revision": revision}


def since(entry, iso="2027-01-01T00:00:00+00:00"):
    return dict(entry, since=iso)


@pytest.fixture
def port():
    """A loopback port nothing listens on."""
    return free_port()


class World:
    """A fake host with green (and optionally blue, the recorded active model) installed."""

    def __init__(self, tmp_path, port, *, blue=True, blue_active=True, green=HEALTHY,
                 green_warmup=0.0, green_installed=True, green_active=False, record=None):
        self.host = FakeHost()
        self.green = spec("green", port)
        self.blue = since(spec("blue", BLUE_PORT))
        self.host.unit(G, self.green["url"], "green-model", behaviour=green,
                       warmup_s=green_warmup, installed=green_installed, active=green_active,
                       journal=JOURNAL)
        self.state_file = tmp_path / "facts.d" / "vllm_fleet.fact"
        if blue:
            self.host.unit(B, self.blue["url"], "blue-model", active=blue_active)
            record = record or {"active": self.blue, "previous": None, "history": []}
        self.record = record or EMPTY
        if record:
            record_mod.write(str(self.state_file), record)
        self.before = self.state_file.read_bytes() if record else None

    def cutover(self, **kwargs):
        # No cgroup is kept here (the fake's cgroup_root is None): a switch waits for blue's
        # whole stop, as it does on a host whose cgroup it cannot read.
        host = Host(self.host.run_command, request=self.host.request, clock=self.host.clock,
                    wall=self.host.wall, sleep=self.host.sleep, proc=self.host.proc,
                    cgroup_root=str(self.state_file.parent / "no-cgroup"))
        procs = kwargs.pop("gpu_processes", None)
        return Cutover(host, self.green, str(self.state_file), Settings(**kwargs),
                       gpu_processes=procs)

    def run(self, check_mode=False, **kwargs):
        return self.cutover(**kwargs).run_plan(record_mod.load(str(self.state_file)), check_mode)

    def fail(self, **kwargs):
        with pytest.raises(CutoverError) as caught:
            self.run(**kwargs)
        return caught.value

    def saved(self):
        return json.loads(self.state_file.read_text())

    def states(self):
        return {name: unit.active_state for name, unit in sorted(self.host.units.items())}


# -- plan ---------------------------------------------------------------------------------
GREEN = spec("green", 8001)
RUNNING = {"ActiveState": "active"}


@pytest.mark.parametrize(("record", "restart", "state", "action"), [
    (EMPTY, False, None, "switch"),
    (EMPTY, True, RUNNING, "switch"),
    ({"active": spec("blue", 8101)}, False, RUNNING, "switch"),
    ({"active": since(GREEN)}, False, RUNNING, "none"),
    ({"active": since(GREEN)}, True, RUNNING, "restart"),
    ({"active": since(GREEN)}, False, {"ActiveState": "inactive"}, "start"),
    ({"active": since(GREEN)}, True, {"ActiveState": "inactive"}, "start"),
    ({"active": since(GREEN)}, False, {"ActiveState": "failed"}, "start"),
    ({"active": since(GREEN)}, False, {"ActiveState": "activating"}, "start"),
    ({"active": since(GREEN)}, False, None, "start"),
    # plan() looks at the model name only; describe() turns a changed record into 'record'
    ({"active": since(spec("green", 8001, revision="b" * 40))}, False, RUNNING, "none"),
])
def test_plan(record, restart, state, action):
    assert plan(record, GREEN, restart, state) == action


# -- switch ---------------------------------------------------------------------------------
def test_first_deploy_starts_green_alone_and_writes_the_record(tmp_path, port):
    world = World(tmp_path, port, blue=False, green_warmup=5.0)
    result = world.run()
    assert result == {
        "action": "switch", "strategy": "sequential", "active_before": None,
        "active_after": "green", "blue": None, "green": "green", "changed": True,
        "rolled_back": False, "phases": {"preflight": 0.0, "start_green": 6.0},
        "green_health": {"ok": True, "seconds": 6.0, "stage": "ok",
                         "detail": "4 completion tokens: ' world'", "attempts": 4},
        "time_to_healthy_s": 6.0, "state": "inactive", "downtime_s": 0.0,
        "revision_before": None, "revision_after": "a" * 40,
    }
    assert world.host.state_calls() == [("reset-failed", G), ("start", G), ("enable", G)]
    assert world.host.units[G].enabled is True
    assert world.saved() == {"active": since(world.green, "2027-01-15T08:00:06+00:00"),
                             "previous": None, "history": []}
    assert oct(world.state_file.stat().st_mode & 0o777) == "0o644"
    assert not [c for c in world.host.calls if c[0] == "ss"]  # the port was free


def test_sequential_stops_blue_before_green_starts(tmp_path, port):
    world = World(tmp_path, port, green_warmup=3.0)
    result = world.run()
    # Green's failed state is cleared before the outage begins, not inside it.
    assert world.host.state_calls() == [
        ("reset-failed", G), ("stop", B), ("start", G), ("enable", G), ("disable", B)]
    assert world.host.active_at_start[G] == []  # the GPUs never held both
    assert world.states() == {B: "inactive", G: "active"}
    assert world.host.units[B].enabled is False
    assert ["systemctl", "stop", B] in world.host.calls  # its cgroup unread: the whole stop
    assert result["blue_released_early"] is False
    assert (result["action"], result["active_before"], result["active_after"],
            result["blue"], result["rolled_back"]) == ("switch", "blue", "green", "blue", False)
    # Blue has no requests in flight (its /metrics says 0), so its drain ends at once.
    assert sorted(result["phases"]) == ["drain_blue", "preflight", "start_green", "stop_blue"]
    assert result["time_to_healthy_s"] == 4.0
    assert world.saved() == {"active": since(world.green, "2027-01-15T08:00:04+00:00"),
                             "previous": world.blue, "history": [world.blue]}


def test_parallel_starts_green_beside_blue_and_stops_blue_after_the_gate(tmp_path, port):
    world = World(tmp_path, port)
    result = world.run(strategy="parallel")
    assert world.host.state_calls() == [
        ("reset-failed", G), ("start", G), ("enable", G), ("stop", B), ("disable", B)]
    assert world.host.active_at_start[G] == [B]
    assert world.states() == {B: "inactive", G: "active"}
    assert (result["strategy"], result["active_after"], result["rolled_back"]) == (
        "parallel", "green", False)
    assert world.saved()["previous"] == world.blue


def test_unknown_strategy_is_refused(tmp_path, port):
    world = World(tmp_path, port)
    with pytest.raises(CutoverError,
                       match="strategy must be sequential, parallel or auto, got 'blue'"):
        world.cutover(strategy="blue")


# -- rollback -------------------------------------------------------------------------------
def test_green_crash_rolls_back_to_blue(tmp_path, port):
    world = World(tmp_path, port, green=CRASH)
    exc = world.fail()
    assert exc.msg == ("cutover to green failed: green green failed its health gate at process: "
                       "vllm-green.service failed (failed)" + CAUSE
                       + ". Rolled back: blue is serving again.")
    fields = exc.fields
    assert (fields["rolled_back"], fields["active_before"], fields["active_after"]) == (
        True, "blue", "blue")
    assert fields["journal"] == JOURNAL
    assert fields["green_health"]["stage"] == "process"
    assert fields["blue_health"]["ok"] is True
    assert sorted(fields["phases"]) == ["drain_blue", "preflight", "rollback", "start_green",
                                        "stop_blue"]
    assert world.host.state_calls() == [
        ("reset-failed", G), ("stop", B), ("start", G),
        ("stop", G), ("reset-failed", G), ("reset-failed", B), ("start", B)]
    assert world.states() == {B: "active", G: "inactive"}
    assert ["journalctl", "-u", G, "--since", "@1799999999", "-n", "40", "-r", "--no-pager",
            "-o", "cat"] in world.host.calls
    assert world.state_file.read_bytes() == world.before  # record untouched


@pytest.mark.parametrize(("behaviour", "reason"), [
    (HANG, ("green green failed its health gate at health: not healthy after 10 s "
            f"(last: GET /health: {CONN_REFUSED})")),
    (START_FAILS, ("systemctl start vllm-green.service failed (rc=1): Job for vllm-green.service "
                   "failed because the control process exited with error code.")),
    (RESTART_LOOP, ("green green failed its health gate at process: vllm-green.service exited "
                    "and was restarted by systemd (1 restarts)")),
    (EXITS, "green green failed its health gate at process: vllm-green.service is inactive (dead)"),
    (WRONG_MODEL, ("green green failed its health gate at models: GET /v1/models: wanted model "
                   "'green-model', server lists ['someone-else']")),
])
def test_each_green_failure_rolls_back(tmp_path, port, behaviour, reason):
    world = World(tmp_path, port, green=behaviour)
    world.green["startup_timeout_s"] = 10
    exc = world.fail()
    assert exc.msg.startswith(f"cutover to green failed: {reason}")
    assert exc.msg.endswith(" Rolled back: blue is serving again.")
    assert exc.fields["rolled_back"] is True
    assert world.states() == {B: "active", G: "inactive"}
    assert world.host.now <= 10.2  # the 10 s gate, and the drain's second quiet read


def test_parallel_rollback_leaves_blue_running_untouched(tmp_path, port):
    world = World(tmp_path, port, green=CRASH)
    exc = world.fail(strategy="parallel")
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    assert world.host.state_calls() == [
        ("reset-failed", G), ("start", G), ("stop", G), ("reset-failed", G)]
    assert "blue_health" not in exc.fields
    assert (exc.fields["rolled_back"], exc.fields["active_after"]) == (True, "blue")
    assert world.states() == {B: "active", G: "inactive"}


def test_first_deploy_failure_has_nothing_to_roll_back(tmp_path, port):
    world = World(tmp_path, port, blue=False, green=CRASH)
    exc = world.fail()
    assert exc.msg.endswith(
        "vllm-green.service failed (failed)" + CAUSE + ". No previous model to roll back to.")
    assert (exc.fields["rolled_back"], exc.fields["active_after"]) == (False, None)
    assert world.host.state_calls() == [
        ("reset-failed", G), ("start", G), ("stop", G), ("reset-failed", G)]
    assert not world.state_file.exists()


@pytest.mark.parametrize(("blue_behaviour", "why"), [
    (CRASH, "vllm-blue.service failed (failed)"),
    # Blue's own start failing must not lose green's story (it used to escape as a bare error).
    (START_FAILS, ("systemctl start vllm-blue.service failed (rc=1): Job for vllm-blue.service "
                   "failed because the control process exited with error code.")),
])
def test_rollback_failed_when_blue_does_not_come_back(tmp_path, port, blue_behaviour, why):
    world = World(tmp_path, port, green=CRASH)
    world.host.units[B].behaviour = blue_behaviour  # it was running; it fails on its next start
    exc = world.fail()
    assert exc.msg == ("cutover to green failed: green green failed its health gate at process: "
                       "vllm-green.service failed (failed)" + CAUSE
                       + f". Rollback FAILED: blue did not pass its health gate either ({why}).")
    assert exc.fields["blue_health"]["ok"] is False
    assert exc.fields["rolled_back"] is False
    assert exc.fields["active_after"] is None
    assert exc.fields["journal"] == JOURNAL
    assert world.states() == {B: "failed", G: "inactive"}


# -- preflight: refused before anything stops ------------------------------------------------
def test_port_taken_names_the_holder_and_stops_nothing(tmp_path, port):
    world = World(tmp_path, port)
    world.host.ss_out = ("LISTEN 0      2048       127.0.0.1:%d      0.0.0.0:*    "
                         'users:(("python3",pid=31337,fd=7))\n' % port)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        exc = world.fail()
    assert exc.msg == ("cutover to green refused before any change: "
                       f"green green cannot start: port {port} on 127.0.0.1 is already taken "
                       '(users:(("python3",pid=31337,fd=7))). blue is still serving.')
    assert exc.fields["phases"] == {"preflight": 0.0}
    assert (exc.fields["active_after"], exc.fields["rolled_back"]) == ("blue", False)
    assert ["ss", "-H", "-ltnp", f"sport = :{port}"] in world.host.calls
    assert world.host.state_calls() == []
    assert world.states() == {B: "active", G: "inactive"}


def test_port_taken_without_ss_detail_says_pid_unknown(tmp_path, port):
    world = World(tmp_path, port, blue=False)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        exc = world.fail()
    assert exc.msg.endswith(f"port {port} on 127.0.0.1 is already taken (pid unknown). "
                            "No model was serving.")


def test_same_port_as_blue_is_refused(tmp_path, port):
    world = World(tmp_path, port)
    world.green["port"] = BLUE_PORT
    exc = world.fail()
    assert exc.msg == ("cutover to green refused before any change: "
                       f"green and the active blue both want port {BLUE_PORT}: "
                       "give each catalog entry its own port. blue is still serving.")
    assert world.host.state_calls() == []


def test_green_unit_not_installed_is_refused_before_blue_stops(tmp_path, port):
    world = World(tmp_path, port, green_installed=False)
    exc = world.fail()
    assert exc.msg == ("cutover to green refused before any change: green unit "
                       "vllm-green.service is not installed (LoadState=not-found). "
                       "blue is still serving.")
    assert world.host.state_calls() == []
    assert world.states()[B] == "active"
    assert world.state_file.read_bytes() == world.before


def test_systemctl_show_failure_is_reported(tmp_path, port):
    world = World(tmp_path, port)

    def broken(argv):
        world.host.calls.append(argv)
        return 1, "", "Failed to connect to bus: No such file or directory\n"

    with pytest.raises(CutoverError) as caught:
        Cutover(Host(broken), world.green, str(world.state_file)).run_plan(world.record)
    assert caught.value.msg == ("systemctl show vllm-green.service failed (rc=1): "
                                "Failed to connect to bus: No such file or directory")


# -- same model: none / record / start / restart ----------------------------------------------
def test_rerun_with_the_active_model_running_changes_nothing(tmp_path, port):
    blue = since(spec("blue", BLUE_PORT))
    record = {"active": since(spec("green", port)), "previous": blue, "history": [blue]}
    world = World(tmp_path, port, blue=False, green_active=True, record=record)
    result = world.run()
    assert (result["action"], result["changed"], result["active_before"],
            result["active_after"], result["blue"]) == ("none", False, "green", "green", None)
    assert world.host.state_calls() == []
    # One pass of the gate says it still serves (heal: test_cutover_heal.py).
    url = f"http://127.0.0.1:{port}"
    assert world.host.http == [("GET", url + "/health"), ("GET", url + "/v1/models"),
                               ("POST", url + "/v1/completions")]
    assert world.state_file.read_bytes() == world.before


def test_record_only_change_rewrites_the_record_and_nothing_else(tmp_path, port):
    old = since(spec("green", port, revision="a" * 40))
    record = {"active": old, "previous": since(spec("blue", BLUE_PORT)),
              "history": [since(spec("blue", BLUE_PORT))]}
    world = World(tmp_path, port, blue=False, green_active=True, record=record)
    world.green["revision"] = "b" * 40
    result = world.run()
    assert (result["action"], result["changed"], result["active_before"]) == (
        "record", True, "green")
    assert world.host.state_calls() == []
    saved = world.saved()
    assert saved["active"] == since(world.green, "2027-01-15T08:00:00+00:00")
    assert saved["previous"] == record["previous"]
    assert saved["history"] == record["history"]  # the previous model is not pushed again


def test_restart_when_green_is_running(tmp_path, port):
    record = {"active": since(spec("green", port)), "previous": None, "history": []}
    world = World(tmp_path, port, blue=False, green_active=True, green_warmup=2.0,
                  record=record)
    result = world.cutover(restart=True).run_plan(record_mod.load(str(world.state_file)))
    assert (result["action"], result["changed"], result["time_to_healthy_s"]) == (
        "restart", True, 2.0)
    assert world.host.state_calls() == [("reset-failed", G), ("restart", G), ("enable", G)]
    assert world.saved() == {"active": since(world.green, "2027-01-15T08:00:02+00:00"),
                             "previous": None, "history": []}


def test_start_when_the_active_model_is_down(tmp_path, port):
    record = {"active": since(spec("green", port)), "previous": None, "history": []}
    world = World(tmp_path, port, blue=False, record=record)
    result = world.run(restart=True)
    assert result["action"] == "start"
    assert world.host.state_calls() == [("reset-failed", G), ("start", G), ("enable", G)]
    assert world.states() == {G: "active"}


def test_failed_restart_stops_green_and_says_there_is_nothing_to_roll_back_to(tmp_path, port):
    record = {"active": since(spec("green", port)), "previous": None, "history": []}
    world = World(tmp_path, port, blue=False, green_active=True, green=CRASH, record=record)
    with pytest.raises(CutoverError) as caught:
        world.cutover(restart=True).run_plan(record_mod.load(str(world.state_file)))
    exc = caught.value
    assert exc.msg == ("green did not pass its health gate after restart: vllm-green.service "
                       "failed (failed); it was the active model, so there is nothing to roll "
                       "back to and it is now stopped")
    assert exc.fields["journal"] == JOURNAL
    assert (exc.fields["action"], exc.fields["rolled_back"]) == ("restart", False)
    assert world.host.state_calls() == [("reset-failed", G), ("restart", G), ("stop", G)]
    assert world.state_file.read_bytes() == world.before


# -- check mode ----------------------------------------------------------------------------
def _world_for(case, tmp_path, port):
    """A world where the cutover's plan is `case`; returns it and the run's options."""
    green_active = {"active": since(spec("green", port)), "previous": None, "history": []}
    if case == "first-deploy":
        return World(tmp_path, port, blue=False), {}
    if case == "switch":
        return World(tmp_path, port), {}
    if case == "restart":
        return World(tmp_path, port, blue=False, green_active=True,
                     record=green_active), {"restart": True}
    if case == "record":
        world = World(tmp_path, port, blue=False, green_active=True, record=green_active)
        world.green["revision"] = "b" * 40
        return world, {}
    return World(tmp_path, port, blue=False, record=green_active), {}  # green is down


@pytest.mark.parametrize(("case", "action"), [
    ("first-deploy", "switch"), ("switch", "switch"), ("restart", "restart"),
    ("record", "record"), ("start", "start"),
])
def test_check_mode_reports_the_plan_and_changes_nothing(tmp_path, port, case, action):
    world, options = _world_for(case, tmp_path, port)
    states = world.states()
    result = world.run(check_mode=True, **options)
    assert (result["action"], result["changed"], result["rolled_back"]) == (action, True, False)
    assert {c[1] for c in world.host.calls} == {"show"}
    assert world.host.http == []
    assert world.states() == states
    if world.before is None:
        assert not world.state_file.exists()
    else:
        assert world.state_file.read_bytes() == world.before


# -- the record -------------------------------------------------------------------------------
def test_history_keeps_the_ten_latest(tmp_path, port):
    old = [since(spec(f"old{i}", 9000 + i)) for i in range(10)]
    record = {"active": since(spec("blue", BLUE_PORT)), "previous": old[0], "history": old}
    world = World(tmp_path, port, record=record)
    world.run()
    saved = world.saved()
    assert saved["previous"] == world.blue
    assert saved["history"] == [world.blue, *old[:9]]


def test_write_record_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "vllm_fleet.fact"
    path.write_text('{"active": null}\n')
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), dst,
                     json.loads(Path(src).read_text(encoding="utf-8")),
                     path.read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(record_mod.os, "replace", replace)
    record_mod.write(str(path), {"active": {"model": "m"}, "history": []})
    (folder, name, dst, written, old_text), = seen
    assert (folder, dst) == (str(tmp_path), str(path))
    assert name.startswith(".vllm_fleet.")
    assert name.endswith(".tmp")
    assert written == {"active": {"model": "m"}, "history": []}
    assert old_text == '{"active": null}\n'  # the old record stayed whole until the rename
    assert path.read_text() == '{\n  "active": {\n    "model": "m"\n  },\n  "history": []\n}\n'
    assert sorted(os.listdir(tmp_path)) == ["vllm_fleet.fact"]


def test_write_record_failure_keeps_the_old_record_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "vllm_fleet.fact"
    path.write_text('{"active": null}\n')
    with pytest.raises(TypeError):
        record_mod.write(str(path), {"active": {"since": object()}})
    assert path.read_text() == '{"active": null}\n'
    assert sorted(os.listdir(tmp_path)) == ["vllm_fleet.fact"]


def test_load_record(tmp_path):
    path = tmp_path / "r.fact"
    assert record_mod.load(str(path)) == {"active": None, "previous": None, "history": []}
    path.write_text('{"active": {"model": "m"}}')
    assert record_mod.load(str(path)) == {"active": {"model": "m"}, "previous": None, "history": []}
    path.write_text("active=m\n")
    with pytest.raises(record_mod.RecordError,
                       match=f"deployment record {path} is not JSON: Expecting"):
        record_mod.load(str(path))


# -- start progress -------------------------------------------------------------------------
def test_a_starting_green_writes_its_progress_for_the_controller(tmp_path, port, monkeypatch):
    """Every progress interval: elapsed of the startup limit and the unit's last log line."""
    world = World(tmp_path, port, blue=False, green_warmup=35.0)
    progress = tmp_path / "progress.json"
    seen = []
    real_write = units_mod.write_atomic

    def spy(path, text, **kwargs):
        if path == str(progress):
            seen.append(json.loads(text))
        return real_write(path, text, **kwargs)

    monkeypatch.setattr(units_mod, "write_atomic", spy)
    result = world.run(progress_file=str(progress), progress_interval=10.0, health_interval=1.0)
    assert result["green_health"]["ok"] is True
    # written at 0 s, then once per 10 s of the fake clock while green loaded for 35 s
    assert [round(s["elapsed_s"]) for s in seen] == [0, 10, 20, 30]
    assert {(s["model"], s["role"], s["phase"], s["limit_s"]) for s in seen} == {
        ("green", "green", "starting", 60)}
    assert seen[-1]["last_line"] == JOURNAL[-1]
    assert json.loads(progress.read_text()) == seen[-1]


def test_without_a_progress_file_nothing_is_written(tmp_path, port):
    world = World(tmp_path, port, blue=False, green_warmup=5.0)
    world.run(health_interval=1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.d"]


def test_a_failed_green_returns_the_last_journal_lines_in_order(tmp_path, port):
    """journalctl's -n with --since counts from the window's start; the failure needs its end."""
    world = World(tmp_path, port, green=CRASH)
    long_log = [f"line {i}" for i in range(100)] + ["torch.OutOfMemoryError: CUDA out of memory"]
    world.host.units[G].journal = long_log
    exc = world.fail(journal_lines=40)
    assert exc.fields["journal"] == long_log[-40:]


# -- a start that stops printing ------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
def test_a_green_that_stops_printing_fails_early_and_rolls_back(tmp_path, port, strategy):
    """startup_stall_s 30 of a 600 s startup timeout: green's last line comes 4 s after its
    start, the gate gives up at 34 s, stops green and leaves blue serving."""
    world = World(tmp_path, port, green=HANG)
    world.green["startup_timeout_s"] = 600
    world.green["startup_stall_s"] = 30
    world.host.units[G].prints = [(1.0, "INFO vLLM API server version 0.32.0"),
                                  (4.0, "INFO Loading safetensors checkpoint shards")]
    exc = world.fail(strategy=strategy, health_interval=1.0)
    assert exc.msg == (
        "cutover to green failed: green green failed its health gate at stall: "
        f"{G} printed nothing for 30.0 s while starting, wanted a new journal line at least "
        "every 30 s (startup_stall_s); its last lines: torch.OutOfMemoryError: CUDA out of "
        "memory | INFO vLLM API server version 0.32.0 | INFO Loading safetensors checkpoint "
        "shards. Rolled back: blue is serving again.")
    assert exc.fields["green_health"]["seconds"] == 34.0
    assert exc.fields["rolled_back"] is True
    assert exc.fields["journal"][-1] == "INFO Loading safetensors checkpoint shards"
    assert world.states() == {B: "active", G: "inactive"}
    assert ("stop", G) in world.host.state_calls()
    assert world.saved() == json.loads(world.before)


# -- who listens on green's port (issue 45 case 2) ------------------------------------------
INTRUDER_PID, INTRUDER_UID = 7777, 4343


def test_a_second_uid_listening_on_greens_port_during_a_switch_is_refused(tmp_path, port):
    """vLLM loads for 20 s before it listens; at 3 s another uid binds green's port and
    answers as a vLLM (1 completion token). Before this change the gate passed it and the
    record (and front door) went to it; now the gate names it and the switch rolls back."""
    world = World(tmp_path, port, green_warmup=20.0)
    world.host.squat(port, INTRUDER_PID, INTRUDER_UID, comm="nc", at=3.0)
    exc = world.fail()
    gate = exc.fields["green_health"]
    assert (gate["ok"], gate["stage"]) == (False, "listener")
    assert gate["detail"] == (
        f"port {port} on 127.0.0.1 is held by pid {INTRUDER_PID} (uid {INTRUDER_UID}, nc, "
        f"/user.slice/user-{INTRUDER_UID}.slice/session-3.scope), not by vllm-green.service's "
        f"processes (cgroup /system.slice/vllm-green.service): refused")
    assert f"failed its health gate at listener: port {port}" in exc.msg
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    assert (exc.fields["rolled_back"], exc.fields["active_after"]) == (True, "blue")
    assert world.states() == {B: "active", G: "inactive"}
    assert world.state_file.read_bytes() == world.before  # the record still names blue
    # no completion was asked of the intruder: the gate looked before each request
    assert ("POST", f"{world.green['url']}/v1/completions") not in world.host.http


def test_a_second_uid_listening_on_greens_port_during_a_restart_is_refused(tmp_path, port):
    record = {"active": since(spec("green", port)), "previous": None, "history": []}
    world = World(tmp_path, port, blue=False, green_active=True, green_warmup=20.0,
                  record=record)
    world.host.squat(port, INTRUDER_PID, INTRUDER_UID, at=world.host.now + 1.0)
    with pytest.raises(CutoverError) as caught:
        world.cutover(restart=True).run_plan(record_mod.load(str(world.state_file)))
    exc = caught.value
    assert exc.msg.startswith(
        f"green did not pass its health gate after restart: port {port} on 127.0.0.1 is held "
        f"by pid {INTRUDER_PID} (uid {INTRUDER_UID}, python3, ")
    assert "; it was the active model, so there is nothing to roll back to" in exc.msg
    assert world.host.state_calls() == [("reset-failed", G), ("restart", G), ("stop", G)]
    assert world.state_file.read_bytes() == world.before


def test_the_units_own_listener_passes_the_gate(tmp_path, port):
    world = World(tmp_path, port, blue=False, green_warmup=2.0)
    world.host.squat(port + 1, INTRUDER_PID, INTRUDER_UID)  # another port: none of its business
    result = world.run()
    assert (result["green_health"]["ok"], result["active_after"]) == (True, "green")


def test_an_answer_nobody_is_seen_listening_for_is_not_trusted(tmp_path, port):
    """An answer while /proc shows no listener of the unit (a reader that cannot see it)
    never passes: the gate waits out its timeout and says what it found."""
    world = World(tmp_path, port, blue=False)
    world.green["startup_timeout_s"] = 6
    world.host.proc.now = FakeProc  # an empty /proc: no listener at all
    exc = world.fail()
    assert exc.fields["green_health"]["stage"] == "listener"
    assert exc.fields["green_health"]["detail"] == (
        f"not healthy after 6 s (last: answered (4 completion tokens: ' world') but nothing "
        f"listens on port {port} on 127.0.0.1 (/proc/net/tcp, tcp6))")
