# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The front door (nginx upstream switch), vLLM's /metrics and the drain.

nginx and the model servers are the fake host's (unit/fake_host.py): `nginx -t`
and `systemctl reload nginx` read the real upstream file these tests write in
tmp_path; HTTP to the front door is proxied to the unit on the loaded port.
"""

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.filter.frontdoor import (
    FilterModule as FrontdoorFilters,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import HttpResult
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import (
    frontdoor as frontdoor_mod,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoor,
    FrontDoorError,
    drain,
    parse_metrics,
    upstream_conf,
    write_atomic,
)
from repo_paths import FIXTURES

from unit.fake_host import CONN_REFUSED, FRONTDOOR_503, NGINX_CONF, FakeHost

ROOT = Path(__file__).resolve().parents[4]
FD_URL = "http://127.0.0.1:8000"
BLUE_URL, GREEN_URL = "http://127.0.0.1:8101", "http://127.0.0.1:8102"
TEST, RELOAD = ["nginx", "-t"], ["systemctl", "reload", "nginx"]

# -- upstream_conf / write_atomic ---------------------------------------------------------


def test_upstream_conf_for_a_port():
    assert upstream_conf(8102, model="green") == (
        "# vllm-fleet front door: active model green\n"
        "# Written by vllm_fleet.fleet.vllm_cutover; do not edit.\n"
        'map $server_port $vllm_fleet_frontdoor_state { default "serving"; }\n'
        'map $server_port $vllm_fleet_active_model { default "green"; }\n'
        "upstream vllm_active {\n"
        "    server 127.0.0.1:8102 max_fails=0;\n"
        "    keepalive 32;\n"
        "    # Idle connections go at 2500 ms, half the model server's 5 s keep-alive:\n"
        "    # reusing one the server has just closed would fail a request.\n"
        "    keepalive_timeout 2500ms;\n"
        "}\n")


def test_upstream_conf_for_a_port_given_as_text_and_no_model_name():
    assert upstream_conf("8102", host="10.0.0.5", server_keepalive_s=75) == (
        "# vllm-fleet front door: active model ?\n"
        "# Written by vllm_fleet.fleet.vllm_cutover; do not edit.\n"
        'map $server_port $vllm_fleet_frontdoor_state { default "serving"; }\n'
        'map $server_port $vllm_fleet_active_model { default ""; }\n'
        "upstream vllm_active {\n"
        "    server 10.0.0.5:8102 max_fails=0;\n"
        "    keepalive 32;\n"
        "    # Idle connections go at 37500 ms, half the model server's 75 s keep-alive:\n"
        "    # reusing one the server has just closed would fail a request.\n"
        "    keepalive_timeout 37500ms;\n"
        "}\n")


def test_upstream_conf_for_none_during_a_switch():
    assert upstream_conf(None, model="ignored") == (
        "# vllm-fleet front door: a model switch is in progress\n"
        "# Written by vllm_fleet.fleet.vllm_cutover; do not edit.\n"
        'map $server_port $vllm_fleet_frontdoor_state { default "switching"; }\n'
        'map $server_port $vllm_fleet_active_model { default ""; }\n'
        "upstream vllm_active {\n"
        "    # No model is active: every request gets the 503 of @vllm_unavailable.\n"
        "    server 127.0.0.1:9 down;\n"
        "}\n")


def test_upstream_conf_for_none_outside_a_switch_is_idle():
    text = upstream_conf(None, switching=False)
    assert text.startswith("# vllm-fleet front door: no active model\n")
    assert 'map $server_port $vllm_fleet_frontdoor_state { default "idle"; }\n' in text
    assert "    server 127.0.0.1:9 down;\n" in text


@pytest.mark.parametrize(("field", "kwargs"), [
    ("model name", {"port": 8102, "model": 'x"; } server evil:1; #'}),
    ("model name", {"port": 8102, "model": "tiny\n"}),
    ("model name", {"port": 8102, "model": "a b"}),
    ("host", {"port": 8102, "host": "127.0.0.1;\n"}),
])
def test_upstream_conf_refuses_values_that_would_change_nginx_configuration(field, kwargs):
    """Written inside nginx's quotes: a quote, space, semicolon or newline would add syntax."""
    with pytest.raises(ValueError, match=f"^{field} .* cannot go into nginx's configuration"):
        upstream_conf(**kwargs)


