# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/keepalive.py's client: exactly the requests asked for, the key sent, every non-2xx failed.

A real HTTP server on loopback plays the front door: it answers every third request 503
(as nginx does when a kept upstream connection was closed under it) and records the
Authorization header it got.
"""

import importlib.util
import json
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from repo_paths import ROOT

BENCH = ROOT / "bench" / "keepalive.py"
spec = importlib.util.spec_from_file_location("bench_keepalive", BENCH)
keepalive = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keepalive)


class Door(BaseHTTPRequestHandler):
    def log_message(self, *_args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.seen.append((body["model"], self.headers.get("Authorization")))
            n = len(self.server.seen)
        status = 503 if n % 3 == 0 else 200
        data = b'{"choices": [{"text": "x"}]}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def door():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Door)
    server.seen, server.lock = [], threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_run_sends_exactly_the_requests_asked_for_with_the_key(door):
    url = urllib.parse.urlsplit(f"http://127.0.0.1:{door.server_address[1]}")
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k-0123456789abcdef"}
    results = keepalive.run(url, headers, "default", requests=9, threads=3, gaps=[0.0, 0.01])
    assert len(results) == len(door.seen) == 9
    assert set(door.seen) == {("default", "Bearer k-0123456789abcdef")}
    assert sorted(status for status, _t, _e in results) == [200] * 6 + [503] * 3


def test_the_check_fails_on_any_non_2xx_and_prints_the_count(door):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--frontdoor", f"http://127.0.0.1:{door.server_address[1]}",
         "--requests", "6", "--threads", "2", "--gaps", "0", "--api-key", "k-0123456789abcdef",
         "--check"], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "requests sent:   6 in" in done.stdout
    assert "requests failed: 2 (every non-2xx and every request with no answer)" in done.stdout
    assert "answers:         200 x4, 503 x2" in done.stdout


def test_the_lab_key_is_the_lab_inventorys():
    assert keepalive.lab_key() == "vllm-fleet-lab-key-0123456789"
