# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 14: the fleet balancer, Debian's real HAProxy running the role's own configuration.

tests/haproxy_balancer.py renders roles/vllm_balancer/templates/haproxy.cfg.j2 (and the keys
files) as Ansible does and runs haproxy in the foreground on a free loopback port, its runtime
socket in tmp_path. Behind it, small stdlib HTTP servers stand in for the hosts' front doors
(nginx on vllm_frontdoor_port): two in the pool "default", one in the pool "kimi". They answer
/health without a key, say which host and pool they are, and keep every request's headers.
Drain and ready go through the role's own tasks_from: server (community.general.haproxy)
under ansible-playbook. Waits are bounded; none decides a pass: where timing matters the test
holds the stand-in (a request in flight, the next chunk of a stream) until it has looked.
"""

import http.client
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from haproxy_balancer import HAVE_HAPROXY, balancer, check_config, write_config
from repo_paths import ROOT

pytestmark = pytest.mark.skipif(
    not HAVE_HAPROXY,
    reason="haproxy is not installed (apt-get install -y --no-install-recommends haproxy)",
)

KEY = "client-key-for-the-balancer-0123"
OTHER = "second-client-key-abcdefghijkl"
UPSTREAM = "balancer-upstream-key-0123456789"
INTER_MS, FALL, RISE, ERROR_LIMIT = 100, 3, 2, 3
WAIT_S = 15  # bound on every wait for a state; never reached when things work


class FrontDoor(ThreadingHTTPServer):
    """Stands in for one host's front door: /health without a key (200, or 503 as the front
    door answers while its model does not), the OpenAI paths answering which host and pool
    they are. Every request is kept with its headers; health checks apart."""

    daemon_threads = True

    def __init__(self, name, pool):
        super().__init__(("127.0.0.1", 0), Handler)
        self.name, self.pool = name, pool
        self.healthy = True  # /health answers 200, else 503
        self.failing = False  # requests answer 500
        self.hold = None  # a threading.Event a request waits for before it answers
        self.arrived = threading.Event()
        self.gate = queue.Queue()  # a gated stream sends its next chunk on each item
        self.seen = []  # (method, path, headers) of requests
        self.checks = []  # (status answered, Authorization) of health checks

    @property
    def port(self):
        return self.server_address[1]

    def handle_error(self, request, client_address):
        """HAProxy closes a check's connection as soon as it has the status line."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _headers(self):
        """Names in lower case, as HAProxy writes them."""
        return {name.lower(): value for name, value in self.headers.items()}

    def _me(self, **extra):
        door = self.server
        return {"host": door.name, "pool": door.pool, **extra}

    def do_GET(self):
        door = self.server
        if self.path == "/health":
            status = 200 if door.healthy else 503
            door.checks.append((status, self.headers.get("authorization")))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        door.seen.append(("GET", self.path, self._headers()))
        self._send(200, self._me(object="list", data=[{"id": door.pool}]))

    def do_POST(self):
        door = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        door.seen.append(("POST", self.path, self._headers()))
        if door.failing:
            self._send(500, {"error": {"message": "EngineCore died", "host": door.name}})
            return
        if door.hold is not None:
            door.arrived.set()
            door.hold.wait(WAIT_S)
        if body.get("stream"):
            self._stream(body)
            return
        self._send(200, self._me(model=body.get("model")))

    def _stream(self, body):
        """Server-sent events, chunked, as vLLM streams them: gated (each chunk after the
        first waits for the test) or spaced (x_spacing seconds apart)."""
        door = self.server
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(body["x_chunks"]):
            if i and body.get("x_gated"):
                door.gate.get(timeout=WAIT_S)
            elif i:
                time.sleep(body["x_spacing"])
            event = f"data: {json.dumps(self._me(chunk=i))}\n\n".encode()
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        event = b"data: [DONE]\n\n"
        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n0\r\n\r\n")


@pytest.fixture
def doors():
    made = {name: FrontDoor(name, pool)
            for name, pool in (("a1", "default"), ("a2", "default"), ("b1", "kimi"))}
    for door in made.values():
        threading.Thread(target=door.serve_forever, args=(0.05,), daemon=True).start()
    yield made
    for door in made.values():
        if door.hold is not None:
            door.hold.set()
        door.shutdown()
        door.server_close()


