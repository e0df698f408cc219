# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 12, case 2: the front door's kept upstream connections against the server's keep-alive.

Real nginx (Debian's package) runs the front door's own server block (rendered from
roles/vllm_frontdoor/templates/vllm-fleet.conf.j2 with the role's defaults) and the
upstream text of frontdoor.upstream_conf(), in a temporary prefix on a free loopback
port. Behind it, a small HTTP/1.1 backend keeps idle connections for 1 s, as vLLM's
uvicorn keeps them for VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s).

The race, pinned. A server closes an idle connection when its timer fires; a proxy that
still holds the connection and sends a request on it just then meets the close, and the
request fails with nothing logged by the server. On the wire the two events are
microseconds apart, so a real timer loses the race only now and then. This backend
decides when the request arrives instead: a connection that has been idle for 1 s or more
is closed with the request unread (the kernel answers it with a reset), which is what the
losing order looks like to nginx, every time. A request nginx sends on a connection it
kept idle past the backend's timeout fails; one sent on a fresh or recently used
connection is answered.
"""

import json
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    upstream_conf,
)
from nginx_frontdoor import HAVE_NGINX, ROLE, front_door

IDLE_TIMEOUT_S = 1.0  # the backend's keep-alive
PAUSE_S = 2.0  # between rounds: past the backend's timeout by 1 s, short of nginx's default 60 s
ROUNDS = 3
# The front door is open here: this test is about connections, not keys.
OPEN = {"vllm_frontdoor_open": True}

pytestmark = pytest.mark.skipif(
    not HAVE_NGINX,
    reason="nginx is not installed (apt-get install -y --no-install-recommends nginx)",
)


class Backend(ThreadingHTTPServer):
    """An OpenAI-shaped completion server with a 1 s keep-alive; counts what it did."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BackendHandler)
        self.lock = threading.Lock()
        self.served = []  # connection number of each answered request
        self.closed_idle = 0  # connections closed because a request came after 1 s idle
        self.connections = 0

    def new_connection(self):
        with self.lock:
            self.connections += 1
            return self.connections


class BackendHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def handle(self):
        conn = self.server.new_connection()
        last = None  # when the last answer was sent
        self.close_connection = False
        while not self.close_connection:
            readable, _unused, _unused2 = select.select([self.connection], [], [], 30)
            if not readable:
                return
            if not self.connection.recv(1, socket.MSG_PEEK):
                return  # nginx closed it
            if last is not None and time.monotonic() - last >= IDLE_TIMEOUT_S:
                with self.server.lock:
                    self.server.closed_idle += 1
                return  # closed with the request unread: a reset, no answer
            self.conn = conn
            self.handle_one_request()
            last = time.monotonic()

    def do_POST(self):
        with self.server.lock:
            self.server.served.append(self.conn)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        prompt = json.loads(body)["prompt"]
        answer = json.dumps(
            {
                "object": "text_completion",
                "model": "tiny-gqa",
                "choices": [{"index": 0, "text": f" echo {prompt}", "finish_reason": "length"}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def _complete(url, prompt):
    """One POST /v1/completions through the front door, on its own client connection."""
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps({"model": "tiny-gqa", "prompt": prompt, "max_tokens": 1}).encode(),
        headers={"Content-Type": "application/json", "Connection": "close"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _rounds(url):
    """ROUNDS rounds of two requests back to back, PAUSE_S apart: [(round, n, status, ...)]."""
    results = []
    for r in range(ROUNDS):
        if r:
            time.sleep(PAUSE_S)
        results.extend((r, n, *_complete(url, f"round {r} request {n}")) for n in range(2))
    return results


@pytest.fixture
def backend():
    server = Backend()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _without_keepalive_timeout(text):
    """The upstream as it was before the fix: keepalive, and nginx's default 60 s idle time."""
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if "keepalive_timeout" not in line
        and not line.lstrip().startswith("# Idle connections")
        and "has just closed" not in line
    ]
    assert len(kept) == len(text.splitlines()) - 3, text
    return "".join(kept)


def test_connections_kept_past_the_servers_keep_alive_fail_requests_without_the_fix(
    tmp_path, backend
):
    text = _without_keepalive_timeout(
        upstream_conf(backend.server_address[1], model="tiny_gqa", server_keepalive_s=1)
    )
    assert "keepalive 32;" in text
    with front_door(tmp_path, text, **OPEN) as (url, prefix):
        results = _rounds(url)
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    retry_after = str(defaults["vllm_frontdoor_unavailable_retry_after_s"])
    failed = [(r, n) for r, n, status, _h, _b in results if status != 200]
    # The first request after each pause goes out on the connection nginx kept: the
    # backend dropped it, and the client gets a 503. No switch is in progress (the
    # upstream says "serving"), so the 503 says the model is unavailable, not switching.
    assert (0, 0) not in failed
    assert {(r, 0) for r in range(1, ROUNDS)} <= set(failed)
    assert len(failed) == backend.closed_idle
    for r, n, status, headers, body in results:
        if (r, n) in failed:
            assert status == 503
            assert headers["Retry-After"] == retry_after
            assert body["error"]["code"] == "model_unavailable"
        else:
            assert body["choices"][0]["text"] == f" echo round {r} request {n}"
    upstream_errors = [
        line
        for line in (prefix / "logs" / "error.log").read_text().splitlines()
        if "[error]" in line and "upstream" in line
    ]
    assert len(upstream_errors) == len(failed), upstream_errors


def test_upstream_conf_drops_idle_connections_before_the_server_does(tmp_path, backend):
    text = upstream_conf(backend.server_address[1], model="tiny_gqa", server_keepalive_s=1)
    assert "keepalive_timeout 500ms;" in text
    with front_door(tmp_path, text, **OPEN) as (url, _prefix):
        results = _rounds(url)
    assert [(r, n, status) for r, n, status, _h, _b in results] == [
        (r, n, 200) for r in range(ROUNDS) for n in range(2)
    ]
    assert [body["choices"][0]["text"] for *_rns, _h, body in results] == [
        f" echo round {r} request {n}" for r in range(ROUNDS) for n in range(2)
    ]
    assert backend.closed_idle == 0
    # Connections are still kept and reused: back-to-back requests share one.
    per_connection = [backend.served.count(c) for c in set(backend.served)]
    assert max(per_connection) >= 2
    assert len(backend.served) == 2 * ROUNDS
