# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Balancer comparison: HAProxy, Debian's nginx and vllm-router before the same pool, same load.

Issue 14 keeps the fleet's balancer that measures better on the lab, correctness
first, then latency. The role's HAProxy already runs on the fleet lab's balancer
container; this sets up the two other candidates beside it, on their own ports,
before the same two hosts' front doors (docker exec in the balancer container):

  nginx        Debian's package, its best configuration for this (nginx_conf()):
               both hosts in one upstream (least_conn, kept-alive connections),
               passive checks (max_fails/fail_timeout, proxy_next_upstream), the
               fleet's client keys checked by a map and the hosts' key set by
               proxy_set_header, streams unbuffered.
  vllm-router  the PyPI wheel (--router-version), pip-installed into a venv in the
               container from a wheelhouse downloaded here (.cache/wheelhouse), run
               as a transient systemd unit (router_argv()): both hosts as
               --worker-urls, --policy round_robin, active /health checks every
               second, --api-key with the hosts' key (its documented "key used for
               authorization with workers").

Then for each candidate, and straight to the first host's front door (the
reference), it measures:

  keys: a request with a wrong key, with the fleet's client key, and with the
    hosts' key sent by a client (each answer's status); from these, whether the
    candidate checks the client keys itself and sends the hosts their own key;
  the pool's alias and the served model name each answered (their statuses);
  streaming: a chat completion of 32 tokens streams when its first chunk arrives
    before half the stream's time and it ends with [DONE];
  runtime drain: taking the lost host out of new requests and back without a
    reload (HAProxy's runtime API, vllm-router's worker endpoints; nginx has none);
  host loss: requests failed of those sent (bench/cutover.py's client loop:
    every answer that is not 2xx and every request without one is a failure) while
    one host's front door is stopped under load (`systemctl stop nginx` in that
    host's container, started again after --down seconds);
  latency: p50/p99 of small completions (max_tokens 1, a new connection each;
    cutover.latency_samples), the targets interleaved in rounds, and the ms each
    candidate adds over the direct path.

It prints one table and a verdict line: of the candidates that pass every check
(host loss 0 failed, streams, the alias, a wrong key refused, their own key check,
a runtime drain), the one with the lowest added p50. The served name's status is
shown, not required: the fleet's contract is the pool's alias.

  make bench-balancers    (molecule converge -s fleet; this; molecule destroy -s fleet)
  .venv/bin/python bench/balancers.py --balancer-container vllm-fleet-lb \\
      --balancer http://172.31.250.10:8000 --stats http://172.31.250.10:8404/stats\\;csv \\
      --host vllm-fleet-h1=http://172.31.250.11:8000 \\
      --host vllm-fleet-h2=http://172.31.250.12:8000 \\
      --api-key K --upstream-key K2 [--json FILE]
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cutover  # bench/cutover.py: the client loop and latency samples
import fleet  # bench/fleet.py: the pool's servers UP in HAProxy's stats

ROOT = Path(__file__).resolve().parent.parent
ROUTER_VENV = "/opt/vllm-router"
ROUTER_WHEELS = "/opt/vllm-router-wheels"
ROUTER_UNIT = "vllm-fleet-bench-router"
NGINX_SITE = "/etc/nginx/conf.d/vllm-fleet-bench.conf"
HAPROXY_SOCKET = "/run/haproxy/admin.sock"
WRONG_KEY = "not-a-key-of-this-fleet-0123456789"
# A bearer token as the roles accept it: safe inside nginx's double quotes.
KEY_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,}")
HTTP_UNAUTHORIZED = 401
# How long nginx leaves out a server that failed (passive checks: max_fails=1).
NGINX_FAIL_TIMEOUT_S = 10
# HAProxy's runtime API, one command a connection (as community.general.haproxy speaks it),
# run with the balancer's python3: no socat in the image.
RUNTIME_SCRIPT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.settimeout(5)\n"
    "s.connect(sys.argv[1])\n"
    "s.sendall(sys.argv[2].encode() + b'\\n')\n"
    "print(s.makefile().read(), end='')\n"
)
NGINX_DRAIN = ("no: open-source nginx changes its upstream servers only by a config edit and "
               "a reload (the runtime upstream API is NGINX Plus's)")


