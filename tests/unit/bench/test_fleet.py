# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/fleet.py: the pool's servers UP at the balancer, and the roll's targets.

pool_up reads the stats CSV of a real HAProxy: tests/haproxy_balancer.py runs Debian's
haproxy with the role's own configuration, and small stdlib servers on loopback stand in
for the hosts' front doors' /health (one answers 503, one port is closed: HAProxy's checks
take both DOWN). targets_missed, speed_targets, rate and the Sampler's figures run on hand-made
rows.
"""

import csv
import importlib.util
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from haproxy_balancer import HAVE_HAPROXY, balancer, free_port
from repo_paths import ROOT

spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "bench" / "fleet.py")
fleet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fleet)

needs_haproxy = pytest.mark.skipif(
    not HAVE_HAPROXY,
    reason="haproxy is not installed (apt-get install -y --no-install-recommends haproxy)",
)
WAIT_S = 15  # bound on the wait for the checks' verdicts; never reached when things work


class Health(BaseHTTPRequestHandler):
    """A front door's /health: 200, or 503 when the server's `healthy` is false."""

    def log_message(self, *_args):
        pass

    def do_GET(self):
        self.send_response(200 if self.server.healthy else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Door(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, healthy):
        super().__init__(("127.0.0.1", 0), Health)
        self.healthy = healthy

    def handle_error(self, request, client_address):
        """HAProxy closes a check's connection as soon as it has the status line."""


@pytest.fixture
def pools():
    """Pool default: h3 and h1 healthy (in that order: the CSV lists h3 first), h2 answering
    503, h4 a closed port. Pool kimi: k1 healthy."""
    doors = {"h3": Door(True), "h1": Door(True), "h2": Door(False), "k1": Door(True)}
    for door in doors.values():
        threading.Thread(target=door.serve_forever, args=(0.05,), daemon=True).start()

    def server(name):
        port = doors[name].server_address[1] if name in doors else free_port()
        return {"name": name, "address": "127.0.0.1", "port": port}

    yield {"default": [server("h3"), server("h1"), server("h2"), server("h4")],
           "kimi": [server("k1")]}
    for door in doors.values():
        door.shutdown()
        door.server_close()


def settled(bal, want):
    """Wait until the runtime API shows each pool/server in its state; return the states."""
    deadline = time.monotonic() + WAIT_S
    while True:
        rows = {(r["pxname"], r["svname"]): r["status"]
                for r in bal_rows(bal) if r["svname"] not in ("FRONTEND", "BACKEND")}
        if all(rows.get(key) == state for key, state in want.items()):
            return rows
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {want}; have {rows}"
        time.sleep(0.05)


def bal_rows(bal):
    """The runtime API's `show stat` rows."""
    return list(csv.DictReader(bal.runtime.command("show stat").lstrip("# ").splitlines()))


def balancer_settings(pools):
    return {"vllm_balancer_pools": pools, "vllm_balancer_open": True,
            "vllm_balancer_upstream_key": "", "vllm_balancer_check_interval_ms": 100,
            "vllm_balancer_check_fall": 2, "vllm_balancer_check_rise": 1}


