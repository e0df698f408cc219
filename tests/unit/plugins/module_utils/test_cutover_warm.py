# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Warm switches (issue 35 item 1): blue sleeps instead of stopping, a sleeping green wakes,
a failed gate wakes blue back. Driven on the fake host (unit/fake_host.py), whose sleep
routes are vLLM 0.32's dev-mode ones as vllm/entrypoints/serve/dev/sleep/api_router.py
(POST /sleep?level&mode with PauseMode abort|wait|keep, POST /wake_up?tags, GET
/is_sleeping), dev/rpc/api_router.py (POST /collective_rpc {"method"}) and
dev/cache/api_router.py (POST /reset_prefix_cache) have them in the lab image's
vllm 0.32.0-cpu; the figures the fake answers with are the lab's (/sleep?level=1 0.03 s,
/wake_up 0.1 s, /health 200 and completions unanswered while asleep). nginx reads the
real upstream file in tmp_path.
"""

import socket
import threading
import time

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as record_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.vllm_engine import wake_steps
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoor,
    upstream_conf,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import fingerprint as prints
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Host,
    Settings,
)

from unit.fake_host import CRASH, HEALTHY, ZERO_TOKENS, FakeHost

B, G, R = "vllm-blue.service", "vllm-green.service", "vllm-red.service"
FD_URL = "http://127.0.0.1:8000"
BLUE_PORT, RED_PORT = 8101, 8102
GIB = 1024**3
SINCE = "2027-01-01T00:00:00+00:00"


@pytest.fixture
def port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spec(name, port, sleep_mode=True, gpus=()):
    return {"model": name, "unit": f"vllm-{name}.service", "url": f"http://127.0.0.1:{port}",
            "port": port, "served_model_name": f"{name}-model", "startup_timeout_s": 60,
            "revision": "a" * 40, "gpus": list(gpus), "sleep_mode": sleep_mode}


def asleep(unit, level):
    """A unit as a warm switch left it: running, asleep at `level`."""
    unit.asleep, unit.asleep_tags, unit.weights_stale = level, {"weights", "kv_cache"}, level == 2
    return unit


class HeldRequest(threading.Thread):
    """nginx's side of a request the hold met: its head sent to the waiting room, the
    room's answer read when the switch ends."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.data = b""
        self.start()

    def run(self):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(20)
            sock.connect(self.path)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
            while chunk := sock.recv(4096):
                self.data += chunk

    def answer(self):
        """(status, where nginx is told to send the request or None)."""
        self.join(20)
        lines = self.data.decode().split("\r\n")
        target = next((line.split(":", 1)[1].strip() for line in lines
                       if line.lower().startswith("x-vllm-fleet-upstream:")), None)
        return int(lines[0].split()[1]), target


class World:
    """Blue active (recorded, behind the front door, able to sleep), green installed."""

    def __init__(self, tmp_path, port, *, green=HEALTHY, green_asleep=0, blue_sleep=True,
                 red_asleep=False, gpus=(), hold_file=False):
        self.host = FakeHost()
        self.host.cgroup_root = str(tmp_path / "cgroup")
        self.blue = dict(spec("blue", BLUE_PORT, blue_sleep, gpus), since=SINCE)
        self.green = spec("green", port, gpus=gpus)
        self.b = self.host.unit(B, self.blue["url"], "blue-model", active=True,
                                sleep_mode=blue_sleep, worker_pids=[4301])
        self.g = self.host.unit(G, self.green["url"], "green-model", behaviour=green,
                                sleep_mode=True, active=bool(green_asleep), worker_pids=[4401])
        sleeping = []
        if green_asleep:
            self.g.main_pid = 4343
            # what green computed before it slept (a switch took it then)
            printed = prints.take(self.green["url"], self.green["served_model_name"],
                                  self.host.request)
            asleep(self.g, green_asleep)
            sleeping.append(dict(self.green, since=SINCE, level=green_asleep, main_pid=4343,
                                 fingerprint=printed))
        if red_asleep:
            red = spec("red", RED_PORT)
            self.r = self.host.unit(R, red["url"], "red-model", active=True, sleep_mode=True)
            printed = prints.take(red["url"], red["served_model_name"], self.host.request)
            asleep(self.r, 1)
            sleeping.insert(0, dict(red, since=SINCE, level=1, main_pid=4242,
                                    fingerprint=printed))
        self.file = tmp_path / "nginx" / "upstream.conf"
        self.file.parent.mkdir()
        self.file.write_text(upstream_conf(BLUE_PORT, model="blue"))
        self.hold_file = str(tmp_path / "nginx" / "switching") if hold_file else None
        self.nginx = self.host.frontdoor(FD_URL, self.file, hold_file=self.hold_file)
        self.nginx.loaded = BLUE_PORT
        self.pid_file = tmp_path / "nginx" / "nginx.pid"
        self.pid_file.write_text(f"{self.nginx.master_pid}\n")
        self.state_file = tmp_path / "vllm_fleet.fact"
        record = {"active": self.blue, "previous": None, "history": []}
        if sleeping:
            record["sleeping"] = sleeping
        record_mod.write(str(self.state_file), record)

    def run(self, *, door_kwargs=None, on_door=None, **kwargs):
        door = FrontDoor(self.host.run_command, str(self.file), FD_URL, request=self.host.request,
                         clock=self.host.clock, sleep=self.host.sleep, hold_file=self.hold_file,
                         pid_file=str(self.pid_file), **(door_kwargs or {}))
        if on_door:
            on_door(door)
        host = Host(self.host.run_command, request=self.host.request, clock=self.host.clock,
                    wall=self.host.wall, sleep=self.host.sleep, proc=self.host.proc,
                    cgroup_root=self.host.cgroup_root)
        procs = kwargs.pop("gpu_processes", None)
        kwargs.setdefault("switch_mode", "warm")
        cut = Cutover(host, self.green, str(self.state_file), Settings(**kwargs),
                      frontdoor=door, gpu_processes=procs)
        return cut.run_plan(record_mod.load(str(self.state_file)))

    def fail(self, **kwargs):
        with pytest.raises(CutoverError) as caught:
            self.run(**kwargs)
        return caught.value

    def run_with_a_request_held(self, room_path, fail=False, **kwargs):
        """The switch with the front door's waiting room at `room_path`: once the hold is on, a
        request arrives there as nginx sends it (a real socket). Returns (result or error,
        the held request's answer, the door)."""
        held, doors = [], []

        def on_door(door):
            doors.append(door)
            real_hold = door.hold

            def hold(warm=False):
                spent = real_hold(warm)
                if door.room is not None:
                    held.append(HeldRequest(room_path))
                    deadline = time.monotonic() + 10
                    while door.room.waiting < 1 and time.monotonic() < deadline:
                        time.sleep(0.01)
                return spent

            door.hold = hold

        kwargs.update(door_kwargs={"hold_socket": room_path}, on_door=on_door)
        out = self.fail(**kwargs) if fail else self.run(**kwargs)
        doors[0].close_room()
        return out, (held[0].answer() if held else None), doors[0]

    def saved(self):
        return record_mod.load(str(self.state_file))

    def snapshot(self):
        """nvidia-smi as the fake host's units hold memory now (GPU 0: blue's and green's)."""
        procs = [{"pid": u.worker_pids[0], "gpu_index": 0,
                  "used_memory_bytes": self.host.gpu_bytes(u)}
                 for u in (self.b, self.g) if u.main_pid]
        return {"gpus": [{"index": 0, "memory_used_bytes": sum(p["used_memory_bytes"]
                                                               for p in procs)}],
                "processes": procs}


