# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Fleet benchmark: a rolling cutover of a pool under continuous load through the balancer.

It loads the balancer (the same bounded client loop as bench/cutover.py: several
threads, every fourth request streaming, every request naming the pool's alias,
paced by --pause so that the roll's own Ansible run gets CPU on a small lab)
for a while before the roll, then runs `site.yml -e model=<to>` over the fleet
inventory through ansible-runner while the load goes on, and samples the pool's
healthy servers from the balancer's own stats (HAProxy's CSV) every half second.
It prints:

  requests sent / failed during the roll (every answer that is not 2xx and every
  request without one is a failure: a client saw it),
  the fewest servers of the pool that were UP at the balancer at any sample,
  the roll's wall time in total and per host (first to last task of the host in
  the roll play), the capacity ratio (requests per second during the roll over
  those before it),
  and the latency the balancer adds: p50/p99 of small completions through it and
  straight to one host's front door.

Correctness targets (what `make test` gates, --check): the roll did what it was
asked (or stopped where --expect-stop-at says), no request failed, the balancer's
stats answered, at least one server of the pool was UP at every sample, no host
left the pool twice after a killed controller, and clients were served while each
host was out of the pool (every absence of MIN_ABSENCE_S or longer). Speed
targets (printed always; failing only with --speed, as `make bench` runs it): the
roll carried --min-requests. A count of requests is the load's rate times the
roll's length, both the machine's: it never fails the Molecule scenario.

  .venv/bin/python bench/fleet.py --inventory <fleet inventory> \\
      --balancer http://172.31.250.10:8000 --stats http://172.31.250.10:8404/stats\\;csv \\
      --to tiny_mla --direct http://172.31.250.11:8000 --api-key K --direct-key K2

