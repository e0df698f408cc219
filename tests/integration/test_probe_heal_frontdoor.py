# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46: the probe mends a front door that disagrees with the record, and a record that
cannot be read, against real nginx 1.22 with the role's own server block.

A switch died without a reboot (its process killed; /run kept): the hold file is there, the
upstream sends to green's port where nothing listens, and `.before-switch` keeps blue's
upstream. Blue, the record's active model, is healthy on its port. The probe (probe.run, as
its service runs it, with the front door's paths the role hands it; systemd's `show` and
`list-units` answered for blue's unit) sees no switch lock held, repairs through the
cutover's FrontDoor (nginx -t, nginx -s reload), and the front door answers blue again.
Before: the probe said ok while every request got 503 model_switching.
"""

import io
import json
import subprocess
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    PRESWITCH_SUFFIX,
    upstream_conf,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import probe
from nginx_frontdoor import HAVE_NGINX, NGINX, nginx, render, role_vars
from ports import free_port

pytestmark = pytest.mark.skipif(not HAVE_NGINX, reason="nginx is not installed")

UNIT = "vllm-blue.service"


class Model(ThreadingHTTPServer):
    """Blue: /health, /v1/models, a completion; /metrics 404 (progress unknown)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ModelHandler)


class ModelHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "blue-served"}]})
        elif self.path == "/health":
            self._send(200, {})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(200, {"choices": [{"text": " hi"}], "usage": {"completion_tokens": 4}})


@pytest.fixture
def blue():
    server = Model()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def own_cgroup():
    for line in Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines():
        hierarchy, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            return path
    return ""


class Host:
    """The role's paths under tmp_path, nginx in tmp_path/nginx, blue's unit "active"."""

    def __init__(self, tmp_path, blue_port):
        self.prefix = tmp_path / "nginx"
        self.prefix.mkdir()
        run = tmp_path / "run"
        run.mkdir()
        self.hold, self.lock = run / "switching", run / "cutover.lock"
        self.record, self.state = tmp_path / "vllm_fleet.fact", tmp_path / "probe.json"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        values = role_vars(self.prefix, self.port, vllm_frontdoor_open=True,
                           vllm_frontdoor_hold_file=str(self.hold),
                           vllm_frontdoor_hold_warm_file=str(run / "switching-warm"))
        self.site = render("vllm-fleet.conf.j2", values)
        self.upstream = self.prefix / "upstream.conf"
        self.blue_port = blue_port
        self.units = [UNIT]

    def nginx(self):
        return nginx(self.prefix, self.site, self.port)

    def run_command(self, argv):
        if argv[:2] == ["systemctl", "show"]:
            props = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
                     "InvocationID": "inv-1", "ActiveEnterTimestampMonotonic": "1",
                     "ControlGroup": own_cgroup()}  # blue's server is this process's thread
            return 0, "".join(f"{key}={props[key]}\n" for key in probe.SHOW), ""
        if argv[:2] == ["systemctl", "list-units"]:
            return 0, "".join(f"{u} loaded active running vLLM\n" for u in self.units), ""
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    def probe(self):
        settings = probe.Settings(str(self.record), str(self.state), lock=str(self.lock),
                                  timeout_s=10.0)
        base = [NGINX, "-p", str(self.prefix), "-e", str(self.prefix / "logs" / "error.log"),
                "-c", str(self.prefix / "nginx.conf")]
        settings.frontdoor = {"upstream_file": str(self.upstream), "hold_file": str(self.hold),
                              "warm_file": str(self.hold) + "-warm", "url": self.url,
                              "test_cmd": [*base, "-t"], "reload_cmd": [*base, "-s", "reload"]}
        return probe.run(settings, run_command=self.run_command, out=io.StringIO())


def get(url, path="/v1/models"):
    try:
        with urllib.request.urlopen(url + path, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_switch_that_died_holding_the_front_door_is_mended_by_the_probe(tmp_path, blue):
    port = blue.server_address[1]
    host = Host(tmp_path, port)
    blue_upstream = upstream_conf(port, model="blue")
    active = {"model": "blue", "unit": UNIT, "port": port, "url": f"http://127.0.0.1:{port}",
              "served_model_name": "blue-served", "startup_timeout_s": 600}
    host.record.write_text(json.dumps({"active": active}))
    host.upstream.write_text(upstream_conf(free_port(), model="green"))  # staged, never opened
    (host.prefix / ("upstream.conf" + PRESWITCH_SUFFIX)).write_text(blue_upstream)
    host.hold.write_text("a model switch holds the front door\n")
    with host.nginx():
        status, body = get(host.url)
        assert (status, body["error"]["code"]) == (503, "model_switching")
        outcome = host.probe()
        assert outcome.verdict == "repaired", outcome.message
        assert "fault frontdoor_disagrees, stale_hold, stale_preswitch" in outcome.message
        assert get(host.url) == (200, {"object": "list", "data": [{"id": "blue-served"}]})
        assert get(host.url, "/health")[0] == 200
        assert host.probe().verdict == "ok"  # mended: quiet from then on
    assert host.upstream.read_text() == blue_upstream
    assert not host.hold.exists()
    assert not (host.prefix / ("upstream.conf" + PRESWITCH_SUFFIX)).exists()


def test_a_zero_length_record_is_rebuilt_from_the_real_front_doors_upstream(tmp_path, blue):
    port = blue.server_address[1]
    host = Host(tmp_path, port)
    host.upstream.write_text(upstream_conf(port, model="blue"))
    host.record.write_bytes(b"")
    with host.nginx():
        outcome = host.probe()
        assert outcome.verdict == "repaired", outcome.message
        assert json.loads(host.record.read_text())["active"] == {
            "model": "blue", "unit": UNIT, "port": port, "url": f"http://127.0.0.1:{port}",
            "served_model_name": "blue-served"}
        again = host.probe()
        assert again.verdict == "ok", again.message
