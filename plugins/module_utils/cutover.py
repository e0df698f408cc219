"""Blue/green switch between vLLM model services under systemd.

`blue` is the model serving now (from the deployment record), `green` the
one asked for. The sequential strategy stops blue before green starts (the
GPUs cannot hold both); the parallel strategy starts green beside blue and
stops blue only once green has passed its health gate. Any failure before
the switch rolls back: green is stopped, blue started again if it was
stopped and gated healthy, and the result says `rolled_back`.

Everything that touches the host comes in as a parameter (a run_command, an
HTTP request function, a clock), so pytest drives the logic.
"""

import datetime as dt
import json
import os
import socket
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import (
    FrontDoorError,
    drain,
    upstream_conf,
    write_atomic,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.health import (
    urllib_request,
    wait_healthy,
)

RECORD_HISTORY = 10
CGROUP_ROOT = "/sys/fs/cgroup"


class CutoverError(Exception):
    """A failure with the result fields collected so far."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg = msg
        self.fields = fields


class Systemd:
    """The few systemctl/journalctl calls the switch needs."""

    def __init__(self, run_command):
        self.run = run_command

    def show(self, unit, props=("LoadState", "ActiveState", "SubState", "NRestarts",
                                "UnitFileState", "MainPID")):
        rc, out, err = self.run(["systemctl", "show", unit, "--property=" + ",".join(props)])
        if rc != 0:
            raise CutoverError(f"systemctl show {unit} failed (rc={rc}): {err.strip()}")
        values = {}
        for line in out.splitlines():
            key, _, value = line.partition("=")
            values[key] = value
        return values

    def act(self, verb, unit):
        rc, out, err = self.run(["systemctl", verb, unit])
        if rc != 0:
            raise CutoverError(f"systemctl {verb} {unit} failed (rc={rc}): "
                               f"{(err or out).strip()}")

    def try_act(self, verb, unit):
        rc, _out, _err = self.run(["systemctl", verb, unit])
        return rc == 0

    def journal(self, unit, since_epoch, lines):
        rc, out, _err = self.run(["journalctl", "-u", unit, "--since", f"@{int(since_epoch)}",
                                  "-n", str(lines), "--no-pager", "-o", "cat"])
        return out.splitlines()[-lines:] if rc == 0 else []

    def is_active(self, unit):
        return self.show(unit)["ActiveState"] == "active"


def port_holder(host, port, run_command):
    """None when nothing listens on host:port, else a description with the pid."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        if sock.connect_ex((host, port)) != 0:
            return None
    rc, out, _err = run_command(["ss", "-H", "-ltnp", f"sport = :{port}"])
    detail = out.strip().splitlines()[0] if rc == 0 and out.strip() else "pid unknown"
    if "users:" in detail:
        detail = detail[detail.index("users:"):]
    return f"port {port} on {host} is already taken ({detail})"


def resolve_strategy(strategy, blue, green):
    """`auto` is parallel when blue and green use disjoint GPU sets, else sequential."""
    if strategy != "auto":
        return strategy
    if not blue:
        return "sequential"
    shared = set(blue.get("gpus") or []) & set(green.get("gpus") or [])
    return "sequential" if shared else "parallel"


def unit_pids(unit, run_command, cgroup_root=None):
    """Pids in a unit's cgroup (cgroup v2, under `cgroup_root`), its children included."""
    cgroup_root = cgroup_root or CGROUP_ROOT
    rc, out, _err = run_command(["systemctl", "show", unit, "--property=ControlGroup", "--value"])
    group = out.strip() if rc == 0 else ""
    pids = set()
    if not group:
        return pids
    for folder, _dirs, files in os.walk(cgroup_root + group):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(folder, "cgroup.procs"), encoding="utf-8") as handle:
                    pids.update(int(line) for line in handle if line.strip())
            except OSError:
                continue
    return pids


def foreign_gpu_processes(gpu_processes, gpus, allowed_pids):
    """Processes holding memory on any of `gpus` that are not in `allowed_pids`."""
    wanted = {str(g) for g in gpus or []}
    return [p for p in gpu_processes or []
            if str(p.get("gpu_index")) in wanted and int(p.get("pid", -1)) not in allowed_pids]