def test_the_roles_initial_upstream_is_the_cutovers_none():
    """The role writes it once (force: false) through the cutover's own renderer."""
    tasks = yaml.safe_load((ROOT / "roles/vllm_frontdoor/tasks/main.yml").read_text())
    copy = next(t["ansible.builtin.copy"] for t in tasks
                if "ansible.builtin.copy" in t and "upstream" in t["name"])
    assert copy["content"] == "{{ none | vllm_fleet.fleet.frontdoor_upstream }}"
    assert copy["force"] is False
    filters = FrontdoorFilters().filters()
    assert filters["frontdoor_upstream"](None) == upstream_conf(None, switching=False)
    assert filters["frontdoor_upstream"]("8011", model="m") == upstream_conf(8011, model="m")


def test_write_atomic_replaces_the_file_by_rename(tmp_path):
    path = tmp_path / "upstream.conf"
    path.write_text("old\n")
    os.chmod(path, 0o600)
    inode = path.stat().st_ino
    write_atomic(str(path), "new\n")
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert path.stat().st_ino != inode  # a new file renamed over the old, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["upstream.conf"]


def test_write_atomic_failure_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "upstream.conf"
    path.write_text("old\n")

    def refuse(_src, _dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(frontdoor_mod.os, "replace", refuse)
    with pytest.raises(OSError, match="cross-device"):
        write_atomic(str(path), "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["upstream.conf"]


# -- FrontDoor.point -------------------------------------------------------------------------


class Door:
    """A fake host with blue (8101) and green (8102) serving and nginx loaded with `loaded`."""

    def __init__(self, tmp_path, loaded=None, text=None, green_warmup=0.0):
        self.host = FakeHost()
        self.host.unit("vllm-blue.service", BLUE_URL, "blue-model", active=True)
        green = self.host.unit("vllm-green.service", GREEN_URL, "green-model", active=True,
                               warmup_s=green_warmup)
        green.started_at = 0.0
        self.file = tmp_path / "vllm-fleet" / "upstream.conf"
        self.file.parent.mkdir()
        self.file.write_text(upstream_conf(loaded, model="blue") if text is None else text)
        self.nginx = self.host.frontdoor(FD_URL, self.file)
        self.nginx.loaded = loaded
        self.door = FrontDoor(self.host.run_command, str(self.file), FD_URL + "/",
                              request=self.host.request, clock=self.host.clock,
                              sleep=self.host.sleep)


def test_point_writes_tests_reloads_and_confirms(tmp_path):
    d = Door(tmp_path, loaded=8101)
    inode = d.file.stat().st_ino
    assert d.door.point(8102, "green", "green-model") == 0.0
    assert d.file.read_text() == upstream_conf(8102, model="green")
    assert d.file.stat().st_ino != inode
    assert sorted(p.name for p in d.file.parent.iterdir()) == ["upstream.conf"]
    assert d.host.calls == [TEST, RELOAD]
    assert d.host.timeline == ["nginx -t", "reload nginx: 8102"]
    assert d.host.http == [("GET", FD_URL + "/v1/models")]
    # and the front door now really answers with green
    res = d.host.request("GET", FD_URL + "/v1/models")
    assert json.loads(res.body)["data"] == [{"id": "green-model"}]


def test_point_at_none_confirms_the_503(tmp_path):
    d = Door(tmp_path, loaded=8101)
    assert d.door.point(None) == 0.0
    assert d.file.read_text() == upstream_conf(None)
    assert d.nginx.switches == [(0.0, None)]
    res = d.host.request("GET", FD_URL + "/v1/chat/completions")
    assert (res.status, res.body) == (503, FRONTDOOR_503)


def test_point_waits_until_green_answers_through_the_front_door(tmp_path):
    d = Door(tmp_path, loaded=None, green_warmup=0.48)
    assert d.door.point(8102, "green", "green-model") == 0.5
    assert d.host.sleeps == [0.05] * 10
    assert len(d.host.http) == 11


def test_point_rejected_by_nginx_restores_the_old_file_and_does_not_reload(tmp_path):
    d = Door(tmp_path, loaded=8101)
    old = d.file.read_text()
    d.nginx.test_error = ('nginx: [emerg] invalid parameter "max_fails=0" in '
                          "/etc/nginx/vllm-fleet/upstream.conf:4")
    with pytest.raises(FrontDoorError) as caught:
        d.door.point(8102, "green", "green-model")
    assert str(caught.value) == (
        "nginx rejected the new upstream (nginx -t rc=1): nginx: [emerg] invalid parameter "
        '"max_fails=0" in /etc/nginx/vllm-fleet/upstream.conf:4\n'
        f"nginx: configuration file {NGINX_CONF} test failed")
    assert d.file.read_text() == old
    assert d.host.calls == [TEST]
    assert (d.nginx.loaded, d.host.http) == (8101, [])


def test_point_rejected_with_no_old_file_leaves_none(tmp_path):
    d = Door(tmp_path)
    d.file.unlink()
    d.nginx.test_error = "nginx: [emerg] unexpected end of file"
    with pytest.raises(FrontDoorError, match=r"^nginx rejected the new upstream \(nginx -t rc=1\)"):
        d.door.point(8102, "green", "green-model")
    assert sorted(d.file.parent.iterdir()) == []


def test_point_reload_failure_raises_and_puts_the_old_file_back(tmp_path):
    d = Door(tmp_path, loaded=8101)
    old = d.file.read_text()
    d.nginx.active = False
    with pytest.raises(FrontDoorError) as caught:
        d.door.point(8102, "green", "green-model")
    assert str(caught.value) == ("reloading nginx failed (systemctl reload nginx rc=1): "
                                 "nginx.service is not active, cannot reload.")
    assert d.host.calls == [TEST, RELOAD]
    # nginx still runs the old upstream, so the file says so: a re-run switches again
    assert d.file.read_text() == old
    assert d.host.http == []


def test_point_when_the_file_is_already_right_only_confirms(tmp_path):
    d = Door(tmp_path, loaded=8102, text=upstream_conf(8102, model="green"))
    before = d.file.stat()
    assert d.door.point(8102, "green", "green-model") == 0.0
    assert d.host.calls == []
    assert d.file.stat().st_ino == before.st_ino
    assert d.file.stat().st_mtime_ns == before.st_mtime_ns
    assert d.host.http == [("GET", FD_URL + "/v1/models")]


def test_settle_timeout_names_what_the_front_door_still_serves(tmp_path):
    # the file is right but nginx still runs blue (a reload that never happened)
    d = Door(tmp_path, loaded=8101, text=upstream_conf(8102, model="green"))
    d.door.settle_timeout = 2.0
    with pytest.raises(FrontDoorError) as caught:
        d.door.point(8102, "green", "green-model")
    assert str(caught.value) == ("front door http://127.0.0.1:8000 did not switch within 2.0 s: "
                                 "wanted green-model, front door lists ['blue-model']")
    assert d.host.calls == []
    assert 2.0 <= d.host.now < 2.1


def test_settle_timeout_when_waiting_for_the_503(tmp_path):
    d = Door(tmp_path, loaded=8101, text=upstream_conf(None))
    d.door.settle_timeout = 0.5
    with pytest.raises(FrontDoorError, match=r"within 0.5 s: wanted 503, got 200$"):
        d.door.point(None)


def test_settle_timeout_when_the_front_door_is_down(tmp_path):
    d = Door(tmp_path, loaded=8102, text=upstream_conf(8102, model="green"))
    d.nginx.active = False
    d.door.settle_timeout = 0.5
    with pytest.raises(FrontDoorError) as caught:
        d.door.point(8102, "green", "green-model")
    assert str(caught.value).endswith(f"0.5 s: wanted green-model, got {CONN_REFUSED}")


# -- parse_metrics ---------------------------------------------------------------------------

# Hand-written in the shape of a vLLM 0.11 /metrics page (prometheus_client exposition) for a
# data-parallel server with two engines; the numbers are made up.
VLLM_METRICS = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 21873.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.3127808e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Kimi K2.5 NVFP4"} 7.0
vllm:num_requests_running{engine="1",model_name="Kimi K2.5 NVFP4"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Kimi K2.5 NVFP4"} 2.0
vllm:num_requests_waiting{engine="1",model_name="Kimi K2.5 NVFP4"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Kimi K2.5 NVFP4"} 0.4127
vllm:kv_cache_usage_perc{engine="1",model_name="Kimi K2.5 NVFP4"} 0.2981
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="Kimi K2.5 NVFP4"} 1532.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="Kimi K2.5 NVFP4"} 17.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="Kimi K2.5 NVFP4"} 4.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="Kimi K2.5 NVFP4"} 1549.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="Kimi K2.5 NVFP4"} 1549.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="Kimi K2.5 NVFP4"} 18211.53

