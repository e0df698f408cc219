# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/cutover.py's client: requests name the alias, and every non-2xx is a failure.

A real HTTP server on loopback plays the front door: it serves one set of model
names and answers others 404 the way vLLM does.
"""

import importlib.util
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import (
    frontdoor as frontdoor_mod,
)
from repo_paths import ROOT

spec = importlib.util.spec_from_file_location("bench_cutover", ROOT / "bench" / "cutover.py")
cutover = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cutover)


class Door(BaseHTTPRequestHandler):
    served = ("tiny-mla", "default")
    asked: ClassVar[list] = []

    def log_message(self, *_args):
        pass

    def _send(self, status, body, headers=()):
        data = body.encode()
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, json.dumps({"data": [{"id": name} for name in self.served]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.asked.append(body["model"])
        if body["model"] not in self.served:
            self._send(404, json.dumps({"error": {
                "message": f"The model `{body['model']}` does not exist.", "code": 404}}))
        elif body.get("stream"):
            self._send(200, 'data: {"choices": []}\n\ndata: [DONE]\n\n')
        else:
            self._send(200, json.dumps({"model": self.served[0], "choices": [{"text": "x"}]}))


@pytest.fixture
def door():
    Door.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Door)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_requests_name_the_alias_and_are_served(door):
    load = cutover.Load(door, model="default")
    outcomes = [load._one(n) for n in range(4)]
    assert Door.asked == ["default"] * 4
    assert [o["status"] for o in outcomes] == [200, 200, 200, 200]
    assert [o["stream"] for o in outcomes] == [True, False, False, False]
    assert not any(cutover.failed(o) for o in outcomes)


def test_a_404_for_a_name_the_new_model_lacks_is_a_failure_not_relabelled(door):
    load = cutover.Load(door, model="tiny-gqa")  # the old model's own name
    outcome = load._one(1)
    assert outcome["status"] == 404
    assert cutover.failed(outcome) is True
    assert load.model == "tiny-gqa"  # it does not learn the new name behind the client's back
    summary = cutover.summarise([outcome], cutover_started=outcome["start"] - 1)
    assert (summary["failed"], summary["503_retry_after"], summary["other_failures"]) == (1, 0, 1)
    assert summary["other_examples"] == ["404"]
    assert "renamed" not in summary


def test_without_an_alias_the_client_asks_for_the_name_listed_at_the_start(door):
    load = cutover.Load(door, model="")
    load.refresh_model()
    assert load.model == "tiny-mla"


@pytest.mark.parametrize(("outcome", "is_failed"), [
    ({"status": 200}, False),
    ({"status": 201}, False),
    ({"status": 299}, False),
    ({"status": 300}, True),
    ({"status": 404}, True),
    ({"status": 503, "retry_after": "5"}, True),
    ({"status": None, "error": "ConnectionResetError: [Errno 104]"}, True),
    ({"status": 200, "error": "stream ended without [DONE]"}, True),
])
def test_every_answer_that_is_not_2xx_is_a_failure(outcome, is_failed):
    assert cutover.failed(outcome) is is_failed


def test_the_summary_counts_503_with_retry_after_apart_from_other_failures():
    results = [{"status": 200, "start": 0.0, "end": 1.0},
               {"status": 503, "retry_after": "5", "start": 2.0, "end": 2.1},
               {"status": 503, "start": 3.0, "end": 3.1},
               {"status": 404, "start": 4.0, "end": 4.5}]
    summary = cutover.summarise(results, cutover_started=0.5)
    assert (summary["sent"], summary["failed"], summary["503_retry_after"],
            summary["other_failures"], summary["window_s"]) == (4, 3, 1, 2, 2.5)
    assert summary["other_examples"] == ["404", "503"]
    assert (summary["in_flight_at_start"], summary["in_flight_failed"]) == (1, 0)


def test_latency_samples_time_every_request_and_keep_its_status(door):
    served = cutover.latency_samples(door, "default", 3)
    unknown = cutover.latency_samples(door, "no-such-model", 2)
    assert [status for _ms, status in served] == [200, 200, 200]
    assert [status for _ms, status in unknown] == [404, 404]
    assert all(ms > 0 for ms, _status in served + unknown)
    assert Door.asked == ["default"] * 3 + ["no-such-model"] * 2


def test_a_request_without_an_answer_is_timed_with_status_none():
    with socket.socket() as s:  # bound and closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    samples = cutover.latency_samples(f"http://127.0.0.1:{port}", "default", 2)
    assert [status for _ms, status in samples] == [None, None]


def test_percentiles_are_the_median_and_the_99th_of_the_sorted_times():
    assert cutover.percentiles([3.0, 1.0, 2.0]) == (2.0, 2.0)  # int(0.99 * 2) = 1
    assert cutover.percentiles([4.0, 1.0, 3.0, 2.0]) == (2.5, 3.0)
    times = [float(n) for n in range(1, 201)]  # 1..200 ms
    assert cutover.percentiles(reversed(times)) == (100.5, 198.0)  # index int(0.99 * 199) = 197


class Record(BaseHTTPRequestHandler):
    """The front door's /metrics/vllm-fleet: the record's text as the role's nginx serves it."""

    text = ""
    status = 200

    def log_message(self, *_args):
        pass

    def do_GET(self):
        data = self.text.encode() if self.path == "/metrics/vllm-fleet" else b"{}"
        self.send_response(self.status if self.path == "/metrics/vllm-fleet" else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def record_door():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Record)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_active_model_is_read_from_the_record_the_front_door_publishes(record_door):
    # The text the cutover publishes (plugins/module_utils/frontdoor/frontdoor.py), not one
    # made here.
    Record.status = 200
    Record.text = frontdoor_mod.record_metrics({"active": {
        "model": "tiny_gqa", "served_model_name": "tiny-gqa", "repo_id": "vllm-fleet-lab/tiny-gqa",
        "revision": "a" * 40, "vllm_version": "0.32.0", "since": "2026-12-02T06:00:00+00:00"}})
    assert cutover.active_model(record_door) == "tiny_gqa"