@needs_haproxy
def test_pool_up_names_the_pools_servers_up_at_a_real_haproxy(tmp_path, pools):
    with balancer(tmp_path, **balancer_settings(pools)) as bal:
        states = settled(bal, {("default", "h1"): "UP", ("default", "h3"): "UP",
                               ("default", "h2"): "DOWN", ("default", "h4"): "DOWN",
                               ("kimi", "k1"): "UP"})
        csv_url = bal.stats_url + "/stats;csv"
        default = fleet.pool_up(csv_url, "default")
        kimi = fleet.pool_up(csv_url, "kimi")
        nowhere = fleet.pool_up(csv_url, "no-such-pool")
        backend_row = next(r for r in bal_rows(bal)
                           if (r["pxname"], r["svname"]) == ("default", "BACKEND"))
        # Drained or in maintenance, a server is not UP.
        bal.runtime.command("set server default/h3 state drain")
        drained = fleet.pool_up(csv_url, "default")
        bal.runtime.command("set server default/h3 state maint")
        in_maint = fleet.pool_up(csv_url, "default")
        # A path the stats frontend does not serve: HAProxy answers 503, not the table.
        wrong_path = fleet.pool_up(bal.stats_url + "/not-the-stats", "default")
    assert states[("default", "h3")] == "UP"
    # The pool's own BACKEND row is UP too: pool_up leaves it out, as it does FRONTEND.
    assert backend_row["status"] == "UP"
    assert default == ["h1", "h3"]  # sorted; HAProxy lists h3 first
    assert kimi == ["k1"]
    assert nowhere == []
    assert drained == ["h1"]
    assert in_maint == ["h1"]
    assert wrong_path is None


def test_pool_up_is_none_when_the_stats_do_not_answer():
    port = free_port()  # bound and closed again: nothing listens there
    assert fleet.pool_up(f"http://127.0.0.1:{port}/stats;csv", "default") is None


@needs_haproxy
def test_the_sampler_polls_the_real_stats_until_stopped(tmp_path, pools):
    with balancer(tmp_path, **balancer_settings(pools)) as bal:
        settled(bal, {("default", "h1"): "UP", ("default", "h3"): "UP",
                      ("default", "h2"): "DOWN", ("default", "h4"): "DOWN"})
        sampler = fleet.Sampler(bal.stats_url + "/stats;csv", "default", interval=0.05)
        sampler.start()
        deadline = time.monotonic() + WAIT_S
        while len(sampler.samples) < 3 and sampler.thread.is_alive():
            assert time.monotonic() < deadline, "the sampler took no 3 samples"
            time.sleep(0.02)
        sampler.stop()
    assert not sampler.thread.is_alive()
    assert len(sampler.samples) >= 3
    assert {tuple(up) for unused, up in sampler.samples} == {("h1", "h3")}
    assert sampler.fewest_up() == 2
    assert sampler.unanswered() == 0


def test_sampler_fewest_up_and_unanswered_on_hand_made_samples():
    sampler = fleet.Sampler("http://127.0.0.1:1/stats;csv", "default")
    assert sampler.fewest_up() is None  # no sample yet
    assert sampler.unanswered() == 0
    sampler.samples = [(0.0, ["a", "b"]), (0.5, None), (1.0, ["b"]), (1.5, None),
                       (2.0, ["a", "b", "c"])]
    assert sampler.fewest_up() == 1
    assert sampler.unanswered() == 2
    sampler.samples.append((2.5, []))  # stats answered: nothing UP
    assert sampler.fewest_up() == 0
    sampler.samples = [(0.0, None), (0.5, None)]  # the stats never answered
    assert sampler.fewest_up() is None
    assert sampler.unanswered() == 2


def test_departures_count_each_server_leaving_the_up_servers_between_answered_samples():
    sampler = fleet.Sampler("http://127.0.0.1:1/stats;csv", "default")
    assert sampler.departures() == {}
    assert not sampler.has_left("a")
    # a leaves, an unanswered sample between does not count as a change, a comes
    # back; then b leaves and comes back, then a leaves a second time.
    sampler.samples = [(0.0, ["a", "b"]), (0.5, ["b"]), (1.0, None), (1.5, ["b"]),
                       (2.0, ["a", "b"]), (2.5, ["a"]), (3.0, ["a", "b"]), (3.5, ["b"]),
                       (4.0, ["b", "c"])]
    assert sampler.departures() == {"a": 2, "b": 1}
    assert sampler.has_left("a")
    assert sampler.has_left("b")
    assert not sampler.has_left("c")