def test_wake_steps_are_vllms_for_each_level():
    """Level 2 discarded the weights: weights back, reread, KV cache back, prefix cache reset
    (vLLM's sleep mode docs; the routes are 0.32's)."""
    assert [p for _m, p, _b in wake_steps(1)] == ["/wake_up"]
    assert wake_steps(2) == (("POST", "/wake_up?tags=weights", None),
                             ("POST", "/collective_rpc", {"method": "reload_weights"}),
                             ("POST", "/wake_up?tags=kv_cache", None),
                             ("POST", "/reset_prefix_cache", None))


def test_warm_first_switch_blue_sleeps_and_green_starts_cold(tmp_path, port):
    world = World(tmp_path, port)
    result = world.run()
    assert (result["switch"], result["woke"], result["green_wake_s"]) == ("warm", False, None)
    assert result["blue_sleep_s"] == 0.03  # the fake's /sleep, as the lab measured
    assert result["sleep_level"] == 1
    assert result["sleepers_stopped"] == []
    # blue was drained, then slept with mode=wait at level 1; never stopped
    assert world.b.sleep_modes == ["wait"]
    assert (world.b.active_state, world.b.asleep, world.b.main_pid) == ("active", 1, 4242)
    assert ("stop", B) not in world.host.state_calls()
    assert ("start", G) in world.host.state_calls()
    assert world.nginx.loaded == port
    saved = world.saved()
    assert saved["active"]["model"] == "green"
    assert saved["active"]["sleep_mode"] is True
    # with what blue computed, drained, before it slept (issue 44, case 1)
    printed = saved["sleeping"][0]["fingerprint"]
    assert saved["sleeping"] == [dict(world.blue, level=1, since="2027-01-15T08:00:00+00:00",
                                      main_pid=4242, fingerprint=printed)]
    assert len(printed["token_ids"]) == len(printed["logprobs"]) == prints.FINGERPRINT_TOKENS


def test_warm_return_green_wakes_without_a_start(tmp_path, port):
    world = World(tmp_path, port, green_asleep=1)
    result = world.run()
    assert (result["switch"], result["woke"], result["green_wake_s"]) == ("warm", True, 0.1)
    assert not [c for c in world.host.state_calls() if c[0] in ("start", "restart")]
    assert world.g.main_pid == 4343  # the process that slept serves
    assert (world.g.asleep, world.b.asleep) == (0, 1)
    assert ("POST", f"{world.green['url']}/wake_up") in world.host.http
    assert world.nginx.loaded == port
    saved = world.saved()
    assert [s["model"] for s in saved["sleeping"]] == ["blue"]  # green left it, blue joined


def test_blue_sleeps_at_the_level_the_preflight_chose(tmp_path, port):
    """The deploy's plan (warm_switch_plan) chose level 2 (host RAM short): blue sleeps at
    level 2, the result and the record say so, and its wake will be the reload sequence."""
    world = World(tmp_path, port)
    result = world.run(sleep_level=2)
    assert (result["switch"], result["sleep_level"]) == ("warm", 2)
    assert world.b.asleep == 2
    assert [(s["model"], s["level"]) for s in world.saved()["sleeping"]] == [("blue", 2)]