def pools_of(doors):
    pools = {}
    for door in doors.values():
        pools.setdefault(door.pool, []).append(
            {"name": door.name, "address": "127.0.0.1", "port": door.port})
    return pools


def settings(doors, **overrides):
    values = {
        "vllm_balancer_pools": pools_of(doors),
        "vllm_balancer_api_keys": [KEY, OTHER],
        "vllm_balancer_upstream_key": UPSTREAM,
        "vllm_balancer_check_interval_ms": INTER_MS,
        "vllm_balancer_check_fall": FALL,
        "vllm_balancer_check_rise": RISE,
        "vllm_balancer_error_limit": ERROR_LIMIT,
        "vllm_balancer_log_target": "stdout format raw",
    }
    values.update(overrides)
    return values


def call(url, path, key=None, payload=None, data=None, timeout=10):
    """(status, headers, body text) of one request to the balancer. Headers are read
    case-insensitively: HAProxy writes their names in lower case."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = key if " " in key else f"Bearer {key}"
    if payload is not None:
        data = json.dumps(payload).encode()
    req = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def chat(model, **extra):
    return {"messages": [{"role": "user", "content": "hi"}], "model": model, **extra}


def wait_for(check, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.01)
    return found


def status_of(bal, pool, server):
    return bal.runtime.stat(pool, server)["status"]


def hosts_of(answers):
    return [json.loads(body)["host"] for _status, _headers, body in answers]


def error_of(answer):
    _status, headers, body = answer
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)["error"]


def test_no_key_or_a_wrong_key_gets_401_in_openais_shape_and_never_reaches_a_host(
        tmp_path, doors):
    with balancer(tmp_path, **settings(doors)) as bal:
        answers = [call(bal.url, "/v1/models"),
                   call(bal.url, "/v1/chat/completions", None, chat("default")),
                   call(bal.url, "/v1/chat/completions", "not-a-key-at-all-000000", chat("kimi")),
                   call(bal.url, "/v1/models", KEY.upper()),  # keys are case-sensitive
                   call(bal.url, "/v1/models", KEY[:-1]),
                   call(bal.url, "/v1/models", KEY + "4"),
                   call(bal.url, "/v1/models", f"Basic {KEY}")]
        health = call(bal.url, "/health")
    for answer in answers:
        assert answer[0] == 401
        assert answer[1]["WWW-Authenticate"] == 'Bearer realm="vllm-fleet"'
        assert error_of(answer) == {
            "message": "Incorrect or missing API key. Send it as: Authorization: Bearer <key>.",
            "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
    assert [door.seen for door in doors.values()] == [[], [], []]
    # The balancer's own health needs no key: the healthy servers of each pool.
    assert health[0] == 200
    assert json.loads(health[2]) == {"status": "ok", "pools": {"default": 2, "kimi": 1}}


def test_the_bodys_model_picks_the_pool_and_the_hosts_see_the_balancers_key(tmp_path, doors):
    with balancer(tmp_path, **settings(doors)) as bal:
        to_default = [call(bal.url, "/v1/chat/completions", KEY, chat("default"))
                      for _n in range(6)]
        to_kimi = [call(bal.url, "/v1/completions", OTHER, {"prompt": "hi", "model": "kimi"})
                   for _n in range(3)]
        models = call(bal.url, "/v1/models", KEY)
        log = (bal.folder / "haproxy.log").read_text()
    assert [a[0] for a in to_default + to_kimi] == [200] * 9
    assert set(hosts_of(to_default)) == {"a1", "a2"}  # both, least requests in flight
    assert hosts_of(to_kimi) == ["b1"] * 3
    assert json.loads(to_kimi[0][2]) == {"host": "b1", "pool": "kimi", "model": "kimi"}
    # No model in the body: GET /v1/models goes to the default pool.
    assert models[0] == 200
    assert json.loads(models[2])["data"] == [{"id": "default"}]
    assert json.loads(models[2])["host"] in {"a1", "a2"}
    # The client's key stops at the balancer; the hosts get the balancer's own.
    seen = [h for door in doors.values() for _m, _p, h in door.seen]
    assert len(seen) == 10
    assert {h["authorization"] for h in seen} == {f"Bearer {UPSTREAM}"}
    # The log has the requests and no key.
    assert log.count("POST /v1/chat/completions") == 6
    for key in (KEY, OTHER, UPSTREAM):
        assert key not in log


def test_a_model_no_pool_serves_gets_404_naming_it_and_the_pools(tmp_path, doors):
    with balancer(tmp_path, **settings(doors)) as bal:
        unknown = call(bal.url, "/v1/chat/completions", KEY, chat("gpt-4o"))
        odd = call(bal.url, "/v1/chat/completions", KEY, chat('we"ird\\name'))
        none = call(bal.url, "/v1/chat/completions", KEY, {"messages": []})
        not_json = call(bal.url, "/v1/completions", KEY, data=b"model=default")
    assert [a[0] for a in (unknown, odd, none, not_json)] == [404] * 4
    assert error_of(unknown) == {
        "message": ("The model `gpt-4o` does not exist at this balancer. "
                    "Its models (pools): default, kimi."),
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    # The model is escaped into the JSON, not pasted.
    assert error_of(odd)["message"].startswith('The model `we"ird\\name` does not exist')
    for answer in (none, not_json):
        assert error_of(answer) == {
            "message": ('The request names no model. This balancer routes by the "model" of the '
                        "JSON body; its models (pools): default, kimi."),
            "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    assert [door.seen for door in doors.values()] == [[], [], []]


def test_a_body_larger_than_the_buffer_gets_413_not_a_wrong_404(tmp_path, doors):
    """OpenAI clients put `model` after `messages`: a body past the buffer has lost it."""
    long_prompt = chat("kimi")
    long_prompt["messages"][0]["content"] = "x" * 64 * 1024
    fits = chat("kimi")
    fits["messages"][0]["content"] = "x" * 8 * 1024
    with balancer(tmp_path, **settings(doors, vllm_balancer_buffer_bytes=16384)) as bal:
        too_big = call(bal.url, "/v1/chat/completions", KEY, long_prompt)
        routed = call(bal.url, "/v1/chat/completions", KEY, fits)
    assert too_big[0] == 413
    error = error_of(too_big)
    size = len(json.dumps(long_prompt).encode())
    assert error["code"] == "request_too_large"
    assert error["message"].startswith(f"The request body ({size} bytes) is larger than the "
                                       "balancer reads to find its model (")
    assert routed[0] == 200
    assert hosts_of([routed]) == ["b1"]


def test_a_body_past_the_buffer_gets_413_with_model_first_too(tmp_path, doors):
    """Issue 46 case 6: a body with `model` before `messages` was routed by it and sent on
    whole (8 MB -> 200), past the limit the buffer sets; field order decides nothing now."""
    first = {"model": "kimi", "messages": [{"role": "user", "content": "x" * 64 * 1024}]}
    assert json.dumps(first).index('"model"') == 1
    with balancer(tmp_path, **settings(doors, vllm_balancer_buffer_bytes=16384)) as bal:
        too_big = call(bal.url, "/v1/chat/completions", KEY, first)
    assert too_big[0] == 413
    assert error_of(too_big)["code"] == "request_too_large"
    assert [door.seen for door in doors.values()] == [[], [], []]


def test_a_pool_without_a_healthy_server_answers_503_with_retry_after(tmp_path, doors):
    with balancer(tmp_path, **settings(doors)) as bal:
        doors["b1"].healthy = False
        wait_for(lambda: status_of(bal, "kimi", "b1") == "DOWN", "kimi/b1 DOWN")
        answers = [call(bal.url, "/v1/chat/completions", KEY, chat("kimi", stream=True)),
                   call(bal.url, "/v1/completions", KEY, {"model": "kimi", "prompt": "hi"})]
        health = call(bal.url, "/health")
        other = call(bal.url, "/v1/chat/completions", KEY, chat("default"))
        metrics = call(bal.stats_url, "/metrics")[2].splitlines()
        csv_rows = call(bal.stats_url, "/stats;csv")[2]
    for answer in answers:
        assert answer[0] == 503
        assert answer[1]["Retry-After"] == "30"
        assert error_of(answer) == {
            "message": "No healthy server in pool kimi. Retry after 30 seconds.",
            "type": "service_unavailable", "param": None, "code": "pool_unavailable"}
    assert doors["b1"].seen == []
    assert json.loads(health[2])["pools"] == {"default": 2, "kimi": 0}
    assert other[0] == 200  # the other pool still serves
    # The read-only stats say so too: Prometheus and the table tasks_from: server reads.
    assert 'haproxy_backend_active_servers{proxy="kimi"} 0' in metrics
    assert 'haproxy_backend_active_servers{proxy="default"} 2' in metrics
    assert "kimi,b1,0,0,0," in csv_rows


def test_active_checks_take_a_server_out_after_fall_and_back_after_rise(tmp_path, doors):
    a1 = doors["a1"]
    with balancer(tmp_path, **settings(doors)) as bal:
        wait_for(lambda: len(a1.checks) >= 2, "a1's first checks")
        start = time.monotonic()
        a1.healthy = False
        wait_for(lambda: status_of(bal, "default", "a1") == "DOWN", "default/a1 DOWN")
        down_s = time.monotonic() - start
        row = bal.runtime.stat("default", "a1")
        while_down = [call(bal.url, "/v1/chat/completions", KEY, chat("default"))
                      for _n in range(6)]
        passes_before = sum(1 for status, _a in a1.checks if status == 200)
        start = time.monotonic()
        a1.healthy = True
        wait_for(lambda: status_of(bal, "default", "a1") == "UP", "default/a1 UP")
        up_s = time.monotonic() - start
        passes = sum(1 for status, _a in a1.checks if status == 200) - passes_before
        after = [call(bal.url, "/v1/chat/completions", KEY, chat("default")) for _n in range(6)]
    print(f"\nchecks every {INTER_MS} ms: DOWN {down_s:.3f} s after /health failed "
          f"(fall {FALL}), UP {up_s:.3f} s after it passed again (rise {RISE})")
    # HAProxy counts failed checks only while a server is up: exactly `fall` of them.
    assert row["chkfail"] == str(FALL)
    assert row["chkdown"] == "1"
    assert row["check_status"] == "L7STS"
    assert row["check_code"] == "503"
    assert down_s >= (FALL - 1) * INTER_MS / 1000
    assert up_s >= (RISE - 1) * INTER_MS / 1000
    assert passes >= RISE
    assert hosts_of(while_down) == ["a2"] * 6
    assert "a1" in hosts_of(after)


def test_answers_that_fail_take_a_server_out_at_the_error_limit(tmp_path, doors):
    """Passive: `observe layer7` counts 5xx answers to clients' requests in a row.

    An active check that passes clears HAProxy's count of errors in a row (src/check.c,
    set_server_check_status: `clear consecutive_errors if observing is enabled`), so with
    checks every 100 ms one could land between the answers (1 run in about 30 under load,
    2026-12-03). Here the active checks are a minute apart: HAProxy spreads the first
    ones over the interval, so none runs while the three requests are answered.
    """
    b1 = doors["b1"]
    b1.failing = True
    with balancer(tmp_path, **settings(doors, vllm_balancer_check_interval_ms=60000)) as bal:
        below = [call(bal.url, "/v1/completions", KEY, {"model": "kimi", "prompt": "hi"})
                 for _n in range(ERROR_LIMIT - 1)]
        row_below = bal.runtime.stat("kimi", "b1")
        at = call(bal.url, "/v1/completions", KEY, {"model": "kimi", "prompt": "hi"})
        row_at = bal.runtime.stat("kimi", "b1")
        log = (bal.folder / "haproxy.log").read_text()
    assert [a[0] for a in [*below, at]] == [500] * ERROR_LIMIT
    assert json.loads(at[2])["error"]["host"] == "b1"  # the host's own answer, passed on
    assert (row_below["chkdown"], row_at["chkdown"]) == ("0", "1"), (dict(row_at), log)
    # "UP 1/3": up, no active check has passed yet (the first is up to a minute away)
    assert (row_below["status"].split()[0], row_at["status"]) == ("UP", "DOWN")
    assert "Server kimi/b1 is DOWN, reason: Health analyze" in log


def test_an_sse_stream_passes_chunk_by_chunk(tmp_path, doors):
    b1 = doors["b1"]
    chunks = 7
    with balancer(tmp_path, **settings(doors)) as bal:
        port = int(bal.url.rsplit(":", 1)[1])
        # Gated: the stand-in sends chunk i+1 only once the client has read chunk i through
        # the balancer. A balancer that buffered would never deliver chunk 0.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps(chat("kimi", stream=True, x_chunks=chunks, x_gated=True))
        conn.request("POST", "/v1/chat/completions", body,
                     {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        status, ctype = resp.status, resp.getheader("Content-Type")
        gated, latency, released = [], [], 0.0
        for i in range(chunks):
            line = resp.readline()
            assert line.startswith(b"data: "), line
            arrived = time.monotonic()
            gated.append(json.loads(line[6:])["chunk"])
            if i:
                latency.append(arrived - released)
            assert resp.readline() == b"\n"
            released = time.monotonic()
            if i < chunks - 1:
                b1.gate.put(i + 1)
        assert resp.read() == b"data: [DONE]\n\n"
        conn.close()
        # Spaced: 200 ms between chunks at the stand-in; the client sees them apart.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps(chat("kimi", stream=True, x_chunks=chunks, x_spacing=0.2))
        conn.request("POST", "/v1/chat/completions", body,
                     {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        times = []
        while (line := resp.readline()) not in (b"", b"data: [DONE]\n"):
            if line.startswith(b"data: "):
                times.append(time.monotonic())
        conn.close()
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    latency.sort()
    median = latency[len(latency) // 2]
    print(f"\ngated stream: chunks delivered {median * 1000:.1f} ms (median), "
          f"{latency[-1] * 1000:.1f} ms (max) after their release; spaced stream (200 ms "
          f"apart): gaps {gaps} s")
    assert (status, ctype) == (200, "text/event-stream")
    assert gated == list(range(chunks))
    # Without `option http-no-delay` HAProxy holds each chunk back to fill a packet: about
    # 200 ms per chunk here (measured 208 and 212 ms), and chunks pair up (gaps 0.0 / 0.4 s).
    assert median < 0.1
    assert len(times) == chunks
    assert times[-1] - times[0] >= 0.4  # 0.8 s at the stand-in; buffered would be ~0


PLAY = """
- name: Drain or ready servers at the balancer
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Change each server
      ansible.builtin.include_role:
        name: vllm_fleet.fleet.vllm_balancer
        tasks_from: server
      vars:
        vllm_balancer_server_pool: "{{ item.split('/')[0] }}"
        vllm_balancer_server_name: "{{ item.split('/')[1] }}"
        vllm_balancer_server_state: "{{ item.split('/')[2] }}"
      loop: %s
