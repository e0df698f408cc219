# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/balancers.py: the candidates' configurations, probes, table and verdict.

The nginx configuration runs in Debian's real nginx (tests/nginx_frontdoor.py's runner)
before small stdlib servers on loopback that stand in for the hosts' front doors: they
accept only the hosts' key, as the lab's do, and stream in chunks 0.1 s apart. The
HAProxy drain speaks to a real HAProxy's runtime API (tests/haproxy_balancer.py).
vllm-router runs when `vllm-router` is on PATH (pip install vllm-router==0.1.17 in a
throwaway venv); otherwise that test is skipped. The table, the key and stream
verdicts and the final verdict run on hand-made rows.
"""

import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from haproxy_balancer import HAVE_HAPROXY, balancer
from nginx_frontdoor import HAVE_NGINX, free_port, nginx
from repo_paths import ROOT

spec = importlib.util.spec_from_file_location("bench_balancers", ROOT / "bench" / "balancers.py")
balancers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(balancers)

CLIENT_KEY = "client-key-of-the-fleet-0123"
HOSTS_KEY = "hosts-key-of-the-balancer-0123"
VLLM_ROUTER = shutil.which("vllm-router")
needs_nginx = pytest.mark.skipif(not HAVE_NGINX, reason="nginx is not installed")
needs_haproxy = pytest.mark.skipif(not HAVE_HAPROXY, reason="haproxy is not installed")
needs_router = pytest.mark.skipif(
    VLLM_ROUTER is None, reason="vllm-router is not on PATH (pip install vllm-router==0.1.17)")
WAIT_S = 15  # bound on waits for a server's state; never reached when things work
# vllm-router's start and a worker's return: measured 1-2 s idle, up to 45 s on 2 busy cores
ROUTER_WAIT_S = 180
STREAM_CHUNKS = 5


class FrontDoor(BaseHTTPRequestHandler):
    """A host's front door: /health open, the rest only with the hosts' key."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_args):
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.send_json(200, {})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.seen.append((self.path, self.headers.get("Authorization"), body.get("model")))
        if self.headers.get("Authorization") != f"Bearer {HOSTS_KEY}":
            self.send_json(401, {"error": {"code": "invalid_api_key"}})
        elif body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n in range(STREAM_CHUNKS):
                self.chunk(f"data: {json.dumps({'n': n, 'door': self.server.name})}\n\n")
                time.sleep(0.1)
            self.chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_json(200, {"model": body.get("model"), "door": self.server.name,
                                 "choices": [{"text": "x"}]})

    def chunk(self, text):
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class Door(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, name):
        super().__init__(("127.0.0.1", 0), FrontDoor)
        self.name = name
        self.seen = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def doors():
    both = [Door("h1"), Door("h2")]
    for door in both:
        threading.Thread(target=door.serve_forever, args=(0.05,), daemon=True).start()
    yield both
    for door in both:
        door.shutdown()
        door.server_close()


def closed_url():
    return f"http://127.0.0.1:{free_port()}"  # bound and closed again: nothing listens there


def keys_at(url):
    return {"wrong": balancers.completion_status(url, "default", balancers.WRONG_KEY),
            "client": balancers.completion_status(url, "default", CLIENT_KEY),
            "hosts": balancers.completion_status(url, "default", HOSTS_KEY)}


# ---- the configurations ------------------------------------------------------------------

def test_nginx_conf_names_both_servers_the_client_keys_and_the_hosts_key():
    text = balancers.nginx_conf(8001, ["http://172.31.250.11:8000", "http://172.31.250.12:8000"],
                                [CLIENT_KEY, "another-client-key-0123"], HOSTS_KEY)
    lines = [line.strip() for line in text.splitlines()]
    assert "listen 8001;" in lines
    assert [line for line in lines if line.startswith("server 172.")] == [
        "server 172.31.250.11:8000 max_fails=1 fail_timeout=10s;",
        "server 172.31.250.12:8000 max_fails=1 fail_timeout=10s;"]
    assert [line for line in lines if line.startswith('"Bearer ')] == [
        f'"Bearer {CLIENT_KEY}" 1;', '"Bearer another-client-key-0123" 1;']
    assert f'proxy_set_header Authorization "Bearer {HOSTS_KEY}";' in lines
    assert "proxy_buffering off;" in lines
    assert "proxy_next_upstream error timeout http_502 http_503 http_504;" in lines
    assert "non_idempotent" not in text.replace("(non_idempotent", "")  # only in the comment
    assert "add_header Retry-After 30 always;" in lines