"""


def test_parse_metrics_sums_the_gauges_over_engines():
    assert parse_metrics(VLLM_METRICS) == {"vllm:num_requests_running": 12.0,
                                           "vllm:num_requests_waiting": 2.0}


def test_parse_metrics_other_names_and_unlabelled_samples():
    totals = parse_metrics(VLLM_METRICS, names=("vllm:kv_cache_usage_perc",
                                                "process_resident_memory_bytes",
                                                "vllm:e2e_request_latency_seconds"))
    assert totals == {"vllm:kv_cache_usage_perc": pytest.approx(0.7108),
                      "process_resident_memory_bytes": 4312780800.0,
                      # the histogram's _bucket/_count/_sum series are other names
                      "vllm:e2e_request_latency_seconds": 0.0}


def test_parse_metrics_skips_a_garbled_sample_and_reads_an_empty_page_as_zero():
    text = ('vllm:num_requests_running{engine="0"} 3.0\n'
            'vllm:num_requests_running{engine="1"} NaNish\n'
            "vllm:num_requests_running\n")
    assert parse_metrics(text) == {"vllm:num_requests_running": 3.0,
                                   "vllm:num_requests_waiting": 0.0}
    assert parse_metrics("") == {"vllm:num_requests_running": 0.0,
                                 "vllm:num_requests_waiting": 0.0}


def test_the_fake_hosts_metrics_parse_like_vllms():
    """The fake's /metrics (used by the cutover tests) reads as its requests in flight."""
    host = FakeHost()
    blue = host.unit("vllm-blue.service", BLUE_URL, "blue-model", active=True, engines=2,
                     max_running=3)
    blue.inflight = [1.0, 2.0, 3.0, 4.0, 5.0, 0.5]
    res = host.request("GET", BLUE_URL + "/metrics")
    assert 'vllm:num_requests_running{engine="1",model_name="blue-model"} 1.0' in res.body
    assert parse_metrics(res.body) == {"vllm:num_requests_running": 3.0,
                                       "vllm:num_requests_waiting": 3.0}


