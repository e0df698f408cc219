# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The health gate: each stage's verdict, the polling loop on a fake clock, the urllib client."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (
    HttpResult,
    check_once,
    urllib_request,
    wait_healthy,
)
from ports import free_port

from unit.fake_host import (
    CONN_REFUSED,
    HANG,
    NOT_JSON,
    WRONG_MODEL,
    ZERO_TOKENS,
    FakeHost,
)

BASE = "http://127.0.0.1:8001"
HEALTH_OK = HttpResult(200, "")
MODELS_OK = HttpResult(200, json.dumps({"object": "list", "data": [{"id": "tiny"}]}))
DONE_OK = HttpResult(200, json.dumps({"choices": [{"text": " world, and more text"}],
                                      "usage": {"completion_tokens": 4}}))


class Scripted:
    """An HTTP fake that answers by path and records each call."""

    def __init__(self, health=HEALTH_OK, models=MODELS_OK, completion=DONE_OK):
        self.answers = {"/health": health, "/v1/models": models, "/v1/completions": completion}
        self.calls = []

    def __call__(self, method, url, payload=None, timeout=10.0):
        self.calls.append((method, url, payload, timeout))
        return self.answers[url[len(BASE):]]


def test_check_once_passes_all_three_stages_with_the_right_requests():
    http = Scripted()
    assert check_once(BASE + "/", "tiny", smoke_prompt="Hi", request=http) == (
        True, "ok", "4 completion tokens: ' world, and more text'")
    assert http.calls == [
        ("GET", BASE + "/health", None, 10.0),
        ("GET", BASE + "/v1/models", None, 10.0),
        ("POST", BASE + "/v1/completions",
         {"model": "tiny", "prompt": "Hi", "max_tokens": 4, "temperature": 0}, 30.0),
    ]


def test_check_once_short_timeout_caps_the_probes():
    http = Scripted()
    check_once(BASE, "tiny", request=http, timeout=3.0)
    assert [c[3] for c in http.calls] == [3.0, 3.0, 3.0]


@pytest.mark.parametrize(("answers", "stage", "detail"), [
    ({"health": HttpResult(error=CONN_REFUSED)}, "health", f"GET /health: {CONN_REFUSED}"),
    ({"health": HttpResult(503, "loading")}, "health", "GET /health: HTTP 503"),
    ({"models": HttpResult(500, "boom")}, "models", "GET /v1/models: HTTP 500"),
    ({"models": HttpResult(error="timed out")}, "models", "GET /v1/models: timed out"),
    ({"models": HttpResult(200, "<html>login</html>")}, "models",
     "GET /v1/models: not JSON: '<html>login</html>'"),
    ({"models": HttpResult(200, "[1, 2]")}, "models", "GET /v1/models: not JSON: '[1, 2]'"),
    ({"models": HttpResult(200, '{"data": null}')}, "models",
     "GET /v1/models: not JSON: '{\"data\": null}'"),
    ({"models": HttpResult(200, json.dumps({"data": [{"id": "other"}, {"id": "x"}]}))}, "models",
     "GET /v1/models: wanted model 'tiny', server lists ['other', 'x']"),
    ({"completion": HttpResult(404, '{"error": "no such model"}')}, "completion",
     'POST /v1/completions: HTTP 404: {"error": "no such model"}'),
    ({"completion": HttpResult(error="timed out")}, "completion",
     "POST /v1/completions: timed out"),
    ({"completion": HttpResult(200, "Internal")}, "completion",
     "POST /v1/completions: not JSON: 'Internal'"),
    ({"completion": HttpResult(200, json.dumps({"usage": {"completion_tokens": 0}}))},
     "completion", "POST /v1/completions: answered with 0 completion tokens"),
    ({"completion": HttpResult(200, json.dumps({"choices": []}))},
     "completion", "POST /v1/completions: answered with 0 completion tokens"),
])
def test_check_once_failure_messages(answers, stage, detail):
    assert check_once(BASE, "tiny", request=Scripted(**answers)) == (False, stage, detail)


@pytest.mark.parametrize(("body", "detail"), [
    ({"usage": {"completion_tokens": 2}, "choices": []}, "2 completion tokens: ''"),
    ({"usage": {"completion_tokens": 1}, "choices": [{"text": None}]}, "1 completion tokens: ''"),
    ({"usage": {"completion_tokens": 1}}, "1 completion tokens: ''"),
])
def test_check_once_passes_on_tokens_even_without_text(body, detail):
    http = Scripted(completion=HttpResult(200, json.dumps(body)))
    assert check_once(BASE, "tiny", request=http) == (True, "ok", detail)


def test_check_once_odd_completion_shape_is_a_failure_not_a_traceback():
    http = Scripted(completion=HttpResult(200, '{"usage": {"completion_tokens": 1}, '
                                               '"choices": ["x"]}'))
    ok, stage, detail = check_once(BASE, "tiny", request=http)
    assert (ok, stage) == (False, "completion")
    assert detail.startswith("POST /v1/completions: not JSON: ")