def nginx_conf(listen, servers, client_keys, upstream_key, fail_timeout_s=NGINX_FAIL_TIMEOUT_S,
               retry_after_s=30):
    """Debian's nginx as the fleet's balancer: the http-level text of its site, listening on
    `listen` (a port, or address:port)."""
    for key in [*client_keys, upstream_key]:
        if not KEY_PATTERN.fullmatch(key):
            raise ValueError("a key must be 16 or more of A-Z a-z 0-9 . _ ~ + / = -")
    upstream = "\n".join(
        f"    server {urllib.parse.urlsplit(url).netloc} max_fails=1 "
        f"fail_timeout={fail_timeout_s}s;" for url in servers)
    keys = "\n".join(f'    "Bearer {key}" 1;' for key in client_keys)
    unauthorized = ('{"error":{"message":"Incorrect or missing API key. Send it as: '
                    'Authorization: Bearer <key>.","type":"invalid_request_error",'
                    '"param":null,"code":"invalid_api_key"}}')
    unavailable = ('{"error":{"message":"No server of the pool could take the request. Retry '
                   f'after {retry_after_s} seconds.","type":"service_unavailable",'
                   '"param":null,"code":"pool_unavailable"}}')
    return f"""# bench/balancers.py: Debian's nginx as the fleet's balancer, for the comparison.
# Open-source nginx checks its servers passively only: a server whose connection
# fails or times out, or that answers 502/503/504, is left out for fail_timeout.
upstream vllm_fleet_bench_pool {{
    # The server with the fewest requests in flight (HAProxy's leastconn).
    least_conn;
{upstream}
    # Connections to the hosts are kept open (HAProxy reuses its own too).
    keepalive 16;
}}

# The fleet's client keys, checked here; the hosts get the balancer's own key.
map $http_authorization $vllm_fleet_bench_client {{
    default 0;
{keys}
}}

server {{
    listen {listen};
    default_type application/json;
    client_max_body_size 64m;

    location / {{
        if ($vllm_fleet_bench_client = 0) {{
            return 401;
        }}
        proxy_pass http://vllm_fleet_bench_pool;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Authorization "Bearer {upstream_key}";
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        # Streams pass as they come; the request body is read first (the default),
        # so a request can still go to the next server.
        proxy_buffering off;
        proxy_cache off;
        proxy_connect_timeout 2s;
        proxy_send_timeout 3600s;
        proxy_read_timeout 3600s;
        # A request no server took goes to the next one. nginx never passes on a POST
        # it has sent (non_idempotent is left out: a generation is not replayed, as in
        # HAProxy); 502/503/504 answers count as a server's failures.
        proxy_next_upstream error timeout http_502 http_503 http_504;
        proxy_next_upstream_tries 2;
        error_page 401 = @vllm_fleet_bench_unauthorized;
        error_page 502 504 = @vllm_fleet_bench_unavailable;
    }}

    location @vllm_fleet_bench_unauthorized {{
        add_header WWW-Authenticate 'Bearer realm="vllm-fleet"' always;
        return 401 '{unauthorized}';
    }}

    location @vllm_fleet_bench_unavailable {{
        add_header Retry-After {retry_after_s} always;
        return 503 '{unavailable}';
    }}
}}
"""


def router_argv(port, servers, upstream_key, policy="round_robin", host="0.0.0.0"):  # noqa: S104
    """vllm-router's command line before the pool, with checks as the lab's HAProxy's:
    GET /health every second, out after 3 failures, back after 2 passes."""
    return [f"{ROUTER_VENV}/bin/vllm-router", "--host", host, "--port", str(port),
            "--worker-urls", *servers, "--policy", policy, "--api-key", upstream_key,
            "--health-check-endpoint", "/health", "--health-check-interval-secs", "1",
            "--health-failure-threshold", "3", "--health-success-threshold", "2",
            "--health-check-timeout-secs", "2", "--worker-startup-check-interval", "1",
            "--log-level", "warning"]