# -- drain -----------------------------------------------------------------------------------


def blue_with(inflight, **kwargs):
    host = FakeHost()
    unit = host.unit("vllm-blue.service", BLUE_URL, "blue-model", active=True, **kwargs)
    unit.inflight = list(inflight)
    return host


def test_drain_returns_after_two_quiet_reads_once_running_and_waiting_reach_zero():
    host = blue_with([0.3, 0.5, 0.9, 0.9], max_running=3)
    outcome = drain(BLUE_URL + "/", 60.0, request=host.request, clock=host.clock,
                    sleep=host.sleep)
    assert outcome == {"drained": True, "seconds": 1.2, "running": 0, "waiting": 0,
                       "in_flight": 0}
    assert host.events() == ["metrics vllm-blue.service: running=3 waiting=1",
                             "metrics vllm-blue.service: running=3 waiting=0",
                             "metrics vllm-blue.service: running=2 waiting=0",
                             "metrics vllm-blue.service: running=0 waiting=0"]
    assert host.sleeps == [0.2] * 6
    assert host.http == [("GET", BLUE_URL + "/load"), ("GET", BLUE_URL + "/metrics")] * 7


def test_drain_waits_for_a_streams_tail_after_the_engine_has_finished_it():
    """CI, sequential leg of the cutover scenario (the run of 9e8d9b5): blue drained in
    0.013 s with running=0 waiting=0, was stopped, and a streamed completion through the
    front door ended after 1131 bytes (IncompleteRead). The engine's gauges drop a request
    when it finishes; vLLM still writes its stream. /load counts it until the last byte."""
    host = blue_with([])
    host.units["vllm-blue.service"].tails = [0.5]
    outcome = drain(BLUE_URL, 60.0, request=host.request, clock=host.clock, sleep=host.sleep)
    assert outcome == {"drained": True, "seconds": 0.8, "running": 0, "waiting": 0,
                       "in_flight": 0}
    # by the gauges alone it was drained at 0.0 s
    assert host.events() == ["metrics vllm-blue.service: running=0 waiting=0"]