@pytest.mark.parametrize(("status", "record"), [
    (200, {}),  # no active model: the metric is absent
    (401, {"active": {"model": "tiny_gqa"}}),  # refused: unknown, so blue is deployed
])
def test_no_active_model_when_the_record_names_none_or_cannot_be_read(record_door, status, record):
    Record.status = status
    Record.text = frontdoor_mod.record_metrics(record)
    assert cutover.active_model(record_door) is None


def test_no_active_model_when_nothing_answers():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert cutover.active_model(f"http://127.0.0.1:{port}") is None


@pytest.mark.parametrize(("early", "says"), [
    (True, "; green started once blue's engine and workers had exited"),
    (False, "; green started once blue's whole unit had stopped"),
    (None, ""),
])
def test_the_detail_line_says_when_a_sequential_green_could_start(early, says):
    row = {"strategy": "sequential", "green": "tiny_mla", "phases": {"stop_blue": 0.23},
           "drain": {"in_flight": 2}, "blue_released_early": early}
    assert cutover.row_detail(row) == (
        "  sequential -> tiny_mla: phases (s) {'stop_blue': 0.23}; blue drain {'in_flight': 2}"
        + says)


def leg(**changes):
    row = {"strategy": "sequential", "green": "tiny_mla", "rc": 0, "msg": "", "sent": 800,
           "failed": 300, "other_failures": 0, "other_examples": [], "in_flight_failed": 0,
           "ratio": 1.02}
    row.update(changes)
    return row