"""


def playbook(tmp_path, bal, changes, text=None, extra=()):
    """ansible-playbook running the role's tasks_from: server for each pool/server/state
    (or the play `text`, with `extra` -e values as JSON)."""
    play = tmp_path / f"play-{len(list(tmp_path.glob('play-*')))}.yml"
    play.write_text(text or PLAY % json.dumps(changes))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_COLLECTIONS_PATH=f"{ROOT / 'collections'}:{ROOT / '.cache' / 'collections'}")
    values = bal.values
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"vllm_balancer_socket={values['vllm_balancer_socket']}",
         "-e", f"vllm_balancer_stats_port={values['vllm_balancer_stats_port']}",
         "-e", f"vllm_balancer_listen={values['vllm_balancer_listen']}",
         "-e", f"vllm_balancer_port={values['vllm_balancer_port']}",
         "-e", "vllm_balancer_drain_poll_s=1", "-e", "vllm_balancer_drain_timeout_s=60",
         *[arg for value in extra for arg in ("-e", json.dumps(value))],
         str(play)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(proc, timeout=120):
    out = proc.communicate(timeout=timeout)[0]
    return proc.returncode, out


def test_a_drained_server_gets_no_new_request_and_finishes_the_one_in_flight(tmp_path, doors):
    """The role's tasks_from: server, through community.general.haproxy and the socket."""
    for door in doors.values():
        door.hold = threading.Event()
    with balancer(tmp_path, **settings(doors)) as bal:
        in_flight = queue.Queue()
        threading.Thread(target=lambda: in_flight.put(
            call(bal.url, "/v1/chat/completions", KEY, chat("default"), timeout=60)),
            daemon=True).start()
        busy = wait_for(lambda: next((d for d in doors.values() if d.arrived.is_set()), None),
                        "the request in flight at a host")
        idle = doors["a2" if busy.name == "a1" else "a1"]
        idle.hold.set()
        drain = playbook(tmp_path, bal, [f"default/{busy.name}/drained"])
        wait_for(lambda: status_of(bal, "default", busy.name) == "DRAIN", "the server in DRAIN",
                 timeout=120)  # ansible-playbook's start
        during = [call(bal.url, "/v1/chat/completions", KEY, chat("default")) for _n in range(6)]
        row = bal.runtime.stat("default", busy.name)
        still_draining = drain.poll() is None
        busy.hold.set()
        done = in_flight.get(timeout=WAIT_S)
        drained_rc, drained_out = finish(drain)
        after_drain = status_of(bal, "default", busy.name)
        # Again (nothing to do), a server that is down (maintenance at once), then ready twice.
        doors["b1"].healthy = False
        wait_for(lambda: status_of(bal, "kimi", "b1") == "DOWN", "kimi/b1 DOWN")
        rc, out = finish(playbook(tmp_path, bal, [
            f"default/{busy.name}/drained", "kimi/b1/drained",
            f"default/{busy.name}/ready", f"default/{busy.name}/ready"]))
        # Out of maintenance HAProxy counts the server up at once ("UP 1/3"), fully after a check.
        wait_for(lambda: status_of(bal, "default", busy.name) == "UP", "the ready server UP")
        states = (status_of(bal, "default", busy.name), status_of(bal, "kimi", "b1"))
        after = [call(bal.url, "/v1/chat/completions", KEY, chat("default")) for _n in range(6)]
    assert drained_rc == 0, drained_out[-3000:]
    assert rc == 0, out[-3000:]
    assert still_draining  # the drain waited for the request in flight ...
    assert row["scur"] == "1"
    assert done[0] == 200  # ... which finished, answered by the drained server
    assert json.loads(done[2])["host"] == busy.name
    assert hosts_of(during) == [idle.name] * 6  # no new request went to it
    assert after_drain == "MAINT"
    assert "changed=1" in drained_out
    assert "changed=2" in out  # kimi/b1 to maintenance, the server ready; the rest no-ops
    assert states == ("UP", "MAINT")
    assert busy.name in hosts_of(after)