def test_drain_starts_its_quiet_reads_again_when_a_request_arrives_between_them():
    """A request the front door passed just before its hold reaches vLLM a moment later."""
    host = blue_with([])
    unit = host.units["vllm-blue.service"]
    reads = []

    def request(method, url, payload=None, timeout=10.0):
        if url.endswith("/load"):
            reads.append(host.now)
            if len(reads) == 2:  # it arrived after the first quiet read
                unit.inflight.append(host.now + 0.5)
        return host.request(method, url, payload, timeout)

    outcome = drain(BLUE_URL, 60.0, request=request, clock=host.clock, sleep=host.sleep)
    # in flight from 0.2 s to 0.7 s: quiet at 0.0 s, then at 0.8 s and 1.0 s
    assert [round(t, 3) for t in reads] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert outcome == {"drained": True, "seconds": 1.0, "running": 0, "waiting": 0,
                       "in_flight": 0}


def test_drain_of_a_vllm_without_load_reads_the_gauges_alone():
    host = blue_with([0.3])
    host.units["vllm-blue.service"].load_route = False
    assert drain(BLUE_URL, 60.0, request=host.request, clock=host.clock, sleep=host.sleep) == {
        "drained": True, "seconds": 0.6, "running": 0, "waiting": 0, "in_flight": None}


def test_drain_times_out_with_the_counts_left():
    host = blue_with([100.0] * 5, max_running=4)
    outcome = drain(BLUE_URL, 1.0, request=host.request, clock=host.clock, sleep=host.sleep,
                    interval_s=0.25)
    assert outcome == {"drained": False, "seconds": 1.0, "running": 4, "waiting": 1,
                       "in_flight": 5}
    assert host.sleeps == [0.25] * 4


def test_drain_with_nothing_in_flight_returns_after_its_two_quiet_reads():
    host = blue_with([])
    assert drain(BLUE_URL, 60.0, request=host.request, clock=host.clock, sleep=host.sleep) == {
        "drained": True, "seconds": 0.2, "running": 0, "waiting": 0, "in_flight": 0}
    assert host.sleeps == [0.2]