def test_level_2_green_wakes_with_the_reload_sequence(tmp_path, port):
    world = World(tmp_path, port, green_asleep=2)
    result = world.run()
    assert result["woke"] is True
    events = [e for e in world.host.events() if "vllm-green" in e and e.split()[0] in
              ("wake", "rpc", "reset_prefix_cache")]
    assert events == [f"wake {G} tags=weights", f"rpc {G} reload_weights",
                      f"wake {G} tags=kv_cache", f"reset_prefix_cache {G}"]
    assert result["green_health"]["ok"] is True  # reloaded weights complete with tokens


def test_failed_gate_after_a_wake_wakes_blue_back(tmp_path, port):
    world = World(tmp_path, port, green=ZERO_TOKENS, green_asleep=1)
    exc = world.fail()
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert "green green failed its health gate at completion" in exc.msg
    assert ("stop", G) in world.host.state_calls()  # the woken green is stopped
    assert ("start", B) not in world.host.state_calls()
    assert (world.b.active_state, world.b.asleep, world.b.main_pid) == ("active", 0, 4242)
    assert world.nginx.loaded == BLUE_PORT
    assert exc.fields["blue_health"]["ok"] is True
    saved = world.saved()
    assert saved["active"]["model"] == "blue"
    assert saved["sleeping"] == []  # green is stopped, no longer asleep


def test_failed_gate_after_a_cold_start_wakes_blue_back(tmp_path, port):
    world = World(tmp_path, port, green=CRASH)
    exc = world.fail()
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert ("start", B) not in world.host.state_calls()
    assert ("POST", f"{world.blue['url']}/wake_up") in world.host.http
    assert (world.b.asleep, world.b.main_pid) == (0, 4242)
    assert world.nginx.loaded == BLUE_PORT
    assert "sleeping" not in world.saved()  # the record is blue's, as before


def test_a_wake_that_fails_rolls_back(tmp_path, port):
    world = World(tmp_path, port, green_asleep=1)
    world.g.wake_error = 500
    exc = world.fail()
    assert "green green did not wake: POST /wake_up answered 500" in exc.msg
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert world.g.active_state == "inactive"


def test_standby_max_1_stops_the_oldest_sleeper(tmp_path, port):
    world = World(tmp_path, port, red_asleep=True)
    result = world.run()
    assert result["sleepers_stopped"] == ["red"]
    assert ("stop", R) in world.host.state_calls()
    assert ("disable", R) in world.host.state_calls()
    assert world.r.active_state == "inactive"
    assert [s["model"] for s in world.saved()["sleeping"]] == ["blue"]


def test_standby_max_2_keeps_both(tmp_path, port):
    world = World(tmp_path, port, red_asleep=True)
    result = world.run(warm_standby_max=2)
    assert result["sleepers_stopped"] == []
    assert [s["model"] for s in world.saved()["sleeping"]] == ["red", "blue"]


def test_blue_without_sleep_mode_is_switched_cold(tmp_path, port):
    world = World(tmp_path, port, blue_sleep=False)
    result = world.run()
    assert result["switch"] == "cold"
    assert "blue blue runs without sleep mode" in result["warm_refused"]
    assert ("stop", B) in world.host.state_calls()
    assert world.b.sleep_modes == []
    assert "sleeping" not in world.saved()


def test_cold_mode_stops_blue_that_could_sleep(tmp_path, port):
    world = World(tmp_path, port)
    result = world.run(switch_mode="cold")
    assert "switch" not in result  # the cold result, as before
    assert ("stop", B) in world.host.state_calls()
    assert world.b.sleep_modes == []


def test_parallel_warm_is_refused_quietly(tmp_path, port):
    world = World(tmp_path, port)
    result = world.run(strategy="parallel")
    assert (result["switch"], result["warm_refused"]) == (
        "cold", ("a parallel switch stops blue only after green serves; warm switches are "
                 "sequential"))
    assert world.b.active_state == "inactive"


def test_gpu_memory_down_to_the_residual(tmp_path, port):
    world = World(tmp_path, port, gpus=[0])
    result = world.run(gpu_processes=world.snapshot)
    assert result["switch"] == "warm"
    assert world.host.gpu_bytes(world.b) == GIB


def test_a_sleeper_that_keeps_its_memory_fails_the_switch(tmp_path, port):
    world = World(tmp_path, port, gpus=[0])
    world.b.keeps_memory = True
    exc = world.fail(gpu_processes=world.snapshot, sleep_residual_bytes=2 * GIB)
    assert ("blue blue sleeps but still holds more than its residual of 2147483648 bytes "
            "per GPU after 30 s: GPU 0 42949672960 bytes") in exc.msg
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert ("start", G) not in world.host.state_calls()
    assert world.b.asleep == 0


def test_a_check_mode_plan_says_warm(tmp_path, port):
    world = World(tmp_path, port, green_asleep=1)
    door = FrontDoor(world.host.run_command, str(world.file), FD_URL, request=world.host.request)
    host = Host(world.host.run_command, request=world.host.request, clock=world.host.clock,
                wall=world.host.wall, sleep=world.host.sleep, proc=world.host.proc)
    result = Cutover(host, world.green, str(world.state_file), Settings(switch_mode="warm"),
                     frontdoor=door).run_plan(world.saved(), check_mode=True)
    assert (result["action"], result["switch"]) == ("switch", "warm")
    assert world.b.asleep == 0  # nothing changed
    assert world.g.asleep == 1