ROLL_PLAY = """
- name: A roll's checks at the balancer
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check the floor before the roll
      ansible.builtin.include_role:
        name: vllm_fleet.fleet.vllm_balancer
        tasks_from: floor
      when: floor | default(false)
    - name: Drain or ready one server, its pool found by its name
      ansible.builtin.include_role:
        name: vllm_fleet.fleet.vllm_balancer
        tasks_from: server
      when: not (floor | default(false))
"""


def roll_step(tmp_path, bal, doors, **values):
    """One of a roll's balancer steps (floor, or server without a pool), the pools as the
    running HAProxy has them."""
    return finish(playbook(tmp_path, bal, [], ROLL_PLAY,
                           ({"vllm_balancer_pools": pools_of(doors)}, values)))


def test_a_roll_keeps_each_pools_minimum_and_finds_a_servers_pool_by_its_name(tmp_path, doors):
    """Issue 14 part 3: the floor before a roll and at each drain (the batch counted)."""
    with balancer(tmp_path, **settings(doors)) as bal:
        wait_for(lambda: status_of(bal, "default", "a2") == "UP", "a2 UP")
        floor_ok = roll_step(tmp_path, bal, doors, floor=True,
                             vllm_balancer_floor_servers=["a1", "a2"],
                             vllm_balancer_floor_out_at_once=1, vllm_balancer_server_min_healthy=1)
        floor_low = roll_step(tmp_path, bal, doors, floor=True,
                              vllm_balancer_floor_servers=["a1", "a2", "b1"],
                              vllm_balancer_floor_out_at_once=2, vllm_balancer_server_min_healthy=1)
        floor_unknown = roll_step(tmp_path, bal, doors, floor=True,
                                  vllm_balancer_floor_servers=["zz"],
                                  vllm_balancer_server_min_healthy=0)
        # a1 and a2 in one batch: draining a1 would leave the pool nothing up.
        batch = roll_step(tmp_path, bal, doors, vllm_balancer_server_name="a1",
                          vllm_balancer_server_state="drained", vllm_balancer_server_min_healthy=1,
                          vllm_balancer_server_leaving=["a1", "a2"])
        after_batch = status_of(bal, "default", "a1")
        alone = roll_step(tmp_path, bal, doors, vllm_balancer_server_name="a1",
                          vllm_balancer_server_state="drained", vllm_balancer_server_min_healthy=1,
                          vllm_balancer_server_leaving=["a1"])
        after_alone = status_of(bal, "default", "a1")
        # a1 in maintenance (a controller that died mid-roll left it there): a re-run of the
        # roll over a1 and a2 counts a1 back, a roll over a2 alone does not.
        floor_rerun = roll_step(tmp_path, bal, doors, floor=True,
                                vllm_balancer_floor_servers=["a1", "a2"],
                                vllm_balancer_floor_out_at_once=1,
                                vllm_balancer_server_min_healthy=1)
        floor_without = roll_step(tmp_path, bal, doors, floor=True,
                                  vllm_balancer_floor_servers=["a2"],
                                  vllm_balancer_floor_out_at_once=1,
                                  vllm_balancer_server_min_healthy=1)
        ready = roll_step(tmp_path, bal, doors, vllm_balancer_server_name="a1",
                          vllm_balancer_server_state="ready")
        after_ready = status_of(bal, "default", "a1")
    assert floor_ok[0] == 0, floor_ok[1][-3000:]
    assert floor_low[0] == 2
    assert ("Pool default: 2 of its 2 servers are up (a1, a2), and with 2 of them out at once "
            "(serial) 0 would stay up; wanted at least vllm_fleet_min_healthy = 1.") in floor_low[1]
    assert "Pool kimi: 1 of its 1 servers are up (b1), and with 1 of them out" in floor_low[1]
    assert floor_unknown[0] == 2
    assert "zz: in no pool of vllm_balancer_pools (default, kimi)" in floor_unknown[1]
    assert batch[0] == 2
    assert "Draining default/a1 with a2 would leave 0 server(s) up in the pool (none)" in batch[1]
    assert after_batch == "UP"
    assert alone[0] == 0, alone[1][-3000:]
    assert after_alone == "MAINT"
    assert floor_rerun[0] == 0, floor_rerun[1][-3000:]
    assert floor_without[0] == 2
    assert ("Pool default: 1 of its 2 servers are up (a2), and with 1 of them out at once "
            "(serial) 0 would stay up") in floor_without[1]
    assert ready[0] == 0, ready[1][-3000:]
    assert after_ready.startswith("UP")


