# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A fake host for the cutover tests: systemd units, the model servers behind them, a clock.

This is a model of the real thing, labelled as such: the cutover's real
targets are GPU servers that cannot run here. It answers the argv the code
sends (`systemctl show/start/stop/restart/enable/disable/reset-failed`,
`journalctl -u`, `ss`) the way systemd and iproute2 do, and answers HTTP per
URL the way a vLLM server does: connection refused until its unit is active
and has loaded, then /health, /v1/models, /v1/completions and /metrics (vLLM's
Prometheus gauges of running and waiting requests, per engine, from the
unit's requests in flight). A unit with `real_metrics` answers /metrics with
a real vLLM 0.32 page (tests/fixtures/vllm_metrics/) whose gauges and
progress counters are its own: with `steps_per_s`, its engine steps while it
has requests running (one generated token per running request per step), on
the fake clock.

With `host.frontdoor(...)` it also holds nginx as the front door: `nginx -t`
and `systemctl reload nginx` read the upstream include file, and HTTP to the
front door's URL is proxied to the unit on the loaded upstream's port, or
answered 503 (nginx's @vllm_unavailable) when there is none or it refuses.
With `host.cgroup_root` set, each active unit's pids are in
<root>/system.slice/<unit>/cgroup.procs, as cgroup v2 keeps them.

`host.proc` is its /proc as listener.py reads it (a FakeProc of the moment): each unit whose server
answers listens on its port from its main pid, in /system.slice/<unit>, uid VLLM_UID.
`host.squat(port, pid, uid)` is another process (another uid, another cgroup) listening
on a port first: it answers HTTP there as a vLLM serving whatever model is asked (the
intruder of issue 45 case 2), and the unit's own server never gets to listen on it.

A unit with `sleep_mode` (started with --enable-sleep-mode and
VLLM_SERVER_DEV_MODE=1) also answers vLLM 0.32's dev-mode sleep routes, as
vllm/entrypoints/serve/dev/{sleep,rpc,cache}/api_router.py have them: POST
/sleep?level=0..2&mode=abort|wait|keep, POST /wake_up[?tags=weights|kv_cache],
GET /is_sleeping, POST /collective_rpc {"method": ...}, POST
/reset_prefix_cache (404 without sleep mode, as a server without dev mode).
While asleep its /health is 200 and a completion is not answered (the lab:
/sleep?level=1 200 in 0.03 s, /is_sleeping true, a completion unanswered
within 5 s, /wake_up 200 in 0.1 s, /health 200). A level-2 sleeper discarded
its weights: woken without `reload_weights` it completes with 0 tokens.
`gpu_bytes(unit)` is what its processes hold on each GPU: `weights_bytes`
awake, `residual_bytes` asleep, nothing stopped.

`now` is a fake monotonic clock; `sleep` only advances it, so no test waits.
"""

import fnmatch
import json
import re
import shutil
import socket
import struct
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import HttpResult

CONN_REFUSED = "[Errno 111] Connection refused"
WALL_EPOCH = 1_800_000_000.0  # 2027-01-15T08:00:00+00:00
STATE_VERBS = ("start", "stop", "restart", "enable", "disable", "reset-failed")

# What a unit's server does once systemd starts it.
HEALTHY = "healthy"          # loads for `warmup_s`, then passes every check
START_FAILS = "start_fails"  # `systemctl start` itself fails (ExecStart missing, ...)
CRASH = "crash"              # starts, then the process exits at once: unit `failed`
EXITS = "exits"              # starts, then exits 0 at once: unit `inactive`
RESTART_LOOP = "restart_loop"  # exits and systemd restarts it again and again
HANG = "hang"                # active but never opens its port (stuck loading)
WRONG_MODEL = "wrong_model"  # healthy, but serves another model name
ZERO_TOKENS = "zero_tokens"  # healthy, lists the model, completes with 0 tokens
NOT_JSON = "not_json"        # /v1/models answers 200 with an HTML page
STALLED = "stalled"          # engine stopped: /health and /v1/models 200, completions time out
# engine saturated and stepping: /health and /v1/models 200, a completion waits in the queue
# past the client's timeout (the fake clock moves on by it) and times out
SATURATED = "saturated"

NGINX_CONF = "/etc/nginx/nginx.conf"
NGINX_OK = (f"nginx: the configuration file {NGINX_CONF} syntax is ok\n"
            f"nginx: configuration file {NGINX_CONF} test is successful\n")
# (metric, type, HELP) as vLLM writes them
METRICS = (
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    ("vllm:request_success_total", "counter", "Count of successfully processed requests."),
)
# a real vLLM 0.32 page (SOURCE.md there); real_metrics units substitute their numbers into it
REAL_PAGE = Path(__file__).parents[1] / "fixtures" / "vllm_metrics" / \
    "vllm-0.32.0-cpu-tiny-gqa-idle.txt"
FRONTDOOR_503 = json.dumps({"error": {
    "message": "No model is serving right now (a model switch is in progress). "
               "Retry after 5 seconds.",
    "type": "service_unavailable", "param": None, "code": "model_switching"}})


VLLM_UID = 998  # the model services' user
SQUATTER_CGROUP = "/user.slice/user-{uid}.slice/session-3.scope"


class FakeProc:
    """/proc as the kernel shows it, for the few files listener.py reads: net/tcp and
    net/tcp6 (LISTEN sockets: address, port, uid, inode), <pid>/fd links to `socket:[inode]`,
    <pid>/cgroup (cgroup v2's one line) and <pid>/comm. Pids in `hidden` are as hidepid
    shows them to a user who may not see them: their fd folder is refused."""

    def __init__(self):
        self.processes = {}  # pid -> {"cgroup", "comm", "sockets": [inode]}
        self.sockets = []    # (inode, address, port, uid)
        self.hidden = set()
        self.next_inode = 40000

    def listen(self, pid, port, address="127.0.0.1", uid=0, cgroup="/", comm="python3"):
        """Process `pid` holds a socket listening on address:port; returns its inode."""
        self.next_inode += 1
        self.sockets.append((self.next_inode, address, port, uid))
        held = self.processes.setdefault(pid, {"cgroup": cgroup, "comm": comm, "sockets": []})
        held["sockets"].append(self.next_inode)
        return self.next_inode

    def _table(self, family):
        lines = [("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
                  "retrnsmt   uid  timeout inode")]
        for inode, address, port, uid in self.sockets:
            if (":" in address) != (family == socket.AF_INET6):
                continue
            raw = socket.inet_pton(family, address)
            words = "".join(f"{struct.unpack('=I', raw[i:i + 4])[0]:08X}"
                            for i in range(0, len(raw), 4))
            lines.append(f"{len(lines) - 1:4d}: {words}:{port:04X} {'0' * len(words)}:0000 0A "
                         f"00000000:00000000 00:00000000 00000000 {uid:5d}        0 {inode} "
                         "1 0000000000000000 100 0 0 10 0")
        return "\n".join(lines) + "\n"

    def read(self, path):
        if path == "net/tcp":
            return self._table(socket.AF_INET)
        if path == "net/tcp6":
            return self._table(socket.AF_INET6)
        pid, _sep, name = path.partition("/")
        held = self.processes.get(int(pid)) if pid.isdigit() else None
        if held is None or name not in ("cgroup", "comm"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return f"0::{held['cgroup']}\n" if name == "cgroup" else held["comm"] + "\n"

    def listdir(self, path=""):
        if path == "":
            return ["net", "self", *(str(pid) for pid in self.processes)]
        pid, _sep, name = path.partition("/")
        if name != "fd" or not pid.isdigit() or int(pid) not in self.processes:
            raise FileNotFoundError(2, "No such file or directory", path)
        if int(pid) in self.hidden:
            raise PermissionError(13, "Permission denied", path)
        return [str(fd) for fd in range(3 + len(self.processes[int(pid)]["sockets"]))]

    def readlink(self, path):
        pid, fd = path.split("/fd/")
        held = self.processes[int(pid)]
        number = int(fd) - 3
        if number < 0:
            return "/dev/null"
        return f"socket:[{held['sockets'][number]}]"


class ProcView:
    """A /proc reader whose every read sees the host as it is at that moment."""

    def __init__(self, now):
        self.now = now

    def read(self, path):
        return self.now().read(path)

    def listdir(self, path=""):
        return self.now().listdir(path)

    def readlink(self, path):
        return self.now().readlink(path)


class FakeUnit:
    def __init__(self, name, url=None, served=None, *, installed=True, active=False,  # noqa: PLR0915 - an attribute per state or fault it plays
                 behaviour=HEALTHY, warmup_s=0.0, journal=(), port=None, engines=1,
                 max_running=256, worker_pids=(), prints=(), behaviour_after_restart=None,
                 release_s=0.0, exit_s=0.0, steps_per_s=0.0, real_metrics=False,
                 sleep_mode=False, sleep_s=0.03, wake_s=0.1, wake_error=None,
                 weights_bytes=40 * 1024**3, residual_bytes=1024**3, keeps_memory=False):
        self.name = name
        # vLLM's sleep mode (dev-mode routes): level asleep (0: awake), the tags still
        # asleep, whether a level-2 sleeper's weights were reloaded, each sleep's mode
        self.sleep_mode = sleep_mode
        self.sleep_s, self.wake_s = sleep_s, wake_s
        self.wake_error = wake_error  # a status /wake_up answers instead of 200
        # One wake step's failure: {"kv_cache": 500} answers that status to
        # /wake_up?tags=kv_cache, {"reload_weights": 500} to that collective_rpc; "oom" (the
        # GPU suite: a reload beside a sleeper ran out of memory at wake_up?tags=kv_cache)
        # leaves the process alive and wedged: that request and every one after it time out.
        self.wake_fails = {}
        self.wedged = False
        self.asleep = 0
        self.asleep_tags = set()
        self.weights_stale = False
        self.sleep_modes = []
        self.aborted = 0  # requests in flight a /sleep?mode=abort ended
        self.weights_bytes, self.residual_bytes = weights_bytes, residual_bytes
        self.keeps_memory = keeps_memory  # a sleeper whose memory is not freed (a fault)
        # the engine's progress: steps per second while requests run, and its counters
        self.steps_per_s = steps_per_s
        self.real_metrics = real_metrics
        self.iterations = self.generation_tokens = 0
        # After SIGTERM (a stop): seconds until the worker processes are gone, and until the
        # main process has exited too and the unit is inactive (systemctl stop returns then).
        self.release_s = release_s
        self.exit_s = max(exit_s, release_s)
        self.stop_asked = None  # fake time of a stop still in progress (--no-block)
        self.released = False   # its worker processes are gone (the GPUs are free)
        # what the server does after `systemctl restart` (a stalled engine comes back healthy)
        self.behaviour_after_restart = behaviour_after_restart
        self.url = url
        # the port nginx proxies to; defaults to the URL's
        self.port = port or (int(url.rsplit(":", 1)[1].split("/")[0]) if url else None)
        # requests in flight: the fake time each one finishes; beyond max_running they wait
        self.inflight = []
        # streams the engine has finished that are still being written to their clients:
        # the fake time each one's last byte is sent (vLLM's /load counts them, the
        # engine's gauges do not)
        self.tails = []
        self.load_route = True  # False: a vLLM without /load (404)
        # requests that reach it right after each /sleep (they passed the front door just
        # before its hold): asleep, its engine queues them (/load counts them) until a wake
        self.stragglers_per_sleep = []
        self.parked = 0
        # A /sleep?mode=wait that meets a request running past the client's timeout: the
        # client gives up, vLLM keeps its scheduler paused (new requests wait) and falls
        # asleep when the request ends: (when, level), applied as the clock passes it.
        self.pending_sleep = None
        self.sleep_hangs = False  # /sleep never answers (its scheduler paused, asleep never)
        # A wake that leaves it computing garbage while answering 200 (vllm PR #54235:
        # '!!!!!!!!!!!!'): from its next wake on, every token is '!' (id 0)
        self.garbage_after_wake = False
        self.garbage = False
        # vLLM is not batch-invariant by default (docs.vllm.ai/en/v0.32.0/features/
        # batch_invariance/): a greedy completion answered beside other requests gets other
        # logprobs (here +0.004, past the fingerprint's 1e-3) than one answered alone
        self.batch_variant = True
        self.abort_route = True  # False: a vLLM without POST /abort_requests (404)
        self.engines = engines
        self.max_running = max_running
        self.worker_pids = list(worker_pids)  # vLLM's worker processes, in the unit's cgroup
        self.served = served
        self.installed = installed
        self.behaviour = behaviour
        self.warmup_s = warmup_s
        self.journal = list(journal)
        # lines the server prints once started: (seconds after the start, line); each
        # lands in the journal when the fake clock reaches it, while the unit runs
        self.prints = list(prints)
        self.stamps = {}  # journal index -> fake monotonic time it was printed
        self.active_state = "active" if active else "inactive"
        self.sub_state = "running" if active else "dead"
        self.n_restarts = 0
        self.enabled = active
        self.main_pid = 4242 if active else 0
        self.started_at = 0.0 if active else None
        # systemd's InvocationID: a new one for every start
        self.invocation = f"{name}-inv-0" if active else ""
        self.starts = 0

    def props(self):
        if not self.installed:
            return {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                    "NRestarts": "0", "UnitFileState": "", "MainPID": "0", "ControlGroup": "",
                    "InvocationID": "", "ActiveEnterTimestampMonotonic": "0"}
        return {"LoadState": "loaded", "ActiveState": self.active_state,
                "SubState": self.sub_state, "NRestarts": str(self.n_restarts),
                "UnitFileState": "enabled" if self.enabled else "disabled",
                "MainPID": str(self.main_pid), "ControlGroup": self.cgroup(),
                "InvocationID": self.invocation,
                "ActiveEnterTimestampMonotonic": str(int((self.started_at or 0.0) * 1e6))}

    def cgroup(self):
        """systemd's ControlGroup: set while the unit has processes, empty once it stopped."""
        return f"/system.slice/{self.name}" if self.main_pid else ""

    def load(self, now):
        """(running, waiting) requests at fake time `now`."""
        pending = sum(1 for done in self.inflight if done > now)
        running = min(pending, self.max_running)
        return running, pending - running

    def server_load(self, now):
        """/load's server_load at fake time `now`: requests in the engine and stream tails."""
        return sum(1 for done in self.inflight + self.tails if done > now) + self.parked

    def step(self, now, seconds):
        """The engine's steps over `seconds` from `now` (a stalled or hung one makes none)."""
        running, _waiting = self.load(now)
        if (self.active_state != "active" or self.behaviour not in (HEALTHY, SATURATED)
                or not running):
            return
        steps = int(self.steps_per_s * seconds)
        self.iterations += steps
        self.generation_tokens += steps * running

    def real_page(self, now):
        """The real vLLM 0.32 page with this unit's gauges, counters and model name."""
        running, waiting = self.load(now)
        values = {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
                  "vllm:generation_tokens_total": self.generation_tokens,
                  "vllm:prompt_tokens_total": 0,
                  "vllm:iteration_tokens_total_count": self.iterations}
        lines = []
        for real in REAL_PAGE.read_text().splitlines():
            name = real.split("{", 1)[0]
            line = f"{real.rsplit(' ', 1)[0]} {float(values[name])!r}" if name in values else real
            lines.append(line.replace('model_name="tiny-gqa"', f'model_name="{self.served}"'))
        return "\n".join(lines) + "\n"

    def metrics(self, now):
        """/metrics as vLLM's prometheus_client exposition writes it: one sample per engine."""
        if self.real_metrics:
            return self.real_page(now)
        running, waiting = self.load(now)
        done = len(self.inflight) - running - waiting
        values = {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
                  "vllm:request_success_total": done, "vllm:kv_cache_usage_perc": running}
        lines = []
        for name, kind, doc in METRICS:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
            for engine in range(self.engines):
                # engine i's share of the total, as a data-parallel server splits requests
                share = values[name] // self.engines + (engine < values[name] % self.engines)
                if name == "vllm:kv_cache_usage_perc":
                    share *= 0.01
                reason = 'finished_reason="stop",' if kind == "counter" else ""
                lines.append(f'{name}{{engine="{engine}",{reason}model_name="{self.served}"}} '
                             f"{float(share)!r}")
        return "\n".join(lines) + "\n"


class FakeHost:
    def __init__(self):
        self.units = {}
        self.calls = []
        self.http = []
        self.sleeps = []
        self.now = 0.0
        self.ss_out = ""
        # unit -> names of the other units active at the moment it was started
        self.active_at_start = {}
        # unit -> {other unit: its GPU-holding worker pids} at the moment it was started
        self.holders_at_start = {}
        # what happened, in order: state-changing systemctl, nginx, /metrics scrapes, gates
        self.timeline = []
        self.nginx = None
        self.cgroup_root = None
        self.squatters = []  # other processes listening: (port, pid, uid, address, comm, at)
        self.hidden_pids = set()  # pids whose /proc/<pid>/fd the reader may not see
        self.proc = ProcView(self.proc_now)  # /proc as the code reads it, live

    def unit(self, name, url=None, served=None, **kwargs):
        self.units[name] = FakeUnit(name, url, served, **kwargs)
        self._sync_cgroup(self.units[name])
        return self.units[name]

    def frontdoor(self, url, upstream_file, **kwargs):
        self.nginx = FakeNginx(self, url, upstream_file, **kwargs)
        return self.nginx

    def _sync_cgroup(self, unit):
        if self.cgroup_root is None:
            return
        folder = Path(self.cgroup_root, "system.slice", unit.name)
        if unit.main_pid:
            folder.mkdir(parents=True, exist_ok=True)
            pids = [unit.main_pid, *([] if unit.released else unit.worker_pids)]
            (folder / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
        elif folder.exists():
            shutil.rmtree(folder)

    # -- /proc: who listens -----------------------------------------------------
    def squat(self, port, pid, uid, address="127.0.0.1", comm="python3", at=0.0):
        """Another process, uid `uid`, listens on `port` from fake time `at` on (issue 45
        case 2: it binds and listens while the unit's server loads)."""
        self.squatters.append((port, pid, uid, address, comm, at))

    def squatter(self, port):
        """The squatter listening on `port` now, or None."""
        return next((s for s in self.squatters if s[0] == port and self.now >= s[5]), None)

    def listening(self, unit):
        """Whether `unit`'s own server listens on its port now (it answers HTTP)."""
        return (unit.active_state == "active" and unit.main_pid and unit.port
                and unit.behaviour not in (HANG, RESTART_LOOP)
                and self.now >= unit.started_at + unit.warmup_s
                and self.squatter(unit.port) is None)

    def proc_now(self):
        """This host's /proc now (a FakeProc): the units' listeners and the squatters'."""
        proc = FakeProc()
        proc.hidden = set(self.hidden_pids)
        for unit in self.units.values():
            if not self.listening(unit):
                continue
            # where HTTP reaches it: its URL's port, and the port nginx proxies to
            url = urlsplit(unit.url) if unit.url else None
            ports = {unit.port, url.port if url else None} - {None}
            for port in sorted(ports):
                proc.listen(unit.main_pid, port, url.hostname if url else "127.0.0.1",
                            VLLM_UID, f"/system.slice/{unit.name}", "vllm")
        for port, pid, uid, address, comm, at in self.squatters:
            if self.now < at:
                continue
            proc.listen(pid, port, address, uid, SQUATTER_CGROUP.format(uid=uid), comm)
        return proc

    def _squatter_answer(self, served, method, path):
        """What a squatter answers: a vLLM look-alike serving `served`, one token."""
        self.timeline.append(f"intruder answered {method} {path}")
        if path == "/health":
            return HttpResult(200, "")
        if path == "/v1/models":
            return HttpResult(200, json.dumps({"object": "list", "data": [{"id": served}]}))
        if path == "/v1/completions" and method == "POST":
            return HttpResult(200, json.dumps({"choices": [{"text": "!"}],
                                               "usage": {"completion_tokens": 1}}))
        return HttpResult(404, json.dumps({"detail": "Not Found"}))

    # -- clock ---------------------------------------------------------------
    def clock(self):
        return self.now

    def wall(self):
        return WALL_EPOCH + self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self._tick(seconds)

    def _tick(self, seconds):
        """The fake clock moves on by `seconds`: engines step, stopping units move on."""
        for unit in self.units.values():
            unit.step(self.now, seconds)
        self.now += seconds
        for unit in self.units.values():
            if unit.pending_sleep and unit.main_pid and self.now >= unit.pending_sleep[0]:
                unit.asleep, unit.pending_sleep = unit.pending_sleep[1], None
                unit.asleep_tags = {"weights", "kv_cache"}
                unit.inflight = []
                self.timeline.append(f"fell asleep {unit.name} (its sleep asked earlier)")
        self._stopping()

    def _stopping(self):
        """Move each unit that is stopping (--no-block) on to where the clock says."""
        for unit in self.units.values():
            if unit.stop_asked is None:
                continue
            if not unit.released and self.now >= unit.stop_asked + unit.release_s:
                unit.released = True
                if unit.exit_s:  # a unit whose stop takes time shows its steps
                    self.timeline.append(f"workers exited {unit.name}")
                self._sync_cgroup(unit)
            if self.now >= unit.stop_asked + unit.exit_s:
                self._stopped(unit)

    def _stopped(self, unit):
        if unit.stop_asked is not None and unit.exit_s:
            self.timeline.append(f"stopped {unit.name}")
        unit.active_state, unit.sub_state = "inactive", "dead"
        unit.main_pid, unit.started_at, unit.stop_asked = 0, None, None
        unit.released = False
        unit.inflight = []  # requests still in flight are cut off
        unit.asleep, unit.asleep_tags, unit.weights_stale = 0, set(), False
        unit.pending_sleep = None
        unit.wedged = False
        self._sync_cgroup(unit)

    def gpu_holders(self, exclude=None):
        """unit -> its worker pids still running (vLLM's engine and workers hold the GPUs)."""
        return {u.name: list(u.worker_pids) for u in self.units.values()
                if u is not exclude and u.main_pid and u.worker_pids and not u.released}

    # -- run_command -----------------------------------------------------------
    def run_command(self, argv):  # noqa: PLR0911, C901 - one answer per program, as the host
        argv = list(argv)
        if argv and "/" in argv[0]:  # the module calls binaries by path (get_bin_path)
            argv[0] = argv[0].rsplit("/", 1)[1]
        self.calls.append(argv)
        if self.nginx:
            self.nginx.deliver()
        if self.nginx and argv[:2] == ["pgrep", "-P"]:
            return self.nginx.pgrep() if argv[2] == str(self.nginx.master_pid) else (1, "", "")
        if self.nginx and argv[:2] == ["systemctl", "reload"] and argv[2] in (
                "nginx", "nginx.service"):
            return self.nginx.reload()
        if self.nginx and argv[0] == "nginx":
            return self.nginx.test()
        if argv[0] == "systemctl":  # options before or after the unit's name
            rest = argv[2:]
            name = next(arg for arg in rest if not arg.startswith("--"))
            rest.remove(name)
            return self._systemctl(argv[1], name, rest)
        if argv[0] == "journalctl" and "json" in argv:
            return self._journal_json(self.units.get(argv[argv.index("-u") + 1]), argv)
        if argv[0] == "journalctl":
            # As systemd 252's journalctl: with --since, -n N gives the FIRST N lines of the
            # window; -r gives the newest first, so -n N -r gives the last N, newest first.
            unit = self.units.get(argv[argv.index("-u") + 1])
            if unit:
                self._due_prints(unit)
            lines = int(argv[argv.index("-n") + 1])
            journal = list(unit.journal if unit else [])
            shown = journal[::-1][:lines] if "-r" in argv else journal[:lines]
            text = "\n".join(shown)
            return 0, text + ("\n" if text else ""), ""
        if argv[0] == "ss":
            return 0, self.ss_out, ""
        return 127, "", f"{argv[0]}: command not found"

    def _due_prints(self, unit):
        """Move the lines a running unit has printed by now into its journal."""
        if unit.started_at is None:
            return
        while unit.prints and unit.started_at + unit.prints[0][0] <= self.now:
            offset, line = unit.prints.pop(0)
            unit.journal.append(line)
            unit.stamps[len(unit.journal) - 1] = unit.started_at + offset

    def _journal_json(self, unit, argv):
        """`journalctl -u U -o json [--after-cursor C | --since @T]`: one JSON object per
        entry with its cursor (here the entry's index) and monotonic time (the fake clock's,
        in microseconds; lines present before the start carry 0)."""
        if unit is None:
            return 0, "", ""
        self._due_prints(unit)
        after = int(argv[argv.index("--after-cursor") + 1].split("=")[1]) + 1 \
            if "--after-cursor" in argv else 0
        out = "".join(json.dumps({
            "MESSAGE": line, "__CURSOR": f"i={index}",
            "__MONOTONIC_TIMESTAMP": str(int(unit.stamps.get(index, 0.0) * 1e6))}) + "\n"
            for index, line in enumerate(unit.journal) if index >= after)
        return 0, out, ""

    def state_calls(self):
        """(verb, unit) of every state-changing systemctl call, in order."""
        return [(a[1], next(arg for arg in a[2:] if not arg.startswith("--")))
                for a in self.calls if a[0] == "systemctl" and a[1] in STATE_VERBS]

    def events(self):
        """The timeline with each run of identical /metrics scrapes shown once."""
        return [e for i, e in enumerate(self.timeline) if i == 0 or e != self.timeline[i - 1]]

    def _systemctl(self, verb, name, rest):  # noqa: PLR0911, C901 - one answer per verb, as systemctl
        unit = self.units.get(name)
        if verb == "show":
            return self._show(name, unit, rest)
        if verb == "list-units":  # --state=active --no-legend --plain PATTERN, as systemd 252
            return 0, "".join(f"{u.name} loaded active {u.sub_state} vLLM model server\n"
                              for u in self.units.values()
                              if u.active_state == "active" and fnmatch.fnmatch(u.name, name)), ""
        if verb in STATE_VERBS:
            self.timeline.append(f"{verb} {name}")
        if unit is None or not unit.installed:
            if verb == "reset-failed":
                return 1, "", f"Failed to reset failed state of unit {name}: not loaded."
            return 5, "", f"Failed to {verb} {name}: Unit {name} not found."
        if verb in ("start", "restart"):
            return self._start(unit, restart=verb == "restart")
        if verb == "stop":
            return self._stop(unit, no_block="--no-block" in rest)
        if verb in ("enable", "disable"):
            unit.enabled = verb == "enable"
            return 0, "", ""
        if verb == "reset-failed":
            if unit.active_state == "failed":
                unit.active_state, unit.sub_state = "inactive", "dead"
            unit.n_restarts = 0
            return 0, "", ""
        return 1, "", f"Unknown command verb {verb}."

    def _show(self, name, unit, rest):
        props = unit.props() if unit else FakeUnit(name, installed=False).props()
        wanted = rest[0].split("=", 1)[1].split(",")
        if unit and unit.behaviour == RESTART_LOOP and unit.started_at is not None:
            unit.n_restarts += 1
            unit.active_state, unit.sub_state = "activating", "auto-restart"
        if "--value" in rest:
            return 0, "".join(f"{props[key]}\n" for key in wanted), ""
        return 0, "".join(f"{key}={props[key]}\n" for key in wanted), ""

    def _stop(self, unit, no_block):
        """SIGTERM: with --no-block systemctl returns at once and the unit is `deactivating`
        until the clock reaches its exit; without, it returns once the unit has stopped (the
        clock moves on to then)."""
        if unit.main_pid and unit.stop_asked is None:
            unit.stop_asked = self.now
            unit.active_state, unit.sub_state = "deactivating", "stop-sigterm"
        if unit.stop_asked is not None and not no_block:
            self.now = max(self.now, unit.stop_asked + unit.exit_s)
        if unit.stop_asked is None or unit.stop_asked + unit.exit_s <= self.now:
            self._stopped(unit)
        else:
            self._stopping()
        return 0, "", ""

    def _start(self, unit, restart):
        if unit.stop_asked is not None:  # a start queued behind a stop runs once it ended
            self._stop(unit, no_block=False)
        if unit.active_state == "active" and not restart:
            return 0, "", ""  # systemctl start on a running unit does nothing
        self.active_at_start[unit.name] = sorted(
            u.name for u in self.units.values() if u.active_state == "active" and u is not unit)
        self.holders_at_start[unit.name] = self.gpu_holders(exclude=unit)
        if unit.behaviour == START_FAILS:
            unit.active_state, unit.sub_state = "failed", "failed"
            return 1, "", (f"Job for {unit.name} failed because the control process exited "
                           f"with error code.\n")
        if restart and unit.behaviour_after_restart is not None:
            unit.behaviour = unit.behaviour_after_restart
        unit.started_at = self.now
        unit.asleep, unit.asleep_tags, unit.weights_stale = 0, set(), False  # a new process
        unit.wedged = False
        unit.starts += 1
        unit.invocation = f"{unit.name}-inv-{unit.starts}"
        unit.main_pid = 5000 + len(self.calls)
        if unit.behaviour == CRASH:
            unit.active_state, unit.sub_state, unit.main_pid = "failed", "failed", 0
        elif unit.behaviour == EXITS:
            unit.active_state, unit.sub_state, unit.main_pid = "inactive", "dead", 0
        else:
            unit.active_state, unit.sub_state = "active", "running"
        self._sync_cgroup(unit)
        return 0, "", ""

    # -- HTTP --------------------------------------------------------------------
    def request(self, method, url, payload=None, timeout=10.0, headers=None):
        self.http.append((method, url))
        if self.nginx:
            self.nginx.deliver()
        if self.nginx and url.startswith(self.nginx.url + "/"):
            sent = (headers or {}).get("Authorization")
            if self.nginx.key and sent != f"Bearer {self.nginx.key}":
                return HttpResult(401, json.dumps({"error": {"code": "invalid_api_key"}}))
            return self.nginx.proxy(method, url[len(self.nginx.url):], payload)
        unit = next((u for u in self.units.values() if u.url and url.startswith(u.url + "/")),
                    None)
        if unit and unit.port and self.squatter(unit.port):
            return self._squatter_answer(unit.served, method, url[len(unit.url):])
        return self.answer(unit, method, url[len(unit.url):] if unit else "", payload, timeout)

    def _greedy(self, unit, payload):
        """A greedy completion with token ids and logprobs: the same for the same model
        (its served name), '!' (id 0) from a model computing garbage."""
        count = payload["max_tokens"]
        seed = sum(map(ord, unit.served or ""))
        garbage = unit.garbage or unit.weights_stale
        batched = unit.batch_variant and any(d > self.now for d in unit.inflight)
        ids = [0] * count if garbage else [(seed * 31 + 7 * i) % 32000 + 1 for i in range(count)]
        logprobs = ([-0.01] * count if garbage else
                    [-0.25 - 0.01 * i + (0.004 if batched else 0.0) for i in range(count)])
        self.timeline.append(f"fingerprint {unit.name}: {'garbage' if garbage else 'greedy'}"
                             f"{' batched' if batched else ''}")
        return HttpResult(200, json.dumps({"choices": [{
            "text": "!" * count if garbage else " one two three", "token_ids": ids,
            "logprobs": {"token_logprobs": logprobs}}],
            "usage": {"completion_tokens": count}}))

    def gpu_bytes(self, unit):
        """What `unit`'s processes hold on each of its GPUs now."""
        if not unit.main_pid:
            return 0
        if unit.asleep and not unit.keeps_memory:
            return unit.residual_bytes
        return unit.weights_bytes

    def _sleep_route(self, unit, method, path, payload, timeout=10.0):  # noqa: PLR0911, PLR0912, PLR0915, C901 - one per route
        """vLLM 0.32's dev-mode sleep routes (None: not one of them)."""
        base, _sep, query = path.partition("?")
        params = parse_qs(query)
        if base not in ("/sleep", "/wake_up", "/is_sleeping", "/collective_rpc",
                        "/reset_prefix_cache", "/abort_requests"):
            return None
        if not unit.sleep_mode:
            return HttpResult(404, json.dumps({"detail": "Not Found"}))
        if base == "/is_sleeping" and method == "GET":
            return HttpResult(200, json.dumps({"is_sleeping": bool(unit.asleep_tags)}))
        if method != "POST":
            return HttpResult(405, json.dumps({"detail": "Method Not Allowed"}))
        if base == "/abort_requests":
            return self._abort_requests(unit)
        if base == "/sleep":
            level = int(params.get("level", ["1"])[0])
            mode = params.get("mode", ["abort"])[0]
            if not 0 <= level <= 2 or mode not in ("abort", "wait", "keep"):
                return HttpResult(422, json.dumps({"detail": "invalid level or mode"}))
            if unit.sleep_hangs:
                unit.pending_sleep = (float("inf"), level)
                self._tick(timeout)
                return HttpResult(error="timed out")
            if mode == "wait" and max([self.now, *unit.inflight]) - self.now > timeout:
                unit.sleep_modes.append(mode)  # the client gives up; vLLM does not
                unit.pending_sleep = (max(unit.inflight), level)
                self._tick(timeout)
                return HttpResult(error="timed out")
            if mode == "wait":  # requests in flight finish first
                self.now = max([self.now, *unit.inflight])
            unit.aborted += len([d for d in unit.inflight if d > self.now])
            unit.inflight = []
            unit.sleep_modes.append(mode)
            self._tick(unit.sleep_s)
            unit.asleep = level
            unit.asleep_tags = {"weights", "kv_cache"}
            unit.weights_stale = level == 2  # level 2 discards the weights
            if unit.stragglers_per_sleep:
                unit.parked += unit.stragglers_per_sleep.pop(0)
            self.timeline.append(f"sleep {unit.name} level={level} mode={mode}")
            return HttpResult(200, json.dumps({"status": "sleeping", "level": level}))
        if base == "/wake_up":
            if unit.wake_error:
                return HttpResult(unit.wake_error, json.dumps({"detail": "wake failed"}))
            tags = params.get("tags") or ["weights", "kv_cache"]
            failed = self._wake_fails(unit, tags, timeout)
            if failed:
                return failed
            self._tick(unit.wake_s)
            unit.asleep_tags -= set(tags)
            if not unit.asleep_tags:
                unit.asleep = 0
                unit.garbage = unit.garbage or unit.garbage_after_wake
                # the queued requests run now, and finish a moment later
                unit.inflight += [self.now + 0.2] * unit.parked
                unit.parked = 0
            self.timeline.append(f"wake {unit.name} tags={','.join(tags)}")
            return HttpResult(200, json.dumps({
                "status": "sleeping" if unit.asleep_tags else "awake",
                "tags": params.get("tags")}))
        if base == "/collective_rpc":
            failed = self._wake_fails(unit, [(payload or {}).get("method")], timeout)
            if failed:
                return failed
            if (payload or {}).get("method") == "reload_weights":
                unit.weights_stale = False
            self.timeline.append(f"rpc {unit.name} {(payload or {}).get('method')}")
            return HttpResult(200, json.dumps({"results": [None]}))
        self.timeline.append(f"reset_prefix_cache {unit.name}")
        return HttpResult(200, json.dumps({"status": "ok"}))

    def _abort_requests(self, unit):
        """POST /abort_requests with `{}` (vLLM 0.32's rl/online router): every request in
        flight is aborted, the scheduler not paused; 404 on a vLLM without the route."""
        if not unit.abort_route:
            return HttpResult(404, json.dumps({"detail": "Not Found"}))
        ended = [d for d in unit.inflight if d > self.now]
        unit.aborted += len(ended)
        unit.inflight = [d for d in unit.inflight if d <= self.now]
        self.timeline.append(f"abort_requests {unit.name}: {len(ended)}")
        return HttpResult(200, json.dumps({"status": "ok"}))

    def _wake_fails(self, unit, steps, timeout):
        """The answer of a wake step set to fail (unit.wake_fails), or None."""
        failure = next((unit.wake_fails[s] for s in steps if s in unit.wake_fails), None)
        if failure is None:
            return None
        self.timeline.append(f"wake failed {unit.name} {','.join(steps)}: {failure}")
        if failure == "oom":
            unit.wedged = True
            self._tick(timeout)
            return HttpResult(error="timed out")
        return HttpResult(failure, json.dumps({"error": {"message": "wake failed"}}))

    def answer(self, unit, method, path, payload=None, timeout=10.0):  # noqa: PLR0911, PLR0912, C901 - one per route
        """What `unit`'s server answers to `method path`."""
        if unit is not None and unit.wedged and unit.main_pid:  # alive, never answering
            self._tick(timeout)
            return HttpResult(error="timed out")
        if (unit is None or unit.active_state != "active" or unit.behaviour in (HANG, RESTART_LOOP)
                or self.now < unit.started_at + unit.warmup_s):
            return HttpResult(error=CONN_REFUSED)
        routed = self._sleep_route(unit, method, path, payload, timeout)
        if routed is not None:
            return routed
        if path == "/metrics":
            running, waiting = unit.load(self.now)
            self.timeline.append(f"metrics {unit.name}: running={running} waiting={waiting}")
            return HttpResult(200, unit.metrics(self.now))
        if path == "/load":
            if not unit.load_route:
                return HttpResult(404, json.dumps({"detail": "Not Found"}))
            return HttpResult(200, json.dumps({"server_load": unit.server_load(self.now)}))
        if path == "/health":
            return HttpResult(200, "")
        if path == "/v1/models":
            if unit.behaviour == NOT_JSON:
                return HttpResult(200, "<html>proxy login</html>")
            name = "someone-else" if unit.behaviour == WRONG_MODEL else unit.served
            return HttpResult(200, json.dumps({"object": "list", "data": [{"id": name}]}))
        if path == "/v1/completions" and method == "POST":
            if unit.asleep_tags or unit.pending_sleep:  # scheduler paused: not answered
                self._tick(timeout)
                return HttpResult(error="timed out")
            if unit.behaviour == STALLED:
                return HttpResult(error="timed out")
            if unit.behaviour == SATURATED:  # queued behind the others, past the timeout
                self._tick(timeout)
                return HttpResult(error="timed out")
            if payload["model"] != unit.served:
                return HttpResult(404, json.dumps({"error": "model not found"}))
            tokens = (0 if unit.behaviour == ZERO_TOKENS or unit.weights_stale
                      else payload["max_tokens"])
            if payload.get("return_token_ids"):  # greedy, as the fingerprint asks
                return self._greedy(unit, payload)
            self.timeline.append(f"completion {unit.name}: {tokens} tokens")
            return HttpResult(200, json.dumps({
                "choices": [{"text": " world" if tokens else ""}],
                "usage": {"completion_tokens": tokens}}))
        return HttpResult(404, "")


class FakeNginx:
    """nginx as the front door, reading the upstream include file the cutover writes.

    `nginx -t` parses the file; `systemctl reload nginx` loads it (as nginx does
    on SIGHUP: a file that does not parse leaves the old configuration running,
    and systemd still reports the reload as done). `test_error`/`reload_error`
    make those commands fail with the given stderr.
    """

    SERVER = re.compile(r"^\s*server\s+([0-9.]+):(\d+)([^;]*);", re.MULTILINE)

    def __init__(self, host, url, upstream_file, *, active=True, key=None, hold_file=None):
        self.host = host
        # while this file exists every request is answered 503 "switching" (the template's
        # `if (-f hold_file)`, tested per request)
        self.hold_file = Path(hold_file) if hold_file else None
        self.key = key  # the API key it asks for (None: an open front door)
        self.url = url.rstrip("/")
        self.upstream_file = Path(upstream_file)
        self.active = active
        self.loaded = None  # the port requests go to; None: no server, every request 503
        self.test_error = None
        self.reload_error = None
        self.switches = []  # (fake time, port or None) of each reload that loaded the file
        # Workers: `pgrep -P master_pid` lists them. A reload starts a new one; the old one
        # exits once the requests it let through have ended (nginx's graceful reload).
        self.master_pid, self.worker_pid = 900, 901
        self.old_workers = []
        # Requests the worker let through before a hold whose body is still on its way: each
        # reaches the port loaded when it passed, `arrives` s after the hold, and runs there
        # `seconds` (vLLM counts it from then on). Asleep there, it waits (hung).
        self.admitted = []
        self.held_at = None  # fake time the front door first answered a hold

    def admit(self, arrives, seconds=0.5):
        """A request let through now (before a hold), reaching the model `arrives` s after
        the hold began (its body was still arriving), then running `seconds` there."""
        entry = {"worker": self.worker_pid, "port": self.loaded, "arrives": arrives,
                 "seconds": seconds, "reached": None, "done": None, "hung": False,
                 "refused": False}
        self.admitted.append(entry)
        return entry

    def _held(self):
        if self.held_at is None:
            self.held_at = self.host.now

    def deliver(self):
        """Each admitted request whose time has come reaches its model as it is now."""
        if self.held_at is None:
            return
        for entry in self.admitted:
            when = self.held_at + entry["arrives"]
            if entry["reached"] is not None or when > self.host.now:
                continue
            entry["reached"] = when
            unit = next((u for u in self.host.units.values() if u.port == entry["port"]), None)
            if unit is None or not unit.main_pid:
                entry["refused"] = True  # connection refused: the front door's 503
                entry["done"] = when
                self.host.timeline.append("admitted request refused")
            elif unit.asleep:
                entry["hung"] = True  # the engine queues it until a wake
                unit.parked += 1
                self.host.timeline.append(f"admitted request reached {unit.name} asleep")
            else:
                entry["done"] = when + entry["seconds"]
                unit.inflight.append(entry["done"])
                self.host.timeline.append(f"admitted request reached {unit.name} awake")

    def carrying(self, worker):
        return any(e["worker"] == worker and (e["done"] is None or e["done"] > self.host.now)
                   for e in self.admitted)

    def pgrep(self):
        """`pgrep -P master`: the worker, and each old one still carrying a request."""
        self.deliver()
        self.old_workers = [w for w in self.old_workers if self.carrying(w)]
        pids = [*self.old_workers, self.worker_pid]
        return 0, "".join(f"{pid}\n" for pid in pids), ""

    def parse(self):
        """(port or None, error or None) of the upstream file as nginx reads it."""
        try:
            text = self.upstream_file.read_text()
        except FileNotFoundError:
            return None, (f'nginx: [emerg] open() "{self.upstream_file}" failed '
                          "(2: No such file or directory) in /etc/nginx/conf.d/vllm-fleet.conf:3")
        block = re.search(r"^upstream vllm_active \{\n(.*?)^\}\n?\Z", text,
                          re.DOTALL | re.MULTILINE)
        servers = self.SERVER.findall(block.group(1)) if block else []
        if not servers:
            return None, ('nginx: [emerg] host not found in upstream "vllm_active" in '
                          "/etc/nginx/conf.d/vllm-fleet.conf:13")
        up = [int(port) for _host, port, flags in servers if "down" not in flags.split()]
        return (up[0] if up else None), None

    def test(self):
        self.host.timeline.append("nginx -t")
        error = self.test_error or self.parse()[1]
        if error:
            return 1, "", f"{error}\nnginx: configuration file {NGINX_CONF} test failed\n"
        return 0, "", NGINX_OK

    def reload(self):
        if not self.active:
            self.host.timeline.append("reload nginx: failed")
            return 1, "", "nginx.service is not active, cannot reload.\n"
        if self.reload_error:
            self.host.timeline.append("reload nginx: failed")
            return 1, "", self.reload_error
        port, error = self.parse()
        if error is None:
            self.load(port)
            self.old_workers.append(self.worker_pid)
            self.worker_pid += 1
        return 0, "", ""

    def load(self, port):
        if port is None:
            self._held()
        self.loaded = port
        self.switches.append((self.host.now, port))
        self.host.timeline.append(f"reload nginx: {port or 'none'}")

    def proxy(self, method, path, payload):
        if not self.active:
            return HttpResult(error=CONN_REFUSED)
        if self.hold_file and self.hold_file.exists():
            self._held()
            return HttpResult(503, FRONTDOOR_503)
        unit = next((u for u in self.host.units.values()
                     if self.loaded is not None and u.port == self.loaded), None)
        if unit and self.host.squatter(unit.port):  # it gets the front door's traffic
            return self.host._squatter_answer(unit.served, method, path)
        res = self.host.answer(unit, method, path, payload) if unit else HttpResult(error="down")
        if res.error:  # 502 from the upstream -> error_page -> @vllm_unavailable
            return HttpResult(503, FRONTDOOR_503)
        return res