def test_a_sleeper_of_another_revision_is_restarted_not_woken(tmp_path, port):
    """The sleeper serves the revision it slept with; green asks for another one."""
    world = World(tmp_path, port, green_asleep=1)
    world.green["revision"] = "b" * 40
    result = world.run()
    assert result["woke"] is False
    assert ("restart", G) in world.host.state_calls()
    assert ("POST", f"{world.green['url']}/wake_up") not in world.host.http
    assert world.g.main_pid != 4343
    assert [s["model"] for s in world.saved()["sleeping"]] == ["blue"]


def test_a_sleeper_whose_unit_changed_is_restarted_not_woken(tmp_path, port):
    """A new-user trial (issue 35): a sleeper's catalog entry changed (max_model_len) while it
    slept, so its unit file was rewritten (restart); woken, its process kept the old flags
    and re-runs never healed it. Its unit restarts instead, cold or warm."""
    for mode in ("warm", "cold"):
        world = World(tmp_path / mode, port, green_asleep=1)
        result = world.run(restart=True, switch_mode=mode)
        assert result["woke"] is False
        assert result["sleeper_restarted"] == ("green restarted, not woken: its unit or files "
                                               "changed while it slept")
        assert ("restart", G) in world.host.state_calls()
        assert ("POST", f"{world.green['url']}/wake_up") not in world.host.http
        assert world.g.main_pid != 4343
        assert world.saved()["active"]["model"] == "green"


def test_the_preflights_cold_reason_keeps_the_switch_cold_and_says_why(tmp_path, port):
    """warm_switch_plan planned the switch cold (GPU memory short beside the residual): the
    switch stops blue, and the result carries the plan's reason as warm_refused."""
    world = World(tmp_path, port)
    why = "GPU 3 short by 6.27 GiB: vLLM's free-memory check wants 85.59 GiB"
    result = world.run(warm_refused=why)
    assert (result["switch"], result["warm_refused"]) == ("cold", why)
    assert ("stop", B) in world.host.state_calls()
    assert world.b.active_state == "inactive"
    assert world.saved().get("sleeping", []) == []


def test_a_revision_update_stays_cold_in_warm_mode(tmp_path, port):
    world = World(tmp_path, port)
    world.green = dict(world.blue, revision="b" * 40)
    world.green.pop("since")
    world.green["model_dir"], world.green["model_link"] = str(tmp_path / "b"), str(
        tmp_path / "link")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    result = world.run()
    assert result["action"] == "update"
    assert (result["switch"], result["warm_refused"]) == (
        "cold", ("a revision update of the same model stays cold (the new revision needs a "
                 "new process)"))
    assert world.b.sleep_modes == []


def test_a_sleepers_since_is_when_it_fell_asleep_not_when_green_came_up(tmp_path, port):
    """A new-user trial saw `since` 34 s after the journal's "fell asleep": the record was
    written once green passed its gate. Green loads for 30 s here."""
    world = World(tmp_path, port)
    world.g.warmup_s = 30.0
    world.run()
    saved = world.saved()
    slept = saved["sleeping"][0]["since"]
    assert slept < saved["active"]["since"]
    assert slept.startswith("2027-01-15T08:00:0")  # the fake wall clock's start: blue slept
    assert saved["active"]["since"] >= "2027-01-15T08:00:30"


def test_a_request_that_reached_blue_asleep_is_answered_before_blue_sleeps_again(tmp_path, port):
    """CI, 2026-12-05 (the cutover scenario, a loaded 2-core host): one request of a warm
    return passed the front door just before its hold, reached blue after its drain and, blue
    asleep, waited out the client's 120 s timeout. vLLM's /load counts such a request on a
    sleeping server: blue wakes (the request is answered), drains and sleeps again."""
    world = World(tmp_path, port)
    world.b.stragglers_per_sleep = [1]
    result = world.run()
    assert result["switch"] == "warm"
    assert result["blue_stragglers"] == 1
    assert world.b.sleep_modes == ["wait", "wait"]
    assert (world.b.asleep, world.b.parked, world.b.main_pid) == (1, 0, 4242)
    assert any(e.startswith("wake vllm-blue") for e in world.host.events())
    assert world.saved()["active"]["model"] == "green"


def test_blue_that_keeps_getting_requests_asleep_is_woken_back_and_the_switch_fails(
        tmp_path, port):
    world = World(tmp_path, port)
    world.b.stragglers_per_sleep = [1, 1, 1]
    exc = world.fail()
    assert ("held 1 request(s) that reached it after its drain each time it fell asleep "
            "(3 times)") in exc.msg
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert (world.b.asleep, world.b.main_pid) == (0, 4242)
    assert world.nginx.loaded == BLUE_PORT


