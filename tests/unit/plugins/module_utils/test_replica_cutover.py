# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A switch in which a two-node replica takes part, phase by phase over its two hosts.

Two fake hosts (unit/fake_host.py: systemd units, vLLM servers, nginx as each
host's front door reading a real upstream file, a fake clock), each with its own
deployment record, switch marker and model link on disk. `Pair` runs the phases
in the order roles/vllm_model/tasks/cutover_replica.yml runs them; the head's
gate reads the worker's rank state as the worker's unit publishes it (its
ExecStartPre records which start of the head it joined).
"""

import json
import os
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as record_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.replica_cutover import (
    RankSwitch,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoor,
    upstream_conf,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    CutoverError,
    Host,
    Settings,
)

from unit.fake_host import CRASH, FakeHost

MLA, GQA = "vllm-tiny_mla.service", "vllm-tiny_gqa.service"
MLA_PORT, GQA_PORT = 8002, 8001
FD_URL = "http://127.0.0.1:8000"
HOSTS = ("h1", "h2")
STATE_URL = "http://172.31.250.1{n}:29510/vllm-fleet/ranks/tiny_gqa.json"


def replica(role, rank):
    return {"group": "replica_a", "role": role, "node_rank": rank, "nodes": 2, "head": "h1",
            "ranks": [{"name": "h1", "role": "head", "node_rank": 0,
                       "state_url": STATE_URL.format(n=1)},
                      {"name": "h2", "role": "worker", "node_rank": 1,
                       "state_url": STATE_URL.format(n=2)}]}


def tiny_mla(tmp_path, host):
    return {"model": "tiny_mla", "unit": MLA, "url": f"http://127.0.0.1:{MLA_PORT}",
            "port": MLA_PORT, "served_model_name": "tiny-mla", "startup_timeout_s": 60,
            "repo_id": "vllm-fleet-lab/tiny-mla", "revision": "m" * 40,
            "model_dir": str(tmp_path / host / "snapshots" / ("m" * 40)),
            "model_link": str(tmp_path / host / "links" / "tiny_mla")}


def tiny_gqa(tmp_path, host, revision="g" * 40):
    role, rank = ("head", 0) if host == "h1" else ("worker", 1)
    return {"model": "tiny_gqa", "unit": GQA, "url": f"http://127.0.0.1:{GQA_PORT}",
            "port": GQA_PORT, "served_model_name": "tiny-gqa", "startup_timeout_s": 60,
            "repo_id": "vllm-fleet-lab/tiny-gqa", "revision": revision,
            "vllm_version": "0.32.0-cpu",
            "model_dir": str(tmp_path / host / "snapshots" / revision),
            "model_link": str(tmp_path / host / "links" / "tiny_gqa"),
            "replica": replica(role, rank)}


class Side:
    """One host: fake systemd and servers, nginx, its record, marker and link on disk."""

    def __init__(self, tmp_path, name, head=None):
        self.name = name
        self.folder = tmp_path / name
        self.folder.mkdir()
        self.rank_dir = self.folder / "ranks"
        self.host = FakeHost()
        self.upstream = self.folder / "upstream.conf"
        self.nginx = self.host.frontdoor(FD_URL, self.upstream)
        self.state_file = str(self.folder / "vllm_fleet.fact")
        self.marker = str(self.folder / "switching.json")
        self.head = head  # the head's Side, for a worker's unit to join its start
        self.joined = ""

    def rank_state(self):
        """What this worker's unit published (ExecStartPre/ExecStopPost)."""
        unit = self.host.units[GQA]
        return {"state": "running" if unit.active_state == "active" else "stopped",
                "invocation": unit.invocation, "head": self.joined}

    def switch(self, green, reader=None):
        door = FrontDoor(self.host.run_command, str(self.upstream), FD_URL,
                         request=self.host.request, clock=self.host.clock, sleep=self.host.sleep)
        host = Host(self.host.run_command, request=self.host.request, clock=self.host.clock,
                    wall=self.host.wall, sleep=self.host.sleep, proc=self.host.proc)
        settings = Settings(switch_marker=self.marker, drain_timeout=5.0)
        return RankSwitch(host, green, self.state_file, settings, frontdoor=door,
                          rank_reader=reader, rank_dir=str(self.rank_dir))

    def publish_worker(self):
        """What the worker's ExecStartPre writes as its unit starts: the head's start it joins."""
        self.joined = self.head.host.units[GQA].invocation
        self.rank_dir.mkdir(exist_ok=True)
        (self.rank_dir / "tiny_gqa.json").write_text(json.dumps(dict(
            self.rank_state(), head=self.joined)))

    def record(self):
        return record_mod.load(self.state_file)

    def active(self):
        return (self.record().get("active") or {}).get("model")

    def link(self, model):
        return os.readlink(self.folder / "links" / model)


class Pair:
    """Two hosts serving tiny_mla each (blue), tiny_gqa installed as a two-node replica."""

    def __init__(self, tmp_path, worker=None):
        self.tmp_path = tmp_path
        self.h1 = Side(tmp_path, "h1")
        self.h2 = Side(tmp_path, "h2", head=self.h1)
        for side in self.sides():
            side.host.unit(MLA, f"http://127.0.0.1:{MLA_PORT}", "tiny-mla", active=True)
            side.upstream.write_text(upstream_conf(MLA_PORT, model="tiny_mla"))
            side.nginx.loaded = MLA_PORT
            blue = dict(tiny_mla(tmp_path, side.name), since="2027-01-01T00:00:00+00:00")
            record_mod.write(side.state_file, {"active": blue, "previous": None, "history": []})
            os.makedirs(side.folder / "links")
            os.symlink(blue["model_dir"], side.folder / "links" / "tiny_mla")
        self.h1.host.unit(GQA, f"http://127.0.0.1:{GQA_PORT}", "tiny-gqa", warmup_s=4.0)
        # The worker runs no API server: no URL answers for it.
        self.h2.host.unit(GQA, None, None, behaviour=worker or "healthy")

    def sides(self):
        return (self.h1, self.h2)

    def green(self, side):
        return tiny_gqa(self.tmp_path, side.name)

    def reader(self):
        """The rank states as the two hosts' nginx serve them."""
        def read(url):
            if url == STATE_URL.format(n=2):
                return self.h2.rank_state(), ""
            unit = self.h1.host.units[GQA]
            assert url == STATE_URL.format(n=1)
            return {"state": "running" if unit.active_state == "active" else "stopped",
                    "invocation": unit.invocation}, ""
        return read

    def phase(self, side, phase, target="green", green=None):
        green = green or self.green(side)
        result = side.switch(green, self.reader()).run(phase, side.record(), target)
        if phase == "start" and side is self.h2 and result.get("started") == GQA:
            side.publish_worker()
        return result

    def switch(self, green_for=None):
        """The controller's order (tasks/cutover_replica.yml); returns every phase's result."""
        green_for = green_for or self.green
        out = {"plan": {s.name: self.phase(s, "plan", green=green_for(s)) for s in self.sides()}}
        if {r["action"] for r in out["plan"].values()} == {"none"}:
            return out
        actions = {r["action"] for r in out["plan"].values()}
        if actions - {"none", "commit"}:
            out["stop"] = {s.name: self.phase(s, "stop", green=green_for(s)) for s in self.sides()}
            roles = {s.name: out["plan"][s.name]["role"] for s in self.sides()}
            order = sorted(self.sides(), key=lambda s: roles[s.name] == "worker")
            out["start"] = {}
            for side in order:
                out["start"][side.name] = self.phase(side, "start", green=green_for(side))
            out["gate"] = {s.name: self.phase(s, "gate", green=green_for(s)) for s in order}
            if not all(r["ok"] for r in out["gate"].values()):
                out["unwind"] = {s.name: self.phase(s, "unwind", green=green_for(s))
                                 for s in self.sides()}
                out["restore"] = {s.name: self.phase(s, "start", "blue", green=green_for(s))
                                  for s in self.sides()}
                out["restore_gate"] = {s.name: self.phase(s, "gate", "blue", green=green_for(s))
                                       for s in self.sides()}
                out["release"] = {s.name: self.phase(s, "release", green=green_for(s))
                                  for s in self.sides()}
                return out
        out["commit"] = {s.name: self.phase(s, "commit", green=green_for(s)) for s in self.sides()}
        return out


@pytest.fixture
def pair(tmp_path):
    return Pair(tmp_path)


def test_two_single_hosts_become_one_replica(pair):
    out = pair.switch()
    assert {n: (r["action"], r["role"], r["blue_role"]) for n, r in out["plan"].items()} == {
        "h1": ("switch", "head", "single"), "h2": ("switch", "worker", "single")}
    # Each host took its front door off, drained and stopped its own blue.
    assert out["stop"]["h1"]["stopped"] == out["stop"]["h2"]["stopped"] == [MLA]
    assert out["stop"]["h1"]["blue_drain"]["drained"] is True
    # The head's unit started before the worker's, and the worker joined that start.
    assert out["start"]["h1"]["invocation"] == "vllm-tiny_gqa.service-inv-1"
    assert pair.h2.joined == out["start"]["h1"]["invocation"]
    assert out["gate"]["h1"]["ok"] is True
    assert out["gate"]["h1"]["green_health"]["stage"] == "ok"
    assert out["gate"]["h2"] == {
        "phase": "gate", "target": "green", "changed": False, "role": "worker",
        "model": "tiny_gqa@gggggggggggg", "ok": True,
        "green_health": {"ok": True, "stage": "ok",
                         "detail": f"{GQA} runs in its head's start vllm-tiny_gq"}}
    # Both records name tiny_gqa with the host's place in the replica; blue is previous.
    for side, role in ((pair.h1, "head"), (pair.h2, "worker")):
        record = side.record()
        assert record["active"]["model"] == "tiny_gqa"
        assert record["active"]["replica"]["role"] == role
        assert record["previous"]["model"] == "tiny_mla"
        assert side.link("tiny_gqa") == pair.green(side)["model_dir"]
        assert not os.path.exists(side.marker)
        # The head starts at boot; the worker does not: its probe starts it into the head's start.
        assert side.host.units[GQA].enabled is (role == "head")
        assert not side.host.units[MLA].enabled
    # The head's front door serves the replica; the worker's says unavailable (no API there).
    assert pair.h1.nginx.loaded == GQA_PORT
    assert pair.h2.upstream.read_text() == upstream_conf(None, switching=False)
    assert pair.h2.host.state_calls() == [("stop", MLA), ("reset-failed", GQA), ("start", GQA),
                                          ("disable", MLA)]


def test_a_worker_that_dies_fails_the_heads_gate_at_once_and_both_go_back(tmp_path):
    pair = Pair(tmp_path, worker=CRASH)
    out = pair.switch()
    gate = out["gate"]["h1"]
    assert gate["ok"] is False
    assert gate["green_health"]["stage"] == "replica"
    assert gate["green_health"]["detail"] == "its worker h2 stopped after joining it"
    # At once: well before the 60 s startup timeout.
    assert gate["green_health"]["seconds"] < 10
    assert out["gate"]["h2"]["ok"] is False
    # Unwound: green stopped on both, each host's own blue started and gated, front doors back.
    assert out["unwind"]["h1"]["stopped"] == [GQA]
    assert {n: r["ok"] for n, r in out["restore_gate"].items()} == {"h1": True, "h2": True}
    for side in pair.sides():
        assert side.active() == "tiny_mla"
        assert side.nginx.loaded == MLA_PORT
        assert side.host.units[GQA].active_state in ("inactive", "failed")
        assert side.host.units[MLA].active_state == "active"
        assert not os.path.exists(side.marker)
    assert out["release"]["h1"]["changed"] is False  # its front door was back on blue already


def test_a_rerun_after_the_gate_only_commits(pair):
    out = pair.switch()
    assert out["commit"]["h1"]["changed"]
    # A controller that died after the gate: the records still name tiny_mla.
    for side in pair.sides():
        record_mod.write(side.state_file, dict(side.record(), active=dict(
            tiny_mla(pair.tmp_path, side.name), since="2027-01-01T00:00:00+00:00")))
        side.host.calls.clear()
    again = pair.switch()
    assert {n: r["action"] for n, r in again["plan"].items()} == {"h1": "commit", "h2": "commit"}
    assert "stop" not in again
    assert [side.active() for side in pair.sides()] == ["tiny_gqa", "tiny_gqa"]
    # Nothing was stopped or started: the replica kept serving.
    for side in pair.sides():
        assert [c for c in side.host.state_calls() if c[0] in ("start", "stop")] == []


def test_a_rerun_once_switched_does_nothing(pair):
    pair.switch()
    for side in pair.sides():
        side.host.calls.clear()
    again = pair.switch()
    assert {n: r["action"] for n, r in again["plan"].items()} == {"h1": "none", "h2": "none"}
    assert list(again) == ["plan"]
    assert pair.h1.host.state_calls() == pair.h2.host.state_calls() == []


def test_a_head_that_fails_its_probe_makes_the_replica_switch_again(pair):
    pair.switch()
    pair.h1.host.units[GQA].behaviour = "stalled"
    plan = pair.phase(pair.h1, "plan")
    assert plan["action"] == "switch"
    assert plan["heal_reason"].startswith(f"{GQA} is active but failed its health probe at "
                                          "completion")


def test_the_replica_back_to_two_single_hosts(pair):
    pair.switch()
    out = pair.switch(green_for=lambda side: tiny_mla(pair.tmp_path, side.name))
    assert {n: (r["role"], r["blue_role"]) for n, r in out["plan"].items()} == {
        "h1": ("single", "head"), "h2": ("single", "worker")}
    # The head's API was drained; the worker has none.
    assert "blue_drain" in out["stop"]["h1"]
    assert "blue_drain" not in out["stop"]["h2"]
    assert out["stop"]["h2"]["stopped"] == [GQA]
    for side in pair.sides():
        assert side.active() == "tiny_mla"
        assert "replica" not in side.record()["active"]
        assert side.nginx.loaded == MLA_PORT


def test_release_tells_clients_unavailable_where_nothing_came_back(pair):
    side = pair.h2
    record_mod.write(side.state_file, {"active": None, "previous": None, "history": []})
    pair.phase(side, "stop")
    assert side.upstream.read_text() == upstream_conf(None)  # switching
    assert json.loads(Path(side.marker).read_text())["phase"] == "stop"
    out = pair.phase(side, "release")
    assert out["changed"] is True
    assert side.upstream.read_text() == upstream_conf(None, switching=False)
    assert not os.path.exists(side.marker)


def test_the_marker_holds_each_units_start_for_the_gate(pair):
    pair.phase(pair.h1, "stop")
    started = pair.phase(pair.h1, "start")
    marker = json.loads(Path(pair.h1.marker).read_text())
    assert marker["phase"] == "start green"
    assert marker["units"][GQA] == {"started_at": pair.h1.host.wall() - 0.0, "restarts": 0}
    assert started["started"] == GQA


def test_an_unknown_phase_is_refused(pair):
    with pytest.raises(CutoverError, match="phase must be one of plan, stop"):
        pair.h1.switch(pair.green(pair.h1)).run("swap", pair.h1.record())


def test_a_changed_unit_makes_the_replica_switch_again(pair):
    """A new vLLM build or other serve options rewrite the units: the ranks start again."""
    pair.switch()
    plan = pair.h1.switch(pair.green(pair.h1)).plan(pair.h1.record())
    assert plan["action"] == "none"
    restarted = RankSwitch(pair.h1.switch(pair.green(pair.h1)).host, pair.green(pair.h1),
                           pair.h1.state_file, Settings(restart=True)).plan(pair.h1.record())
    assert restarted["action"] == "switch"


def test_the_plan_refuses_a_switch_that_would_fail_before_it_starts(pair):
    """The single-host switch's preflight, for this host's part: green's unit installed."""
    pair.h2.host.units[GQA].installed = False
    plan = pair.phase(pair.h2, "plan")
    assert plan["action"] == "switch"
    assert plan["refused"] == f"green unit {GQA} is not installed (LoadState=not-found)"
    # Nothing was touched: the plan only reads.
    assert pair.h2.host.state_calls() == []
    assert pair.h1.host.units[MLA].active_state == "active"


def test_a_worker_that_did_not_join_its_heads_start_fails_its_gate(pair):
    """A worker whose ExecStartPre could not read the head (its rank state server down)
    runs, but not in the head's start: the switch is not committed on it."""
    pair.phase(pair.h1, "stop")
    pair.phase(pair.h2, "stop")
    pair.phase(pair.h1, "start")
    pair.phase(pair.h2, "start")
    (pair.h2.rank_dir / "tiny_gqa.json").write_text(json.dumps(dict(
        pair.h2.rank_state(), head="", head_read="GET http://172.31.250.11:29510/...: refused")))
    gate = pair.phase(pair.h2, "gate")
    assert gate["ok"] is False
    assert gate["green_health"] == {
        "ok": False, "stage": "replica",
        "detail": (f"{GQA} runs, but its rank state does not show it in its head's start "
                   "vllm-tiny_gq (it joined none: GET http://172.31.250.11:29510/...: refused)")}


def test_an_unwind_also_stops_a_blue_worker_left_running(pair):
    """The replica is blue; a stop that failed on the worker's host left its rank running:
    the unwind stops it, so it starts again into the head's new start."""
    pair.switch()
    back = tiny_mla(pair.tmp_path, "h2")
    assert pair.h2.host.units[GQA].active_state == "active"
    out = pair.phase(pair.h2, "unwind", green=back)
    assert out["stopped"] == [MLA, GQA]
    assert pair.h2.host.units[GQA].active_state == "inactive"