--expect-stop-at HOST: the roll is meant to stop at HOST's failed gate (the
scenario breaks that host's green through --extra-vars): then site.yml must fail
naming HOST, and the load must still see 0 failures.
--check exits 1 when a correctness target is missed (the Molecule fleet scenario);
with --speed a missed speed target fails too (make bench).
"""

import argparse
import csv
import http.client
import io
import itertools
import json
import os
import sys
import threading
import time
import urllib.parse
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cutover  # bench/cutover.py: the client loop and latency sampler

ROOT = Path(__file__).resolve().parent.parent
ROLL_PLAY = "Roll the model through the pools, host by host"
# An absence from the pool this long must have seen clients served by the rest of it. A
# host is out for a whole switch (a minute on the lab); a shorter gap between two samples
# may hold no request at all at the lab's 8 requests/s, and says nothing about the pool.
MIN_ABSENCE_S = 10.0


def pool_up(stats_url, pool):
    """The servers of `pool` the balancer has UP now (HAProxy's stats CSV), or None."""
    url = urllib.parse.urlsplit(stats_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    try:
        # urlsplit keeps HAProxy's ";csv" in the path
        conn.request("GET", url.path + ("?" + url.query if url.query else ""))
        resp = conn.getresponse()
        text = resp.read().decode()
        if resp.status != 200:
            return None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
    return sorted(r["svname"] for r in rows
                  if r["pxname"] == pool and r["svname"] not in ("FRONTEND", "BACKEND")
                  and r["status"].startswith("UP"))


class Sampler:
    """Polls the pool's UP servers every `interval` seconds until stopped."""

    def __init__(self, stats_url, pool, interval=0.5):
        self.stats_url, self.pool, self.interval = stats_url, pool, interval
        self.samples = []  # (monotonic time, [servers UP] or None when stats did not answer)
        self.errors = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_event.is_set():
            try:
                up = pool_up(self.stats_url, self.pool)
            except Exception as exc:  # noqa: BLE001 - a sample that failed is kept as unanswered
                self.errors.append(f"{type(exc).__name__}: {exc}")
                up = None
            self.samples.append((time.monotonic(), up))
            self.stop_event.wait(self.interval)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=10)

    def fewest_up(self):
        counts = [len(up) for _t, up in self.samples if up is not None]
        return min(counts) if counts else None

    def unanswered(self):
        return sum(1 for _t, up in self.samples if up is None)

    def departures(self):
        """How many times each server left the pool's UP servers, between answered samples."""
        answered = [set(up) for _t, up in list(self.samples) if up is not None]
        left = {}
        for before, after in itertools.pairwise(answered):
            for server in before - after:
                left[server] = left.get(server, 0) + 1
        return left

    def absences(self):
        """[(server, left, back)]: each time a server was missing from the pool's UP servers,
        from the first answered sample without it to the next one with it again (the last
        sample's time when it never came back). Servers never seen UP are not listed."""
        answered = [(t, set(up)) for t, up in list(self.samples) if up is not None]
        seen, out, spans = set(), {}, []
        for t, up in answered:
            for server in sorted(seen - up):
                out.setdefault(server, t)
            spans.extend((server, out.pop(server), t) for server in sorted(up & set(out)))
            seen |= up
        end = answered[-1][0] if answered else 0.0
        spans.extend((server, left, end) for server, left in sorted(out.items()))
        return sorted(spans, key=lambda span: span[1])

    def has_left(self, server):
        return self.departures().get(server, 0) > 0


def roll(inventory, model, extravars, kill_when=None, spans=None):
    """site.yml over the fleet through ansible-runner: (rc, per-host seconds, failure messages).

    kill_when: polled during the run; True kills the controller (SIGKILL to its process group).
    spans: the per-host first and last event times of an earlier run, extended by this one.
    """
    variables = {"model": model}
    variables.update(extravars)
    rc, events = cutover.run_site(inventory, variables, cancel_callback=kill_when)
    spans = {} if spans is None else spans
    failures = []
    for event in events:
        data = event.get("event_data", {})
        host = data.get("host")
        if event.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
            failures.append(f"{host}: {data.get('res', {}).get('msg', '')}".strip())
        if data.get("play") != ROLL_PLAY or not host or "created" not in event:
            continue
        when = datetime.fromisoformat(event["created"]).timestamp()
        first, last = spans.get(host, (when, when))
        spans[host] = (min(first, when), max(last, when))
    per_host = {h: round(last - first, 1) for h, (first, last) in spans.items()}
    return rc, per_host, failures, spans


def rate(results, start, end):
    done = [r for r in results if start <= r["start"] < end]
    return len(done) / (end - start) if end > start else 0.0


def served_while_out(results, absences):
    """[(server, seconds out, requests answered 2xx that started while it was out)]."""
    return [(server, round(back - left, 1),
             sum(1 for r in results if left <= r["start"] < back and not cutover.failed(r)))
            for server, left, back in absences]


def roll_under_load(args, model, extravars, expect_stop_at=""):
    load = cutover.Load(args.balancer, threads=args.threads, model=args.alias,
                        max_seconds=args.max_seconds, pause_s=args.pause)
    sampler = Sampler(args.stats, args.pool)
    sampler.start()
    load.start()
    before_start = time.monotonic()
    time.sleep(args.before)
    roll_start = time.monotonic()
    killed = {}
    if args.kill_controller_once_out:
        # A controller that dies mid-roll: SIGKILL once the host has left the pool at
        # the balancer (drained, its switch under way), then the same command again.
        host = args.kill_controller_once_out
        first_rc, _per_host, first_failures, spans = roll(
            args.inventory, model, extravars, kill_when=lambda: sampler.has_left(host))
        killed = {"host": host, "rc": first_rc, "after_s": round(time.monotonic() - roll_start, 1),
                  "failures": first_failures}
        rc, per_host, failures, _spans = roll(args.inventory, model, extravars, spans=spans)
    else:
        rc, per_host, failures, _spans = roll(args.inventory, model, extravars)
    roll_end = time.monotonic()
    time.sleep(args.settle)
    load.stop()
    sampler.stop()
    during = [r for r in load.results if roll_start <= r["start"] < roll_end]
    bad = [r for r in load.results if cutover.failed(r)]
    before_rate = rate(load.results, before_start, roll_start)
    during_rate = rate(load.results, roll_start, roll_end)
    return {
        "model": model, "rc": rc, "expect_stop_at": expect_stop_at,
        "wall_s": round(roll_end - roll_start, 1), "per_host_s": per_host,
        "sent": len(load.results), "sent_during_roll": len(during), "failed": len(bad),
        "failed_examples": sorted({str(r.get("error") or r["status"]) for r in bad})[:5],
        "rate_before": round(before_rate, 1), "rate_during": round(during_rate, 1),
        "capacity_ratio": round(during_rate / before_rate, 2) if before_rate else None,
        "fewest_up": sampler.fewest_up(), "samples": len(sampler.samples),
        "stats_unanswered": sampler.unanswered(), "sampler_errors": sampler.errors,
        "failures": failures, "killed": killed, "departures": sampler.departures(),
        "served_while_out": served_while_out(load.results, sampler.absences()),
    }


def killed_missed(row, where):
    """The targets of a roll whose controller was killed (--kill-controller-once-out)."""
    if not row["killed"]:
        return []
    missed = []
    # ansible-runner's rc for a run it cancelled; anything else: the run ended first
    if row["killed"]["rc"] != 254:
        missed.append(f"{where}: the controller was not killed with "
                      f"{row['killed']['host']} out (first run rc {row['killed']['rc']})")
    twice = {s: n for s, n in row["departures"].items() if n > 1}
    if twice:
        missed.append(f"{where}: hosts taken out of the pool more than once: {twice}")
    return missed


def targets_missed(row):
    """The correctness targets of one roll, as messages (empty when all are met)."""
    where = f"roll to {row['model']}"
    missed = []
    if row["expect_stop_at"]:
        stop = row["expect_stop_at"]
        if row["rc"] == 0:
            missed.append(f"{where}: site.yml succeeded; wanted it to stop at {stop}")
        elif not any(stop in f and "roll stopped" in f for f in row["failures"]):
            missed.append(f"{where}: the failure does not name {stop} where the roll stopped: "
                          f"{row['failures'][-3:]}")
    elif row["rc"] != 0:
        missed.append(f"{where}: site.yml failed: {row['failures'][-3:]}")
    if row["failed"]:
        missed.append(f"{where}: {row['failed']} requests failed ({row['failed_examples']})")
    for server, seconds, served in row["served_while_out"]:
        if seconds >= MIN_ABSENCE_S and served == 0:
            missed.append(f"{where}: no request was served in the {seconds} s {server} was out "
                          "of the pool")
    if row["stats_unanswered"]:
        missed.append(f"{where}: the balancer's stats did not answer {row['stats_unanswered']} "
                      f"of {row['samples']} samples {row['sampler_errors'][:2]}")
    missed += killed_missed(row, where)
    if row["fewest_up"] is None or row["fewest_up"] < 1:
        missed.append(f"{where}: the pool had {row['fewest_up']} healthy servers at the balancer "
                      "at one sample; wanted at least 1 at every sample")
    return missed


def speed_targets(row, min_requests):
    """The speed targets: [(target, figure, met)]. Printed by every run; they fail a run
    only with --speed (make bench), never the Molecule scenario."""
    return [(f"roll to {row['model']}: requests sent during the roll >= {min_requests}",
             row["sent_during_roll"], row["sent_during_roll"] >= min_requests)]


def latency_pair(args):
    """(balancer p50, p99, direct p50, p99) in ms, small completions naming the alias."""
    key = cutover.HEADERS.get("Authorization")
    b50, b99 = cutover.latency(args.balancer, args.alias, args.latency_requests)
    if args.direct_key:
        cutover.HEADERS["Authorization"] = f"Bearer {args.direct_key}"
    try:
        d50, d99 = cutover.latency(args.direct, args.alias, args.latency_requests)
    finally:
        if key:
            cutover.HEADERS["Authorization"] = key
    return b50, b99, d50, d99


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", required=True,
                        help="the fleet inventory (a vllm_balancers group)")
    parser.add_argument("--balancer", required=True, help="the balancer's base URL")
    parser.add_argument("--stats", required=True,
                        help="the balancer's stats CSV URL (HAProxy ;csv)")
    parser.add_argument("--pool", default="default", help="the pool that rolls (its alias)")
    parser.add_argument("--alias", default="default", help="the model name requests ask for")
    parser.add_argument("--to", required=True, help="the model the pool rolls to")
    parser.add_argument("--extra-vars", default="{}", help="JSON extra vars for site.yml")
    parser.add_argument("--expect-stop-at", default="",
                        help="the host whose failed gate must stop the roll")
    parser.add_argument("--kill-controller-once-out", metavar="HOST", default="",
                        help="kill site.yml (SIGKILL) once HOST has left the pool at the balancer, "
                             "then run it again: the re-run must finish the roll without taking "
                             "any host out twice")
    parser.add_argument("--direct", help="one host's front door, for the balancer's added latency")
    parser.add_argument("--direct-key", default="", help="the key that front door accepts")
    # The lab's default: 3 clients, 0.3 s apart, about 8 requests/s of 8 tokens each.
    # It was 2 clients 0.5 s apart (3.7 requests/s) while a serving host's vLLM worker
    # busy-polled a core and the roll took 7 minutes or more; with the lab image's
    # 0.1 s poll the roll to tiny_mla took 117 s on a fast machine (2026-12-04), and
    # 3.7 requests/s sent 424 during it, under the 500 the roll is to carry (a speed
    # target: make bench, --speed). Unpaced clients would starve the roll itself on 2 cores.
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.3,
                        help="each client's wait between requests, seconds (0: back to back)")
    parser.add_argument("--before", type=float, default=15.0, help="load seconds before the roll")
    parser.add_argument("--settle", type=float, default=3.0, help="load seconds after it")
    parser.add_argument("--max-seconds", type=float, default=1800, help="the load's own bound")
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--min-requests", type=int, default=500)
    parser.add_argument("--json", help="also write the figures here")
    cutover.add_target_args(parser)
    parser.add_argument("--api-key", default=os.environ.get("VLLM_FLEET_API_KEY", ""),
                        help="the balancer's key (default: $VLLM_FLEET_API_KEY; none: open)")
    args = parser.parse_args()
    if args.api_key:
        cutover.HEADERS["Authorization"] = f"Bearer {args.api_key}"

    row = roll_under_load(args, args.to, json.loads(args.extra_vars), args.expect_stop_at)
    problems = targets_missed(row)
    print("balancer: HAProxy; requests name the model "
          f"{args.alias!r}; failed = every answer that is not 2xx and every request without one")
    print(f"roll to {row['model']}: site.yml rc {row['rc']}, wall {row['wall_s']} s; "
          f"per host (s) {row['per_host_s']}")
    print(f"  requests sent {row['sent']} ({row['sent_during_roll']} during the roll), "
          f"failed {row['failed']} {row['failed_examples'] or ''}")
    print(f"  requests/s before {row['rate_before']}, during {row['rate_during']}: "
          f"capacity ratio {row['capacity_ratio']}")
    print(f"  pool {args.pool}: fewest servers UP at the balancer {row['fewest_up']} "
          f"over {row['samples']} samples ({row['stats_unanswered']} unanswered)")
    if row["killed"]:
        print(f"  controller killed {row['killed']['after_s']} s into the roll, "
              f"{row['killed']['host']} out of the pool (first run rc {row['killed']['rc']}); "
              f"the re-run's rc {row['rc']}")
    print(f"  times each host left the pool: {row['departures'] or 'none'}")
    for server, seconds, served in row["served_while_out"]:
        print(f"  {server} out of the pool {seconds} s: {served} requests served meanwhile")
    if row["rc"] != 0:
        print(f"  site.yml's failures: {row['failures'][-3:]}")
    if args.direct:
        b50, b99, d50, d99 = latency_pair(args)
        row["latency_ms"] = {"balancer_p50": round(b50, 1), "balancer_p99": round(b99, 1),
                             "direct_p50": round(d50, 1), "direct_p99": round(d99, 1)}
        print(f"latency over {args.latency_requests} requests (max_tokens 1): direct p50 "
              f"{d50:.1f} ms p99 {d99:.1f} ms; balancer p50 {b50:.1f} ms p99 {b99:.1f} ms; "
              f"added p50 {b50 - d50:+.1f} ms p99 {b99 - d99:+.1f} ms")
    problems.extend(cutover.report_speed(speed_targets(row, args.min_requests), args.speed))
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=2) + "\n", encoding="utf-8")
    for p in problems:
        print("MISSED:", p)
    return 1 if (args.check and problems) else 0


if __name__ == "__main__":
    sys.exit(main())