def parse_hosts(items):
    """--host NAME=URL, in order: [(name, url)]."""
    hosts = []
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith("http://"):
            raise ValueError(f"--host {item!r}: wanted NAME=http://ADDRESS:PORT")
        hosts.append((name, url.rstrip("/")))
    return hosts


def rotations(names, rounds):
    """The targets' order in each round: each target goes first in turn."""
    return [names[r % len(names):] + names[:r % len(names)] for r in range(rounds)]


def streamed(probe):
    """A stream came as it was made: 2xx, [DONE], two chunks or more, the first before half time."""
    return (cutover.ok(probe["status"]) and probe["done"] and probe["chunks"] >= 2
            and probe["first_ms"] is not None and probe["first_ms"] <= probe["total_ms"] / 2)


def key_check(keys):
    """What the statuses of (wrong key, fleet's client key, hosts' key from a client) show."""
    wrong, client, hosts = keys["wrong"], keys["client"], keys["hosts"]
    if wrong == HTTP_UNAUTHORIZED and cutover.ok(client) and hosts == HTTP_UNAUTHORIZED:
        return "own"  # checks the client keys; the hosts' key stays behind it
    if client == HTTP_UNAUTHORIZED and cutover.ok(hosts):
        return "passes on"  # the client's key reaches the hosts, which check it
    return "unclear"


KEY_CHECK_WORDS = {"own": "own, hosts get theirs", "passes on": "none, passes key on",
                   "unclear": "unclear"}


def misses(row):
    """A candidate's failed checks, as messages (empty: correct on every check)."""
    if row["key"] is None:
        return [f"served no key the bench holds (wrong/client/hosts' key: {statuses(row)})"]
    missed = []
    if row["keys"]["wrong"] != HTTP_UNAUTHORIZED:
        missed.append(f"a wrong key answered {row['keys']['wrong']}")
    if row["key_check"] == "passes on":
        missed.append("checks no key: the client's key goes on to the hosts, so clients "
                      "must hold the hosts' key")
    elif row["key_check"] != "own":
        missed.append(f"keys unclear (wrong/client/hosts' key: {statuses(row)})")
    if not cutover.ok(row["alias"]):
        missed.append(f"the alias answered {row['alias']}")
    if not row["streamed"]:
        missed.append(f"the stream did not come as made ({row['stream']})")
    if row["latency_failed"]:
        missed.append(f"{row['latency_failed']} of {row['latency_sent']} latency requests failed")
    loss = row["loss"]
    if loss and loss["failed"]:
        missed.append(f"{loss['failed']} of {loss['sent']} requests failed while "
                      f"{loss['host']} was away ({', '.join(loss['examples'])})")
    if not row["drain"]["ok"]:
        missed.append("no runtime drain")
    return missed


def statuses(row):
    return "/".join(str(row["keys"][k]) for k in ("wrong", "client", "hosts"))


def verdict(rows):
    """Correctness first, then latency: the verdict line."""
    candidates = [r for r in rows if r["name"] != "direct"]
    correct = [r for r in candidates if not misses(r)]
    wrong = [f"{r['name']} ({'; '.join(misses(r))})" for r in candidates if misses(r)]
    if not correct:
        return "verdict: no candidate passed every check: " + "; ".join(wrong)
    best = min(correct, key=lambda r: (r["added_p50"] is None, r["added_p50"] or 0.0,
                                       r["added_p99"] or 0.0))
    why = ("the only candidate correct on every check" if len(correct) == 1 else
           "correct on every check, the lowest added latency")
    text = (f"verdict: keep {best['name']}: {why} "
            f"(p50 {signed(best['added_p50'])} ms, p99 {signed(best['added_p99'])} ms)")
    also = [f"{r['name']} (p50 {signed(r['added_p50'])} ms, p99 {signed(r['added_p99'])} ms)"
            for r in correct if r is not best]
    if also:
        text += "; also correct: " + ", ".join(also)
    if wrong:
        text += "; not correct: " + "; ".join(wrong)
    return text


