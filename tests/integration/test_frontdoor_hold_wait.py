# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 44, case 6: clients wait through a warm switch instead of failing.

Real nginx (Debian's 1.22, the role's own server block) and the cutover's FrontDoor with its
waiting room (module_utils/frontdoor/hold_room.py). Before: every request the hold met was answered
503 + Retry-After (the lab's warm return: 8-20 of ~850 failed). Now a warm hold keeps the
request (nginx keeps its body), and the switch's end sends it to the model that serves
after it: green, or blue after a rollback, over a reload whose old workers still carry the
held requests with the old upstream. Past vllm_frontdoor_hold_max_s, for a cold switch, for
/health, and when the room is gone, the hold's 503 + Retry-After as before.
"""

import http.client
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoor,
    upstream_conf,
)
from nginx_frontdoor import HAVE_NGINX, NGINX, front_door

pytestmark = pytest.mark.skipif(
    not HAVE_NGINX,
    reason="nginx is not installed (apt-get install -y --no-install-recommends nginx)",
)
OPEN = {"vllm_frontdoor_open": True}


class Model(ThreadingHTTPServer):
    """A model server that answers with its own name, the prompt it got and its body's size;
    `stream` answers as server-sent events."""

    daemon_threads = True

    def __init__(self, name):
        super().__init__(("127.0.0.1", 0), ModelHandler)
        self.name = name
        self.seen = []  # (prompt, Authorization header) of each completion

    @property
    def port(self):
        return self.server_address[1]


class ModelHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, data, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": self.server.name}]}).encode())
        else:
            self._send(200, b"{}")

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        body = json.loads(raw)
        self.server.seen.append((body["prompt"], self.headers.get("Authorization")))
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for text in (f"data: {self.server.name}\n\n", "data: [DONE]\n\n"):
                chunk = text.encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self._send(200, json.dumps({"model": self.server.name, "prompt": body["prompt"],
                                    "bytes": len(raw)}).encode())


@pytest.fixture
def models():
    made = {name: Model(name) for name in ("blue", "green")}
    for server in made.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield made
    for server in made.values():
        server.shutdown()
        server.server_close()


def _run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def _door(url, prefix, max_s=10.0):
    nginx = [NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf")]
    return FrontDoor(_run, str(prefix / "upstream.conf"), url, test_cmd=[*nginx, "-t"],
                     reload_cmd=[*nginx, "-s", "reload"], hold_file=str(prefix / "switching"),
                     pid_file=str(prefix / "nginx.pid"), warm_file=str(prefix / "switching-warm"),
                     hold_socket=str(prefix / "hold.sock"), hold_max_s=max_s)


class Client(threading.Thread):
    """One request through the front door, in the background: status, headers, body and
    how long it took."""

    def __init__(self, url, prompt, path="/v1/completions", stream=False, pad=0,
                 headers=None):
        super().__init__(daemon=True)
        self.port = int(url.rsplit(":", 1)[1])
        self.path = path
        self.headers = headers or {}
        payload = {"model": "x", "prompt": prompt, "max_tokens": 1, "stream": stream}
        if pad:
            payload["pad"] = "p" * pad
        self.body = json.dumps(payload)
        self.status = self.reply = self.retry_after = None
        self.seconds = None
        self.start()

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        start = time.monotonic()
        try:
            conn.request("POST" if self.path != "/health" else "GET", self.path,
                         self.body if self.path != "/health" else None,
                         {"Content-Type": "application/json", **self.headers})
            resp = conn.getresponse()
            self.status = resp.status
            self.retry_after = resp.getheader("Retry-After")
            self.reply = resp.read()
        finally:
            conn.close()
            self.seconds = time.monotonic() - start

    def result(self):
        self.join(60)
        assert not self.is_alive(), "the request never ended"
        return self.status


def _waiting(door, count, timeout=10):
    """Until the room holds `count` requests (its own count)."""
    deadline = time.monotonic() + timeout
    while door.room.waiting < count:
        assert time.monotonic() < deadline, f"{door.room.waiting} of {count} reached the room"
        time.sleep(0.02)


def test_a_warm_return_holds_requests_and_green_answers_them_after_a_reload(tmp_path, models):
    blue, green = models["blue"], models["green"]
    with front_door(tmp_path, upstream_conf(blue.port, model="blue"), **OPEN) as (url, prefix):
        door = _door(url, prefix)
        door.hold(warm=True)
        assert (prefix / "hold.sock").exists()
        held = [Client(url, "plain"), Client(url, "big", pad=300_000),
                Client(url, "streamed", path="/v1/chat/completions", stream=True),
                Client(url, "keyed", headers={"Authorization": "Bearer secret-of-a-client"})]
        _waiting(door, len(held))
        assert blue.seen == []
        assert green.seen == []
        # the switch stages green behind the hold (a reload: the held requests stay with the
        # old workers, whose upstream is blue), then points the front door at it
        door.stage(green.port, "green")
        time.sleep(0.3)
        door.point(green.port, "green", "green")
        assert [c.result() for c in held] == [200, 200, 200, 200]
        plain, big, streamed, keyed = (c.reply for c in held)
        assert json.loads(plain)["model"] == "green"
        assert json.loads(big)["bytes"] == len(held[1].body)  # the kept body, whole
        assert b"data: green" in streamed
        assert b"[DONE]" in streamed
        assert json.loads(keyed)["prompt"] == "keyed"
        assert sorted(p for p, _auth in green.seen) == ["big", "keyed", "plain", "streamed"]
        assert all(auth is None for _p, auth in green.seen)  # the key never reaches the model
        assert blue.seen == []
        stats = door.held()
        assert stats["held"] == 4
        assert stats["refused"] == 0
        assert 0.3 <= stats["wait_max_s"] < 10
        door.close_room()
        assert not (prefix / "hold.sock").exists()
        # after the switch: straight to green
        assert Client(url, "after").result() == 200


def test_a_rollback_sends_held_requests_to_blue(tmp_path, models):
    blue = models["blue"]
    with front_door(tmp_path, upstream_conf(blue.port, model="blue"), **OPEN) as (url, prefix):
        door = _door(url, prefix)
        door.hold(warm=True)
        client = Client(url, "during a failed switch")
        _waiting(door, 1)
        door.point(blue.port, "blue", "blue")  # the rollback's
        assert client.result() == 200
        assert json.loads(client.reply)["model"] == "blue"


def test_past_the_bound_the_hold_answers_503_with_retry_after(tmp_path, models):
    blue = models["blue"]
    with front_door(tmp_path, upstream_conf(blue.port, model="blue"), **OPEN,
                    vllm_frontdoor_warm_retry_after_s=2) as (url, prefix):
        door = _door(url, prefix, max_s=1.0)
        door.hold(warm=True)
        client = Client(url, "waits too long")
        assert client.result() == 503
        assert client.retry_after == "2"
        assert json.loads(client.reply)["error"]["code"] == "model_switching"
        assert 0.5 <= client.seconds < 5
        # once past the bound, a newcomer is not held at all
        late = Client(url, "late")
        assert late.result() == 503
        assert late.seconds < 0.5
        assert door.held()["refused"] == 2
        assert blue.seen == []


def test_a_cold_hold_health_and_a_closed_room_answer_503_at_once(tmp_path, models):
    blue = models["blue"]
    with front_door(tmp_path, upstream_conf(blue.port, model="blue"), **OPEN,
                    vllm_frontdoor_retry_after_s=30) as (url, prefix):
        door = _door(url, prefix)
        door.hold()  # cold: no room
        assert not (prefix / "hold.sock").exists()
        cold = Client(url, "cold")
        assert cold.result() == 503
        assert cold.retry_after == "30"
        assert cold.seconds < 1
        door.point(blue.port, "blue", "blue")
        # a warm hold: /health is never held (balancers must see the hold at once)
        door.hold(warm=True)
        health = Client(url, "", path="/health")
        assert health.result() == 503
        assert health.seconds < 1
        # the warm switch falls back to cold: whoever waits is answered 503 now
        waiting = Client(url, "waiting")
        _waiting(door, 1)
        door.mark_warm(False)
        assert waiting.result() == 503
        assert not (prefix / "hold.sock").exists()
        assert Client(url, "after the room").result() == 503
        door.point(blue.port, "blue", "blue")
        assert Client(url, "served").result() == 200


def test_a_held_request_never_keeps_the_drain_waiting(tmp_path, models):
    """CI's cutover scenario (2026-12-07): a request that met the hold between the hold file
    and the hold's fence reload waited in the room carried by a worker of the old
    generation, and the drain waits for those workers (admitted()) until they exit: it
    waited until the room's bound refused them (every warm leg's drain 10.2 s, the warm
    return's 16 held refused). A worker whose requests wait in the room (their pid from
    the room's SO_PEERCRED) is no longer counted: the drain ends, the request is served."""
    blue, green = models["blue"], models["green"]
    with front_door(tmp_path, upstream_conf(blue.port, model="blue"), **OPEN) as (url, prefix):
        door = _door(url, prefix)
        real_reload = door._reload_with  # the hold's fence reload, timed
        window = []

        def reload_with(wanted, force=False):
            if force and not window:  # between the hold file and the fence reload
                window.append(Client(url, "in the window"))
                _waiting(door, 1)  # held by a worker the reload then fences
            return real_reload(wanted, force)

        door._reload_with = reload_with
        door.hold(warm=True)
        assert door.fenced & door.room.holding_pids()  # an old worker carries it
        deadline = time.monotonic() + 5
        while door.admitted() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert door.admitted() == 0  # the drain has nothing to wait for
        assert window[0].is_alive()  # still held
        door.point(green.port, "green", "green")
        assert window[0].result() == 200
        assert json.loads(window[0].reply)["model"] == "green"