def test_correctness_targets_name_each_miss_and_never_a_speed_figure():
    assert cutover.targets_missed(leg()) == []
    # a sequential window far longer than green's start is slow, not wrong (make bench says so)
    assert cutover.targets_missed(leg(ratio=1.068)) == []
    assert cutover.targets_missed(leg(ratio=None)) == []
    assert cutover.targets_missed(leg(other_failures=2, other_examples=["502"])) == [
        "sequential -> tiny_mla: 2 failures were not 503 + Retry-After: ['502']"]
    assert cutover.targets_missed(leg(strategy="parallel", failed=1, other_examples=["404"])) == [
        "parallel -> tiny_mla: 1 requests failed (['404'])"]
    assert cutover.targets_missed(leg(rc=2, msg="gate failed", in_flight_failed=1)) == [
        "sequential -> tiny_mla: site.yml failed: gate failed",
        "sequential -> tiny_mla: 1 requests in flight when the cutover began did not complete"]


def test_speed_targets_are_the_ratio_and_the_parallel_legs_load():
    rows = [leg(strategy="parallel", failed=0, sent=300), leg(strategy="parallel", failed=0,
                                                              sent=250, green="tiny_gqa"),
            leg(ratio=1.068)]
    assert cutover.speed_targets(rows, 500) == [
        ("sequential -> tiny_mla: window / time-to-healthy <= 1.05", 1.068, False),
        ("parallel legs carried >= 500 requests", 550, True)]
    assert cutover.speed_targets([leg(ratio=1.05)], 500) == [
        ("sequential -> tiny_mla: window / time-to-healthy <= 1.05", 1.05, True)]
    # a switch that failed has no ratio to judge (its failure is a correctness miss)
    assert cutover.speed_targets([leg(rc=2, ratio=None)], 500) == []


def test_report_speed_prints_every_target_and_fails_only_when_asked(capsys):
    targets = [("ratio <= 1.05", 1.068, False), ("requests >= 500", 550, True)]
    assert cutover.report_speed(targets, speed=False) == []
    assert cutover.report_speed(targets, speed=True) == ["speed: ratio <= 1.05, got 1.068"]
    assert capsys.readouterr().out.splitlines() == [
        "speed target ratio <= 1.05: 1.068 - missed", "speed target requests >= 500: 550 - met"] * 2


def test_warm_legs_must_be_warm_and_a_rollback_leg_must_fail_and_roll_back():
    warm = leg(strategy="warm", switch="warm")
    assert cutover.targets_missed(warm) == []
    assert cutover.targets_missed(leg(strategy="warm", switch="cold")) == [
        "warm -> tiny_mla: the switch was cold, not warm"]
    assert cutover.targets_missed(leg(strategy="warm", switch="warm", other_failures=1,
                                      other_examples=["502"])) == [
        "warm -> tiny_mla: 1 failures were not 503 + Retry-After: ['502']"]
    # a warm return (green woke) holds what arrives in its outage: any failure is missed
    held = {"held": 9, "refused": 0, "max_s": 10.0, "wait_p50_s": 0.4, "wait_p99_s": 0.7}
    assert cutover.targets_missed(leg(strategy="warm", switch="warm", woke=True, failed=0,
                                      held=held)) == []
    assert cutover.targets_missed(leg(strategy="warm", switch="warm", woke=True, failed=2,
                                      held=held)) == [
        ("warm -> tiny_mla: a warm return failed 2 requests (503 + Retry-After); held 9 "
         "(refused 0, bound 10 s), added latency p50 400 ms, p99 700 ms")]
    # the first warm switch starts green cold: past the room's bound its 503s are polite
    assert cutover.targets_missed(leg(strategy="warm", switch="warm", woke=False, failed=2)) == []
    rollback = leg(strategy="warm", green="tiny_slow", expect_rollback=True, rc=2,
                   rolled_back=True, msg="... Rolled back: tiny_gqa woke and is serving again.")
    assert cutover.targets_missed(rollback) == []
    wanted = ("warm -> tiny_slow: wanted a failed switch rolled back to blue, got rc 0, "
              "rolled_back None: ok")
    assert cutover.targets_missed(dict(rollback, rc=0, rolled_back=None, msg="ok")) == [wanted]
    assert cutover.site_strategy("warm") == ("sequential", {"vllm_fleet_switch_mode": "warm"})
    assert cutover.site_strategy("parallel") == ("parallel", {})


