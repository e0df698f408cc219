# Copyright 2026 vllm-fleet contributors
"""The vllm_cutover module end to end: real AnsibleModule, its real JSON output.

systemctl/journalctl/ss go to the fake host (unit/fake_host.py) through
AnsibleModule.run_command; HTTP is real: the module's own urllib client talks to
loopback servers that answer as the fake host's units would (503 while a unit
is down, since a listening socket cannot refuse).
"""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.cutover import write_record
from ansible_collections.vllm_fleet.fleet.plugins.modules import vllm_cutover

from unit.fake_host import CRASH, FakeHost

B, G = "vllm-blue.service", "vllm-green.service"
JOURNAL = ["INFO Loading weights", "ERROR CUDA out of memory"]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length)) if length else None
        res = self.server.host.request(method, self.server.base + self.path, payload)
        body = (res.error or res.body).encode()
        self.send_response(503 if res.error else res.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self._answer("POST")


@pytest.fixture(scope="module")
def servers():
    """Two loopback servers, blue's and green's; each test points them at its fake host."""
    started = []
    for _ in range(2):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        started.append(srv)
    yield started
    for srv in started:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def port():
    """Green's TCP port: free, so the preflight's probe finds nothing there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def world(servers, tmp_path, monkeypatch, port):
    host = FakeHost()
    for srv in servers:
        srv.host = host
    blue_srv, green_srv = servers
    host.unit(B, blue_srv.base, "blue-model", active=True)
    host.unit(G, green_srv.base, "green-model", journal=JOURNAL)
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda _self, argv, **_kw: host.run_command(argv))
    host.state_file = tmp_path / "vllm_fleet.fact"
    host.args = {"model": "green", "unit": G, "url": green_srv.base,
                 "served_model_name": "green-model", "port": port,
                 "state_file": str(host.state_file), "health_interval": 0.01,
                 "record": {"repo_id": "org/green", "revision": "b" * 40}}
    host.blue = {"model": "blue", "unit": B, "url": blue_srv.base, "port": 8101,
                 "served_model_name": "blue-model", "startup_timeout_s": 900,
                 "since": "2027-01-01T00:00:00+00:00"}
    return host


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as caught:
        vllm_cutover.main()
    result = json.loads(capsys.readouterr().out)
    result["rc"] = caught.value.code
    return result


def test_first_deploy_switches_and_shows_the_diff(world, capsys):
    result = run_module(capsys, {**world.args, "_ansible_diff": True})
    assert result["rc"] == 0
    assert (result["changed"], result["action"], result["active_before"],
            result["active_after"], result["rolled_back"]) == (True, "switch", None, "green", False)
    assert result["diff"] == {"before": "active model: None\n", "after": "active model: green\n"}
    assert result["green_health"]["ok"] is True
    assert result["green_health"]["detail"] == "4 completion tokens: ' world'"
    assert world.state_calls() == [("reset-failed", G), ("start", G), ("enable", G)]
    active = json.loads(world.state_file.read_text())["active"]
    since = active.pop("since")
    assert since.endswith("+00:00")
    assert active == {"model": "green", "unit": G, "url": world.args["url"],
                      "port": world.args["port"], "served_model_name": "green-model",
                      "startup_timeout_s": 900, "repo_id": "org/green", "revision": "b" * 40,
                      "gpus": []}

    # The same run again: green is active, running and unchanged.
    world.calls.clear()
    again = run_module(capsys, {**world.args, "_ansible_diff": True})
    assert (again["rc"], again["changed"], again["action"]) == (0, False, "none")
    assert again["diff"]["before"] == again["diff"]["after"] == "active model: green\n"
    assert world.state_calls() == []


def test_sequential_switch_from_blue(world, capsys):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    result = run_module(capsys, world.args)
    assert (result["rc"], result["changed"], result["active_before"], result["active_after"]) == (
        0, True, "blue", "green")
    assert world.state_calls() == [("stop", B), ("reset-failed", G), ("start", G),
                                   ("enable", G), ("disable", B)]
    saved = json.loads(world.state_file.read_text())
    assert saved["previous"] == world.blue
    assert saved["history"] == [world.blue]


def test_check_mode_touches_nothing(world, capsys):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    before = world.state_file.read_bytes()
    result = run_module(capsys, {**world.args, "_ansible_check_mode": True,
                                 "_ansible_diff": True})
    assert (result["rc"], result["changed"], result["action"], result["blue"]) == (
        0, True, "switch", "blue")
    assert result["diff"] == {"before": "active model: blue\n", "after": "active model: green\n"}
    assert {argv[1] for argv in world.calls} == {"show"}
    assert world.state_file.read_bytes() == before
    assert world.units[B].active_state == "active"


def test_green_failure_fails_with_the_rollback_fields(world, capsys):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    before = world.state_file.read_bytes()
    world.units[G].behaviour = CRASH
    result = run_module(capsys, world.args)
    assert result["rc"] == 1
    assert result["failed"] is True
    assert result["changed"] is True  # blue was stopped and started again
    assert result["msg"] == (
        "cutover to green failed: green green failed its health gate at process: "
        "vllm-green.service failed (failed). Rolled back: blue is serving again.")
    assert (result["rolled_back"], result["active_before"], result["active_after"]) == (
        True, "blue", "blue")
    assert result["journal"] == JOURNAL
    assert result["green_health"]["stage"] == "process"
    assert result["blue_health"]["ok"] is True
    assert sorted(result["phases"]) == ["drain_blue", "preflight", "rollback", "start_green",
                                        "stop_blue"]
    assert world.units[B].active_state == "active"
    assert world.state_file.read_bytes() == before


def test_refusal_before_anything_changes_reports_changed_false(world, capsys):
    write_record(str(world.state_file), {"active": world.blue, "previous": None, "history": []})
    world.units[G].installed = False
    result = run_module(capsys, world.args)
    assert (result["rc"], result["failed"], result["changed"]) == (1, True, False)
    assert result["msg"] == ("cutover to green refused before any change: green unit "
                             "vllm-green.service is not installed (LoadState=not-found). "
                             "blue is still serving.")
    assert (result["rolled_back"], result["active_after"]) == (False, "blue")
    assert world.state_calls() == []


def test_unreadable_record_fails_cleanly(world, capsys):
    world.state_file.write_text("active: blue\n")
    result = run_module(capsys, world.args)
    assert (result["rc"], result["failed"], result["changed"]) == (1, True, False)
    assert result["msg"].startswith(f"deployment record {world.state_file} is not JSON: ")
    assert world.calls == []


def test_restart_option_restarts_the_running_active_model(world, capsys):
    green = {"model": "green", "unit": G, "url": world.args["url"], "port": world.args["port"],
             "served_model_name": "green-model", "startup_timeout_s": 900,
             "repo_id": "org/green", "revision": "b" * 40, "since": "2027-01-01T00:00:00+00:00"}
    write_record(str(world.state_file), {"active": green, "previous": world.blue,
                                         "history": [world.blue]})
    world.run_command(["systemctl", "start", G])
    world.calls.clear()
    result = run_module(capsys, {**world.args, "restart": True})
    assert (result["rc"], result["changed"], result["action"]) == (0, True, "restart")
    assert world.state_calls() == [("reset-failed", G), ("restart", G), ("enable", G)]
    saved = json.loads(world.state_file.read_text())
    assert (saved["previous"], saved["history"]) == (world.blue, [world.blue])


def test_bad_strategy_is_refused_by_the_argument_spec(world, capsys):
    result = run_module(capsys, {**world.args, "strategy": "blue-green"})
    assert result["failed"] is True
    assert result["msg"] == ("value of strategy must be one of: sequential, parallel, auto, "
                             "got: blue-green")
    assert world.calls == []
