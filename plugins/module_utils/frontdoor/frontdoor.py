# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The front door: nginx on one stable port, proxying to the active model.

The cutover points it at a model's port, or at nothing (while no model is
healthy, nginx answers 503 with Retry-After and an OpenAI-shaped JSON error).
The upstream is one small include file, written atomically; nginx is
checked (`nginx -t`) and reloaded gracefully, so requests in flight finish on
the old workers. After a reload the switch waits until the front door
answers the new way, so the caller knows traffic has moved.

A sequential switch holds the front door instead of reloading it twice: while
the hold file exists, nginx answers every request to the model 503 "switching"
(it tests the file on each request, so every worker, old or new, answers so
from the next request on; no reload, no moment where an old worker still
proxies). The upstream is pointed at green while green starts, behind the
hold, and removing the file opens the front door to green at once.

A hold fences what passed before it (issue 44, case 6). nginx decides a request's fate in
its rewrite phase, as soon as the headers are read (`if (-f hold_file)`), and with
`proxy_request_buffering off` passes it to the model server while the body still arrives;
vLLM's /load counts a request only when its handler runs, after the whole body was read and
parsed (vllm/entrypoints/serve/utils/api_utils.py `load_aware_call`, vLLM 0.32.0). A drain
that reads the model server alone can therefore end while the front door still holds a
request it let through before the hold: that request reaches blue after blue fell asleep and
waits until a wake. So a hold also reloads nginx: every request let through before it is
then carried by a worker of the old generation, which exits once its last request ended
(nginx's graceful reload), and `admitted()` counts those workers until they are gone. The
drain waits for them as it waits for vLLM's own count.

A switch's transient state does not outlive the boot that cut it (issue 46, case 1). The
hold files live in /run (tmpfs: gone at boot; nginx's `-f` test of a missing file is simply
false, so the configuration parses either way). The upstream a hold stages (green's) lives
in /etc, so the upstream in force before the switch is kept beside it
(`<upstream>.before-switch`, PRESWITCH_SUFFIX) from the hold until the switch ends; the
front door's boot unit (roles/vllm_frontdoor/templates/vllm-fleet-frontdoor-boot.service.j2,
ordered before nginx) puts it back, since a switch a reboot cut never wrote the record:
after boot nginx sends to the record's active model, whose unit is the one still enabled.

Measured on the lab (nginx 1.22, 2 cores): a switch by reload costs nginx -t
(8-15 ms), systemctl reload (29-51 ms), then 105-160 ms before new workers
answer: nginx's master starts them and sleeps 100 ms before it tells the old
ones to stop, and meanwhile both take connections. The settle's three answers
in a row then add 100 ms. A sequential switch paid that twice inside its outage.
"""

import contextlib
import datetime as dt
import json
import os
import re
import time

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import (
        write_atomic,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import (
        vllm_engine as engine,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (
        metric_totals,
        urllib_request,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.vllm_engine import (
        NEVER_FORWARDED,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.hold_room import (
        DEFAULT_MAX_S,
        HoldRoom,
        HoldRoomError,
    )
except ImportError:  # on the host: shipped beside the probe (it mends the front door)
    import vllm_engine as engine  # type: ignore[no-redef]
    from durable import write_atomic  # type: ignore[no-redef]
    from errors import FieldsError  # type: ignore[no-redef]
    from health import metric_totals, urllib_request  # type: ignore[no-redef]
    from hold_room import DEFAULT_MAX_S, HoldRoom, HoldRoomError  # type: ignore[no-redef]
    from vllm_engine import NEVER_FORWARDED  # type: ignore[no-redef]

UPSTREAM_NAME = "vllm_active"
# The front door's own key (made once on the host, 0600, root): the cutover's settle check
# and playbooks/status.yml ask with it (host_path 'frontdoor_own_key').
OWN_KEY_FILE = "/etc/nginx/vllm-fleet/own.key"
# Answers in a row, each on a new connection, that must show a reload's new state before a
# switch (or the probe's repair) counts it done: for a moment after a reload an old worker
# can still take a connection and answer the old way (FrontDoor._settle).
SETTLE_CONFIRMATIONS = 3
HTTP_OK = 200
HTTP_UNAUTHORIZED = 401
HTTP_UNAVAILABLE = 503
# How long vLLM's HTTP server (uvicorn) keeps an idle connection open: vLLM passes
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s unless set, as uvicorn's timeout_keep_alive
# (vllm/envs.py; vllm/entrypoints/launchers/api_server/entry.py in vLLM 0.32.0).
VLLM_KEEPALIVE_S = 5.0


def keepalive_timeout_ms(server_keepalive_s):
    """nginx's idle time for kept upstream connections: half the model server's.

    A connection must leave nginx's cache before the server closes it; otherwise a
    request sent on it as the server's idle timer fires meets the close and fails.
    The front door never replays a request (proxy_next_upstream off), so the client
    would get the 503 that says a model switch is in progress when none is. Half
    leaves the two clocks (nginx starts counting when it has read the answer, the
    server when it has sent it) a margin of half the server's timeout; reuse still
    pays off where it matters, for requests that come more often than that.
    """
    return max(1, int(server_keepalive_s * 1000) // 2)


# The front door's states, as the upstream file sets them (the 503 says which).
# Beside the upstream file while a switch holds the front door: the upstream from before
# the switch, which the boot unit restores (its template names the same suffix).
PRESWITCH_SUFFIX = ".before-switch"

SERVING = "serving"  # an active model behind it
SWITCHING = "switching"  # a cutover holds the front door: no model for a moment
IDLE = "idle"  # no model deployed, or none could be brought back
_NGINX_WORD = re.compile(r"[A-Za-z0-9_.:-]*")


def _nginx_word(value, what):
    """A value written inside double quotes in nginx's configuration: plain characters only."""
    text = "" if value is None else str(value)
    if not _NGINX_WORD.fullmatch(text):
        raise ValueError(f"{what} {text!r} cannot go into nginx's configuration: wanted letters, "
                         "digits and . _ : - only")
    return text


def upstream_conf(port=None, host="127.0.0.1", model=None, server_keepalive_s=VLLM_KEEPALIVE_S,
                  switching=True):
    """The include file: one upstream, pointing at the model or at nothing.

    `server_keepalive_s` is how long the model server keeps an idle connection open
    (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE); nginx drops idle ones after half of it.
    Without a port the front door has no model: `switching` says whether a cutover
    holds it (the 503 says "switching") or no model is there at all ("unavailable").
    Two variables go with it: $vllm_fleet_frontdoor_state (serving, switching, idle)
    and $vllm_fleet_active_model (the model's name, for the metrics' header).
    """
    if port is None:
        state = SWITCHING if switching else IDLE
        body = ("    # No model is active: every request gets the 503 of @vllm_unavailable.\n"
                "    server 127.0.0.1:9 down;\n")
        head = ("# vllm-fleet front door: a model switch is in progress\n" if switching
                else "# vllm-fleet front door: no active model\n")
        model = None
    else:
        state = SERVING
        timeout_ms = keepalive_timeout_ms(server_keepalive_s)
        body = (f"    server {_nginx_word(host, 'host')}:{int(port)} max_fails=0;\n"
                "    keepalive 32;\n"
                f"    # Idle connections go at {timeout_ms} ms, half the model server's "
                f"{server_keepalive_s:g} s keep-alive:\n"
                "    # reusing one the server has just closed would fail a request.\n"
                f"    keepalive_timeout {timeout_ms}ms;\n")
        head = f"# vllm-fleet front door: active model {model or '?'}\n"
    name = _nginx_word(model or "", "model name")
    return (head + "# Written by vllm_fleet.fleet.vllm_cutover; do not edit.\n"
            f'map $server_port $vllm_fleet_frontdoor_state {{ default "{state}"; }}\n'
            f'map $server_port $vllm_fleet_active_model {{ default "{name}"; }}\n'
            f"upstream {UPSTREAM_NAME} {{\n{body}}}\n")


_STATE_MAP = re.compile(
    r'^map \$server_port \$vllm_fleet_frontdoor_state \{ default "([a-z]*)"; \}$', re.MULTILINE)
_MODEL_MAP = re.compile(r'^map \$server_port \$vllm_fleet_active_model \{ default "([^"]*)"; \}$',
                        re.MULTILINE)
_SERVER = re.compile(r"^    server ([A-Za-z0-9_.:-]+):(\d+)( down)?[^;\n]*;$", re.MULTILINE)


def parse_upstream(text):
    """What an upstream file (upstream_conf's shape) says: {"state": serving, switching or
    idle, "model": the active model's name or None, "host", "port": where it sends (None
    when nowhere)}. None for no file, an empty one, or one not of upstream_conf's shape."""
    if not text:
        return None
    state, model = _STATE_MAP.search(text), _MODEL_MAP.search(text)
    server = _SERVER.search(text)
    if not (state and model and server) or f"upstream {UPSTREAM_NAME} {{" not in text:
        return None
    serving = state.group(1) == SERVING and not server.group(3)
    if state.group(1) not in (SERVING, SWITCHING, IDLE) or (state.group(1) == SERVING) != serving:
        return None
    return {"state": state.group(1), "model": model.group(1) or None,
            "host": server.group(1) if serving else None,
            "port": int(server.group(2)) if serving else None}


def _prom_label(value):
    """A Prometheus label value (text format 0.0.4): backslash, quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


SERVING, SLEEPING, STOPPED = "serving", "sleeping", "stopped"


def model_states(record, inactive_units=()):
    """[(model, state)] for each model of the record, serving first: the active model is
    serving, each of `sleeping` (a warm switch's sleepers; absent = none) sleeping, the
    previous model stopped unless it sleeps. A model is listed once (serving outranks
    sleeping: a woken model may still be listed until its record is rewritten).
    inactive_units: units known not to run (status.yml asks systemd); a sleeper whose unit
    is one of them is stopped, whatever the record says (its unit was stopped by hand, or
    its process died, after the switch that put it to sleep)."""
    record = record or {}
    inactive = set(inactive_units or ())
    states = {}
    active = record.get("active") or None
    if isinstance(active, dict) and active.get("model"):
        states[active["model"]] = SERVING
    for entry in record.get("sleeping") or []:
        if isinstance(entry, dict) and entry.get("model"):
            states.setdefault(entry["model"],
                              STOPPED if entry.get("unit") in inactive else SLEEPING)
    previous = record.get("previous") or None
    if isinstance(previous, dict) and previous.get("model"):
        states.setdefault(previous["model"], STOPPED)
    return list(states.items())


def record_metrics(record):
    """The deployment record as Prometheus text: what the host serves, which revision, since when.

    `vllm_fleet_active_model_info` is 1 with the active model's labels (absent when none);
    `vllm_fleet_active_since_seconds` is when it became active (Unix time);
    `vllm_fleet_model_state` is 1 for each model of the record with its state
    (model_states(): serving, sleeping or stopped).
    """
    active = (record or {}).get("active") or None
    lines = [
        ("# HELP vllm_fleet_active_model_info The model this host serves behind its front door "
         "(1), with its revision."),
        "# TYPE vllm_fleet_active_model_info gauge",
    ]
    if active:
        labels = ",".join(
            f'{key}="{_prom_label(active.get(key) or "")}"'
            for key in ("model", "served_model_name", "repo_id", "revision", "vllm_version",
                        "vllm_lock"))
        lines.append(f"vllm_fleet_active_model_info{{{labels}}} 1")
    lines += [
        ("# HELP vllm_fleet_active_since_seconds When the active model became active "
         "(Unix time, seconds)."),
        "# TYPE vllm_fleet_active_since_seconds gauge",
    ]
    since = (active or {}).get("since")
    if since:
        try:
            stamp = dt.datetime.fromisoformat(since).timestamp()
        except ValueError:
            stamp = None
        if stamp is not None:
            lines.append(f"vllm_fleet_active_since_seconds {stamp:.0f}")
    lines += [
        ("# HELP vllm_fleet_model_state Each model of the deployment record (1) and its state: "
         "serving (active), sleeping (a warm switch's standby), stopped (the previous model)."),
        "# TYPE vllm_fleet_model_state gauge",
    ]
    lines += [f'vllm_fleet_model_state{{model="{_prom_label(model)}",state="{state}"}} 1'
              for model, state in model_states(record)]
    return "\n".join(lines) + "\n"


def read_upstream(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


class FrontDoorError(FieldsError):
    """nginx refused or did not take the switch; `fields` holds what the command said."""


class FrontDoor:
    """Switch nginx's upstream. `url` is the front door's own base URL.

    `key_file` holds the front door's own API key (one line): the settle check sends it
    as a bearer token when the front door asks for keys. `record_file` is where the
    deployment record is published as Prometheus text (served at /metrics/vllm-fleet).
    """

    def __init__(self, run_command, upstream_file, url, test_cmd=("nginx", "-t"),
                 reload_cmd=("systemctl", "reload", "nginx"), request=urllib_request,
                 clock=time.monotonic, sleep=time.sleep, settle_timeout=10.0, key_file=None,
                 record_file=None, confirmations=1, hold_file=None, pid_file=None,
                 warm_file=None, hold_socket=None, hold_max_s=DEFAULT_MAX_S,
                 hold_socket_user=None):
        self.run = run_command
        self.upstream_file = upstream_file
        self.url = url.rstrip("/")
        self.test_cmd = list(test_cmd)
        self.reload_cmd = list(reload_cmd)
        self.request = request
        self.clock = clock
        self.sleep = sleep
        self.settle_timeout = settle_timeout
        self.key_file = key_file
        self.record_file = record_file
        self.confirmations = max(1, int(confirmations))
        # nginx answers 503 "switching" while this file exists (None: hold by pointing at
        # nothing, a reload, as before the file existed)
        self.hold_file = hold_file
        # nginx's master pid file: its children are the workers (None: the front door's
        # workers are not read, and a drain cannot see requests nginx still holds)
        self.pid_file = pid_file
        # while this file exists beside the hold file, the hold's 503 says a warm switch's
        # Retry-After (None: every hold says the cold one's)
        self.warm_file = warm_file
        # the workers that ran before the last reload: each carries requests it let through
        # before then until they end, and exits after them (None: not known)
        self.fenced = None
        # the upstream from before the switch, kept while a switch is under way
        self.before_file = upstream_file + PRESWITCH_SUFFIX
        # the waiting room's socket (hold_room.py): while it exists, a request the hold meets
        # waits there (at most `hold_max_s` from the hold) and is then sent to the model that
        # serves after the switch (None: every held request is answered 503 at once)
        self.hold_socket = hold_socket
        self.hold_max_s = hold_max_s
        self.hold_socket_user = hold_socket_user
        self.room = None
        self.room_stats = None  # the last room's stats once it closed

    def workers(self):
        """nginx's worker pids now (the master's children, `pgrep -P`), None when unknown."""
        if not self.pid_file:
            return None
        try:
            with open(self.pid_file, encoding="utf-8") as handle:
                master = int(handle.read().strip())
        except (OSError, ValueError):
            return None
        rc, out, _err = self.run(["pgrep", "-P", str(master)])
        if rc not in (0, 1):  # 1: no child (nginx between two generations)
            return None
        return {int(word) for word in out.split() if word.isdigit()}

    def admitted(self):
        """How many workers of the generation before the last reload still run: each still
        carries a request it let through before the reload (a hold reloads, so these are the
        requests that passed before it). None when the workers cannot be read.

        A worker that carries requests waiting in the room is not counted: they wait for the
        switch's end, so the drain would wait for them until the room's bound refused them
        (CI's cutover scenario, 2026-12-07: every warm leg's drain 10.2 s, the warm return's
        16 held requests refused; nginx's old workers take connections for a moment after a
        reload, and a request can meet the hold before it). Such a worker may also carry a
        request let through before the hold whose body still arrives: it then reaches blue
        asleep, and the sleep's straggler check wakes blue for it (`_sleep_blue`)."""
        if self.fenced is None:
            return None
        now = self.workers()
        if now is None:
            return None
        waiting = self.room.holding_pids() if self.room is not None else set()
        return len((self.fenced & now) - waiting)

    def holding(self):
        """Whether a hold is on (a switch holds the front door, or one died holding it)."""
        return bool(self.hold_file) and os.path.exists(self.hold_file)

    def _keep_before(self):
        """A switch begins: keep the upstream in force now beside the file (once: a switch
        re-run after one that died keeps the first one's), so a reboot that cuts the switch
        goes back to it. Nothing when there is no upstream yet."""
        if os.path.exists(self.before_file):
            return
        current = self.current()
        if current is None:
            return
        try:
            write_atomic(self.before_file, current, prefix=".upstream.")
        except OSError as exc:
            raise FrontDoorError(f"cannot keep the front door's upstream from before the switch "
                                 f"in {self.before_file}: {exc.strerror or exc}") from None

    def _drop_before(self):
        """The switch has ended (its upstream is final): nothing to go back to at boot."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.before_file)

    @staticmethod
    def _make_folder(path):
        """The hold files' folder, in /run: gone after a reboot, made again (0755: nginx's
        workers must see the files)."""
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, mode=0o755, exist_ok=True)

    def _write_flag(self, path, text, prefix, what):
        """A hold flag in its /run folder (made again after a reboot), written atomically;
        FrontDoorError naming `what` and the path when it cannot be."""
        try:
            self._make_folder(path)
            write_atomic(path, text, prefix=prefix)
        except OSError as exc:
            raise FrontDoorError(f"cannot write the front door's {what} {path}: "
                                 f"{exc.strerror or exc}") from None

    def mark_warm(self, warm):
        """Say (or stop saying) that the switch is warm: the hold's Retry-After follows. A
        switch no longer warm keeps no one waiting (a room not yet released closes: 503 at
        once; a released one stays open, answering at once, until `close_room`)."""
        if not warm and self.room is not None and not self.room.done:
            self.close_room()
        if not (self.hold_file and self.warm_file):
            return
        if warm:  # the room opens first: nginx sends a warm hold's requests to it
            self._write_flag(self.warm_file, "a warm switch holds the front door\n",
                             ".hold-warm.", "warm hold file")
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.warm_file)

    def hold(self, warm=False):
        """Answer 503 "switching" from the next request on: the hold file, confirmed by one
        answer (each request tests the file: there is no old worker to wait out). Without a
        hold file, point at nothing (a reload). `warm`: the 503 says a warm switch's
        Retry-After (the warm file is written first) and, with a hold socket, requests wait
        in the waiting room instead, until the switch points the front door or `hold_max_s`
        passes. Returns seconds spent."""
        if not self.hold_file:
            return self.point(None)  # its reload fences what passed before it
        start = self.clock()
        self._keep_before()
        self.mark_warm(warm)
        if warm and self.hold_socket:
            self._open_room()
        self._write_flag(self.hold_file, "a model switch holds the front door\n", ".hold.",
                         "hold file")
        self._settle(None, 1)
        # Requests let through before the file existed may still be on their way to the
        # model (their body arriving): a reload moves them to workers that exit once they
        # ended, which admitted() counts. Without a pid file nothing would read them.
        if self.pid_file:
            self._reload_with(self.current(), force=True)
        return round(self.clock() - start, 3)

    def _open_room(self):
        self.close_room()
        try:
            self.room = HoldRoom(self.hold_socket, self.hold_max_s,
                                 user=self.hold_socket_user).open()
        except HoldRoomError as exc:
            raise FrontDoorError(exc.msg) from None

    def close_room(self):
        """Requests still waiting are answered 503 (unless the room was released) and the
        socket goes; what the room did is kept in `room_stats`."""
        if self.room is not None:
            self.room.close()
            self.room_stats = self.room.stats()
            self.room = None

    def held(self):
        """What the waiting room did in this switch (None: no room was opened)."""
        return self.room.stats() if self.room is not None else self.room_stats

    def stage(self, port, model=None):
        """Behind a hold, point the upstream at `port` (checked and reloaded) without opening
        the front door: `point` opens it later with no reload left to do. Returns seconds."""
        start = self.clock()
        if self.hold_file:  # without one the upstream stays at nothing until `point`
            self._reload_with(self.wanted(port, model))
        return round(self.clock() - start, 3)

    def _release(self):
        if self.hold_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.hold_file)
            self.mark_warm(False)  # after the hold: no 503 says a cold switch's wait

    def current(self):
        return read_upstream(self.upstream_file)

    def wanted(self, port=None, model=None, switching=True):
        """The upstream text for this state (the same renderer the role uses)."""
        return upstream_conf(port, model=model, switching=switching)

    def publish(self, record):
        """Write the deployment record's metrics file (atomically); nothing without one."""
        if self.record_file:
            write_atomic(self.record_file, record_metrics(record), prefix=".deployment.")

    def _headers(self):
        """The bearer token for the front door, read when it is needed (never kept or logged)."""
        if not self.key_file:
            return {}
        try:
            with open(self.key_file, encoding="utf-8") as handle:
                key = handle.readline().strip()
        except OSError as exc:
            raise FrontDoorError(f"cannot read the front door's key file {self.key_file}: "
                                 f"{exc.strerror or exc}") from None
        return {"headers": {"Authorization": f"Bearer {key}"}} if key else {}

    def point(self, port=None, model=None, served_model_name=None, switching=True):
        """Point the front door at a port (or at nothing) and wait until it answers so.

        Returns seconds spent. The old file is put back if nginx rejects the new one or
        the reload fails.
        """
        start = self.clock()
        final = port is not None or not switching  # else a switch holds it by pointing
        if not final:
            self._keep_before()
        reloaded = self._reload_with(self.wanted(port, model, switching))
        if final:
            self._drop_before()  # the switch has ended: this upstream is the one to boot with
            if self.room is not None:  # held requests go to this model (none: refused)
                self.room.release(f"127.0.0.1:{port}" if port is not None else None)
        self._release()
        # After a reload old workers may still answer the old way for a moment; a hold's
        # end needs no such wait (the upstream was staged long before).
        self._settle(served_model_name if port is not None else None,
                     self.confirmations if reloaded else 1)
        return round(self.clock() - start, 3)

    def _reload_with(self, wanted, force=False):
        """Write the upstream, check and reload nginx; the old file back when either fails.
        True when nginx was reloaded (False: the file already said so; `force` reloads it
        all the same). The workers from before the reload are kept in `fenced`."""
        old = self.current()
        if old == wanted and not force:
            return False
        before = self.workers()
        if old != wanted:
            write_atomic(self.upstream_file, wanted, prefix=".upstream.")
        rc, out, err = self.run(self.test_cmd)
        if rc != 0:
            self._restore(old)
            raise FrontDoorError(f"nginx rejected the new upstream ({' '.join(self.test_cmd)}"
                                 f" rc={rc}): {(err or out).strip()}",
                                 rc=rc, stdout=out, stderr=err)
        rc, out, err = self.run(self.reload_cmd)
        if rc != 0:
            # nginx still runs the old upstream: the file says so, and a re-run switches
            self._restore(old)
            raise FrontDoorError(f"reloading nginx failed ({' '.join(self.reload_cmd)} "
                                 f"rc={rc}): {(err or out).strip()}",
                                 rc=rc, stdout=out, stderr=err)
        if before is None:
            self.fenced = None
        else:  # an older generation still exiting stays fenced with this one
            self.fenced = before | (self.fenced or set())
        return True

    def _restore(self, old):
        """Put back the file as it was (absent when there was none)."""
        if old is None:
            os.unlink(self.upstream_file)
        else:
            write_atomic(self.upstream_file, old, prefix=".upstream.")

    def _settle(self, served_model_name, confirmations=None):
        """Wait until /v1/models through the front door shows the new state.

        After a reload nginx's old workers finish what they hold and stop accepting, but
        for a moment an old worker can still take a new connection and answer the old
        way: `confirmations` (default `self.confirmations`) answers in a row, each on a
        new connection 50 ms apart, must show the new state.
        """
        confirmations = confirmations or self.confirmations
        deadline = self.clock() + self.settle_timeout
        last = ""
        auth = self._headers()
        if served_model_name is None and self.room is not None:
            # the hold's own check is answered at once by the room, never held
            auth = {"headers": {**auth.get("headers", {}), "X-Vllm-Fleet-Hold": "check"}}
        seen = 0
        while True:
            res = self.request("GET", self.url + "/v1/models", timeout=5.0, **auth)
            if res.status == HTTP_UNAUTHORIZED:
                raise FrontDoorError(
                    f"front door {self.url} answered 401: it does not accept "
                    + (f"the key in {self.key_file}" if self.key_file else
                       "requests without a key (give the cutover the front door's own key file)"))
            matched = False
            if served_model_name is None:
                matched = res.status == HTTP_UNAVAILABLE
                last = f"wanted 503, got {res.status or res.error}"
            elif res.status == HTTP_OK:
                try:
                    names = [m.get("id") for m in json.loads(res.body).get("data", [])]
                except (ValueError, AttributeError):
                    names = []
                matched = served_model_name in names
                last = f"wanted {served_model_name}, front door lists {names}"
            else:
                last = f"wanted {served_model_name}, got {res.status or res.error}"
            seen = seen + 1 if matched else 0
            if seen >= confirmations:
                return
            if self.clock() >= deadline:
                raise FrontDoorError(f"front door {self.url} did not switch within "
                                     f"{self.settle_timeout} s: {last}")
            self.sleep(0.05)