def test_the_lab_figures_file_names_each_leg_and_paper_reads_it(tmp_path):
    rows = [leg(strategy="sequential", downtime_s=31.2, time_to_healthy_s=30.1, failed=40),
            leg(strategy="warm", switch="warm", downtime_s=33.0, time_to_healthy_s=32.0,
                failed=44, woke=False),
            leg(strategy="warm", green="tiny_gqa", switch="warm", downtime_s=1.4,
                time_to_healthy_s=0.9, failed=3, woke=True, green_wake_s=0.1),
            leg(strategy="warm", green="tiny_slow", expect_rollback=True, rc=2,
                rolled_back=True, downtime_s=7.5, time_to_healthy_s=None, failed=12)]
    out = tmp_path / "cutover-warm.json"
    cutover.write_lab_figures(out, rows)
    runs = json.loads(out.read_text())["runs"]
    assert [(r["case"], r["outage_s"], r["failed_requests"]) for r in runs] == [
        ("cold sequential", 31.2, 40), ("warm first switch", 33.0, 44),
        ("warm return", 1.4, 3), ("warm rollback", 7.5, 12)]
    assert runs[2]["woke"] is True
    lines = cutover.lab_section(out)
    assert lines[2].split()[:4] == ["cold", "sequential", "31.20", "30.10"]
    assert lines[4].split()[:4] == ["warm", "return", "1.40", "0.90"]
    assert lines[4].endswith("CPU")


def test_the_warm_legs_join_the_cold_ones_the_scenario_wrote_first(tmp_path):
    """The cutover scenario runs its cold legs (parallel, sequential) and later its warm
    ones, each bench writing the same file: the file ends with all of them, in LAB_CASES
    order, each saying when it was measured; a case measured again replaces the old one."""
    out = tmp_path / "cutover-warm.json"
    cold = [leg(strategy="parallel", downtime_s=0.0, time_to_healthy_s=20.0, failed=0),
            leg(strategy="parallel", green="tiny_gqa", downtime_s=0.0, time_to_healthy_s=21.0,
                failed=0),
            leg(strategy="sequential", downtime_s=31.2, time_to_healthy_s=30.1, failed=40)]
    cutover.write_lab_figures(out, cold, when="2026-12-05T10:00:00Z")
    warm = [leg(strategy="warm", switch="warm", downtime_s=33.0, time_to_healthy_s=32.0,
                failed=44, woke=False),
            leg(strategy="warm", green="tiny_gqa", switch="warm", downtime_s=1.4,
                time_to_healthy_s=0.9, failed=3, woke=True, green_wake_s=0.1)]
    cutover.write_lab_figures(out, warm, when="2026-12-05T10:05:00Z")
    runs = json.loads(out.read_text())["runs"]
    assert [(r["case"], r["outage_s"], r["measured_at"]) for r in runs] == [
        ("cold parallel", 0.0, "2026-12-05T10:00:00Z"),
        ("cold parallel", 0.0, "2026-12-05T10:00:00Z"),
        ("cold sequential", 31.2, "2026-12-05T10:00:00Z"),
        ("warm first switch", 33.0, "2026-12-05T10:05:00Z"),
        ("warm return", 1.4, "2026-12-05T10:05:00Z")]
    cutover.write_lab_figures(out, [leg(strategy="sequential", downtime_s=29.0,
                                        time_to_healthy_s=28.0, failed=38)],
                              when="2026-12-05T11:00:00Z")
    runs = json.loads(out.read_text())["runs"]
    assert [(r["case"], r["outage_s"]) for r in runs if r["case"] == "cold sequential"] == [
        ("cold sequential", 29.0)]
    assert len(runs) == 5
