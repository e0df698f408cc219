# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A switch in which a multi-node replica takes part, as green or as blue: one host's part.

A multi-node replica (a catalog entry with nodes > 1) is one blue or one green
across its hosts: its head cannot start without its workers, and a worker left
running hangs the head's next start. No host can switch it alone, so the
controller runs the switch phase by phase over every host of the switch
(roles/vllm_model/tasks/cutover_replica.yml), each phase on all of them
before the next:

  plan     (check mode) each host: none (serving green as recorded), commit
           (green runs, the record or front door lags: a controller died after
           the gate) or switch
  stop     each host: the switch marker, the front door to 503 (switching),
           blue drained where it serves an API, blue's unit stopped (and a
           green left running by a dead controller)
  start    the heads and single hosts first, then the workers: the model link
           pointed, green's unit started (a worker's unit joins the head's start)
  gate     the heads and single hosts: green's gate (health, model list, one
           completion; the completion is what catches a dead worker), failing
           at once when a worker that joined the head stopped
  commit   each host: green enabled, blue disabled, the record, the front door
           to green (heads, single hosts) or unavailable (workers); marker off
and when a start or a gate failed:
  unwind   each host: green's unit stopped
  start, gate with target blue (the record's active model on each host:
           single hosts and replica ranks alike), then
  release  each host: a front door still switching says unavailable; marker off

