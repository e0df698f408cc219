# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46: the probe treats a front door that disagrees with the record, and a record that
cannot be read, as named faults it repairs or reports (fake host, fake nginx, real files and
a real switch lock). Each test here failed on the code before: the probe said ok (or idle,
in silence) and left the front door answering 503 or sending elsewhere."""

import contextlib
import fcntl
import io
import json
import os

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import frontdoor
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import probe

from unit.fake_host import FakeHost

BLUE, GREEN = "vllm-blue.service", "vllm-green.service"
BLUE_URL, GREEN_URL = "http://127.0.0.1:8011", "http://127.0.0.1:8012"
FRONT = "http://127.0.0.1:8000"
ACTIVE = {"model": "blue", "unit": BLUE, "url": BLUE_URL, "port": 8011,
          "served_model_name": "blue-served", "startup_timeout_s": 600}


@pytest.fixture
def where(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "etc").mkdir()
    return {"record": tmp_path / "etc" / "vllm_fleet.fact",
            "state": tmp_path / "state.json", "marker": tmp_path / "run" / "switching.json",
            "lock": tmp_path / "run" / "cutover.lock",
            "upstream": tmp_path / "etc" / "upstream.conf",
            "hold": tmp_path / "run" / "switching", "warm": tmp_path / "run" / "switching-warm"}


def lab(where, record=None, green=False, blue=True):
    """Blue serving (and green running too when asked), nginx sending to blue, the record
    naming blue."""
    host = FakeHost()
    host.now = 10_000.0
    if blue:
        host.unit(BLUE, BLUE_URL, "blue-served", active=True, real_metrics=True).started_at = 1.0
    if green:
        host.unit(GREEN, GREEN_URL, "green-served", active=True,
                  real_metrics=True).started_at = 1.0
    where["upstream"].write_text(frontdoor.upstream_conf(8011, model="blue"))
    nginx = host.frontdoor(FRONT, where["upstream"], hold_file=where["hold"])
    nginx.loaded = 8011
    if record is not False:
        where["record"].write_text(json.dumps(record or {"active": ACTIVE}))
    return host, nginx


def probe_run(where, host, **kwargs):
    settings = probe.Settings(
        str(where["record"]), str(where["state"]), marker=str(where["marker"]),
        lock=str(where["lock"]), failures=3, timeout_s=10.0, **kwargs)
    settings.frontdoor = {"upstream_file": str(where["upstream"]),
                          "hold_file": str(where["hold"]), "warm_file": str(where["warm"]),
                          "url": FRONT}
    out = io.StringIO()
    outcome = probe.run(settings, run_command=host.run_command, request=host.request,
                        wall=host.wall, monotonic=host.clock, out=out, proc=host.proc)
    return outcome, out.getvalue()


def models(host):
    res = host.request("GET", FRONT + "/v1/models")
    return res.status, [m["id"] for m in json.loads(res.body).get("data", [])] \
        if res.status == 200 else json.loads(res.body)["error"]["code"]


def state(where):
    return json.loads(where["state"].read_text())


@contextlib.contextmanager
def switch_running(where):
    """Another process's switch: the cutover's flock on the lock file, held."""
    fd = os.open(where["lock"], os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, json.dumps({"pid": 77, "model": "green", "since": "now"}).encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


# -- the front door disagrees with the record ---------------------------------------------


def test_a_stale_hold_is_removed_and_the_front_door_serves_the_record_again(where):
    """A switch that died holding the front door (no reboot since: /run kept the hold): the
    model is healthy, every request got 503 switching, and the probe said ok."""
    host, _nginx = lab(where)
    where["hold"].write_text("a model switch holds the front door\n")
    assert models(host) == (503, "model_switching")
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "repaired"
    assert said.startswith(f"{BLUE}: fault stale_hold: the hold file {where['hold']} is there")
    assert "repaired: the front door sends to blue again" in said
    assert not where["hold"].exists()
    assert models(host) == (200, ["blue-served"])
    assert "faults" not in state(where)
    again, said = probe_run(where, host)  # mended: the next run is quiet
    assert (again.verdict, said) == ("ok", "")


def test_an_upstream_left_at_green_is_pointed_back_at_the_records_model(where):
    """A switch that died after staging green (its upstream written, the record never): the
    front door sends to green while the record, and the enabled unit, say blue."""
    host, nginx = lab(where, green=True)
    where["upstream"].write_text(frontdoor.upstream_conf(8012, model="green"))
    where["upstream"].with_name("upstream.conf" + frontdoor.PRESWITCH_SUFFIX).write_text(
        frontdoor.upstream_conf(8011, model="blue"))
    nginx.loaded = 8012
    assert models(host) == (200, ["green-served"])
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "repaired"
    assert (f"fault frontdoor_disagrees, stale_preswitch: the front door disagrees with the "
            f"record: {where['upstream']} sends to green on 127.0.0.1:8012; the record's "
            "active model is blue on port 8011") in said
    assert where["upstream"].read_text() == frontdoor.upstream_conf(8011, model="blue")
    assert not where["upstream"].with_name("upstream.conf.before-switch").exists()
    assert host.timeline[-2:] == ["nginx -t", "reload nginx: 8011"]
    assert models(host) == (200, ["blue-served"])


def test_a_switch_in_progress_is_never_touched(where):
    """The cutover's lock held: its hold and staged upstream are the switch's, not faults."""
    host, _nginx = lab(where)
    where["hold"].write_text("a model switch holds the front door\n")
    where["upstream"].write_text(frontdoor.upstream_conf(8012, model="green"))
    with switch_running(where):
        outcome, said = probe_run(where, host)
    assert outcome.verdict == "skipped"
    assert "the switch to green (pid 77, since now) holds" in said
    assert where["hold"].exists()
    assert where["upstream"].read_text() == frontdoor.upstream_conf(8012, model="green")
    assert "nginx -t" not in host.timeline


def test_the_marker_of_a_killed_switch_does_not_hold_the_repair_off(where):
    """SIGKILL mid-switch: its marker stays in /run (fresh for hours), its flock died with it.
    A one-host switch writes its marker only while it holds the lock: orphaned, said so."""
    host, _nginx = lab(where)
    where["hold"].write_text("held\n")
    where["marker"].write_text(json.dumps({"pid": 4321, "model": "green", "action": "switch",
                                           "since": host.wall() - 60}))
    os.utime(where["marker"], (host.wall() - 60, host.wall() - 60))
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "repaired"
    assert said.startswith(f"ignoring the switch marker {where['marker']}: the switch of green "
                           f"(pid 4321) that wrote it no longer holds the switch lock "
                           f"{where['lock']} (a switch that died); {BLUE}: fault stale_hold")
    assert not where["hold"].exists()
    with switch_running(where):  # the same marker while a switch holds the lock: held off
        where["hold"].write_text("held\n")
        assert probe_run(where, host)[0].verdict == "skipped"
    assert where["hold"].exists()


def test_a_fresh_switch_marker_holds_the_repair_off_too(where):
    """A replica switch between its phases holds the marker, not the lock."""
    host, _nginx = lab(where)
    where["upstream"].write_text(frontdoor.upstream_conf(None))
    where["marker"].write_text(json.dumps({"action": "replica", "model": "blue"}))
    os.utime(where["marker"], (host.wall() - 10, host.wall() - 10))
    outcome, _said = probe_run(where, host)
    assert outcome.verdict == "skipped"
    assert where["upstream"].read_text() == frontdoor.upstream_conf(None)


def test_an_unhealthy_model_leaves_the_fault_reported_not_repaired(where):
    """The record's model is down: pointing the front door at it mends nothing. The fault is
    said by name beside the failed probe, and kept in the state."""
    host, _nginx = lab(where)
    host.units[BLUE].active_state, host.units[BLUE].sub_state = "failed", "failed"
    host.units[BLUE].main_pid = 0
    where["hold"].write_text("held\n")
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "failed"
    assert said.endswith(f"{BLUE}: fault stale_hold: the hold file {where['hold']} is there "
                         "(every request answered 503 switching) while no switch holds the "
                         "switch lock: a switch that died; not repaired while "
                         f"{BLUE} is not healthy (failed)\n")
    assert where["hold"].exists()
    assert state(where)["faults"] == ["stale_hold"]


def test_nginx_refusing_the_repair_is_a_fault_and_the_old_file_stays(where):
    host, nginx = lab(where)
    where["upstream"].write_text(frontdoor.upstream_conf(8012, model="green"))
    nginx.test_error = "nginx: [emerg] unknown directive"
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "fault"
    assert "fault frontdoor_disagrees" in said
    assert "the repair failed: nginx rejected the new upstream" in said
    assert where["upstream"].read_text() == frontdoor.upstream_conf(8012, model="green")
    assert state(where)["faults"] == ["frontdoor_disagrees"]


def test_without_a_front_door_the_probe_is_as_before(where):
    host, _nginx = lab(where)
    where["hold"].write_text("held\n")
    out = io.StringIO()
    outcome = probe.run(probe.Settings(str(where["record"]), str(where["state"]),
                                       lock=str(where["lock"])),
                        run_command=host.run_command, request=host.request, wall=host.wall,
                        monotonic=host.clock, out=out, proc=host.proc)
    assert (outcome.verdict, out.getvalue()) == ("ok", "")
    assert where["hold"].exists()


# -- a record that cannot be read -----------------------------------------------------------


def test_a_zero_length_record_is_rebuilt_from_what_runs(where):
    """A crash mid-write (before writes were durable) left the record empty: the probe was
    idle in silence and every cutover failed "not JSON"."""
    host, _nginx = lab(where, record=False)
    where["record"].write_bytes(b"")
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "repaired"
    assert said == (f"fault record_unreadable: the deployment record {where['record']} is empty "
                    f"(0 bytes); repaired from what runs (front door: {where['upstream']} sends "
                    f"to blue on 127.0.0.1:8011; model units active: {BLUE}; {BLUE_URL} serves "
                    "blue-served): the record names blue active (its other fields come back "
                    "with the next deployment); the unreadable bytes, if any, are kept in "
                    f"{where['record']}.unreadable\n")
    record = json.loads(where["record"].read_text())
    assert record["active"] == {"model": "blue", "unit": BLUE, "port": 8011, "url": BLUE_URL,
                                "served_model_name": "blue-served"}
    assert record["repaired"]["why"].endswith("is empty (0 bytes)")
    assert (record["previous"], record["history"]) == (None, [])
    assert not where["record"].with_name("vllm_fleet.fact.unreadable").exists()
    again, said = probe_run(where, host)  # the record serves the probe again
    assert (again.verdict, said) == ("ok", "")


def test_garbage_with_two_models_running_cannot_be_repaired_and_says_what_it_found(where):
    host, _nginx = lab(where, record=False, green=True)
    where["record"].write_text('{"active": {"model": "bl')
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "fault"
    assert said.startswith(f"fault record_unreadable: the deployment record {where['record']} "
                           "is not JSON (")
    assert said.endswith(f"cannot repair it from what runs (front door: {where['upstream']} "
                         f"sends to blue on 127.0.0.1:8011; model units active: {BLUE}, {GREEN}"
                         f" (wanted {BLUE} alone)): re-run the deployment for the model this "
                         "host should serve\n")
    assert where["record"].read_text() == '{"active": {"model": "bl'
    assert state(where)["faults"] == ["record_unreadable"]
    assert not [c for c in host.calls if c[:2] == ["systemctl", "restart"]]


def test_an_unparsable_record_keeps_its_bytes_beside_the_rebuilt_one(where):
    host, _nginx = lab(where, record=False)
    where["record"].write_text("\x00\x00garbage")
    outcome, _said = probe_run(where, host)
    assert outcome.verdict == "repaired"
    assert where["record"].with_name("vllm_fleet.fact.unreadable").read_text() == \
        "\x00\x00garbage"


def test_nothing_running_and_a_front_door_with_no_model_is_an_empty_record(where):
    host, _nginx = lab(where, record=False, blue=False)
    where["upstream"].write_text(frontdoor.upstream_conf(None, switching=False))
    where["record"].write_bytes(b"")
    outcome, said = probe_run(where, host)
    assert outcome.verdict == "repaired"
    assert "the record names no active model" in said
    assert json.loads(where["record"].read_text())["active"] is None
    assert probe_run(where, host)[0].verdict == "idle"


def test_a_broken_record_is_not_repaired_while_a_switch_runs(where):
    host, _nginx = lab(where, record=False)
    where["record"].write_bytes(b"")
    with switch_running(where):
        outcome, said = probe_run(where, host)
    assert outcome.verdict == "fault"
    assert said.endswith("holds " + str(where["lock"]) + ": not probing; not repaired while a "
                         "switch runs\n")
    assert where["record"].read_bytes() == b""


def test_a_missing_record_is_still_idle():
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import heal

    assert heal.read_record("/nonexistent/vllm_fleet.fact") == ({}, None)


def test_the_upstream_parser_reads_what_the_renderer_writes():
    assert frontdoor.parse_upstream(frontdoor.upstream_conf(8011, model="blue")) == {
        "state": "serving", "model": "blue", "host": "127.0.0.1", "port": 8011}
    assert frontdoor.parse_upstream(frontdoor.upstream_conf(None)) == {
        "state": "switching", "model": None, "host": None, "port": None}
    assert frontdoor.parse_upstream(frontdoor.upstream_conf(None, switching=False))["state"] \
        == "idle"
    assert frontdoor.parse_upstream("") is None
    assert frontdoor.parse_upstream("upstream vllm_active {\n") is None