@pytest.mark.parametrize("hold_file", [False, True], ids=["hold-by-reload", "hold-file"])
def test_a_request_the_front_door_let_through_before_its_hold_is_answered_by_blue_awake(
        tmp_path, port, hold_file):
    """Issue 44, case 6 (CI's cutover scenario: one warm-return request timed out after
    120.6 s; a new user's trial: 2 requests hung 150 s). nginx lets a request through in its
    rewrite phase, once its headers are read, and with proxy_request_buffering off passes it
    on while its body still arrives; vLLM's /load counts it only when its handler runs, after
    the body was read and parsed (vllm 0.32.0 vllm/entrypoints/serve/utils/api_utils.py
    load_aware_call). Here one reaches blue 1 s after the hold: past the model server's
    drain (two quiet reads 0.2 s apart), past blue's sleep and the one /load read after it.
    Before the fix blue was asleep by then and the request waited for a wake. The drain
    now waits until nginx's workers from before the hold have exited: the request reaches
    blue awake and is answered before blue sleeps; no straggler wake is needed."""
    world = World(tmp_path, port, hold_file=hold_file)
    late = world.nginx.admit(arrives=1.0, seconds=0.5)
    result = world.run()
    world.host.sleep(2.0)  # past its arrival, however early the switch ended
    world.nginx.deliver()
    assert result["switch"] == "warm"
    assert (late["hung"], late["refused"]) == (False, False)
    assert late["done"] == pytest.approx(world.nginx.held_at + 1.5)
    events = world.host.events()
    reached = events.index("admitted request reached vllm-blue.service awake")
    slept = next(i for i, e in enumerate(events) if e.startswith("sleep vllm-blue"))
    assert reached < slept
    drained = result["blue_drain"]
    assert drained["drained"] is True
    assert drained["frontdoor_in_flight"] == 0
    assert drained["seconds"] >= 1.5  # it waited for the request, not for a fixed time
    assert "blue_stragglers" not in result
    assert (world.b.asleep, world.b.parked) == (1, 0)
    assert world.saved()["active"]["model"] == "green"


def test_blue_still_carrying_a_request_at_the_drains_deadline_is_stopped_not_put_to_sleep(
        tmp_path, port):
    """A request whose body is still arriving when the drain's deadline passes (nginx waits
    client_body_timeout, 30 s, between two reads of it) would reach blue asleep: blue stops
    instead, as a cold switch stops it, and the switch says why."""
    world = World(tmp_path, port)
    late = world.nginx.admit(arrives=5.0, seconds=0.5)
    result = world.run(drain_timeout=2.0)
    world.host.sleep(6.0)
    world.nginx.deliver()
    assert result["switch"] == "cold"
    assert "the front door still carried 1 request(s) for blue blue" in result["warm_refused"]
    assert result["blue_drain"]["drained"] is False
    assert result["blue_drain"]["frontdoor_in_flight"] == 1
    assert (late["hung"], late["refused"]) == (False, True)  # answered at once: 503
    assert world.b.main_pid == 0  # stopped, not asleep
    assert "sleeping" not in world.saved() or not world.saved()["sleeping"]
    assert world.saved()["active"]["model"] == "green"


def test_a_generation_that_outlasts_the_drain_is_aborted_and_blue_sleeps(tmp_path, port):
    """Issue 44, case 2 (vllm #28714: /sleep must not meet running requests): a long
    generation outlasts the drain (60 s); `POST /sleep?mode=wait` would wait for it past the
    client's bound, the rollback's wake would find blue not yet asleep and its gate would time
    out on the paused scheduler ("Rollback FAILED"), and blue would fall asleep later with no
    one to wake it. Past the drain's deadline what still runs is ended as a cold stop ends it
    (vLLM's mode=abort), counted in the result."""
    world = World(tmp_path, port)
    world.b.inflight = [world.host.now + 300.0]  # a generation of 5 minutes
    result = world.run()
    assert result["blue_drain"]["drained"] is False
    assert result["blue_drain"]["running"] == 1
    assert world.b.sleep_modes == ["abort"]
    assert result["blue_aborted"] == 1
    assert world.b.aborted == 1
    assert result["switch"] == "warm"
    assert (world.b.asleep, world.b.pending_sleep) == (1, None)
    assert world.saved()["active"]["model"] == "green"
    assert [s["model"] for s in world.saved()["sleeping"]] == ["blue"]


def test_blue_s_fingerprint_is_taken_alone_after_the_requests_past_the_drain_end(
        tmp_path, port):
    """vLLM is not batch-invariant by default (docs.vllm.ai/en/v0.32.0/features/
    batch_invariance/): a fingerprint taken beside the generation that outlasted the drain
    carries other logprobs than the one the rollback's wake takes alone, and the rollback
    then refused a sound blue ("Rollback FAILED", nothing serving). The requests past the
    deadline are ended first (POST /abort_requests), then the fingerprint is taken."""
    world = World(tmp_path, port, green=ZERO_TOKENS)
    world.b.inflight = [world.host.now + 300.0]
    exc = world.fail()
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert exc.fields["blue_health"]["fingerprint"] == "matched"
    assert "fingerprint_beside" not in exc.fields["blue_health"]
    assert (exc.fields["blue_aborted"], world.b.aborted) == (1, 1)
    blue_events = [e for e in world.host.events() if e.split()[1].rstrip(":") == B
                   and e.split()[0] in ("abort_requests", "fingerprint", "sleep", "wake")]
    assert blue_events == [f"fingerprint {B}: greedy batched",  # the warm-up, before the hold
                           f"abort_requests {B}: 1", f"fingerprint {B}: greedy",
                           f"sleep {B} level=1 mode=abort", f"wake {B} tags=weights,kv_cache",
                           f"fingerprint {B}: greedy"]