def parse_metrics(text, names=(engine.RUNNING, engine.WAITING)):
    """Sum the named Prometheus gauges (over all label sets) from /metrics text."""
    totals = metric_totals(text)
    return {name: totals.get(name, 0.0) for name in names}


def server_load(text):
    """vLLM's /load answer ({"server_load": N}) as an int, or None when it is not that."""
    try:
        value = json.loads(text).get("server_load")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def drain(base_url, timeout_s, request=urllib_request, clock=time.monotonic, sleep=time.sleep,
          interval_s=0.2, quiet_reads=2, pending=None):
    """Wait until the server has nothing in flight.

    In flight is what vLLM's /load counts (a request from its handler's entry to
    the last byte of its response, a stream's tail included; the unit runs
    `vllm serve --enable-server-load-tracking`) and the engine's running and
    waiting gauges from /metrics. The engine's gauges alone reach 0 while a
    finished request's stream is still being written: a stop then cuts it
    (found in CI: a streamed completion ended after 1131 bytes). A server
    without /load is read by its gauges alone. Drained after `quiet_reads`
    reads in a row with nothing in flight, `interval_s` apart, so that a
    request the front door passed just before its hold has reached vLLM's
    handler. A server that no longer answers counts as drained (nothing can
    be in flight on it).

    `pending` (FrontDoor.admitted) counts what the front door let through before its hold
    and still carries: a request whose body is still arriving is not in vLLM's count yet
    (issue 44, case 6). Drained needs it at 0 too: an old worker exits only after the last
    request it carries has ended, so 0 means every request let through before the hold
    has ended.

    Returns a dict: drained (bool), seconds, running, waiting, in_flight (/load's
    count, None when the server has no /load), frontdoor_in_flight (pending's count,
    only with `pending`; None when the front door's workers could not be read).
    """
    base = base_url.rstrip("/")
    start = clock()
    quiet = 0
    while True:
        held = pending() if pending else None
        load = request("GET", base + engine.LOAD, timeout=5.0)
        in_flight = server_load(load.body) if load.status == HTTP_OK else None
        res = request("GET", base + engine.METRICS, timeout=5.0)
        if res.status != HTTP_OK:
            return {"drained": True, "seconds": round(clock() - start, 3), "running": 0,
                    "waiting": 0, "in_flight": 0,
                    "note": f"/metrics answered {res.status or res.error}"}
        totals = parse_metrics(res.body)
        running = int(totals[engine.RUNNING])
        waiting = int(totals[engine.WAITING])
        outcome = {"drained": False, "seconds": round(clock() - start, 3), "running": running,
                   "waiting": waiting, "in_flight": in_flight}
        if pending:
            outcome["frontdoor_in_flight"] = held
        quiet = quiet + 1 if running == 0 and waiting == 0 and not in_flight and not held else 0
        if quiet >= quiet_reads:
            return dict(outcome, drained=True)
        if clock() - start >= timeout_s:
            return outcome
        sleep(interval_s)