def load_record(path):
    """The deployment record, or an empty one when there is none yet."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {"active": None, "previous": None, "history": []}
    except ValueError as exc:
        raise CutoverError(f"deployment record {path} is not JSON: {exc}") from exc
    data.setdefault("active", None)
    data.setdefault("previous", None)
    data.setdefault("history", [])
    return data


def write_record(path, record):
    """Write the record atomically (temp file + rename in the same folder)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n", prefix=".vllm_fleet.")


def now_iso(clock=time.time):
    return dt.datetime.fromtimestamp(clock(), dt.timezone.utc).isoformat(
        timespec="seconds")


def same_deployment(active, green):
    """Whether the recorded active deployment already is `green` (model and record fields)."""
    if not active:
        return False
    keys = set(green) - {"since"}
    return all(active.get(k) == green.get(k) for k in keys)


def plan(record, green, restart=False, green_state=None):
    """Decide what to do. Returns one of:

    'none'    green is the active model, running, nothing changed
    'start'   green is the active model but its unit is not running
    'restart' green is the active model and its unit or files changed
    'switch'  another model (or none) is active: blue/green cutover
    """
    active = record.get("active")
    if active and active.get("model") == green["model"]:
        running = (green_state or {}).get("ActiveState") == "active"
        if restart and running:
            return "restart"
        if not running:
            return "start"
        return "none"
    return "switch"