@pytest.mark.parametrize("bad", ['has"quote-0123456789', "has space 0123456789", "short"])
def test_nginx_conf_refuses_a_key_it_could_not_quote(bad):
    with pytest.raises(ValueError, match="16 or more"):
        balancers.nginx_conf(8001, ["http://h:8000"], [bad], HOSTS_KEY)
    with pytest.raises(ValueError, match="16 or more"):
        balancers.nginx_conf(8001, ["http://h:8000"], [CLIENT_KEY], bad)


def test_router_argv_is_the_pool_the_policy_the_key_and_the_labs_checks():
    argv = balancers.router_argv(8002, ["http://a:8000", "http://b:8000"], HOSTS_KEY)
    assert argv == [
        "/opt/vllm-router/bin/vllm-router", "--host", "0.0.0.0", "--port", "8002",  # noqa: S104
        "--worker-urls", "http://a:8000", "http://b:8000", "--policy", "round_robin",
        "--api-key", HOSTS_KEY, "--health-check-endpoint", "/health",
        "--health-check-interval-secs", "1", "--health-failure-threshold", "3",
        "--health-success-threshold", "2", "--health-check-timeout-secs", "2",
        "--worker-startup-check-interval", "1", "--log-level", "warning"]
    assert balancers.router_argv(1, ["http://a:8000"], HOSTS_KEY, "cache_aware")[8] == "cache_aware"


def test_parse_hosts_keeps_the_order_and_refuses_what_is_not_name_equals_url():
    assert balancers.parse_hosts(["h1=http://10.0.0.1:8000/", "h2=http://10.0.0.2:8000"]) == [
        ("h1", "http://10.0.0.1:8000"), ("h2", "http://10.0.0.2:8000")]
    for bad in ("h1", "=http://x:1", "h1=x:1", "h1="):
        with pytest.raises(ValueError, match="NAME=http://ADDRESS:PORT"):
            balancers.parse_hosts([bad])


def test_rotations_put_each_target_first_in_turn():
    assert balancers.rotations(["d", "a", "b"], 4) == [
        ["d", "a", "b"], ["a", "b", "d"], ["b", "d", "a"], ["d", "a", "b"]]
    assert balancers.rotations(["d"], 2) == [["d"], ["d"]]


# ---- the verdicts on hand-made figures ---------------------------------------------------

def probe(**changes):
    found = {"status": 200, "chunks": 33, "first_ms": 40.0, "total_ms": 400.0, "done": True}
    found.update(changes)
    return found


def test_a_stream_streams_when_its_first_chunk_comes_before_half_time():
    assert balancers.streamed(probe()) is True
    assert balancers.streamed(probe(first_ms=200.0)) is True  # exactly half
    assert balancers.streamed(probe(first_ms=395.0)) is False  # held back to the end
    assert balancers.streamed(probe(done=False)) is False
    assert balancers.streamed(probe(chunks=1)) is False
    assert balancers.streamed(probe(status=401, chunks=0, first_ms=None)) is False
    assert balancers.streamed(probe(status=None, chunks=0, first_ms=None, done=False)) is False


@pytest.mark.parametrize(("keys", "check"), [
    ({"wrong": 401, "client": 200, "hosts": 401}, "own"),
    ({"wrong": 401, "client": 401, "hosts": 200}, "passes on"),
    ({"wrong": 200, "client": 200, "hosts": 200}, "unclear"),  # checks nothing at all
    ({"wrong": 401, "client": 200, "hosts": 200}, "unclear"),  # lets the hosts' key in too
    ({"wrong": None, "client": None, "hosts": None}, "unclear"),
])
def test_key_check_reads_the_three_statuses(keys, check):
    assert balancers.key_check(keys) == check


