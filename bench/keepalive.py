# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Keep-alive benchmark: requests through the real front door, spaced around vLLM's keep-alive.

vLLM's HTTP server closes an idle connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE);
nginx keeps idle upstream connections for reuse. A request nginx sends on a kept
connection just as the server closes it fails (a 503 to the client). The front door's
upstream drops idle connections at half the server's timeout (module_utils/frontdoor/frontdoor.py);
this bench checks that on the running lab: `--threads` clients each send requests with
gaps cycling through `--gaps` (seconds, around 5), so nginx's kept connections are
reused at every idle age around the server's timeout. Each request is a small
completion on a new client connection (the upstream connections are nginx's).

Every answer that is not 2xx, and every request with no answer, is a failure.

  .venv/bin/python bench/keepalive.py --frontdoor http://127.0.0.1:8000 --requests 240
  --check  exits 1 unless every request was answered 2xx
"""

import argparse
import collections
import itertools
import os
import statistics
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cutover  # bench/cutover.py: small_completion, one timed request

ROOT = Path(__file__).resolve().parent.parent
HTTP_OK_MIN, HTTP_OK_END = 200, 300
DEFAULT_GAPS = "2.4,2.6,4.5,4.9,5.0,5.1,5.5,6.0"


def lab_key():
    """The lab inventory's first front door key (not a secret), or ''."""
    try:
        data = yaml.safe_load((ROOT / "inventory/lab/group_vars/vllm_hosts.yml").read_text())
    except OSError:
        return ""
    keys = data.get("vllm_frontdoor_api_keys") or []
    return keys[0] if keys else ""


def run(url, headers, model, requests, threads, gaps):
    """Send `requests` in `threads` clients, each sleeping the next gap between its requests."""
    results = []
    lock = threading.Lock()
    counter = itertools.count()

    def client(offset):
        gap = itertools.cycle(gaps[offset % len(gaps):] + gaps[:offset % len(gaps)])
        time.sleep(offset * 0.37)  # spread the clients' phases
        while next(counter) < requests:
            outcome = cutover.small_completion(url, headers, model, timeout=60)
            with lock:
                results.append(outcome)
            time.sleep(next(gap))

    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--frontdoor", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="default", help="model name to ask for (the alias)")
    parser.add_argument("--api-key", default=os.environ.get("VLLM_FLEET_API_KEY") or lab_key())
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--gaps", default=DEFAULT_GAPS, help="seconds between a client's requests")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every request is 2xx")
    args = parser.parse_args()
    url = urllib.parse.urlsplit(args.frontdoor)
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    gaps = [float(g) for g in args.gaps.split(",")]
    started = time.monotonic()
    results = run(url, headers, args.model, args.requests, args.threads, gaps)
    wall = time.monotonic() - started
    statuses = collections.Counter("no answer" if s is None else str(s) for s, _t, _e in results)
    failed = [r for r in results if r[0] is None or not HTTP_OK_MIN <= r[0] < HTTP_OK_END]
    seconds = sorted(t for _s, t, _e in results)
    print(f"keep-alive bench through {args.frontdoor} (model {args.model!r}), "
          f"{args.threads} clients, gaps {args.gaps} s")
    print(f"requests sent:   {len(results)} in {wall:.1f} s")
    print(f"requests failed: {len(failed)} (every non-2xx and every request with no answer)")
    print("answers:         " + ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items())))
    print(f"latency:         p50 {statistics.median(seconds) * 1000:.1f} ms, "
          f"p99 {seconds[int(0.99 * (len(seconds) - 1))] * 1000:.1f} ms")
    for status, _t, error in failed[:5]:
        print(f"  failed: {status or ''} {error}")
    if args.check and (failed or len(results) < args.requests):
        sys.exit(1)


if __name__ == "__main__":
    main()