class Cutover:
    """One switch to `green`. `green` and the recorded blue are dicts with
    model, unit, url, served_model_name, startup_timeout_s (+ record fields)."""

    def __init__(self, run_command, green, state_file, strategy="sequential", restart=False,
                 health_interval=2.0, smoke_prompt="Hello", journal_lines=40,
                 request=urllib_request, clock=time.monotonic, wall=time.time, sleep=time.sleep,
                 frontdoor=None, drain_timeout=60.0, gpu_processes=None, cgroup_root=None):
        if strategy not in ("sequential", "parallel", "auto"):
            raise CutoverError(f"strategy must be sequential, parallel or auto, got {strategy!r}")
        self.frontdoor = frontdoor
        self.drain_timeout = drain_timeout
        self.gpu_processes = gpu_processes
        self.cgroup_root = cgroup_root
        self.run = run_command
        self.systemd = Systemd(run_command)
        self.green = green
        self.state_file = state_file
        self.strategy = strategy
        self.restart = restart
        self.interval = health_interval
        self.smoke_prompt = smoke_prompt
        self.journal_lines = journal_lines
        self.request = request
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.phases = {}

    # -- pieces ------------------------------------------------------------
    def _timed(self, name, func, *args):
        start = self.clock()
        try:
            return func(*args)
        finally:
            self.phases[name] = round(self.phases.get(name, 0) + self.clock() - start, 2)

    def _alive(self, unit, baseline_restarts):
        def check():
            state = self.systemd.show(unit)
            restarts = int(state.get("NRestarts") or 0)
            if state["ActiveState"] == "failed":
                return False, f"{unit} failed ({state['SubState']})"
            if restarts > baseline_restarts:
                return False, f"{unit} exited and was restarted by systemd ({restarts} restarts)"
            if state["ActiveState"] == "inactive":
                return False, f"{unit} is inactive ({state['SubState']})"
            return True, ""
        return check

    def _start_and_gate(self, svc, verb="start"):
        """Start (or restart) a service and wait for its health gate."""
        self.systemd.try_act("reset-failed", svc["unit"])
        baseline = int(self.systemd.show(svc["unit"]).get("NRestarts") or 0)
        self.systemd.act(verb, svc["unit"])
        return wait_healthy(
            svc["url"], svc["served_model_name"], svc["startup_timeout_s"],
            interval_s=self.interval, smoke_prompt=self.smoke_prompt, request=self.request,
            alive=self._alive(svc["unit"], baseline), clock=self.clock, sleep=self.sleep)

    def _preflight(self, blue):
        if self.gpu_processes and self.green.get("gpus"):
            allowed = unit_pids(blue["unit"], self.run, self.cgroup_root) if blue else set()
            allowed |= unit_pids(self.green["unit"], self.run, self.cgroup_root)
            foreign = foreign_gpu_processes(self.gpu_processes, self.green["gpus"], allowed)
            if foreign:
                held = ", ".join(f"pid {p['pid']} holds {p.get('used_memory_bytes', '?')} bytes "
                                 f"on GPU {p['gpu_index']}" for p in foreign)
                raise CutoverError(f"green {self.green['model']} cannot start: processes that "
                                   f"belong to no model service hold memory on its GPUs ({held})")
        state = self.systemd.show(self.green["unit"])
        if state.get("LoadState") != "loaded":
            raise CutoverError(f"green unit {self.green['unit']} is not installed "
                               f"(LoadState={state.get('LoadState')})")
        if blue and blue.get("port") == self.green.get("port"):
            raise CutoverError(
                f"{self.green['model']} and the active {blue['model']} both want port "
                f"{self.green.get('port')}: give each catalog entry its own port")
        if state.get("ActiveState") != "active" and self.green.get("port"):
            held = port_holder(self.green.get("host", "127.0.0.1"), int(self.green["port"]),
                               self.run)
            if held:
                raise CutoverError(f"green {self.green['model']} cannot start: {held}")

    def _record(self, record, blue):
        green = dict(self.green, since=now_iso(self.wall))
        history = ([blue] if blue else []) + list(record.get("history") or [])
        return {"active": green, "previous": blue or record.get("previous"),
                "history": history[:RECORD_HISTORY]}

    # -- the switch --------------------------------------------------------
    def describe(self, record):
        state = self.systemd.show(self.green["unit"])
        action = plan(record, self.green, self.restart, state)
        active = record.get("active")
        if action == "none" and not same_deployment(active, self.green):
            action = "record"
        if action == "none" and self.frontdoor is not None and self.frontdoor.current() != \
                upstream_conf(self.green["port"], model=self.green["model"]):
            action = "frontdoor"
        return action, state

    def run_plan(self, record, check_mode=False):
        """Carry the switch out (or only report it in check mode). Returns the result dict."""
        action, state = self.describe(record)
        blue = record.get("active")
        if blue and blue.get("model") == self.green["model"]:
            blue = None
        self.strategy = resolve_strategy(self.strategy, blue, self.green)
        result = {
            "action": action,
            "strategy": self.strategy,
            "active_before": (record.get("active") or {}).get("model"),
            "active_after": self.green["model"],
            "blue": blue["model"] if blue else None,
            "green": self.green["model"],
            "changed": action != "none",
            "rolled_back": False,
            "phases": self.phases,
        }
        if check_mode or action == "none":
            return result
        if action in ("record", "frontdoor"):
            self._point_green_or_fail(result)
            if action == "record":
                write_record(self.state_file, self._record(record, None))
            result["active_before"] = self.green["model"]
            return result
        if action in ("start", "restart"):
            gate = self._timed("start_green", self._start_and_gate, self.green,
                               "restart" if action == "restart" else "start")
            result["green_health"] = gate
            if not gate["ok"]:
                since = self.wall() - gate["seconds"] - 5
                self.systemd.try_act("stop", self.green["unit"])
                raise CutoverError(
                    f"{self.green['model']} did not pass its health gate after {action}: "
                    f"{gate['detail']}; it was the active model, so there is nothing to roll "
                    f"back to and it is now stopped",
                    journal=self.systemd.journal(self.green["unit"], since, self.journal_lines),
                    **result)
            self._point_green_or_fail(result)
            self.systemd.act("enable", self.green["unit"])
            write_record(self.state_file, self._record(record, None))
            result["time_to_healthy_s"] = gate["seconds"]
            return result
        return self._switch(record, blue, result, state)

    def _point_green(self):
        if self.frontdoor is not None:
            self._timed("frontdoor", self.frontdoor.point, self.green["port"],
                        self.green["model"], self.green["served_model_name"])

    def _point_green_or_fail(self, result):
        """Outside a switch there is nothing to roll back: a front door failure fails the run."""
        try:
            self._point_green()
        except FrontDoorError as exc:
            raise CutoverError(f"{self.green['model']} is running, but the front door was not "
                               f"switched to it: {exc}", **result) from None

    def _drain(self, svc, result, key):
        outcome = drain(svc["url"], self.drain_timeout, request=self.request, clock=self.clock,
                        sleep=self.sleep)
        result[key] = outcome
        return outcome

    def _switch(self, record, blue, result, state):
        try:
            self._timed("preflight", self._preflight, blue)
        except CutoverError as exc:
            serving = f"{blue['model']} is still serving." if blue else "No model was serving."
            result["active_after"] = result["active_before"]
            raise CutoverError(f"cutover to {self.green['model']} refused before any change: "
                               f"{exc.msg}. {serving}", **dict(exc.fields, **result)) from None
        blue_stopped = False
        down_since = None
        started_at = self.wall()
        try:
            if blue and self.strategy == "sequential":
                if self.frontdoor is not None:
                    self._timed("frontdoor", self.frontdoor.point, None)
                    down_since = self.clock()
                self._timed("drain_blue", self._drain, blue, result, "blue_drain")
                self._timed("stop_blue", self.systemd.act, "stop", blue["unit"])
                blue_stopped = True
            gate = self._timed("start_green", self._start_and_gate, self.green)
            result["green_health"] = gate
            if not gate["ok"]:
                raise CutoverError(f"green {self.green['model']} failed its health gate "  # noqa: TRY301
                                   f"at {gate['stage']}: {gate['detail']}")
            result["time_to_healthy_s"] = gate["seconds"]
            self._point_green()
        except (CutoverError, FrontDoorError) as exc:
            msg = getattr(exc, "msg", str(exc))
            result.update(getattr(exc, "fields", {}))
            result["journal"] = self.systemd.journal(self.green["unit"], started_at - 1,
                                                     self.journal_lines)
            self._timed("rollback", self._rollback, blue, blue_stopped, result)
            if down_since is not None:
                result["downtime_s"] = round(self.clock() - down_since, 2)
            raise CutoverError(
                f"cutover to {self.green['model']} failed: {msg}. "
                + (f"Rolled back: {blue['model']} is serving again."
                   if blue and result.get("blue_health", {}).get("ok", True)
                   else "No previous model to roll back to."
                   if not blue else
                   f"Rollback FAILED: {blue['model']} did not pass its health gate either "
                   f"({result['blue_health']['detail']})."),
                **result) from None
        result["downtime_s"] = (round(self.clock() - down_since, 2) if down_since is not None
                                else 0.0)
        self.systemd.act("enable", self.green["unit"])
        if blue:
            if not blue_stopped:
                self._timed("drain_blue", self._drain, blue, result, "blue_drain")
                self._timed("stop_blue", self.systemd.act, "stop", blue["unit"])
            self.systemd.try_act("disable", blue["unit"])
        write_record(self.state_file, self._record(record, blue))
        result["state"] = state.get("ActiveState")
        return result

    def _rollback(self, blue, blue_stopped, result):
        self.systemd.try_act("stop", self.green["unit"])
        self.systemd.try_act("reset-failed", self.green["unit"])
        if blue and blue_stopped:
            try:
                result["blue_health"] = self._start_and_gate(blue)
            except CutoverError as exc:
                result["blue_health"] = {"ok": False, "stage": "start", "detail": exc.msg}
        restored = bool(blue) and result.get("blue_health", {}).get("ok", True)
        result["rolled_back"] = restored
        result["active_after"] = blue["model"] if restored else None
        if restored and self.frontdoor is not None:
            try:
                self.frontdoor.point(blue["port"], blue["model"], blue["served_model_name"])
            except FrontDoorError as exc:
                result["frontdoor_error"] = str(exc)