def signed(ms):
    return "-" if ms is None else f"{ms:+.1f}"


def table(rows, served_name):
    """The comparison, one line a target, columns right-aligned under their headers."""
    header = ["candidate", "added p50 ms", "added p99 ms", "p50/p99 ms", "host loss failed",
              "stream", f"alias/{served_name}", "keys wrong/client/hosts'", "key check",
              "runtime drain"]
    lines = [header]
    for r in rows:
        direct = r["name"] == "direct"
        measured = r["p50"] is not None
        loss = r["loss"]
        lines.append([
            r["name"],
            "-" if direct else signed(r["added_p50"]),
            "-" if direct else signed(r["added_p99"]),
            f"{r['p50']:.1f}/{r['p99']:.1f}" if measured else "-",
            f"{loss['failed']} of {loss['sent']}" if loss else "-",
            "ok" if r["streamed"] else "NO",
            f"{r['alias']}/{r['served']}",
            statuses(r),
            "-" if direct else KEY_CHECK_WORDS.get(r["key_check"], r["key_check"]),
            "-" if direct else r["drain"]["short"],
        ])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                      for i, (cell, w) in enumerate(zip(line, widths, strict=True))).rstrip()
            for line in lines]


# ---- HTTP probes -------------------------------------------------------------------------

def request(base_url, method, path, body=None, key=None, timeout=60):
    """(status or None, body bytes) of one request with this bearer key."""
    url = urllib.parse.urlsplit(base_url)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return None, b""
    finally:
        conn.close()


def completion_status(base_url, model, key):
    return request(base_url, "POST", "/v1/completions",
                   {"model": model, "prompt": "Hello", "max_tokens": 1}, key)[0]