def test_without_abort_requests_the_fingerprint_beside_them_is_checked_by_its_ids(
        tmp_path, port):
    """A vLLM without POST /abort_requests (404): blue's fingerprint is taken beside the
    generation past the drain and marked so; the wake's check compares its token ids alone
    (the logprobs of a batch are not a single request's), so a sound blue passes..."""
    world = World(tmp_path, port, green=ZERO_TOKENS)
    world.b.inflight = [world.host.now + 300.0]
    world.b.abort_route = False
    exc = world.fail()
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert exc.fields["blue_abort_requests"].startswith("404")
    assert (exc.fields["blue_health"]["fingerprint"],
            exc.fields["blue_health"]["fingerprint_beside"]) == ("matched", 1)
    assert world.b.sleep_modes == ["abort"]  # /sleep ended it


def test_without_abort_requests_a_garbage_wake_still_fails_on_its_ids(tmp_path, port):
    """... and a blue that wakes computing garbage ('!!!!', vllm PR #54235) still fails."""
    world = World(tmp_path, port, green=ZERO_TOKENS)
    world.b.inflight = [world.host.now + 300.0]
    world.b.abort_route = False
    world.b.garbage_after_wake = True
    exc = world.fail()
    assert "Rollback FAILED" in exc.msg
    assert exc.fields["blue_health"]["stage"] == "fingerprint"
    assert "greedy tokens changed" in exc.fields["blue_health"]["detail"]


def test_a_sleep_that_does_not_answer_within_its_bound_stops_blue_never_strands_it(
        tmp_path, port):
    """Issue 44, case 2: a /sleep that does not answer leaves blue in a state no one knows
    (its scheduler paused, asleep perhaps later). It is stopped, never left to fall asleep
    unlisted, and the rollback starts it again: the host ends serving blue."""
    world = World(tmp_path, port)
    world.b.sleep_hangs = True
    exc = world.fail()
    assert "blue blue did not go to sleep" in exc.msg
    assert "it was stopped" in exc.msg
    assert exc.msg.endswith("is serving again.")
    assert (world.b.asleep, world.b.pending_sleep) == (0, None)
    assert world.b.main_pid not in (0, 4242)  # started again, not the paused process
    assert world.nginx.loaded == BLUE_PORT
    assert not world.saved().get("sleeping")
    assert world.saved()["active"]["model"] == "blue"


def test_a_green_that_wakes_computing_garbage_fails_its_gate_is_stopped_and_blue_serves(
        tmp_path, port):
    """Issue 44, case 1: a level-2 wake that answers '!!!!' to every completion with 200
    (vllm PR #54235; NVIDIA-NeMo/RL #2631: level 2 diverges at token 0; vllm #48312 / PR
    #49695) passed the gate that counts completion tokens and took traffic. Its fingerprint,
    taken before it slept, no longer matches: the gate fails naming the tokens, green is
    stopped (not put back to sleep) and blue, woken, serves."""
    world = World(tmp_path, port, green_asleep=2)
    world.g.garbage_after_wake = True
    exc = world.fail()
    assert "failed its health gate at fingerprint" in exc.msg
    assert f"24 of {prints.FINGERPRINT_TOKENS} greedy tokens changed" in exc.msg
    assert "(position before->now: #0 " in exc.msg
    assert "->0, #1 " in exc.msg
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert world.g.main_pid == 0  # stopped, not asleep
    assert (world.b.asleep, world.b.main_pid) == (0, 4242)
    assert world.nginx.loaded == BLUE_PORT
    assert [s["model"] for s in world.saved().get("sleeping") or []] == []


def test_a_sleeper_without_a_fingerprint_is_restarted_not_woken(tmp_path, port):
    """A sleeper recorded before fingerprints (or whose fingerprint could not be taken)
    cannot prove its wake: it is restarted cold."""
    world = World(tmp_path, port, green_asleep=1)
    saved = world.saved()
    for entry in saved["sleeping"]:
        entry.pop("fingerprint")
    record_mod.write(str(world.state_file), saved)
    result = world.run()
    assert "without a fingerprint" in result["sleeper_restarted"]
    assert result["woke"] is False
    assert world.g.main_pid not in (0, 4343)


def test_fingerprint_differs_names_flipped_tokens_and_logprob_drift():
    before = {"token_ids": [5, 6, 7], "logprobs": [-0.1, -0.2, -0.3]}
    assert prints.differs(before, dict(before)) is None
    assert prints.differs(before, {"token_ids": [5, 6, 7], "logprobs": [-0.1, -0.2005, -0.3]}) \
        is None
    assert "1 logprob(s) moved more than 0.001 (largest 0.05 at token #2)" in prints.differs(
        before, {"token_ids": [5, 6, 7], "logprobs": [-0.1, -0.2, -0.35]})
    assert "2 of 3 greedy tokens changed (position before->now: #1 6->9, #2 7->-)" in \
        prints.differs(before, {"token_ids": [5, 9], "logprobs": [-0.1, -0.2]})


def test_blues_fingerprint_path_is_warmed_before_the_hold_and_taken_drained_inside_it(
        tmp_path, port):
    """The lab (cutover scenario on 2b87cfb, vLLM-CPU): the first request with logprobs and
    token ids took 20.4 s on tiny_gqa and 9.1 s on tiny_mla, later ones 0.19 s; taken first
    inside the hold, it made the warm return's outage 10 s instead of 0.9 s. One request
    before the hold warms the path; the fingerprint that counts is still taken drained."""
    world = World(tmp_path, port)
    result = world.run()
    events = world.host.events()
    prints_at = [i for i, e in enumerate(events) if e == "fingerprint vllm-blue.service: greedy"]
    hold = events.index("reload nginx: none")
    slept = next(i for i, e in enumerate(events) if e.startswith("sleep vllm-blue"))
    assert len(prints_at) == 2
    assert prints_at[0] < hold < prints_at[1] < slept
    assert {"fingerprint_warmup", "fingerprint"} <= set(result["phases"])


