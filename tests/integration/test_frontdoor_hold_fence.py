# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 44, case 6: a request the front door let through before its hold, still sending its
body when blue's drain reads blue, must not be missed by the drain.

CI's cutover scenario (a warm return to tiny_gqa: one request timed out after 120.6 s) and a
new user's lab trial (2 requests hung 150 s) saw requests wait on a sleeping blue. The
mechanism, pinned here on real nginx (Debian's package, the role's own server block, the
cutover's FrontDoor driving its `nginx -t`, reload and hold file):

- nginx decides in its rewrite phase, once the headers are read, whether the hold file
  exists (the template's `if (-f hold_file)`); with `proxy_request_buffering off` it then
  passes the request to the model server while the body is still arriving;
- vLLM counts a request in /load only when its handler runs, after FastAPI has read and
  parsed the whole body (vLLM 0.32.0, vllm/entrypoints/serve/utils/api_utils.py
  `load_aware_call` wraps `create_completion(request: CompletionRequest, raw_request)`).

So a drain that reads only the model server sees nothing in flight while such a request is
still on its way; blue falls asleep, the body completes, the handler runs, and the engine
(paused) keeps the request until a wake. The backend here counts /load exactly as vLLM does
(from the whole body on, until the answer is sent). The fix: a hold reloads nginx, so the
requests let through before it are carried by workers of the old generation, which exit
once those requests ended; the drain waits for them (FrontDoor.admitted).
"""

import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoor,
    drain,
    upstream_conf,
)
from nginx_frontdoor import HAVE_NGINX, NGINX, ROLE, front_door

pytestmark = pytest.mark.skipif(
    not HAVE_NGINX,
    reason="nginx is not installed (apt-get install -y --no-install-recommends nginx)",
)
OPEN = {"vllm_frontdoor_open": True}


class Blue(ThreadingHTTPServer):
    """A completion server that counts /load as vLLM's load_aware_call does."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BlueHandler)
        self.lock = threading.Lock()
        self.load = 0
        self.handled = []  # (monotonic time its handler ran, prompt)
        self.headers_in = threading.Event()  # nginx passed a request's headers on


class BlueHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _answer(self, status, body, content_type="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/load":
            with self.server.lock:
                load = self.server.load
            self._answer(200, json.dumps({"server_load": load}))
        elif self.path == "/metrics":
            self._answer(200, "vllm:num_requests_running 0.0\nvllm:num_requests_waiting 0.0\n",
                         "text/plain")
        elif self.path == "/v1/models":
            self._answer(200, json.dumps({"object": "list", "data": [{"id": "blue-model"}]}))
        else:
            self._answer(404, "{}")

    def do_POST(self):
        self.server.headers_in.set()
        # FastAPI reads and parses the whole body before the endpoint (and its load count)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.load += 1
            self.server.handled.append((time.monotonic(), body["prompt"]))
        try:
            self._answer(200, json.dumps({"object": "text_completion", "choices": [
                {"index": 0, "text": f" echo {body['prompt']}", "finish_reason": "length"}]}))
        finally:
            with self.server.lock:
                self.server.load -= 1


@pytest.fixture
def blue():
    server = Blue()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def _half_sent(url, prompt):
    """A client that sent its headers and half its body: the front door let it through."""
    body = json.dumps({"model": "tiny-gqa", "prompt": prompt, "max_tokens": 1}).encode()
    port = int(url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: frontdoor\r\n"
                 b"Content-Type: application/json\r\nConnection: close\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
    return sock, body[10:]


def _finish(sock, rest):
    sock.sendall(rest)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _sep, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_request_let_through_before_the_hold_keeps_the_drain_open_until_it_ended(
        tmp_path, blue):
    backend = f"http://127.0.0.1:{blue.server_address[1]}"
    with front_door(tmp_path, upstream_conf(blue.server_address[1], model="blue"),
                    **OPEN) as (url, prefix):
        nginx = [NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf")]
        door = FrontDoor(_run, str(prefix / "upstream.conf"), url,
                         test_cmd=[*nginx, "-t"], reload_cmd=[*nginx, "-s", "reload"],
                         hold_file=str(prefix / "switching"),
                         pid_file=str(prefix / "nginx.pid"))
        sock, rest = _half_sent(url, "late")
        # nginx let it through and, not buffering the body, passed its headers on to blue
        assert blue.headers_in.wait(10)
        door.hold()
        assert door.fenced, "the hold reloaded nginx and kept its workers from before"
        # The model server's own counts see nothing: the body has not arrived (today's
        # drain, which put blue to sleep here).
        blind = drain(backend, 5.0, interval_s=0.05)
        assert blind["drained"] is True
        assert blind["in_flight"] == 0
        # The front door's count sees the request it let through.
        fenced = drain(backend, 1.0, interval_s=0.05, pending=door.admitted)
        assert fenced["drained"] is False
        assert fenced["frontdoor_in_flight"] == 1
        drained_before = time.monotonic()
        status, body = _finish(sock, rest)
        # It reached blue after the blind drain had ended: a blue asleep by then would have
        # kept it waiting until a wake.
        assert status == 200
        assert body["choices"][0]["text"] == " echo late"
        assert [prompt for _t, prompt in blue.handled] == ["late"]
        assert blue.handled[0][0] > drained_before
        # Once it ended the old worker exits, and the drain completes.
        done = drain(backend, 10.0, interval_s=0.05, pending=door.admitted)
        assert done["drained"] is True
        assert done["frontdoor_in_flight"] == 0
        assert done["in_flight"] == 0
        # Held: a request that comes now is answered 503 at once, and never reaches blue.
        sock2, rest2 = _half_sent(url, "after the hold")
        status2, body2 = _finish(sock2, rest2)
        assert status2 == 503
        assert body2["error"]["code"] == "model_switching"
        assert [prompt for _t, prompt in blue.handled] == ["late"]


def test_without_the_pid_file_the_front_door_cannot_count_and_says_so(tmp_path, blue):
    with front_door(tmp_path, upstream_conf(blue.server_address[1], model="blue"),
                    **OPEN) as (url, prefix):
        nginx = [NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf")]
        door = FrontDoor(_run, str(prefix / "upstream.conf"), url,
                         test_cmd=[*nginx, "-t"], reload_cmd=[*nginx, "-s", "reload"],
                         hold_file=str(prefix / "switching"),
                         pid_file=str(prefix / "no-such.pid"))
        door.hold()
        assert door.workers() is None
        assert door.admitted() is None


def _held_answer(url):
    sock, rest = _half_sent(url, "held")
    sock.sendall(rest)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _sep, body = data.partition(b"\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    return int(head.split()[1]), headers.get("Retry-After"), json.loads(body)


def test_a_warm_switchs_hold_tells_clients_to_retry_in_its_seconds_a_cold_ones_in_its(
        tmp_path, blue):
    """Issue 44, "Must build" 6: past the hold, a warm switch's 503 says its own Retry-After
    (vllm_frontdoor_warm_retry_after_s, a wake), not the 30 s of a cold one (a model's start);
    the lab's warm return told clients 30 s for a wake of 0.01 s."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    warm_s, cold_s = (defaults["vllm_frontdoor_warm_retry_after_s"],
                      defaults["vllm_frontdoor_retry_after_s"])
    assert warm_s < cold_s
    with front_door(tmp_path, upstream_conf(blue.server_address[1], model="blue"),
                    vllm_frontdoor_hold_warm_file=str(tmp_path / "nginx" / "switching-warm"),
                    **OPEN) as (url, prefix):
        nginx = [NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf")]
        door = FrontDoor(_run, str(prefix / "upstream.conf"), url,
                         test_cmd=[*nginx, "-t"], reload_cmd=[*nginx, "-s", "reload"],
                         hold_file=str(prefix / "switching"),
                         pid_file=str(prefix / "nginx.pid"),
                         warm_file=str(prefix / "switching-warm"))
        door.hold(warm=True)
        warm = _held_answer(url)
        door.mark_warm(False)  # a warm switch that fell back to cold
        fell_cold = _held_answer(url)
        door.point(blue.server_address[1], "blue", "blue-model")
        served = _held_answer(url)
        assert not (prefix / "switching-warm").exists()
        door.hold()
        cold = _held_answer(url)
    assert warm[:2] == (503, str(warm_s))
    assert warm[2]["error"]["message"] == (
        f"A model switch is in progress on this server. Retry after {warm_s} seconds.")
    assert fell_cold[:2] == (503, str(cold_s))
    assert served[0] == 200
    assert cold[:2] == (503, str(cold_s))
    assert cold[2]["error"]["code"] == "model_switching"