Roles: a host's part in a model is `head` or `worker` (its record's or the
request's `replica`), else `single`. The switch marker (the probe keeps off
while it exists) is held from `stop` to `commit` or `release`, across phases;
it carries when each unit was started, for the gate. Each phase holds the
host's switch lock (the module) while it runs. A controller that dies between
phases leaves the record as it was: a re-run plans again from it and either
finishes (commit, when green's ranks run and its head passes) or switches
again, so every rank ends on one revision behind a passed gate, or blue is back.
"""

import contextlib
import json
import os

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as records
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import write_atomic
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import replica_watch
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoorError,
    drain,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Settings,
    health_gate,
    label,
    link_target,
    prepare_link,
    probe_active,
    published,
    revision_changed,
    unit_act,
    unit_show,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import (
    Systemd,
    UnitError,
)

PHASES = ("plan", "stop", "start", "gate", "commit", "unwind", "release")
HEAD, WORKER, SINGLE = replica_watch.HEAD, replica_watch.WORKER, "single"


def role_of(svc):
    """`head`, `worker` or `single` (a model served by this host alone); None without one."""
    if not svc:
        return None
    return (svc.get("replica") or {}).get("role") or SINGLE


def serves_api(svc):
    return role_of(svc) in (HEAD, SINGLE)


def workers_of(svc):
    """The replica's workers (name, state_url) as `svc` records them; [] for a single host."""
    return [rank for rank in (svc.get("replica") or {}).get("ranks") or []
            if rank.get("role") == WORKER]


class RankSwitch:
    """One host's part in a replica switch to `green` (a dict like vllm_cutover's green, with
    `replica` - record_replica of the plan - when green is a multi-node rank here)."""

    def __init__(self, host, green, state_file, settings=None, frontdoor=None, rank_reader=None,
                 gpu_processes=None, rank_dir=replica_watch.RANK_DIR):
        self.host = host
        self.green = green
        self.state_file = state_file
        self.settings = settings or Settings()
        self.frontdoor = frontdoor
        self.gpu_processes = gpu_processes
        self.rank_dir = rank_dir
        self.read_rank = rank_reader or (
            lambda url: replica_watch.read_rank(url, request=host.request))
        self.systemd = Systemd(host.run_command)
        self.gate_runner = health_gate(host, self.systemd, self.settings)

    # -- helpers -----------------------------------------------------------------
    def _show(self, unit, props=("LoadState", "ActiveState", "SubState", "NRestarts",
                                 "InvocationID", "UnitFileState")):
        return unit_show(self.systemd, unit, props)

    def _act(self, verb, unit):
        unit_act(self.systemd, verb, unit)

    def _target(self, record, target):
        if target == "green":
            return self.green
        blue = record.get("active")
        if not blue:
            return None
        return dict(blue)

    def _marker(self):
        path = self.settings.switch_marker
        if not path:
            return {}
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_marker(self, **changes):
        path = self.settings.switch_marker
        if not path:
            return
        data = self._marker()
        data.update({"pid": os.getpid(), "model": self.green["model"], "action": "replica"})
        data.setdefault("since", self.host.wall())
        data.update(changes)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomic(path, json.dumps(data) + "\n", prefix=".switching.")

    def _drop_marker(self):
        if self.settings.switch_marker:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.settings.switch_marker)

    def _frontdoor(self, port=None, model=None, served=None, switching=True):
        if self.frontdoor is None:
            return None
        try:
            return self.frontdoor.point(port, model, served, switching=switching)
        except FrontDoorError as exc:
            raise CutoverError(f"the front door could not be pointed "
                               f"{'at ' + str(model) if port else 'at nothing'}: {exc}",
                               **exc.fields) from None

    # -- phases ------------------------------------------------------------------
    def plan(self, record):
        """What this host would do (reads only): none, commit or switch, with the roles; a
        `refused` reason when the switch would fail before it starts (the single-host
        switch's preflight: green's unit installed, its port, processes on its GPUs)."""
        blue = record.get("active")
        state = self._show(self.green["unit"])
        link_now = link_target(self.green["model_link"]) if self.green.get("model_link") else None
        running = state.get("ActiveState") == "active"
        result = {"phase": "plan", "role": role_of(self.green), "blue_role": role_of(blue),
                  "blue": label(blue) if blue else None, "green": label(self.green),
                  "green_state": state.get("ActiveState"), "changed": False,
                  # what the controller checks across hosts before anything changes
                  "green_group": (self.green.get("replica") or {}).get("group"),
                  "green_ranks": _rank_names(self.green), "blue_ranks": _rank_names(blue),
                  "green_revision": self.green.get("revision"),
                  "green_vllm": self.green.get("vllm_version")}
        # The unit or the files changed (a new vLLM build, other serve options): the ranks
        # start again whatever the record says.
        if not running or revision_changed(self.green, link_now) or self.settings.restart:
            action = "switch"
        elif records.same_deployment(blue, self.green) and self._frontdoor_right(record):
            action = "none"
        else:
            action = "commit"
        if action != "switch" and serves_api(self.green):
            why = probe_active(self.green, self.settings.smoke_prompt, self.host.request)
            if why:
                action, result["heal_reason"] = "switch", why
        result.update(action=action, changed=action != "none")
        if action == "switch":
            refused = self._refused(blue)
            if refused:
                result["refused"] = refused
        return result

    def _refused(self, blue):
        """Why the switch would fail before any change on this host, or None: the single-host
        switch's own preflight, its port checks only where green serves an API."""
        check = Cutover(self.host, dict(self.green) if serves_api(self.green)
                        else dict(self.green, port=None), self.state_file, self.settings,
                        gpu_processes=self.gpu_processes)
        same = bool(blue) and blue.get("unit") == self.green["unit"]
        try:
            check._preflight(None if same else blue)  # noqa: SLF001 - the one preflight
        except CutoverError as exc:
            return exc.msg
        return None

    def _frontdoor_right(self, record):
        fd = self.frontdoor
        if fd is None:
            return True
        if serves_api(self.green):
            wanted = fd.wanted(self.green["port"], self.green["model"])
        else:
            wanted = fd.wanted(None, switching=False)
        return fd.current() == wanted and published(fd, record) and not fd.holding()

    def stop(self, record):
        """Hold the marker, take the front door off, drain and stop blue (and a left green)."""
        blue = record.get("active")
        self._write_marker(phase="stop", units={})
        result = {"phase": "stop", "changed": True, "stopped": []}
        self._frontdoor(None)
        if blue and serves_api(blue) and blue.get("url"):
            result["blue_drain"] = drain(blue["url"], self.settings.drain_timeout,
                                         request=self.host.request, clock=self.host.clock,
                                         sleep=self.host.sleep)
        for unit in dict.fromkeys(u for u in ((blue or {}).get("unit"), self.green["unit"]) if u):
            if self._show(unit).get("ActiveState") in ("active", "activating", "reloading"):
                self._act("stop", unit)
                result["stopped"].append(unit)
        return result

    def start(self, record, target="green"):
        """Point the model link and start the target's unit, without waiting for it."""
        svc = self._target(record, target)
        if svc is None:
            return {"phase": "start", "target": target, "changed": False, "started": None}
        prepare_link(svc)
        try:
            restarts, started_at = self.gate_runner.launch(svc, "start", wall=self.host.wall)
        except UnitError as exc:
            raise CutoverError(f"{target} {label(svc)}: {exc.msg}", **exc.fields) from None
        units = dict(self._marker().get("units") or {})
        units[svc["unit"]] = {"started_at": started_at, "restarts": restarts}
        self._write_marker(phase=f"start {target}", units=units)
        state = self._show(svc["unit"])
        return {"phase": "start", "target": target, "changed": True, "started": svc["unit"],
                "role": role_of(svc), "invocation": state.get("InvocationID", ""),
                "state": state.get("ActiveState")}

    def gate(self, record, target="green"):
        """The target's gate at this host (heads and single hosts), its unit already started.

        A worker's part is only that its unit still runs. With target blue, a passing gate
        points the front door back at blue. Returns the gate's outcome; never raises for a
        failed gate (the controller unwinds every host).
        """
        svc = self._target(record, target)
        result = {"phase": "gate", "target": target, "changed": False}
        if svc is None:
            result.update(ok=True, role=None)
            return result
        result.update(role=role_of(svc), model=label(svc))
        if not serves_api(svc):
            health = self._worker_health(svc)
            result["green_health" if target == "green" else "blue_health"] = health
            result["ok"] = health["ok"]
            return result
        started = (self._marker().get("units") or {}).get(svc["unit"]) or {}
        state = self._show(svc["unit"])
        invocation = state.get("InvocationID", "")
        gate = self.gate_runner.watch(
            svc, int(started.get("restarts", state.get("NRestarts") or 0)),
            float(started.get("started_at", self.host.wall() - 1)), role=target,
            peers_alive=self._workers_alive(svc, invocation))
        result["green_health" if target == "green" else "blue_health"] = gate
        result["ok"] = gate["ok"]
        if gate["ok"]:
            result["time_to_healthy_s"] = gate["seconds"]
            if target == "blue":
                self._frontdoor(svc["port"], svc["model"], svc["served_model_name"])
                result["changed"] = True
        else:
            since = float(started.get("started_at", self.host.wall() - gate["seconds"] - 5))
            result["journal"] = self.systemd.journal(svc["unit"], since - 1,
                                                     self.settings.journal_lines)
        return result

    def _worker_health(self, svc):
        """A worker's part in the gate, once its head passed: its unit runs, in the head's
        current start (what its unit wrote as it started, against the head's state now)."""
        state = self._show(svc["unit"])
        if state.get("ActiveState") != "active":
            return {"ok": False, "stage": "process",
                    "detail": f"{svc['unit']} is {state.get('ActiveState')} "
                              f"({state.get('SubState')})"}
        mine = replica_watch.read_local(replica_watch.rank_file(svc["model"], self.rank_dir)) or {}
        heads = [r for r in (svc.get("replica") or {}).get("ranks") or [] if r.get("role") == HEAD]
        head, why = self.read_rank(heads[0].get("state_url", "")) if heads else (None, "no head")
        if head is None:
            return {"ok": False, "stage": "replica",
                    "detail": f"the head's rank state cannot be read from this worker ({why})"}
        joined = mine.get("head", "")
        if joined != head.get("invocation") or mine.get("invocation") != state.get("InvocationID"):
            read = f": {mine['head_read']}" if mine.get("head_read") else ""
            return {"ok": False, "stage": "replica",
                    "detail": (f"{svc['unit']} runs, but its rank state does not show it in its "
                               f"head's start {head.get('invocation', '')[:12]} (it joined "
                               f"{joined[:12] or 'none'}{read})")}
        return {"ok": True, "stage": "ok",
                "detail": f"{svc['unit']} runs in its head's start {joined[:12]}"}

    def _workers_alive(self, svc, invocation):
        workers = workers_of(svc)
        if not workers:
            return None

        def alive():
            for rank in workers:
                peer, _why = self.read_rank(rank.get("state_url", ""))
                if peer and peer.get("head") == invocation and peer.get("state") != "running":
                    return False, (f"its worker {rank.get('name')} "
                                   f"{replica_watch.how_it_stopped(peer)} after joining it")
            return True, ""
        return alive

    def commit(self, record):
        """Green is this host's active model: enable, disable blue, record, front door."""
        blue = record.get("active")
        result = {"phase": "commit", "changed": False, "role": role_of(self.green)}
        state = self._show(self.green["unit"], ("UnitFileState", "ActiveState"))
        # A head (or a single host's model) starts at boot; a worker does not: its probe
        # starts it into the head's start once the head runs (replica_watch.py).
        wanted = "disabled" if role_of(self.green) == WORKER else "enabled"
        if state.get("UnitFileState") != wanted:
            self._act("disable" if wanted == "disabled" else "enable", self.green["unit"])
            result["changed"] = True
        if blue and blue.get("unit") and blue["unit"] != self.green["unit"]:
            self.systemd.try_act("disable", blue["unit"])
        new = record
        if not records.same_deployment(blue, self.green):
            new = records.with_active(record, self.green, blue, self.host.wall)
            records.write(self.state_file, new)
            result["changed"] = True
        if self.frontdoor is not None:
            before = self.frontdoor.current()
            if serves_api(self.green):
                self._frontdoor(self.green["port"], self.green["model"],
                                self.green["served_model_name"])
            else:
                self._frontdoor(None, switching=False)
            if not published(self.frontdoor, new):
                self.frontdoor.publish(new)
                result["changed"] = True
            result["changed"] = result["changed"] or self.frontdoor.current() != before
        self._drop_marker()
        return result

    def unwind(self, record):
        """Stop green's unit after a failed start or gate anywhere in the switch; and blue's
        where blue is a worker (one a failed stop left running would stay in its head's old
        start, and hang the head's start again)."""
        blue = record.get("active") or {}
        units = [self.green["unit"]]
        if role_of(blue) == WORKER and blue.get("unit") and blue["unit"] != self.green["unit"]:
            units.append(blue["unit"])
        stopped = []
        for unit in units:
            if self.systemd.try_act("stop", unit):
                stopped.append(unit)
            self.systemd.try_act("reset-failed", unit)
        self._write_marker(phase="unwind")
        return {"phase": "unwind", "changed": True, "stopped": stopped}

    def release(self, record):
        """The end of a switch that was unwound: a front door still on 503 switching says
        unavailable now (nothing came back on this host), and the marker goes."""
        del record
        result = {"phase": "release", "changed": False}
        fd = self.frontdoor
        if fd is not None and fd.current() == fd.wanted(None):
            self._frontdoor(None, switching=False)
            result["changed"] = True
        self._drop_marker()
        return result

    def run(self, phase, record, target="green"):
        if phase not in PHASES:
            raise CutoverError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
        if phase in ("start", "gate"):
            return getattr(self, phase)(record, target)
        return getattr(self, phase)(record)


def _rank_names(svc):
    return [rank.get("name") for rank in ((svc or {}).get("replica") or {}).get("ranks") or []]