def test_a_roll_that_takes_out_no_server_up_passes_the_floor(tmp_path, doors):
    """A first deployment: the pool's servers are all down (their front doors answer 503),
    so the roll lowers nothing: the floor before the roll and the drain's check let it through
    (test_a_roll_keeps_each_pools_minimum_... holds them where servers are up)."""
    with balancer(tmp_path, **settings(doors)) as bal:
        for name in ("a1", "a2"):
            doors[name].healthy = False
        for name in ("a1", "a2"):
            wait_for(lambda name=name: status_of(bal, "default", name) == "DOWN", f"{name} DOWN")
        floor_down = roll_step(tmp_path, bal, doors, floor=True,
                               vllm_balancer_floor_servers=["a1", "a2"],
                               vllm_balancer_floor_out_at_once=1,
                               vllm_balancer_server_min_healthy=1)
        drain_down = roll_step(tmp_path, bal, doors, vllm_balancer_server_name="a1",
                               vllm_balancer_server_state="drained",
                               vllm_balancer_server_min_healthy=1,
                               vllm_balancer_server_leaving=["a1"])
        after_drain = status_of(bal, "default", "a1")
        other = status_of(bal, "default", "a2")
    assert floor_down[0] == 0, floor_down[1][-3000:]
    assert drain_down[0] == 0, drain_down[1][-3000:]
    assert "would leave" not in drain_down[1]
    assert after_drain == "MAINT"
    assert other == "DOWN"