def test_drain_counts_a_dead_server_as_drained():
    host = blue_with([5.0, 6.0])
    host.run_command(["systemctl", "stop", "vllm-blue.service"])
    assert drain(BLUE_URL, 60.0, request=host.request, clock=host.clock, sleep=host.sleep) == {
        "drained": True, "seconds": 0.0, "running": 0, "waiting": 0, "in_flight": 0,
        "note": f"/metrics answered {CONN_REFUSED}"}


def test_drain_server_that_dies_while_draining():
    host = blue_with([5.0])
    calls = []

    def request(method, url, payload=None, timeout=10.0):
        calls.append(url)
        if len(calls) == 5:  # the third read's /load
            host.run_command(["systemctl", "stop", "vllm-blue.service"])
        return host.request(method, url, payload, timeout)

    outcome = drain(BLUE_URL, 60.0, request=request, clock=host.clock, sleep=host.sleep)
    assert outcome == {"drained": True, "seconds": 0.4, "running": 0, "waiting": 0,
                       "in_flight": 0, "note": f"/metrics answered {CONN_REFUSED}"}


# -- drain against real /metrics pages (tests/fixtures/vllm_metrics/SOURCE.md) --------------

VLLM_METRICS_DIR = FIXTURES / "vllm_metrics"
IDLE_0_32 = (VLLM_METRICS_DIR / "vllm-0.32.0-cpu-tiny-gqa-idle.txt").read_text()
STALLED = (VLLM_METRICS_DIR / "vllm-metal-479-stalled-excerpt.txt").read_text()


class Scripted:
    """/metrics answers in order (the last one repeats), on a clock that sleep() advances;
    /load answers 404 (a server read by its gauges alone) and is not recorded."""

    def __init__(self, *pages):
        self.pages = list(pages)
        self.now = 0.0
        self.urls = []

    def request(self, method, url, payload=None, timeout=10.0):
        if url.endswith("/load"):
            return HttpResult(404, '{"detail":"Not Found"}')
        self.urls.append((method, url))
        page = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        return HttpResult(200, page)

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now = round(self.now + seconds, 6)


def test_parse_metrics_reads_a_real_vllm_0_32_page():
    assert "vllm:num_requests_waiting_by_reason" in IDLE_0_32
    assert parse_metrics(IDLE_0_32) == {"vllm:num_requests_running": 0.0,
                                        "vllm:num_requests_waiting": 0.0}


def test_parse_metrics_reads_a_stalled_engine_and_leaves_waiting_by_reason_apart():
    # waiting_by_reason sums to waiting: adding it in would read 12 waiting, not 6.
    assert parse_metrics(STALLED) == {"vllm:num_requests_running": 0.0,
                                      "vllm:num_requests_waiting": 6.0}


def test_drain_waits_for_waiting_requests_while_none_is_running():
    server = Scripted(STALLED, STALLED, IDLE_0_32)
    outcome = drain(BLUE_URL, 60.0, request=server.request, clock=server.clock,
                    sleep=server.sleep)
    assert outcome == {"drained": True, "seconds": 0.6, "running": 0, "waiting": 0,
                       "in_flight": None}
    assert server.urls == [("GET", BLUE_URL + "/metrics")] * 4


def test_drain_of_a_stalled_engine_times_out_with_its_waiting_requests():
    server = Scripted(STALLED)
    outcome = drain(BLUE_URL, 1.0, request=server.request, clock=server.clock,
                    sleep=server.sleep, interval_s=0.25)
    assert outcome == {"drained": False, "seconds": 1.0, "running": 0, "waiting": 6,
                       "in_flight": None}
    assert len(server.urls) == 5