def test_check_once_stops_at_the_first_failing_stage():
    http = Scripted(health=HttpResult(error=CONN_REFUSED))
    check_once(BASE, "tiny", request=http)
    assert [c[1] for c in http.calls] == [BASE + "/health"]


def _host(behaviour="healthy", warmup_s=0.0):
    host = FakeHost()
    host.unit("vllm-tiny.service", BASE, "tiny", behaviour=behaviour, warmup_s=warmup_s)
    host.run_command(["systemctl", "start", "vllm-tiny.service"])
    return host


def _wait(host, timeout_s=10, **kwargs):
    return wait_healthy(BASE, "tiny", timeout_s, interval_s=2.0, request=host.request,
                        clock=host.clock, sleep=host.sleep, **kwargs)


def test_wait_healthy_polls_until_the_server_has_loaded():
    host = _host(warmup_s=5.0)
    assert _wait(host) == {"ok": True, "seconds": 6.0, "stage": "ok",
                           "detail": "4 completion tokens: ' world'", "attempts": 4}
    assert host.sleeps == [2.0, 2.0, 2.0]


def test_wait_healthy_counts_seconds_and_the_timeout_from_the_start_command():
    # Started 1.5 s before the gate's first probe (the start command itself, and what ran
    # after it): that is part of its time-to-healthy, and of its startup timeout.
    host = _host(warmup_s=5.0)  # started at 0, healthy from 5.0, probed at 1.5, 3.5, 5.5
    host.now = 1.5
    assert _wait(host, since=0.0)["seconds"] == 5.5
    host = _host(warmup_s=5.0)
    host.now = 1.5
    assert _wait(host)["seconds"] == 4.0  # without `since`: from the first probe
    host = _host(HANG)
    host.now = 1.5
    outcome = _wait(host, timeout_s=10, since=0.0)
    assert (outcome["ok"], outcome["seconds"], outcome["attempts"]) == (False, 11.5, 6)


def test_wait_healthy_gives_up_after_the_timeout_on_the_fake_clock():
    host = _host(HANG)
    assert _wait(host, timeout_s=10) == {
        "ok": False, "seconds": 10.0, "stage": "health",
        "detail": f"not healthy after 10 s (last: GET /health: {CONN_REFUSED})",
        "attempts": 6}
    assert host.now == 10.0
    assert host.sleeps == [2.0] * 5


def test_wait_healthy_wrong_model_fails_at_once_without_retry():
    host = _host(WRONG_MODEL)
    assert _wait(host, timeout_s=600) == {
        "ok": False, "seconds": 0.0, "stage": "models",
        "detail": "GET /v1/models: wanted model 'tiny', server lists ['someone-else']",
        "attempts": 1}
    assert host.sleeps == []


@pytest.mark.parametrize(("behaviour", "detail"), [
    (NOT_JSON, "GET /v1/models: not JSON: '<html>proxy login</html>'"),
    (ZERO_TOKENS, "POST /v1/completions: answered with 0 completion tokens"),
])
def test_wait_healthy_retries_other_model_and_completion_failures(behaviour, detail):
    host = _host(behaviour)
    result = _wait(host, timeout_s=4)
    assert result == {"ok": False, "seconds": 4.0, "stage": result["stage"],
                      "detail": f"not healthy after 4 s (last: {detail})", "attempts": 3}


def test_alive_reporting_death_ends_the_wait_at_once():
    host = _host(HANG)
    verdicts = iter([(True, ""), (True, ""), (False, "vllm-tiny.service failed (failed)")])
    result = _wait(host, timeout_s=600, alive=lambda: next(verdicts))
    assert result == {"ok": False, "seconds": 4.0, "stage": "process",
                      "detail": "vllm-tiny.service failed (failed)", "attempts": 3}
    assert host.sleeps == [2.0, 2.0]


def test_alive_is_not_asked_once_the_gate_passes():
    host = _host()

    def alive():
        raise AssertionError("alive() asked after a passing check")

    assert _wait(host, alive=alive)["ok"] is True


# -- the default client, against a real loopback server ------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._answer(200, "")
        else:
            self._answer(503, '{"error": "loading"}')

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self._answer(200, json.dumps({"got": json.loads(body),
                                      "type": self.headers["Content-Type"]}))


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_urllib_request_get_post_and_http_error(server):
    res = urllib_request("GET", server + "/health", timeout=2)
    assert (res.status, res.body, res.error) == (200, "", None)
    res = urllib_request("POST", server + "/v1/completions", {"prompt": "é"}, timeout=2)
    assert res.status == 200
    assert json.loads(res.body) == {"got": {"prompt": "é"}, "type": "application/json"}
    res = urllib_request("GET", server + "/v1/models", timeout=2)
    assert (res.status, res.body, res.error) == (503, '{"error": "loading"}', None)


def test_urllib_request_connection_refused_is_an_error_not_an_exception():
    port = free_port()
    res = urllib_request("GET", f"http://127.0.0.1:{port}/health", timeout=2)
    assert res.status is None
    assert "Connection refused" in res.error