def stream_probe(base_url, model, key, max_tokens=32, timeout=60):
    """A streamed chat completion: status, data chunks, first chunk and [DONE] in ms."""
    url = urllib.parse.urlsplit(base_url)
    body = {"model": model, "messages": [{"role": "user", "content": "Count to twenty."}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    probe = {"status": None, "chunks": 0, "first_ms": None, "total_ms": None, "done": False}
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        probe["status"] = resp.status
        for line in iter(resp.readline, b""):
            if line.strip() == b"data: [DONE]":
                probe["done"] = True
                break
            if line.startswith(b"data:"):
                probe["chunks"] += 1
                if probe["first_ms"] is None:
                    probe["first_ms"] = round((time.perf_counter() - start) * 1000, 1)
    except (OSError, http.client.HTTPException) as exc:
        probe["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    probe["total_ms"] = round((time.perf_counter() - start) * 1000, 1)
    return probe


def wait_until(predicate, seconds, interval=0.5):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


@contextlib.contextmanager
def bearer(key):
    """cutover's client sends this key while the block runs."""
    before = cutover.HEADERS.get("Authorization")
    cutover.HEADERS["Authorization"] = f"Bearer {key}"
    try:
        yield
    finally:
        if before is None:
            cutover.HEADERS.pop("Authorization", None)
        else:
            cutover.HEADERS["Authorization"] = before


# ---- Runtime drain -----------------------------------------------------------------------

def haproxy_drain(run, socket_path, stats_url, pool, server, wait_s=30):
    """Drain `server` through HAProxy's runtime API (run: argv -> stdout, in the balancer's
    box), see it leave the pool's UP servers, make it ready again: {ok, short, how}."""
    before = fleet.pool_up(stats_url, pool) or []
    said = run(["python3", "-c", RUNTIME_SCRIPT, socket_path,
                f"set server {pool}/{server} state drain"]).strip()
    drained = fleet.pool_up(stats_url, pool) or []
    run(["python3", "-c", RUNTIME_SCRIPT, socket_path, f"set server {pool}/{server} state ready"])
    back = wait_until(lambda: server in (fleet.pool_up(stats_url, pool) or []), wait_s, 0.1)
    ok = server in before and server not in drained and back
    how = ("runtime API (set server <pool>/<server> state drain|ready): the stats showed "
           f"{server} out and back" if ok else
           f"runtime API: UP before {before}, drained {drained} ({said!r}), back {back}")
    return {"ok": ok, "short": "yes, runtime API" if ok else "NO", "how": how}


def router_workers(router_url):
    status, body = request(router_url, "GET", "/list_workers", timeout=10)
    return json.loads(body).get("urls", []) if status == 200 else None


def router_healthy(router_url):
    """The workers vllm-router's own checks hold healthy now (GET /workers), or None."""
    status, body = request(router_url, "GET", "/workers", timeout=10)
    if status != 200:
        return None
    return sorted(w["url"] for w in json.loads(body).get("workers", []) if w.get("is_healthy"))


def router_drain(router_url, worker_url, wait_s=30):
    """Remove the worker from vllm-router at runtime and add it back: {ok, short, how}."""
    query = urllib.parse.urlencode({"url": worker_url})
    before = router_workers(router_url) or []
    removed, _body = request(router_url, "POST", f"/remove_worker?{query}", timeout=10)
    after = router_workers(router_url) or []
    added, _body = request(router_url, "POST", f"/add_worker?{query}", timeout=wait_s)
    back = wait_until(lambda: worker_url in (router_workers(router_url) or []), wait_s)
    ok = worker_url in before and worker_url not in after and back
    how = ("POST /remove_worker and /add_worker?url= (answered to anyone who reaches the "
           "port): the worker left the list and came back; no drain state, its requests in "
           "flight are not shown once removed" if ok else
           f"remove_worker {removed}, add_worker {added}: listed before {before}, after {after}, "
           f"back {back}")
    return {"ok": ok, "short": "remove/add (HTTP)" if ok else "NO", "how": how}


# ---- The balancer container --------------------------------------------------------------

def docker(*args, input_text=None, check=True):
    done = subprocess.run(["docker", *args], input=input_text, capture_output=True, text=True,
                          check=False)
    if check and done.returncode:
        # the first words only: a command line may hold a key
        raise RuntimeError(f"docker {' '.join(args[:4])} ...: rc {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
    return done


def setup_nginx(container, text):
    """Debian's nginx in the balancer container, with only this site."""
    docker("exec", container, "sh", "-c",
           "command -v nginx >/dev/null || { export DEBIAN_FRONTEND=noninteractive; "
           "apt-get install -y -q --no-install-recommends nginx || "
           "{ apt-get update -q && apt-get install -y -q --no-install-recommends nginx; }; }")
    docker("exec", "-i", container, "sh", "-c",
           f"umask 077 && cat > {NGINX_SITE} && rm -f /etc/nginx/sites-enabled/default",
           input_text=text)
    docker("exec", container, "nginx", "-t")
    docker("exec", container, "systemctl", "restart", "nginx")


def setup_router(container, version, argv):
    """vllm-router from its PyPI wheel in a venv in the container; (re)started as a unit."""
    present = docker("exec", container, f"{ROUTER_VENV}/bin/python", "-c",
                     "from vllm_router.version import __version__; print(__version__)",
                     check=False)
    if present.returncode or present.stdout.strip() != version:
        wheelhouse = ROOT / ".cache" / "wheelhouse" / f"vllm-router-{version}"
        if not any(wheelhouse.glob("vllm_router-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                            "-d", str(wheelhouse), f"vllm-router=={version}"], check=True)
        docker("exec", container, "mkdir", "-p", ROUTER_WHEELS)
        docker("cp", f"{wheelhouse}/.", f"{container}:{ROUTER_WHEELS}")
        docker("exec", container, "python3", "-m", "venv", ROUTER_VENV)
        docker("exec", container, f"{ROUTER_VENV}/bin/pip", "install", "-q", "--no-index",
               "--find-links", ROUTER_WHEELS, f"vllm-router=={version}")
    docker("exec", container, "systemctl", "stop", ROUTER_UNIT, check=False)
    docker("exec", container, "systemd-run", "--unit", ROUTER_UNIT, "--collect", *argv)


def versions(container):
    def first_line(*argv):
        done = docker("exec", container, *argv, check=False)
        return ((done.stdout or done.stderr).strip().splitlines() or ["?"])[0]
    return {"haproxy": first_line("haproxy", "-v"), "nginx": first_line("nginx", "-v"),
            "vllm-router": first_line(f"{ROUTER_VENV}/bin/python", "-c",
                                      "from vllm_router.version import __version__ as v; "
                                      "print('vllm-router', v)")}


def teardown(container):
    docker("exec", container, "systemctl", "stop", ROUTER_UNIT, check=False)
    docker("exec", container, "rm", "-f", NGINX_SITE, check=False)
    docker("exec", container, "systemctl", "stop", "nginx", check=False)


# ---- The measurements --------------------------------------------------------------------

def correctness(target, args):
    """Keys, the alias and the served name, a stream: the target's row so far."""
    keys = {"wrong": completion_status(target["url"], args.alias, WRONG_KEY),
            "client": completion_status(target["url"], args.alias, args.api_key),
            "hosts": completion_status(target["url"], args.alias, args.upstream_key)}
    key = (args.api_key if cutover.ok(keys["client"]) else
           args.upstream_key if cutover.ok(keys["hosts"]) else None)
    row = {"name": target["name"], "url": target["url"], "keys": keys,
           "key": None if key is None else ("client" if key == args.api_key else "hosts"),
           "key_check": key_check(keys), "alias": None, "served": None,
           "stream": {}, "streamed": False, "p50": None, "p99": None, "added_p50": None,
           "added_p99": None, "latency_sent": 0, "latency_failed": 0, "loss": None,
           "drain": {"ok": None, "short": "-", "how": ""}}
    if key is not None:
        target["key"] = key
        row["alias"] = completion_status(target["url"], args.alias, key)
        row["served"] = completion_status(target["url"], args.served_name, key)
        row["stream"] = stream_probe(target["url"], args.alias, key)
        row["streamed"] = streamed(row["stream"])
    return row


def measure_latency(targets, rows, args):
    """Small completions to every target in interleaved rounds; p50/p99 and added ms."""
    live = [t for t in targets if t.get("key")]
    by_name = {t["name"]: t for t in live}
    samples = {t["name"]: [] for t in live}
    per_round = max(1, args.latency_requests // args.rounds)
    for order in rotations([t["name"] for t in live], args.rounds):
        for name in order:
            with bearer(by_name[name]["key"]):
                samples[name].extend(cutover.latency_samples(by_name[name]["url"], args.alias,
                                                             per_round))
    for row in rows:
        if row["name"] in samples and samples[row["name"]]:
            taken = samples[row["name"]]
            row["p50"], row["p99"] = (round(v, 1) for v in
                                      cutover.percentiles([ms for ms, _st in taken]))
            row["latency_sent"] = len(taken)
            row["latency_failed"] = sum(1 for _ms, st in taken if not cutover.ok(st))
    direct = next(r for r in rows if r["name"] == "direct")
    for row in rows:
        if row["p50"] is not None and direct["p50"] is not None:
            row["added_p50"] = round(row["p50"] - direct["p50"], 1)
            row["added_p99"] = round(row["p99"] - direct["p99"], 1)


def host_loss(target, args, lost_name):
    """Load through the target; the lost host's front door stops for --down seconds."""
    load = cutover.Load(target["url"], threads=args.threads, model=args.alias,
                        max_seconds=args.before + args.down + args.after + 120,
                        pause_s=args.pause)
    with bearer(target["key"]):
        load.start()
        time.sleep(args.before)
        down_at = time.monotonic()
        try:
            docker("exec", lost_name, "systemctl", "stop", "nginx")
            time.sleep(args.down)
        finally:
            docker("exec", lost_name, "systemctl", "start", "nginx")
            up_at = time.monotonic()
        time.sleep(args.after)
        load.stop()
    bad = [r for r in load.results if cutover.failed(r)]
    return {"host": lost_name, "sent": len(load.results), "failed": len(bad),
            "failed_while_down": sum(1 for r in bad if down_at <= r["start"] < up_at),
            "examples": sorted({str(r.get("error") or r["status"]) for r in bad})[:5],
            "down_s": round(up_at - down_at, 1)}


def measure(args, hosts, lost):
    """Set the candidates up, measure every target; (rows, versions)."""
    container = args.balancer_container
    address = urllib.parse.urlsplit(args.balancer).hostname
    nginx_url = f"http://{address}:{args.nginx_port}"
    router_url = f"http://{address}:{args.router_port}"
    servers = [url for _name, url in hosts]
    lost_url = dict(hosts)[lost]
    setup_nginx(container, nginx_conf(args.nginx_port, servers, [args.api_key], args.upstream_key))
    setup_router(container, args.router_version,
                 router_argv(args.router_port, servers, args.upstream_key, args.router_policy))
    for name, url in (("nginx", nginx_url), ("vllm-router", router_url)):
        if not wait_until(lambda u=url: request(u, "GET", "/health", timeout=5)[0] is not None,
                          120):
            raise RuntimeError(f"{name} did not answer at {url}")
    targets = [{"name": "direct", "url": servers[0]},
               {"name": "haproxy", "url": args.balancer},
               {"name": "nginx", "url": nginx_url},
               {"name": "vllm-router", "url": router_url}]
    rows = [correctness(t, args) for t in targets]
    measure_latency(targets, rows, args)
    by_name = {r["name"]: r for r in rows}

    def in_balancer(argv):
        return docker("exec", container, *argv).stdout

    def nginx_back():
        time.sleep(NGINX_FAIL_TIMEOUT_S)  # no view of its servers: it tries one again after this
        return True

    by_name["haproxy"]["drain"] = haproxy_drain(in_balancer, HAPROXY_SOCKET, args.stats,
                                                args.pool, lost)
    by_name["nginx"]["drain"] = {"ok": False, "short": "no (reload)", "how": NGINX_DRAIN}
    by_name["vllm-router"]["drain"] = router_drain(router_url, lost_url)
    # Each candidate's own view that the lost host is back, before the next one's turn.
    back = {"haproxy": lambda: lost in (fleet.pool_up(args.stats, args.pool) or []),
            "nginx": nginx_back,
            "vllm-router": lambda: lost_url in (router_healthy(router_url) or [])}
    for target in targets[1:]:
        if not target.get("key"):
            continue
        by_name[target["name"]]["loss"] = host_loss(target, args, lost)
        if not (wait_until(lambda: healthy(lost_url), 120)
                and wait_until(back[target["name"]], 60)):
            print(f"warning: {lost} was not back at {target['name']} within 3 minutes")
    return rows, versions(container)


def healthy(url):
    return request(url, "GET", "/health", timeout=5)[0] == 200


def report(rows, found, args, hosts, lost):
    print(f"{found['haproxy']}; {found['nginx']}; {found['vllm-router']}; "
          f"direct = {hosts[0][0]}'s front door")
    print(f"requests name {args.alias!r}; failed = every answer that is not 2xx and every "
          "request without one")
    print(f"latency: small completions (max_tokens 1), a new connection each, "
          f"{args.latency_requests} a target in {args.rounds} interleaved rounds")
    print(f"host loss: {args.threads} clients {args.pause} s apart (every 4th streaming); "
          f"{lost}'s front door stopped after {args.before:.0f} s for {args.down:.0f} s, "
          f"then {args.after:.0f} s more")
    for line in table(rows, args.served_name):
        print(line)
    for row in rows:
        stream = row["stream"]
        notes = [(f"stream {stream.get('chunks')} chunks, the first at "
                  f"{stream.get('first_ms')} of {stream.get('total_ms')} ms")]
        if row["key"]:
            notes.append(f"the load sent the {row['key']} key")
        if row["name"] != "direct":
            notes.append(f"drain: {row['drain']['how']}")
        print(f"  {row['name']}: " + "; ".join(notes))
        if row["name"] != "direct":
            for missed in misses(row):
                print(f"    MISSED: {missed}")
        elif row["latency_failed"] or not row["key"]:
            print(f"    the direct path failed: {row['latency_failed']} of {row['latency_sent']} "
                  f"latency requests, keys {statuses(row)}: the added figures mean nothing")
    return verdict(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--balancer-container", required=True,
                        help="the container the balancer runs in (docker exec)")
    parser.add_argument("--balancer", required=True, help="HAProxy's base URL (the role's)")
    parser.add_argument("--stats", required=True, help="HAProxy's stats CSV URL")
    parser.add_argument("--pool", default="default", help="the hosts' pool at HAProxy")
    parser.add_argument("--host", action="append", required=True, metavar="NAME=URL",
                        help="a host of the pool: its container (and HAProxy server) name and "
                             "its front door; the first is also the direct path")
    parser.add_argument("--lose", help="the host whose front door stops (default: the last)")
    parser.add_argument("--nginx-port", type=int, default=8001)
    parser.add_argument("--router-port", type=int, default=8002)
    parser.add_argument("--router-version", default="0.1.17")
    parser.add_argument("--router-policy", default="round_robin",
                        help="vllm-router's policy (its docs: round_robin for stateless "
                             "requests; cache_aware would send the bench's one prompt to one host)")
    parser.add_argument("--alias", default="default", help="the pool's alias")
    parser.add_argument("--served-name", default="tiny-gqa", help="the hosts' served model name")
    parser.add_argument("--api-key", default=os.environ.get("VLLM_FLEET_API_KEY", ""),
                        help="the fleet's client key (default: $VLLM_FLEET_API_KEY)")
    parser.add_argument("--upstream-key", required=True,
                        help="the key the hosts' front doors accept (the balancer's own)")
    parser.add_argument("--latency-requests", type=int, default=200, help="per target")
    parser.add_argument("--rounds", type=int, default=10, help="latency rounds, interleaved")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pause", type=float, default=0.2,
                        help="each client's wait between requests, seconds")
    parser.add_argument("--before", type=float, default=10.0, help="load seconds before the loss")
    parser.add_argument("--down", type=float, default=20.0, help="seconds the host stays away")
    parser.add_argument("--after", type=float, default=15.0, help="load seconds after it is back")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--keep", action="store_true",
                        help="leave nginx and vllm-router running in the container")
    args = parser.parse_args()
    if not args.api_key:
        parser.error("--api-key (or $VLLM_FLEET_API_KEY) is needed: the fleet's client key")
    try:
        hosts = parse_hosts(args.host)
    except ValueError as exc:
        parser.error(str(exc))
    lost = args.lose or hosts[-1][0]
    if lost not in dict(hosts) or lost == hosts[0][0]:
        parser.error(f"--lose {lost}: wanted a host of --host other than the first")
    for name, url in hosts:
        if not wait_until(lambda u=url: healthy(u), 60):
            sys.exit(f"{name}'s front door {url}/health did not answer 200")
    try:
        rows, found = measure(args, hosts, lost)
    finally:
        if not args.keep:
            teardown(args.balancer_container)
    result = report(rows, found, args, hosts, lost)
    print(result)
    if args.json:
        Path(args.json).write_text(json.dumps({"versions": found, "rows": rows,
                                               "verdict": result}, indent=2) + "\n",
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