# -- the deployment record as metrics ----------------------------------------------------------
def test_record_metrics_without_an_active_model_has_the_help_lines_only():
    text = frontdoor_mod.record_metrics({"active": None, "previous": None, "history": []})
    assert [line for line in text.splitlines() if not line.startswith("#")] == []
    assert text.count("# TYPE ") == 3


def test_record_metrics_escapes_label_values_as_the_text_format_wants():
    """Prometheus text format 0.0.4: backslash, double quote and line feed are escaped."""
    active = {"model": "m", "served_model_name": 'a"b\\c\nd', "repo_id": None,
              "revision": "r", "vllm_version": "v", "vllm_lock": "3f0c9a61d2b84e07",
              "since": "not a time"}
    lines = frontdoor_mod.record_metrics({"active": active}).splitlines()
    info = [line for line in lines if line.startswith("vllm_fleet_active_model_info{")]
    assert info == [('vllm_fleet_active_model_info{model="m",served_model_name="a\\"b\\\\c\\nd",'
                     'repo_id="",revision="r",vllm_version="v",vllm_lock="3f0c9a61d2b84e07"} 1')]
    assert not [line for line in lines if line.startswith("vllm_fleet_active_since_seconds")]


# The record's sleepers as the warm switch writes them (issue 35: `sleeping`, entries like
# `active` with level, since, main_pid).
WARM_RECORD = {
    "active": {"model": "tiny_mla", "unit": "vllm-tiny_mla.service", "sleep_mode": True},
    "sleeping": [{"model": "tiny_gqa", "unit": "vllm-tiny_gqa.service", "sleep_mode": True,
                  "level": 1, "since": "2026-12-05T06:00:00+00:00", "main_pid": 4242}],
    "previous": {"model": "tiny_gqa", "unit": "vllm-tiny_gqa.service"},
    "history": [{"model": "tiny_gqa"}, {"model": "old"}],
}


def state_lines(record):
    return [line for line in frontdoor_mod.record_metrics(record).splitlines()
            if line.startswith("vllm_fleet_model_state")]


def test_model_state_metrics_serving_sleeping_stopped():
    """vllm_fleet_model_state{model,state} 1 per model of the record (issue 35 item 3): the
    previous model that sleeps is sleeping, not stopped; history adds nothing."""
    assert state_lines(WARM_RECORD) == [
        'vllm_fleet_model_state{model="tiny_mla",state="serving"} 1',
        'vllm_fleet_model_state{model="tiny_gqa",state="sleeping"} 1']
    cold = {**WARM_RECORD, "sleeping": []}
    assert state_lines(cold) == [
        'vllm_fleet_model_state{model="tiny_mla",state="serving"} 1',
        'vllm_fleet_model_state{model="tiny_gqa",state="stopped"} 1']
    # A record from before warm switches (no `sleeping` key) reads the same as an empty list.
    assert state_lines({k: v for k, v in cold.items() if k != "sleeping"}) == state_lines(cold)
    assert state_lines({"active": None, "previous": None, "history": []}) == []


def test_a_sleeper_whose_unit_does_not_run_is_stopped_in_status():
    """A new user's trial stopped a sleeper's unit by hand: status.yml went on saying
    "sleeping". status.yml asks systemd (systemctl is-active) and passes the units that do not
    run; the record alone (the metrics) still says sleeping."""
    unit = WARM_RECORD["sleeping"][0]["unit"]
    assert frontdoor_mod.model_states(WARM_RECORD, [unit]) == [
        ("tiny_mla", "serving"), ("tiny_gqa", "stopped")]
    assert frontdoor_mod.model_states(WARM_RECORD, ["vllm-other.service"]) == [
        ("tiny_mla", "serving"), ("tiny_gqa", "sleeping")]


