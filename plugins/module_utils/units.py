# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A model server's unit under systemd: start it, gate it, stop it, see who holds its port.

The few systemctl/journalctl/ss calls a switch needs, each through a
`run_command` the caller passes in (AnsibleModule.run_command on a host, a
fake host in the tests), and the health gate of a started unit: health,
model list and one completion (health.wait_healthy), failing at once when
systemd says the process died or was restarted.
"""

import json
import os
import socket
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import write_atomic
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.health import wait_healthy

CGROUP_ROOT = "/sys/fs/cgroup"
SHOW_PROPS = ("LoadState", "ActiveState", "SubState", "NRestarts", "UnitFileState", "MainPID")


class UnitError(Exception):
    """A systemctl call failed; `msg` names the verb, the unit and what systemd said."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg = msg
        self.fields = fields


class Systemd:
    """The few systemctl/journalctl calls the switch needs."""

    def __init__(self, run_command):
        self.run = run_command

    def show(self, unit, props=SHOW_PROPS):
        rc, out, err = self.run(["systemctl", "show", unit, "--property=" + ",".join(props)])
        if rc != 0:
            raise UnitError(f"systemctl show {unit} failed (rc={rc}): {err.strip()}",
                            rc=rc, stdout=out, stderr=err)
        values = {}
        for line in out.splitlines():
            key, _unused, value = line.partition("=")
            values[key] = value
        return values

    def act(self, verb, unit):
        rc, out, err = self.run(["systemctl", verb, unit])
        if rc != 0:
            raise UnitError(f"systemctl {verb} {unit} failed (rc={rc}): {(err or out).strip()}",
                            rc=rc, stdout=out, stderr=err)

    def try_act(self, verb, unit):
        rc, _out, _err = self.run(["systemctl", verb, unit])
        return rc == 0

    def journal(self, unit, since_epoch, lines):
        """The unit's last `lines` log lines since `since_epoch`, oldest first.

        With --since, journalctl's -n counts from the start of the window (systemd 252
        prints the first N lines after it), so ask newest-first (-r) and turn it round.
        """
        rc, out, _err = self.run(["journalctl", "-u", unit, "--since", f"@{int(since_epoch)}",
                                  "-n", str(lines), "-r", "--no-pager", "-o", "cat"])
        return list(reversed(out.splitlines()[:lines])) if rc == 0 else []

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


class StartProgress:
    """Writes where a start stands (elapsed of its limit, the unit's last log line) to a
    JSON file every `interval` seconds, for async_follow to print on the controller."""

    def __init__(self, path, systemd, interval=10.0, wall=time.time):
        self.path = path
        self.systemd = systemd
        self.interval = interval
        self.wall = wall
        self.last_write = None

    def __call__(self, svc, role, elapsed, started_wall, force=False):
        if not self.path:
            return
        now = self.wall()
        if not force and self.last_write is not None and now - self.last_write < self.interval:
            return
        self.last_write = now
        lines = self.systemd.journal(svc["unit"], started_wall - 1, 1)
        data = {"phase": "starting", "model": svc["model"], "role": role,
                "elapsed_s": round(elapsed, 1), "limit_s": svc["startup_timeout_s"],
                "last_line": lines[-1] if lines else "", "updated": now}
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            write_atomic(self.path, json.dumps(data) + "\n", prefix=".vllm-fleet-progress.")
        except OSError:
            pass  # progress is a courtesy; the switch goes on


class UnitGate:
    """Start (or restart) a model's unit and wait for its health gate."""

    def __init__(self, systemd, request, clock, sleep, interval=2.0, smoke_prompt="Hello",
                 progress=None):
        self.systemd = systemd
        self.request = request
        self.clock = clock
        self.sleep = sleep
        self.interval = interval
        self.smoke_prompt = smoke_prompt
        self.progress = progress

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

    def start(self, svc, verb="start", role="green", wall=time.time):
        """Start (or restart) `svc` and wait for its gate; returns the gate's outcome."""
        self.systemd.try_act("reset-failed", svc["unit"])
        baseline = int(self.systemd.show(svc["unit"]).get("NRestarts") or 0)
        self.systemd.act(verb, svc["unit"])
        started_wall = wall()
        process_alive = self._alive(svc["unit"], baseline)
        start = self.clock()

        def alive():
            """systemd's view of the process, and a progress line while it loads."""
            if self.progress is not None:
                self.progress(svc, role, self.clock() - start, started_wall)
            return process_alive()

        return wait_healthy(
            svc["url"], svc["served_model_name"], svc["startup_timeout_s"],
            interval_s=self.interval, smoke_prompt=self.smoke_prompt, request=self.request,
            alive=alive, clock=self.clock, sleep=self.sleep)
