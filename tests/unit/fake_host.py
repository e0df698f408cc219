# Copyright 2026 vllm-fleet contributors
"""A fake host for the cutover tests: systemd units, the model servers behind them, a clock.

This is a model of the real thing, labelled as such: the cutover's real
targets are GPU servers that cannot run here. It answers the argv the code
sends (`systemctl show/start/stop/restart/enable/disable/reset-failed`,
`journalctl -u`, `ss`) the way systemd and iproute2 do, and answers HTTP per
URL the way a vLLM server does: connection refused until its unit is active
and has loaded, then /health, /v1/models and /v1/completions.

`now` is a fake monotonic clock; `sleep` only advances it, so no test waits.
"""

import json

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.health import HttpResult

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


class FakeUnit:
    def __init__(self, name, url=None, served=None, *, installed=True, active=False,
                 behaviour=HEALTHY, warmup_s=0.0, journal=()):
        self.name = name
        self.url = url
        self.served = served
        self.installed = installed
        self.behaviour = behaviour
        self.warmup_s = warmup_s
        self.journal = list(journal)
        self.active_state = "active" if active else "inactive"
        self.sub_state = "running" if active else "dead"
        self.n_restarts = 0
        self.enabled = active
        self.main_pid = 4242 if active else 0
        self.started_at = 0.0 if active else None

    def props(self):
        if not self.installed:
            return {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                    "NRestarts": "0", "UnitFileState": "", "MainPID": "0"}
        return {"LoadState": "loaded", "ActiveState": self.active_state,
                "SubState": self.sub_state, "NRestarts": str(self.n_restarts),
                "UnitFileState": "enabled" if self.enabled else "disabled",
                "MainPID": str(self.main_pid)}


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

    def unit(self, name, url=None, served=None, **kwargs):
        self.units[name] = FakeUnit(name, url, served, **kwargs)
        return self.units[name]

    # -- clock ---------------------------------------------------------------
    def clock(self):
        return self.now

    def wall(self):
        return WALL_EPOCH + self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    # -- run_command -----------------------------------------------------------
    def run_command(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "systemctl":
            return self._systemctl(argv[1], argv[2], argv[3:])
        if argv[0] == "journalctl":
            unit = self.units.get(argv[argv.index("-u") + 1])
            lines = int(argv[argv.index("-n") + 1])
            text = "\n".join((unit.journal if unit else [])[-lines:])
            return 0, text + ("\n" if text else ""), ""
        if argv[0] == "ss":
            return 0, self.ss_out, ""
        return 127, "", f"{argv[0]}: command not found"

    def state_calls(self):
        """(verb, unit) of every state-changing systemctl call, in order."""
        return [(a[1], a[2]) for a in self.calls if a[0] == "systemctl" and a[1] in STATE_VERBS]

    def _systemctl(self, verb, name, rest):  # noqa: PLR0911 - one answer per verb, as systemctl
        unit = self.units.get(name)
        if verb == "show":
            props = unit.props() if unit else FakeUnit(name, installed=False).props()
            wanted = rest[0].split("=", 1)[1].split(",")
            if unit and unit.behaviour == RESTART_LOOP and unit.started_at is not None:
                unit.n_restarts += 1
                unit.active_state, unit.sub_state = "activating", "auto-restart"
            return 0, "".join(f"{key}={props[key]}\n" for key in wanted), ""
        if unit is None or not unit.installed:
            if verb == "reset-failed":
                return 1, "", f"Failed to reset failed state of unit {name}: not loaded."
            return 5, "", f"Failed to {verb} {name}: Unit {name} not found."
        if verb in ("start", "restart"):
            return self._start(unit, restart=verb == "restart")
        if verb == "stop":
            unit.active_state, unit.sub_state = "inactive", "dead"
            unit.main_pid, unit.started_at = 0, None
            return 0, "", ""
        if verb in ("enable", "disable"):
            unit.enabled = verb == "enable"
            return 0, "", ""
        if verb == "reset-failed":
            if unit.active_state == "failed":
                unit.active_state, unit.sub_state = "inactive", "dead"
            unit.n_restarts = 0
            return 0, "", ""
        return 1, "", f"Unknown command verb {verb}."

    def _start(self, unit, restart):
        if unit.active_state == "active" and not restart:
            return 0, "", ""  # systemctl start on a running unit does nothing
        self.active_at_start[unit.name] = sorted(
            u.name for u in self.units.values() if u.active_state == "active" and u is not unit)
        if unit.behaviour == START_FAILS:
            unit.active_state, unit.sub_state = "failed", "failed"
            return 1, "", (f"Job for {unit.name} failed because the control process exited "
                           f"with error code.\n")
        unit.started_at = self.now
        unit.main_pid = 5000 + len(self.calls)
        if unit.behaviour == CRASH:
            unit.active_state, unit.sub_state, unit.main_pid = "failed", "failed", 0
        elif unit.behaviour == EXITS:
            unit.active_state, unit.sub_state, unit.main_pid = "inactive", "dead", 0
        else:
            unit.active_state, unit.sub_state = "active", "running"
        return 0, "", ""

    # -- HTTP --------------------------------------------------------------------
    def request(self, method, url, payload=None, timeout=10.0):  # noqa: PLR0911 - one per route
        self.http.append((method, url))
        unit = next((u for u in self.units.values() if u.url and url.startswith(u.url + "/")),
                    None)
        if (unit is None or unit.active_state != "active" or unit.behaviour in (HANG, RESTART_LOOP)
                or self.now < unit.started_at + unit.warmup_s):
            return HttpResult(error=CONN_REFUSED)
        path = url[len(unit.url):]
        if path == "/health":
            return HttpResult(200, "")
        if path == "/v1/models":
            if unit.behaviour == NOT_JSON:
                return HttpResult(200, "<html>proxy login</html>")
            name = "someone-else" if unit.behaviour == WRONG_MODEL else unit.served
            return HttpResult(200, json.dumps({"object": "list", "data": [{"id": name}]}))
        if path == "/v1/completions" and method == "POST":
            if payload["model"] != unit.served:
                return HttpResult(404, json.dumps({"error": "model not found"}))
            tokens = 0 if unit.behaviour == ZERO_TOKENS else payload["max_tokens"]
            return HttpResult(200, json.dumps({
                "choices": [{"text": " world" if tokens else ""}],
                "usage": {"completion_tokens": tokens}}))
        return HttpResult(404, "")
