# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46, case 1: a reboot mid-switch must not leave the front door held.

Real nginx (Debian's package) with the role's own server block, the role's default paths
laid out under tmp_path as on a host (/etc and /run), and the cutover's FrontDoor driving
it: a sequential switch holds the front door and stages green's upstream, then the host
"reboots" while green loads: nginx stops, /run (a tmpfs) is emptied, the role's boot unit
(vllm-fleet-frontdoor-boot.service, rendered and read as systemd reads it) runs its
commands, nginx starts again. Blue's unit is the one still enabled (the cutover enables
green only after it passed its gate), so blue answers on its port; the front door must
send to it. Before the fix the hold file was in /etc: after the boot every request got
503 model_switching (issue 46), and green's staged upstream stayed in force.
"""

import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    PRESWITCH_SUFFIX,
    SETTLE_CONFIRMATIONS,
    FrontDoor,
    upstream_conf,
)
from nginx_frontdoor import HAVE_NGINX, NGINX, ROLE, nginx, render, role_vars
from ports import free_port
from systemd_unit import exec_argv, parsed

pytestmark = pytest.mark.skipif(not HAVE_NGINX, reason="nginx is not installed")

PATHS = ("vllm_frontdoor_upstream_file", "vllm_frontdoor_hold_file",
         "vllm_frontdoor_hold_warm_file")


class Model(ThreadingHTTPServer):
    """Blue, serving after the boot: /v1/models and /health answer 200."""

    daemon_threads = True

    def __init__(self, name):
        super().__init__(("127.0.0.1", 0), ModelHandler)
        self.name = name


class ModelHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": self.server.name}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def blue():
    server = Model("blue")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def get(url, path="/v1/models"):
    try:
        with urllib.request.urlopen(url + path, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Host:
    """The role's default paths under tmp_path/host, nginx in tmp_path/nginx."""

    def __init__(self, tmp_path):
        self.root = tmp_path / "host"
        self.prefix = tmp_path / "nginx"
        self.prefix.mkdir()
        defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
        self.paths = {name: self.root / defaults[name].lstrip("/") for name in PATHS}
        for path in self.paths.values():
            path.parent.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.values = role_vars(self.prefix, self.port, vllm_frontdoor_open=True,
                                **{name: str(path) for name, path in self.paths.items()})
        self.site = render("vllm-fleet.conf.j2", self.values)
        self.upstream = self.paths["vllm_frontdoor_upstream_file"]

    def nginx(self):
        return nginx(self.prefix, self.site, self.port)

    def door(self):
        base = [NGINX, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf")]
        return FrontDoor(_run, str(self.upstream), self.url, test_cmd=[*base, "-t"],
                         reload_cmd=[*base, "-s", "reload"],
                         hold_file=str(self.paths["vllm_frontdoor_hold_file"]),
                         warm_file=str(self.paths["vllm_frontdoor_hold_warm_file"]),
                         pid_file=str(self.prefix / "nginx.pid"),
                         # as the cutover runs it: after a reload an old worker can still
                         # take a connection for a moment (one 503 was not enough: a request
                         # right after the settle met blue, 1 run in 3 under load)
                         confirmations=SETTLE_CONFIRMATIONS)

    def reboot(self):
        """nginx has stopped; /run is a tmpfs: empty at boot; then the boot unit runs."""
        shutil.rmtree(self.root / "run", ignore_errors=True)
        unit = parsed(render("vllm-fleet-frontdoor-boot.service.j2", self.values))
        assert unit["Unit.Before"] == ["nginx.service"]
        assert unit["Install.WantedBy"] == ["multi-user.target"]
        assert unit["Service.Type"] == ["oneshot"]
        for command in unit["Service.ExecStart"]:
            done = subprocess.run(exec_argv(command), capture_output=True, text=True,
                                  check=False)
            assert done.returncode == 0, (command, done.stderr)


def test_a_reboot_while_green_loads_boots_into_blue_through_the_front_door(tmp_path, blue):
    host = Host(tmp_path)
    blue_upstream = upstream_conf(blue.server_address[1], model="blue")
    host.upstream.write_text(blue_upstream)
    with host.nginx():
        door = host.door()
        assert get(host.url)[1]["data"][0]["id"] == "blue"
        door.hold(warm=True)
        door.stage(free_port(), "green")  # green loads behind the hold: nothing answers yet
        status, body = get(host.url)
        assert (status, body["error"]["code"]) == (503, "model_switching")
        assert (host.upstream.parent / ("upstream.conf" + PRESWITCH_SUFFIX)).read_text() == \
            blue_upstream
    host.reboot()
    with host.nginx():  # its -t passed with no file of the switch's in /run
        assert get(host.url) == (200, {"object": "list", "data": [{"id": "blue"}]})
        status, _body = get(host.url, "/health")
        assert status == 200
    assert host.upstream.read_text() == blue_upstream
    assert not (host.upstream.parent / ("upstream.conf" + PRESWITCH_SUFFIX)).exists()
    assert not host.paths["vllm_frontdoor_hold_file"].exists()
    assert not host.paths["vllm_frontdoor_hold_warm_file"].exists()


def test_the_hold_files_are_on_a_tmpfs_by_default():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["vllm_frontdoor_hold_file"].startswith("/run/")
    assert defaults["vllm_frontdoor_hold_warm_file"].startswith("/run/")
    assert defaults["vllm_frontdoor_upstream_file"].startswith("/etc/")


def test_a_switch_that_ended_keeps_its_upstream_across_a_reboot(tmp_path, blue):
    host = Host(tmp_path)
    host.upstream.write_text(upstream_conf(free_port(), model="old"))
    with host.nginx():
        door = host.door()
        door.hold()
        door.stage(blue.server_address[1], "blue")
        door.point(blue.server_address[1], "blue", "blue")  # the switch ended: blue serves
        assert not (host.upstream.parent / ("upstream.conf" + PRESWITCH_SUFFIX)).exists()
        assert not host.paths["vllm_frontdoor_hold_file"].exists()
    host.reboot()
    with host.nginx():
        assert get(host.url) == (200, {"object": "list", "data": [{"id": "blue"}]})


def test_a_replica_switch_held_by_pointing_at_nothing_goes_back_too(tmp_path, blue):
    """replica_cutover holds with point(None, switching=True): no hold file, one reload."""
    host = Host(tmp_path)
    blue_upstream = upstream_conf(blue.server_address[1], model="blue")
    host.upstream.write_text(blue_upstream)
    with host.nginx():
        door = host.door()
        door.point(None, switching=True)
        door.point(None, switching=True)  # a re-run keeps the first switch's upstream
        status, body = get(host.url)
        assert (status, body["error"]["code"]) == (503, "model_switching")
    host.reboot()
    with host.nginx():
        assert get(host.url)[0] == 200
    assert host.upstream.read_text() == blue_upstream
