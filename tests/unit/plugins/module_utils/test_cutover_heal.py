# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A re-run with the active model: one pass of the gate; a model that fails it is restarted
through the gate (`heal`), in check mode only reported; the switch marker is held while a run
acts on units and removed after, also on failure (fake host: unit/fake_host.py)."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as record_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Host,
    Settings,
)

from unit.fake_host import HEALTHY, STALLED, FakeHost

G = "vllm-green.service"
PORT = 8201
URL = f"http://127.0.0.1:{PORT}"
GREEN = {"model": "green", "unit": G, "url": URL, "port": PORT,
         "served_model_name": "green-model", "startup_timeout_s": 60,
         "repo_id": "org/green", "revision": "a" * 40}
REASON = ("vllm-green.service is active but failed its health probe at completion: "
          "POST /v1/completions: timed out")


class World:
    def __init__(self, tmp_path, behaviour=STALLED, after_restart=HEALTHY):
        self.host = FakeHost()
        self.unit = self.host.unit(G, URL, "green-model", behaviour=behaviour, active=True,
                                   behaviour_after_restart=after_restart,
                                   journal=["EngineCore stopped"])
        self.state_file = tmp_path / "vllm_fleet.fact"
        self.marker = tmp_path / "run" / "switching.json"
        record_mod.write(str(self.state_file), {
            "active": dict(GREEN, since="2027-01-01T00:00:00+00:00"), "previous": None,
            "history": []})
        self.before = self.state_file.read_bytes()
        self.marker_seen = []
        request = self.host.request

        def watching_request(method, url, payload=None, timeout=10.0):
            self.marker_seen.append(self.marker.exists())
            return request(method, url, payload, timeout)
        self.request = watching_request

    def run(self, check_mode=False):
        host = Host(self.host.run_command, request=self.request, clock=self.host.clock,
                    wall=self.host.wall, sleep=self.host.sleep, proc=self.host.proc)
        cutover = Cutover(host, GREEN, str(self.state_file),
                          Settings(switch_marker=str(self.marker)))
        return cutover.run_plan(record_mod.load(str(self.state_file)), check_mode)


def test_a_stalled_active_model_is_restarted_through_the_gate(tmp_path):
    world = World(tmp_path)
    result = world.run()
    assert (result["action"], result["changed"], result["heal_reason"]) == (
        "heal", True, REASON)
    assert (result["active_before"], result["active_after"], result["rolled_back"]) == (
        "green", "green", False)
    assert world.host.state_calls() == [("reset-failed", G), ("restart", G)]
    assert result["green_health"]["ok"] is True
    assert result["green_health"]["stage"] == "ok"
    assert result["time_to_healthy_s"] == result["green_health"]["seconds"]
    assert set(result["phases"]) == {"restart_green"}
    # The same deployment serves: the record is left as it was.
    assert world.state_file.read_bytes() == world.before
    # The marker is held from the probe on (the periodic probe leaves the unit alone),
    # and removed at the end.
    assert len(world.marker_seen) > 3
    assert all(world.marker_seen)
    assert not world.marker.exists()


def test_check_mode_reports_the_heal_and_touches_nothing(tmp_path):
    world = World(tmp_path)
    result = world.run(check_mode=True)
    assert (result["action"], result["changed"], result["heal_reason"]) == (
        "heal", True, REASON)
    assert world.host.state_calls() == []
    assert world.unit.behaviour == STALLED
    assert world.state_file.read_bytes() == world.before
    assert not any(world.marker_seen)


def test_a_healthy_active_model_is_left_alone(tmp_path):
    world = World(tmp_path, behaviour=HEALTHY)
    result = world.run()
    assert (result["action"], result["changed"]) == ("none", False)
    assert "heal_reason" not in result
    assert world.host.state_calls() == []
    assert world.marker_seen == [True, True, True]  # held while it probed
    assert not world.marker.exists()


def test_a_model_that_stays_broken_after_the_restart_fails_and_says_so(tmp_path):
    world = World(tmp_path, after_restart=STALLED)
    with pytest.raises(CutoverError) as caught:
        world.run()
    exc = caught.value
    assert exc.msg.startswith(f"green failed its health probe ({REASON}) and did not pass its "
                              "health gate after a restart: not healthy after 60 s (last: "
                              "POST /v1/completions: timed out)")
    assert exc.msg.endswith("it is the active model, so there is nothing to roll back to and "
                            "it is now stopped")
    assert exc.fields["action"] == "heal"
    assert exc.fields["journal"] == ["EngineCore stopped"]
    assert world.host.state_calls()[-1] == ("stop", G)
    assert world.state_file.read_bytes() == world.before
    assert not world.marker.exists()  # released on failure too


def test_the_marker_names_the_run_while_it_acts(tmp_path):
    world = World(tmp_path)
    seen = []
    request = world.request

    def reading_request(method, url, payload=None, timeout=10.0):
        if world.marker.exists():
            seen.append(json.loads(world.marker.read_text()))
        return request(method, url, payload, timeout)
    world.request = reading_request
    world.run()
    assert seen
    # Written once the run decided from systemd's view (running, unchanged: it probes first).
    assert {(m["model"], m["action"]) for m in seen} == {("green", "probe")}
    assert all(isinstance(m["pid"], int) and m["since"] > 0 for m in seen)