def test_the_configuration_holds_no_key_and_an_open_balancer_asks_for_none(tmp_path, doors):
    keyed = tmp_path / "keyed"
    keyed.mkdir()
    config, _values = write_config(keyed, 8000, **settings(doors))
    assert check_config(config)[0] == 0
    text = config.read_text()
    assert text.startswith("#\n# Ansible managed\n#\n")
    for key in (KEY, OTHER, UPSTREAM):
        assert key not in text
    assert [line for line in (keyed / "api-keys.lst").read_text().splitlines()
            if line and not line.startswith("#")] == [KEY, OTHER]
    assert "upstream " + UPSTREAM in (keyed / "upstream-key.map").read_text().splitlines()
    for name in ("api-keys.lst", "upstream-key.map"):
        assert (keyed / name).stat().st_mode & 0o777 == 0o600
    with balancer(tmp_path, **settings(doors, vllm_balancer_open=True,
                                       vllm_balancer_upstream_key="")) as bal:
        answer = call(bal.url, "/v1/chat/completions", None, chat("kimi"))
        with_key = call(bal.url, "/v1/chat/completions", KEY, chat("kimi"))
        files = sorted(p.name for p in bal.folder.iterdir())
    assert (answer[0], with_key[0]) == (200, 200)
    assert all("authorization" not in h for _m, _p, h in doors["b1"].seen)
    assert all(auth is None for _s, auth in doors["b1"].checks)
    assert "api-keys.lst" not in files
    assert "upstream-key.map" not in files