def row(name="haproxy", **changes):
    found = {"name": name, "url": "http://lb:8000", "key": "client",
             "keys": {"wrong": 401, "client": 200, "hosts": 401}, "key_check": "own",
             "alias": 200, "served": 404, "stream": probe(), "streamed": True,
             "p50": 17.5, "p99": 30.25, "added_p50": 5.0, "added_p99": 9.75,
             "latency_sent": 200, "latency_failed": 0,
             "loss": {"host": "h2", "sent": 300, "failed": 0, "failed_while_down": 0,
                      "examples": [], "down_s": 20.1},
             "drain": {"ok": True, "short": "yes, runtime API", "how": "runtime API"}}
    found.update(changes)
    return found


def direct(**changes):
    values = {"key": "hosts", "keys": {"wrong": 401, "client": 401, "hosts": 200},
              "key_check": "passes on", "served": 200, "p50": 12.5, "p99": 20.5,
              "added_p50": 0.0, "added_p99": 0.0, "loss": None,
              "drain": {"ok": None, "short": "-", "how": ""}}
    values.update(changes)
    return row("direct", **values)


def test_a_correct_candidate_misses_nothing_and_the_served_name_is_not_required():
    assert balancers.misses(row()) == []  # its served name answered 404: shown, not required


def test_each_missed_check_is_named():
    loss = {"host": "h2", "sent": 310, "failed": 3, "failed_while_down": 3,
            "examples": ["502", "RemoteDisconnected: x"], "down_s": 20.0}
    assert balancers.misses(row(loss=loss)) == [
        "3 of 310 requests failed while h2 was away (502, RemoteDisconnected: x)"]
    assert balancers.misses(row(streamed=False, stream=probe(first_ms=399.0))) == [
        f"the stream did not come as made ({probe(first_ms=399.0)})"]
    assert balancers.misses(row(alias=404)) == ["the alias answered 404"]
    assert balancers.misses(row(latency_failed=2)) == ["2 of 200 latency requests failed"]
    assert balancers.misses(row(drain={"ok": False, "short": "no", "how": "x"})) == [
        "no runtime drain"]
    passes_on = row(key="hosts", keys={"wrong": 401, "client": 401, "hosts": 200},
                    key_check="passes on")
    assert balancers.misses(passes_on) == [
        ("checks no key: the client's key goes on to the hosts, so clients must hold the "
         "hosts' key")]
    open_door = row(keys={"wrong": 200, "client": 200, "hosts": 200}, key_check="unclear")
    assert balancers.misses(open_door) == [
        "a wrong key answered 200", "keys unclear (wrong/client/hosts' key: 200/200/200)"]
    nothing = row(key=None, keys={"wrong": None, "client": None, "hosts": None})
    assert balancers.misses(nothing) == [
        "served no key the bench holds (wrong/client/hosts' key: None/None/None)"]


def test_the_verdict_keeps_the_correct_candidate_with_the_lowest_added_p50():
    rows = [direct(), row("haproxy", added_p50=5.25, added_p99=100.0),
            row("nginx", added_p50=1.5, added_p99=3.0,
                drain={"ok": False, "short": "no (reload)", "how": ""}),
            row("vllm-router", added_p50=2.0, added_p99=4.0, key="hosts",
                keys={"wrong": 401, "client": 401, "hosts": 200}, key_check="passes on")]
    assert balancers.verdict(rows) == (
        "verdict: keep haproxy: the only candidate correct on every check "
        "(p50 +5.2 ms, p99 +100.0 ms); not correct: nginx (no runtime drain); vllm-router "
        "(checks no key: the client's key goes on to the hosts, so clients must hold the "
        "hosts' key)")
    # Among correct candidates, latency decides (p50, then p99); the others are named.
    rows[2]["drain"] = {"ok": True, "short": "yes", "how": ""}
    assert balancers.verdict(rows).startswith(
        "verdict: keep nginx: correct on every check, the lowest added latency (p50 +1.5 ms, "
        "p99 +3.0 ms); also correct: haproxy (p50 +5.2 ms, p99 +100.0 ms); not correct: "
        "vllm-router")
    tie = [direct(), row("a", added_p50=1.0, added_p99=9.0), row("b", added_p50=1.0, added_p99=2.0)]
    assert balancers.verdict(tie).startswith("verdict: keep b:")