def test_level_2_asked_for_a_blue_that_decodes_speculatively_is_refused_before_any_change(
        tmp_path, port):
    """A run whose tags skipped the plan passes vllm_fleet_sleep_level 2 as asked: the switch
    refuses it for a blue whose record says it decodes speculatively (vllm#52479, #55013)
    before it touches anything; blue serves on, awake."""
    world = World(tmp_path, port)
    record = world.saved()
    record["active"]["sizing"] = {"architecture": "Qwen3NextForCausalLM", "speculative": "mtp"}
    record_mod.write(str(world.state_file), record)
    error = world.fail(sleep_level=2)
    assert error.msg.startswith(
        "cutover to green refused before any change: vllm_fleet_sleep_level is 2, but blue "
        "must not sleep at level 2: it decodes speculatively (mtp): its wake reloads the "
        "target model's weights only")
    assert "vllm-project/vllm#52479" in error.msg
    assert "Set vllm_fleet_sleep_level: 1" in error.msg
    assert error.msg.endswith("blue is still serving.")
    assert world.host.state_calls() == []
    assert (world.b.active_state, world.b.asleep) == ("active", 0)
    assert world.saved()["active"]["model"] == "blue"
    # Level 1 asked: the same blue sleeps as before.
    assert world.run(sleep_level=1)["sleep_level"] == 1


# -- the post-sleep check compares green's need with what is free (issue 44 case 3) ----------
# An 80 GB card as the GPU runs read it (bench/output/gpu/gpu-h100-80gb-hbm3-...-0503.json:
# nvidia-smi's memory.total 81,559 MiB); green sized at the plan's share.
H100_TOTAL = 81559 * 1024**2


def sized_world(tmp_path, port, share, residual):
    world = World(tmp_path, port, gpus=[0])
    world.green["sizing"] = {"gpu_memory_utilization": share, "tensor_parallel_size": 1}
    world.blue["sizing"] = {"gpu_memory_utilization": 0.9, "tensor_parallel_size": 1}
    record = world.saved()
    record["active"] = world.blue
    record_mod.write(str(world.state_file), record)
    world.b.residual_bytes = residual

    def snapshot():
        snap = world.snapshot()
        snap["gpus"][0]["memory_total_bytes"] = H100_TOTAL
        return snap

    return world, snapshot


def test_a_sleeper_over_the_default_residual_passes_when_green_fits(tmp_path, port):
    """The H200 run's MLA sleeper kept 3.33 GiB (the default then: 2.25 GiB) and failed the
    constant check though green fitted beside it; what green needs decides now, and what blue
    kept is recorded for the next plan."""
    world, snapshot = sized_world(tmp_path, port, 0.85, int(4.5 * GIB))
    result = world.run(gpu_processes=snapshot)
    assert result["switch"] == "warm"
    saved = world.saved()
    assert saved["sleeping"][0]["residual_bytes_per_gpu"] == int(4.5 * GIB)
    kept = saved["residuals"]["blue"]
    assert (kept["bytes_per_gpu"], kept["per_gpu"], kept["tensor_parallel_size"],
            kept["gpu_memory_utilization"]) == (int(4.5 * GIB), {"0": int(4.5 * GIB)}, 1, 0.9)
    assert kept["measured_at"].startswith("20")


def test_a_sleeper_that_leaves_green_short_fails_naming_the_need(tmp_path, port):
    world, snapshot = sized_world(tmp_path, port, 0.9, 12 * GIB)
    exc = world.fail(gpu_processes=snapshot)
    assert ("blue blue sleeps but green green would not start at its share 0.9 after 30 s "
            "(blue keeps GPU 0 12884901888 bytes): GPU 0 has ") in exc.msg
    free = int(exc.msg.split("GPU 0 has ")[1].split(" ")[0])
    asks = int(exc.msg.split("its share asks ")[1].split(")")[0].split(".")[0])
    assert free < asks
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert "residuals" not in world.saved()


# --- a level-2 wake that fails leaves no live process (issue 44 case 4) ------------------------

def test_a_level_2_wake_that_runs_out_of_memory_stops_green_and_the_result_says_so(
        tmp_path, port):
    """The GPU suite: a level-2 reload beside a sleeper ran out of memory at
    wake_up?tags=kv_cache and the process stayed alive, never answering. Green's unit is
    stopped at once (before blue wakes back into the memory it held), and the result names
    it in failed_wakes."""
    world = World(tmp_path, port, green_asleep=2)
    world.g.wake_fails = {"kv_cache": "oom"}
    exc = world.fail()
    assert ("green green did not wake: POST /wake_up?tags=kv_cache answered timed out; its "
            "unit was stopped (a failed wake leaves no live process)") in exc.msg
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert exc.fields["failed_wakes"] == [{
        "model": "green", "unit": G, "role": "green", "level": 2, "stopped": True,
        "why": "green green did not wake: POST /wake_up?tags=kv_cache answered timed out"}]
    assert (world.g.active_state, world.g.main_pid, world.g.wedged) == ("inactive", 0, False)
    events = world.host.events()
    stop = events.index(f"stop {G}")
    assert stop < events.index(f"wake {B} tags=weights,kv_cache")  # freed before blue wakes
    assert (world.b.asleep, world.b.main_pid) == (0, 4242)
    assert world.saved()["active"]["model"] == "blue"
    assert world.saved()["sleeping"] == []