def test_rate_counts_requests_started_in_the_window_per_second():
    results = [{"start": s} for s in (-0.1, 0.0, 0.5, 1.0, 1.99, 2.0, 3.0)]
    assert fleet.rate(results, 0.0, 2.0) == 2.0  # 0.0, 0.5, 1.0, 1.99: start in, end out
    assert fleet.rate(results, 2.0, 4.0) == 1.0
    assert fleet.rate(results, 10.0, 20.0) == 0.0
    assert fleet.rate(results, 1.0, 1.0) == 0.0  # an empty window, no division by zero
    assert fleet.rate(results, 2.0, 1.0) == 0.0
    assert fleet.rate([], 0.0, 1.0) == 0.0


def good_row(**changes):
    row = {"model": "tiny_mla", "rc": 0, "expect_stop_at": "", "sent": 700, "sent_during_roll": 600,
           "failed": 0, "failed_examples": [], "fewest_up": 1, "failures": [], "samples": 400,
           "stats_unanswered": 0, "sampler_errors": [], "killed": {}, "departures": {},
           "served_while_out": [("h1", 60.0, 300), ("h2", 55.0, 280)]}
    row.update(changes)
    return row


def test_a_good_roll_misses_no_target():
    assert fleet.targets_missed(good_row()) == []
    # how many requests the roll carried is a speed figure, never a correctness miss
    assert fleet.targets_missed(good_row(sent_during_roll=10)) == []


def test_each_missed_target_is_named():
    assert fleet.targets_missed(good_row(rc=2, failures=["f1", "f2", "f3", "f4"])) == [
        "roll to tiny_mla: site.yml failed: ['f2', 'f3', 'f4']"]
    assert fleet.targets_missed(good_row(failed=3, failed_examples=["502", "timed out"])) == [
        "roll to tiny_mla: 3 requests failed (['502', 'timed out'])"]
    assert fleet.targets_missed(good_row(served_while_out=[("h1", 61.5, 0), ("h2", 9.9, 0)])) == [
        "roll to tiny_mla: no request was served in the 61.5 s h1 was out of the pool"]
    unanswered = good_row(stats_unanswered=2, sampler_errors=["OSError: x"])
    assert fleet.targets_missed(unanswered) == [
        "roll to tiny_mla: the balancer's stats did not answer 2 of 400 samples ['OSError: x']"]
    for fewest in (0, None):
        assert fleet.targets_missed(good_row(fewest_up=fewest)) == [
            (f"roll to tiny_mla: the pool had {fewest} healthy servers at the balancer at one "
             "sample; wanted at least 1 at every sample")]
    # Everything at once: every target, in order.
    missed = fleet.targets_missed(good_row(rc=1, failed=1, served_while_out=[("h1", 10.0, 0)],
                                           fewest_up=0))
    assert missed == [
        "roll to tiny_mla: site.yml failed: []",
        "roll to tiny_mla: 1 requests failed ([])",
        "roll to tiny_mla: no request was served in the 10.0 s h1 was out of the pool",
        ("roll to tiny_mla: the pool had 0 healthy servers at the balancer at one sample; "
         "wanted at least 1 at every sample")]


def test_a_roll_meant_to_stop_must_stop_at_that_host():
    stop = "vllm-fleet-h2"
    stopped = ["vllm-fleet-h1: a task", f"localhost: The roll stopped at {stop}: its gate failed"]
    # It stopped there: rc != 0 is what was wanted, not a miss.
    assert fleet.targets_missed(good_row(rc=2, expect_stop_at=stop, failures=stopped)) == []
    # It did not stop at all.
    assert fleet.targets_missed(good_row(rc=0, expect_stop_at=stop)) == [
        f"roll to tiny_mla: site.yml succeeded; wanted it to stop at {stop}"]
    # It failed, but not where the roll stops at that host: another host, or no roll stop.
    elsewhere = ["localhost: The roll stopped at vllm-fleet-h1: its gate failed"]
    unrelated = [f"{stop}: could not reach the host"]
    for failures in (elsewhere, unrelated, []):
        assert fleet.targets_missed(
            good_row(rc=2, expect_stop_at=stop, failures=failures)) == [
            (f"roll to tiny_mla: the failure does not name {stop} where the roll stopped: "
             f"{failures[-3:]}")]
    # A stop as wanted still misses when the load saw a failure.
    assert fleet.targets_missed(
        good_row(rc=2, expect_stop_at=stop, failures=stopped, failed=1,
                 failed_examples=["503"])) == [
        "roll to tiny_mla: 1 requests failed (['503'])"]