def test_the_verdict_says_so_when_no_candidate_is_correct():
    loss = {"host": "h2", "sent": 10, "failed": 1, "failed_while_down": 1, "examples": ["502"],
            "down_s": 20.0}
    rows = [direct(), row("haproxy", loss=loss), row("nginx", alias=503)]
    assert balancers.verdict(rows) == (
        "verdict: no candidate passed every check: haproxy (1 of 10 requests failed while h2 "
        "was away (502)); nginx (the alias answered 503)")


def test_the_table_has_a_line_a_target_with_its_figures():
    rows = [direct(), row("haproxy"),
            row("vllm-router", key="hosts", keys={"wrong": 401, "client": 401, "hosts": 200},
                key_check="passes on", served=200, streamed=False,
                drain={"ok": True, "short": "remove/add (HTTP)", "how": ""}),
            row("nginx", key=None, p50=None, p99=None, added_p50=None, added_p99=None,
                loss=None, alias=None, served=None, streamed=False,
                keys={"wrong": None, "client": None, "hosts": None}, key_check="unclear",
                drain={"ok": False, "short": "no (reload)", "how": ""})]
    lines = balancers.table(rows, "tiny-gqa")
    assert [line.split() for line in lines[1:]] == [
        ["direct", "-", "-", "12.5/20.5", "-", "ok", "200/200", "401/401/200", "-", "-"],
        ["haproxy", "+5.0", "+9.8", "17.5/30.2", "0", "of", "300", "ok", "200/404",
         "401/200/401", "own,", "hosts", "get", "theirs", "yes,", "runtime", "API"],
        ["vllm-router", "+5.0", "+9.8", "17.5/30.2", "0", "of", "300", "NO", "200/200",
         "401/401/200", "none,", "passes", "key", "on", "remove/add", "(HTTP)"],
        ["nginx", "-", "-", "-", "-", "NO", "None/None", "None/None/None", "unclear", "no",
         "(reload)"]]
    assert lines[0].split("  ")[0] == "candidate"
    assert "alias/tiny-gqa" in lines[0]
    # right-aligned columns: every line is as long as the header
    widths = {len(line) for line in lines}
    assert len(widths) == 1


# ---- real proxies on loopback ------------------------------------------------------------

@contextlib.contextmanager
def nginx_before(tmp_path, servers):
    """Debian's nginx with bench/balancers.py's site before these servers: yields its URL."""
    port = free_port()
    text = balancers.nginx_conf(f"127.0.0.1:{port}", servers, [CLIENT_KEY], HOSTS_KEY)
    with nginx(tmp_path / "nginx", text, port):
        yield f"http://127.0.0.1:{port}"


@needs_nginx
def test_nginx_checks_the_client_key_and_sends_the_hosts_key(tmp_path, doors):
    with nginx_before(tmp_path, [door.url for door in doors]) as url:
        keys = keys_at(url)
        status, body = balancers.request(url, "POST", "/v1/completions",
                                         {"model": "default", "prompt": "x"}, "")
    assert keys == {"wrong": 401, "client": 200, "hosts": 401}
    assert balancers.key_check(keys) == "own"
    assert (status, json.loads(body)["error"]["code"]) == (401, "invalid_api_key")  # no key
    # Only the client's request got through, and with the hosts' key.
    seen = doors[0].seen + doors[1].seen
    assert seen == [("/v1/completions", f"Bearer {HOSTS_KEY}", "default")]


@needs_nginx
def test_nginx_streams_chunks_as_they_come(tmp_path, doors):
    with nginx_before(tmp_path, [door.url for door in doors]) as url:
        found = balancers.stream_probe(url, "default", CLIENT_KEY)
    assert (found["status"], found["chunks"], found["done"]) == (200, STREAM_CHUNKS, True)
    # the door sends a chunk every 0.1 s: the first is here long before the end
    assert found["total_ms"] >= 100 * STREAM_CHUNKS
    assert found["first_ms"] < found["total_ms"] / 2
    assert balancers.streamed(found) is True