def test_publish_writes_nothing_without_a_record_file(tmp_path):
    door = FrontDoor(None, str(tmp_path / "upstream.conf"), FD_URL)
    door.publish({"active": {"model": "m"}})
    assert list(tmp_path.iterdir()) == []
    door.record_file = str(tmp_path / "deployment.prom")
    door.publish({"active": {"model": "m", "since": "2026-11-30T20:00:00+00:00"}})
    assert (tmp_path / "deployment.prom").read_text().endswith(
        "vllm_fleet_active_since_seconds 1796068800\n"
        "# HELP vllm_fleet_model_state Each model of the deployment record (1) and its state: "
        "serving (active), sleeping (a warm switch's standby), stopped (the previous model).\n"
        "# TYPE vllm_fleet_model_state gauge\n"
        'vllm_fleet_model_state{model="m",state="serving"} 1\n')


def test_settle_wants_the_new_state_on_several_answers_in_a_row(tmp_path):
    """After a reload an old nginx worker may still answer the old way for a moment."""
    models = json.dumps({"data": [{"id": "green-model"}]})
    answers = [HttpResult(200, models), HttpResult(503, "{}"), HttpResult(200, models),
               HttpResult(200, models), HttpResult(200, models), HttpResult(503, "{}")]
    asked = []
    now = [0.0]

    def request(method, url, timeout=10.0):
        asked.append(url)
        return answers[len(asked) - 1]

    def sleep(seconds):
        now[0] += seconds

    door = FrontDoor(None, str(tmp_path / "u.conf"), FD_URL, request=request,
                     clock=lambda: now[0], sleep=sleep, confirmations=3)
    door._settle("green-model")
    assert len(asked) == 5  # the one old answer reset the count
    door1 = FrontDoor(None, str(tmp_path / "u.conf"), FD_URL, request=lambda *a, **k: answers[0],
                      clock=lambda: now[0], sleep=sleep)
    door1._settle("green-model")


# -- the hold: a sequential switch's 503 without a reload --------------------------------------
def test_hold_stage_and_point_reload_nginx_once_and_open_on_one_answer(tmp_path):
    d = Door(tmp_path, loaded=8101)
    hold = tmp_path / "vllm-fleet" / "switching"
    d.nginx.hold_file = hold
    d.door.hold_file = str(hold)
    assert not d.door.holding()
    d.door.hold()
    assert d.door.holding()
    assert d.host.calls == []  # no nginx -t, no reload
    assert d.host.http == [("GET", FD_URL + "/v1/models")]  # one 503 confirms it
    assert d.host.request("GET", FD_URL + "/v1/models").status == 503
    d.door.stage(8102, "green")
    assert d.host.timeline == ["nginx -t", "reload nginx: 8102"]
    assert d.host.request("GET", FD_URL + "/v1/models").status == 503  # still held
    d.door.point(8102, "green", "green-model")
    assert d.host.timeline == ["nginx -t", "reload nginx: 8102"]  # nothing more to load
    assert not hold.exists()
    res = d.host.request("GET", FD_URL + "/v1/models")
    assert json.loads(res.body)["data"] == [{"id": "green-model"}]
    assert sorted(p.name for p in hold.parent.iterdir()) == ["upstream.conf"]


def test_without_a_hold_file_hold_points_at_nothing_and_stage_does_nothing(tmp_path):
    d = Door(tmp_path, loaded=8101)
    d.door.hold()
    assert d.host.timeline == ["nginx -t", "reload nginx: none"]
    d.door.stage(8102, "green")
    assert d.host.timeline == ["nginx -t", "reload nginx: none"]
    assert d.file.read_text() == upstream_conf(None)
    assert not d.door.holding()


def test_point_ends_a_hold_even_where_it_points_at_nothing(tmp_path):
    d = Door(tmp_path, loaded=8101)
    hold = tmp_path / "vllm-fleet" / "switching"
    d.nginx.hold_file = hold
    d.door.hold_file = str(hold)
    d.door.hold()
    d.door.point(None, switching=False)  # a rollback that brought nothing back
    assert not hold.exists()
    assert d.file.read_text() == upstream_conf(None, switching=False)