INVENTORY = """
all:
  children:
    vllm_hosts:
      hosts:
        gpu1: {ansible_host: 10.0.0.1}
        gpu2: {ansible_host: 10.0.0.2, vllm_frontdoor_port: 8443}
        gpu3: {ansible_host: 10.0.0.3, vllm_fleet_model_alias: kimi}
        gpu4: {ansible_host: 10.0.0.4, vllm_fleet_pool: big, vllm_fleet_model_alias: kimi}
    balancer:
      hosts:
        lb: {ansible_connection: local}
"""
POOLS_PLAY = """
- name: The pools the role builds from the inventory
  hosts: lb
  gather_facts: false
  vars_files: [%(role)s/defaults/main.yml, %(role)s/vars/main.yml]
  tasks:
    - name: Write them down
      ansible.builtin.copy:
        content: >-
          {{ {'pools': vllm_balancer_pools, 'default': __vllm_balancer_default_pool} | to_json }}
        dest: "%(out)s"
        mode: "0644"

- name: A pool name HAProxy cannot take
  hosts: lb
  gather_facts: false
  tasks:
    - name: Run the role's preflight
      ansible.builtin.include_role:
        name: vllm_fleet.fleet.vllm_balancer
        tasks_from: preflight
      vars:
        vllm_balancer_open: true
        vllm_balancer_pools: {"org/model": [{name: gpu1, address: 10.0.0.1, port: 8000}]}
"""