@needs_nginx
def test_nginx_passes_a_refused_connection_to_the_other_server(tmp_path, doors):
    with nginx_before(tmp_path, [closed_url(), doors[0].url]) as url:
        answers = [balancers.completion_status(url, "default", CLIENT_KEY) for _n in range(10)]
    assert answers == [200] * 10
    assert len(doors[0].seen) == 10


@needs_nginx
def test_nginx_without_a_server_answers_503_with_retry_after(tmp_path):
    with nginx_before(tmp_path, [closed_url(), closed_url()]) as url:
        status, body = balancers.request(url, "POST", "/v1/completions",
                                         {"model": "default", "prompt": "x"}, CLIENT_KEY)
    assert status == 503
    assert json.loads(body)["error"]["code"] == "pool_unavailable"


@needs_router
def test_vllm_router_passes_the_clients_key_on_streams_and_removes_a_worker(tmp_path, doors):
    port = free_port()
    argv = balancers.router_argv(port, [door.url for door in doors], HOSTS_KEY, host="127.0.0.1")
    argv[0] = VLLM_ROUTER
    log = tmp_path / "router.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*argv, "--prometheus-port", str(free_port())], stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert balancers.wait_until(lambda: balancers.healthy(url), ROUTER_WAIT_S, 0.1), \
            log.read_text()[-2000:]
        keys = keys_at(url)
        found = balancers.stream_probe(url, "default", HOSTS_KEY)
        listed = balancers.router_workers(url)
        healthy = balancers.router_healthy(url)
        drained = balancers.router_drain(url, doors[1].url, wait_s=ROUTER_WAIT_S)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # Its --api-key does not replace the client's: the hosts see (and check) the client's key.
    assert keys == {"wrong": 401, "client": 401, "hosts": 200}
    assert balancers.key_check(keys) == "passes on"
    auths = {auth for door in doors for _path, auth, _model in door.seen}
    assert auths == {f"Bearer {k}" for k in (balancers.WRONG_KEY, CLIENT_KEY, HOSTS_KEY)}
    assert (found["chunks"], found["done"]) == (STREAM_CHUNKS, True)
    assert balancers.streamed(found) is True, found
    assert sorted(listed) == sorted(door.url for door in doors)
    assert healthy == sorted(door.url for door in doors)
    assert drained["ok"] is True, drained
    assert drained["short"] == "remove/add (HTTP)"


@needs_haproxy
def test_haproxy_drain_takes_the_server_out_and_back_through_a_real_runtime_api(tmp_path, doors):
    pools = {"default": [{"name": door.name, "address": "127.0.0.1",
                          "port": door.server_address[1]} for door in doors]}

    def local(argv):  # the balancer's box is this one; its python3 is ours
        command = [sys.executable if argv[0] == "python3" else argv[0], *argv[1:]]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    with balancer(tmp_path, vllm_balancer_pools=pools, vllm_balancer_open=True,
                  vllm_balancer_upstream_key="", vllm_balancer_check_interval_ms=100,
                  vllm_balancer_check_fall=2, vllm_balancer_check_rise=1) as bal:
        stats = bal.stats_url + "/stats;csv"
        assert balancers.wait_until(
            lambda: balancers.fleet.pool_up(stats, "default") == ["h1", "h2"], WAIT_S, 0.05)
        drained = balancers.haproxy_drain(local, str(bal.folder / "admin.sock"), stats,
                                          "default", "h2", wait_s=WAIT_S)
        after = balancers.fleet.pool_up(stats, "default")
        missing = balancers.haproxy_drain(local, str(bal.folder / "admin.sock"), stats,
                                          "default", "h3", wait_s=1)
    assert drained == {
        "ok": True, "short": "yes, runtime API",
        "how": "runtime API (set server <pool>/<server> state drain|ready): the stats showed "
               "h2 out and back"}
    assert after == ["h1", "h2"]  # ready again
    assert missing["ok"] is False
    assert missing["short"] == "NO"
    assert "No such server" in missing["how"]