# The paths the front door serves itself or always forwards: not for api_routes().
FIXED_ROUTES = ("/health", "/metrics", "/metrics/vllm-fleet")
# A route as nginx's exact location and proxy_pass take it: no pattern, no dot segment,
# no empty segment, no trailing slash, nothing nginx would decode.
_ROUTE = re.compile(r"(/[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*)+")


def api_routes(routes):
    """The front door's allowlist, checked: each route forwarded as it is, nothing else.

    `routes` is vllm_frontdoor_api_routes, a list of paths such as "/v1/models". Raises
    TypeError for anything but a list; ValueError naming the variable, what was wanted and
    what was found for a path that is not plain, one of FIXED_ROUTES (always served), a
    repeat, or a route in (or under) NEVER_FORWARDED.
    """
    if not isinstance(routes, (list, tuple)):
        raise TypeError("vllm_frontdoor_api_routes must be a list of paths such as "
                        f"/v1/models, got {type(routes).__name__} {routes!r}")
    problems = []
    for route in routes:
        text = route if isinstance(route, str) else repr(route)
        if not isinstance(route, str) or not _ROUTE.fullmatch(route):
            problems.append(f"{text} (wanted a plain path: / then segments of A-Z a-z 0-9 _ -"
                            " joined by / or ., no trailing /)")
        elif route in FIXED_ROUTES:
            problems.append(f"{route} (always served by the front door; leave it out)")
        elif any(route == bad or route.startswith(bad + "/") for bad in NEVER_FORWARDED):
            problems.append(f"{route} (one of vLLM's control or development routes, which the"
                            " front door never forwards)")
    repeats = sorted({r for r in routes if isinstance(r, str) and routes.count(r) > 1})
    problems += [f"{r} (listed more than once)" for r in repeats]
    if problems:
        raise ValueError("vllm_frontdoor_api_routes: refused " + "; ".join(problems))
    return list(routes)