def test_the_default_pools_come_from_the_inventory_and_bad_names_are_refused(tmp_path):
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    play = tmp_path / "pools.yml"
    shown = tmp_path / "pools.json"
    play.write_text(POOLS_PLAY % {"role": ROOT / "roles" / "vllm_balancer", "out": shown})
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_COLLECTIONS_PATH=f"{ROOT / 'collections'}:{ROOT / '.cache' / 'collections'}")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i",
         str(tmp_path / "hosts.yml"), "-e", f"ansible_python_interpreter={sys.executable}",
         str(play)], capture_output=True, text=True, env=env, check=False, timeout=120)
    out = proc.stdout + proc.stderr
    assert json.loads(shown.read_text()) == {"default": "default", "pools": {
        "default": [{"name": "gpu1", "address": "10.0.0.1", "port": 8000},
                    {"name": "gpu2", "address": "10.0.0.2", "port": 8443}],
        "kimi": [{"name": "gpu3", "address": "10.0.0.3", "port": 8000}],
        "big": [{"name": "gpu4", "address": "10.0.0.4", "port": 8000}]}}
    assert proc.returncode == 2
    flat = " ".join(out.split())
    assert ("vllm_balancer_pools: wanted a dict of pool name (the alias its hosts answer to; "
            "letters, digits, . _ : -) to a list of servers {name, address, port}, found dict "
            "with pools ['org/model'].") in flat