def test_a_level_2_wake_whose_reload_fails_for_a_straggler_stops_blue_and_starts_it_again(
        tmp_path, port):
    """Blue asleep at level 2 is woken for a request that reached it asleep; its
    reload_weights answers 500. Blue is stopped (not woken again into the same failure) and
    the rollback starts it again: the host ends serving blue, no process left half awake."""
    world = World(tmp_path, port)
    world.b.stragglers_per_sleep = [1]
    world.b.wake_fails = {"reload_weights": 500}
    exc = world.fail(sleep_level=2)
    assert "blue blue did not wake: POST /collective_rpc answered 500" in exc.msg
    assert "its unit was stopped (a failed wake leaves no live process)" in exc.msg
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    assert [(w["role"], w["level"], w["stopped"]) for w in exc.fields["failed_wakes"]] == [
        ("blue", 2, True)]
    assert world.b.main_pid not in (0, 4242)  # started again, not the half-woken process
    assert (world.b.active_state, world.b.asleep) == ("active", 0)
    assert world.nginx.loaded == BLUE_PORT
    assert world.saved()["active"]["model"] == "blue"


def test_blue_whose_level_2_wake_back_fails_is_stopped_and_the_result_says_so(tmp_path, port):
    """Green crashes; blue, asleep at level 2, is woken back and runs out of memory at
    wake_up?tags=kv_cache: it is stopped, never left alive and unanswering."""
    world = World(tmp_path, port, green=CRASH)
    world.b.wake_fails = {"kv_cache": "oom"}
    exc = world.fail(sleep_level=2)
    assert "Rollback FAILED: blue did not pass its health gate either" in exc.msg
    assert "its unit was stopped (a failed wake leaves no live process)" in exc.msg
    assert [(w["model"], w["role"], w["level"], w["stopped"])
            for w in exc.fields["failed_wakes"]] == [("blue", "blue", 2, True)]
    assert (world.b.active_state, world.b.main_pid) == ("inactive", 0)
    assert (world.g.active_state, world.g.main_pid) in (("inactive", 0), ("failed", 0))


def test_a_request_that_arrives_during_a_warm_return_waits_and_green_answers_it(
        tmp_path, port):
    """Issue 44, case 6: before, the hold answered it 503 + Retry-After (the lab: 8-20 of
    ~850 per warm return); now it waits in the room and is sent to green once green passed
    its gate and the front door points at it."""
    world = World(tmp_path, port, green_asleep=1, hold_file=True)
    room = str(tmp_path / "run" / "hold.sock")
    result, answer, door = world.run_with_a_request_held(room)
    assert result["switch"] == "warm"
    assert answer == (409, f"127.0.0.1:{port}")
    assert result["frontdoor_held"]["held"] == 1
    assert result["frontdoor_held"]["refused"] == 0
    assert result["frontdoor_held"]["wait_max_s"] >= 0
    assert door.room is None  # closed at the end: nginx answers for itself again


def test_a_request_held_through_a_failed_warm_return_is_answered_by_blue(tmp_path, port):
    world = World(tmp_path, port, green=ZERO_TOKENS, green_asleep=1, hold_file=True)
    room = str(tmp_path / "run" / "hold.sock")
    exc, answer, _door = world.run_with_a_request_held(room, fail=True)
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert answer == (409, f"127.0.0.1:{BLUE_PORT}")
    assert exc.fields["frontdoor_held"]["held"] == 1


def test_a_cold_switch_opens_no_room(tmp_path, port):
    world = World(tmp_path, port, hold_file=True)
    room = tmp_path / "run" / "hold.sock"
    result, answer, _door = world.run_with_a_request_held(str(room), switch_mode="cold")
    assert result["active_after"] == "green"
    assert answer is None
    assert "frontdoor_held" not in result
    assert not room.exists()


@pytest.mark.parametrize(("outcome", "wanted"), [
    ({"drained": False, "running": 1, "waiting": 0, "in_flight": 1}, 1),
    # /load counts a stream's tail the engine's gauges have let go of
    ({"drained": False, "running": 0, "waiting": 0, "in_flight": 2}, 2),
    # a server without /load: its gauges alone
    ({"drained": False, "running": 1, "waiting": 2, "in_flight": None}, 3),
])
def test_what_a_drain_left_running_is_the_larger_count(outcome, wanted):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.wake import (
        still_running,
    )

    assert still_running(outcome) == wanted


def test_a_sleeper_recorded_at_a_level_vllm_does_not_have_is_stopped_not_woken(tmp_path, port):
    world = World(tmp_path, port, green_asleep=1)
    record = world.saved()
    record["sleeping"][0]["level"] = 3  # hand-edited, or written by another tool
    record_mod.write(str(world.state_file), record)
    exc = world.fail()
    assert "green green cannot be woken: wanted a sleep level in (1, 2), got 3" in exc.msg
    assert exc.msg.endswith("Rolled back: blue woke and is serving again.")
    assert ("stop", G) in world.host.state_calls()  # never left alive, unchecked
    wake = world.green["url"] + "/wake_up"
    assert not [url for _m, url in world.host.http if url.startswith(wake)]