def test_a_killed_controller_must_have_been_killed_and_no_host_out_twice():
    killed = {"host": "vllm-fleet-h1", "rc": 254, "after_s": 40.2, "failures": []}
    once = {"vllm-fleet-h1": 1, "vllm-fleet-h2": 1}
    assert fleet.targets_missed(good_row(killed=killed, departures=once)) == []
    # The first run ended by itself (the host never left while it ran): not the test wanted.
    ended = dict(killed, rc=0)
    assert fleet.targets_missed(good_row(killed=ended, departures=once)) == [
        "roll to tiny_mla: the controller was not killed with vllm-fleet-h1 out (first run rc 0)"]
    # The re-run drained a host the killed run had already taken out and put back.
    twice = {"vllm-fleet-h1": 2, "vllm-fleet-h2": 1}
    assert fleet.targets_missed(good_row(killed=killed, departures=twice)) == [
        "roll to tiny_mla: hosts taken out of the pool more than once: {'vllm-fleet-h1': 2}"]
    # Without a kill, departures are reported only.
    assert fleet.targets_missed(good_row(departures=twice)) == []


def test_absences_span_from_the_first_sample_without_a_server_to_the_first_with_it_again():
    sampler = fleet.Sampler("http://127.0.0.1:1/stats;csv", "default")
    assert sampler.absences() == []
    # h1 out from 1.0 to 3.0 (an unanswered sample between changes nothing), h2 from 4.0
    # and never back (until the last sample, 5.0); h3 was never UP, so never absent.
    sampler.samples = [(0.0, ["h1", "h2"]), (1.0, ["h2"]), (2.0, None), (3.0, ["h1", "h2"]),
                       (4.0, ["h1"]), (5.0, ["h1"])]
    assert sampler.absences() == [("h1", 1.0, 3.0), ("h2", 4.0, 5.0)]
    # A server that joins later and then leaves is absent from its leaving only.
    sampler.samples = [(0.0, ["h1"]), (1.0, ["h1", "h2"]), (2.0, ["h1"]), (3.0, ["h1", "h2"])]
    assert sampler.absences() == [("h2", 2.0, 3.0)]


def test_served_while_out_counts_answered_requests_started_in_each_absence():
    results = [{"start": 0.5, "status": 200}, {"start": 1.0, "status": 200},
               {"start": 2.0, "status": 503}, {"start": 2.5, "status": 200, "error": "reset"},
               {"start": 2.9, "status": 200}, {"start": 3.0, "status": 200}]
    # [1.0, 3.0): 1.0 and 2.9 served; the 503 and the reset were failures, 3.0 is after
    assert fleet.served_while_out(results, [("h1", 1.0, 3.0), ("h2", 4.0, 5.0)]) == [
        ("h1", 2.0, 2), ("h2", 1.0, 0)]


def test_the_roll_s_request_count_is_a_speed_target_only():
    assert fleet.speed_targets(good_row(sent_during_roll=500), 500) == [
        ("roll to tiny_mla: requests sent during the roll >= 500", 500, True)]
    assert fleet.speed_targets(good_row(sent_during_roll=424), 500) == [
        ("roll to tiny_mla: requests sent during the roll >= 500", 424, False)]
    assert fleet.targets_missed(good_row(sent_during_roll=424)) == []
