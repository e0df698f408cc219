# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The host's periodic probe of the active model (stdlib only).

`vllm-fleet-probe.service`, started by its timer, runs this file as a script
(the vllm_service role ships it beside health.py). Each run reads the
deployment record for the active model, asks it the health gate once (health,
model list, one completion: health.check_once, the gate the cutover uses) and
keeps a count of consecutive failures in a state file. After `failures` of
them in a row it restarts the unit and says why on stdout (the journal).

Busy is not dead. Each run also reads the model server's /metrics (vLLM's
gauges vllm:num_requests_running and vllm:num_requests_waiting, and its
monotone counters of engine steps, vllm:iteration_tokens_total_count, and
of tokens, vllm:generation_tokens_total and vllm:prompt_tokens_total; all
in vLLM 0.32's page) and keeps the reading, with the unit's InvocationID and
the time, in the state file. A failed gate while any of those counters rose
since the last reading of this start (or, with none kept, since a reading
taken just before the gate) is `busy`: said on stdout with the figures, the
failure count does not grow, and nothing is restarted however slow the
answer (a saturated server answers the probe's completion after its queue).
A failure counts only when the engine made no progress: counters flat (an
idle server or a stalled engine, whatever its gauges say), or /metrics
unreadable (a dead API server). A busy run does not end the row of failed
probes (no answer came); an answer does.

Blind is not dead either (issue 44 item 5). Where /metrics answers but holds
none of those counters (vLLM's --disable-log-stats, --api-server-count > 1:
vllm-project/vllm pull request 22227; the product refuses both in a catalog
entry, serve_args.PRODUCT_OPTIONS, but a unit edited by hand can still set
them), the probe cannot tell busy from dead: a gate that failed by timing out
is `blind`, said on stdout ("cannot tell busy from dead"), not counted and
never a restart (a saturated engine times out too); the state keeps `blind`
with the reason. A gate that failed with an answer (/health 503, a wrong
model list, an error page) still counts: an answer is not a timeout.

It never restarts:
  - a unit a cutover is acting on: the cutover holds the host's switch lock
    (an flock, switch_lock.py: it dies with its holder, so it is never stale),
    and its switch marker (a marker older than `marker_max_age_s` is stale,
    said so, and ignored);
  - a unit inside its startup window: up for less than the model's
    `startup_timeout_s` and not yet healthy once since it last started
    (systemd's InvocationID tells one start from the next);
  - a unit systemd is starting, stopping or about to restart itself.
A unit that is inactive or failed while the record names it active counts as
a failed probe (vLLM's API server exits with status 0 once its engine died,
so `Restart=on-failure` does not bring it back).

A sleeping model is a state, not a fault (a warm switch, docs/warm-switch.md):
the probe never probes a model the record lists in `sleeping` (vLLM's /sleep
pauses its scheduler: the probe's completion would hang until its timeout and
count as a failure, and /health answers 200 all the while, so it cannot tell).
Such a run says "<unit>: sleeping (level N since T), not probed", keeps no
failure and restarts nothing.

A rank of a multi-node replica (the record's active names a `replica`) is
watched with its peers as well (replica_watch.py): the head restarts at once
when a worker that joined it stopped or started again; a worker follows its
head (stops when the head stopped, restarts or starts when the head started
again) and is never probed or restarted on its own.

Only the unit's own process is trusted on its port (issue 45 case 2; listener.py): each
probe of an active unit first reads who listens on its URL's port (/proc/net/tcp, the
holder's /proc/<pid>/cgroup against the unit's ControlGroup). A listener of another
cgroup fails the probe at once, naming its pid and uid (counted, even inside the startup
window: the port is taken, a wait will not mend it); an answer while the unit's own
process is not seen listening (nobody, or cannot tell) is not a healthy one.

What disagrees is a named fault, never an ok or an idle (issue 46; heal.py): a deployment
record that is zero-length or not JSON (`record_unreadable`: rebuilt from what runs where that
is unambiguous, else "cannot repair" with what was found), and, given the front door's paths,
an upstream that sends elsewhere than the record's active model (`frontdoor_disagrees`), a
hold file no switch holds (`stale_hold`), a `.before-switch` copy left behind
(`stale_preswitch`). The front door is mended (FrontDoor.point under the switch lock, taken
without waiting) only after this run found the record's model healthy and no switch holds the
lock or a fresh marker; otherwise the fault is said beside the run's verdict and kept in the
state (`faults`). A run that mended something is `repaired`; one left with a fault it could not
mend while the model is healthy is `fault`, and the service exits 1 (systemctl --failed).

Everything that touches the host (commands, HTTP, clocks, /proc) is a parameter.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import durable
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import (
        vllm_engine as engine,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (
        check_once,
        metric_totals,
        urllib_request,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import replica_watch
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import listener
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.switch_lock import (
        describe,
        in_progress,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import heal
except ImportError:  # on the host: shipped beside health.py and switch_lock.py by vllm_service
    import durable  # type: ignore[no-redef]
    import heal  # type: ignore[no-redef]
    import listener  # type: ignore[no-redef]
    import replica_watch  # type: ignore[no-redef]
    import vllm_engine as engine  # type: ignore[no-redef]
    from health import check_once, metric_totals, urllib_request  # type: ignore[no-redef]
    from switch_lock import describe, in_progress  # type: ignore[no-redef]

OK, FAILED, SKIPPED, RESTARTED, IDLE = "ok", "failed", "skipped", "restarted", "idle"
# The gate failed while the engine made progress: not counted (see above).
BUSY = "busy"
# /metrics answers without vLLM's counters and the gate timed out: not counted (see above).
BLIND = "blind"
NO_COUNTERS = "/metrics has none of vLLM's progress counters"
CANNOT_TELL = "cannot tell busy from dead"
# The record lists the active model among its sleepers: not probed (see above).
SLEEPING = "sleeping"
# A named fault the probe mended (heal.py): the record rebuilt, the front door re-pointed.
REPAIRED = "repaired"
# A named fault the probe could not mend now (heal.py): said on every run until it is gone.
FAULT = "fault"
# A replica's worker started or stopped by its watch (replica_watch.py).
STARTED, STOPPED = "started", "stopped"
SHOW = ("LoadState", "ActiveState", "SubState", "InvocationID", "ActiveEnterTimestampMonotonic",
        "ControlGroup")
TRANSITIONS = ("activating", "deactivating", "reloading", "refreshing")
METRICS_TIMEOUT_S = 10.0
HTTP_OK = 200


class Settings:
    """How the probe decides (the probe service's command line)."""

    def __init__(self, record, state_file, marker=None, failures=3, marker_max_age_s=7200.0,
                 timeout_s=30.0, smoke_prompt="Hello", lock=None,
                 rank_dir=replica_watch.RANK_DIR, frontdoor=None):
        self.record = record
        self.state_file = state_file
        self.marker = marker
        self.lock = lock
        self.failures = max(1, int(failures))
        self.marker_max_age_s = float(marker_max_age_s)
        self.timeout_s = float(timeout_s)
        self.smoke_prompt = smoke_prompt
        self.rank_dir = rank_dir
        # The front door the probe mends (heal.door_of: upstream_file, hold_file, warm_file,
        # url, key_file, test_cmd, reload_cmd); None: the probe leaves it alone.
        self.frontdoor = frontdoor


class Outcome:
    """What one run decided: `verdict` (ok, failed, busy, blind, skipped, restarted, idle,
    sleeping, started, stopped, repaired, fault), the
    line for the journal (empty when there is nothing to say) and the state to keep."""

    def __init__(self, verdict, message, state, answer=""):
        self.verdict = verdict
        self.message = message
        self.state = state
        self.answer = answer  # what a healthy gate got ("4 completion tokens: ...")


def _read_json(path, default):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (FileNotFoundError, ValueError):
        return default


def marker_check(path, now, max_age_s, stat=os.stat):
    """(blocks, note): whether the switch marker holds the probe off, and a note about it."""
    if not path:
        return False, ""
    try:
        age = now - stat(path).st_mtime
    except FileNotFoundError:
        return False, ""
    if age < max_age_s:
        held = _read_json(path, {})
        return True, (f"a cutover holds {path} ({held.get('action', '?')} of "
                      f"{held.get('model', '?')}, {age:.0f} s ago): not probing")
    return False, (f"ignoring the stale switch marker {path}: {age:.0f} s old, older than "
                   f"{max_age_s:.0f} s (a cutover that died?)")


# The marker of a multi-node replica's switch: it stays between the phases, each of which
# takes and drops the switch lock (replica_cutover.py), so a free lock does not orphan it.
REPLICA_ACTION = "replica"


def switch_check(settings, now, stat=os.stat):
    """(blocks, note): a switch in progress holds the probe off, by the host's switch lock
    (never stale) or by the switch marker (unless stale). A one-host switch writes its
    marker only while it holds the lock (vllm_cutover), so its marker with the lock free was
    left by a switch that died (SIGKILL, OOM): orphaned, said so, and ignored (issue 46)."""
    holder = in_progress(settings.lock) if settings.lock else None
    if holder is not None:
        return True, f"{describe(holder)} holds {settings.lock}: not probing"
    blocks, note = marker_check(settings.marker, now, settings.marker_max_age_s, stat)
    if not blocks or not settings.lock:
        return blocks, note
    held = _read_json(settings.marker, {})
    action = held.get("action") if isinstance(held, dict) else None
    if not action or action == REPLICA_ACTION or in_progress(settings.lock) is not None:
        return blocks, note
    return False, (f"ignoring the switch marker {settings.marker}: the {action} of "
                   f"{held.get('model', '?')} (pid {held.get('pid', '?')}) that wrote it no "
                   f"longer holds the switch lock {settings.lock} (a switch that died)")


def show(unit, run_command):
    rc, out, err = run_command(["systemctl", "show", unit, "--property=" + ",".join(SHOW)])
    if rc != 0:
        return None, f"systemctl show {unit} failed (rc={rc}): {(err or out).strip()}"
    props = {}
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        props[key] = value
    return props, ""


def startup_window(props, monotonic_now, startup_timeout_s, healthy_invocation):
    """Seconds the unit has been up when it is still inside its startup window, else None.

    The window lasts from systemd's ActiveEnterTimestampMonotonic (microseconds of
    CLOCK_MONOTONIC) for the model's startup timeout, and ends early at the first healthy
    probe of this start (InvocationID)."""
    if props.get("InvocationID") and props.get("InvocationID") == healthy_invocation:
        return None
    try:
        entered_us = int(props.get("ActiveEnterTimestampMonotonic") or 0)
    except ValueError:
        entered_us = 0
    if entered_us <= 0:
        return None
    up_s = monotonic_now - entered_us / 1e6
    return up_s if up_s < float(startup_timeout_s) else None


def _unit_skip(unit, props, error, state):
    """An Outcome when the unit cannot be probed now (systemd cannot say, it is not
    installed, systemd is acting on it), else None."""
    if props is None:
        return Outcome(SKIPPED, f"{unit}: {error}", state)
    if props.get("LoadState") != "loaded":
        return Outcome(SKIPPED, f"{unit}: not installed (LoadState={props.get('LoadState')})",
                       state)
    if props.get("ActiveState") in TRANSITIONS:
        return Outcome(SKIPPED, "", dict(state, failures=0))  # systemd is acting on it
    return None


def read_progress(url, request, timeout):
    """(reading, error): vLLM's running and waiting requests and its progress counters from
    url/metrics; reading is None (and error says why) when they cannot be read."""
    res = request("GET", url.rstrip("/") + engine.METRICS, timeout=timeout)
    if res.status != HTTP_OK:
        return None, f"/metrics answered {res.error or f'HTTP {res.status}'}"
    totals = metric_totals(res.body)
    counters = {name: totals[name] for name, _label in engine.PROGRESS if name in totals}
    if not counters:
        return None, NO_COUNTERS
    return {"running": int(totals.get(engine.RUNNING, 0)),
            "waiting": int(totals.get(engine.WAITING, 0)), "counters": counters}, ""


def progress(before, after):
    """(advanced, figures): whether any counter rose from `before` to `after` (readings), and
    the figures for the journal."""
    rises = [(label, after["counters"][name] - before["counters"][name])
             for name, label in engine.PROGRESS
             if name in after["counters"] and name in before["counters"]]
    advanced = any(rise > 0 for _label, rise in rises) and all(rise >= 0 for _l, rise in rises)
    seconds = max(0.0, after["at"] - before["at"])
    counts = ", ".join(f"{rise:+.0f} {label}" for label, rise in rises)
    return advanced, (f"in {seconds:.0f} s: running {after['running']}, waiting "
                      f"{after['waiting']}; {counts}")


def listener_of(active, props, proc):
    """listener.judge of the port the active model's URL names, against its unit's cgroup;
    None where there is no TCP port to judge."""
    address, port = listener.url_endpoint(active.get("url") or "")
    if not port:
        return None
    return listener.judge(proc, port, address, active["unit"],
                          lambda: props.get("ControlGroup", ""))


def _probe_active(settings, active, props, state, request, monotonic, proc):
    """(Outcome, None) when the probe settles it (healthy, starting, blind, busy, or not
    trusted), else (None, why). Someone else listening on the port fails it before any
    request; a healthy answer counts only while the unit's own process is seen listening."""
    found = listener_of(active, props, proc)
    if found is not None and found.refused:
        return None, f"failed its health probe at listener: {found.message}"
    settled, why = _probe_answer(settings, active, props, state, request, monotonic)
    if settled is None or settled.verdict != OK or found is None or found.trusted:
        return settled, why
    found = listener_of(active, props, proc)  # the first look may have been a race
    if found.trusted:
        return settled, why
    answer = settled.answer
    if found.refused:
        return None, f"answered its health probe ({answer}) but {found.message}"
    return _untrusted(active["unit"], answer, found, state, settings), None


def _probe_answer(settings, active, props, state, request, monotonic):
    """_probe_active's HTTP part: the gate once and vLLM's progress."""
    unit = active["unit"]
    invocation = props.get("InvocationID")
    timeout = min(settings.timeout_s, METRICS_TIMEOUT_S)
    kept = state.get("progress") or {}
    before = kept if kept.get("invocation") == invocation and "at" in kept else None
    if before is None:  # nothing kept of this start: this run's own interval, then
        before, _error = read_progress(active["url"], request, timeout)
        if before is not None:
            before["at"] = monotonic()
    ok, stage, detail = check_once(active["url"], active["served_model_name"],
                                   settings.smoke_prompt, request=request,
                                   timeout=settings.timeout_s)
    reading, error = read_progress(active["url"], request, timeout)
    if reading is not None:
        reading.update(at=monotonic(), invocation=invocation)
        state = dict(state, progress=reading)
    blind = reading is None and error == NO_COUNTERS
    if ok:
        return _healthy(unit, detail, state, invocation, blind), None
    limit = active.get("startup_timeout_s", 900)
    up_s = startup_window(props, monotonic(), limit, state.get("healthy_invocation"))
    if up_s is not None:
        return Outcome(SKIPPED, (f"{unit}: starting ({up_s:.0f} s of its {limit} s startup "
                                 f"window, not healthy yet: {stage}: {detail}); not counted"),
                       dict(state, failures=0)), None
    failed = f"failed its health probe at {stage}: {detail}"
    if blind and TIMED_OUT in detail:
        count = state.get("failures", 0)
        state = dict(state, blind=BLIND_WHY)
        state.pop("busy", None)
        return Outcome(BLIND, (f"{unit}: {CANNOT_TELL}, not counted: it {failed}, and {BLIND_WHY}; "
                               f"not restarted on timeouts alone (failure count stays {count} "
                               f"of {settings.failures})"), state), None
    if reading is None or before is None:
        return None, (f"{failed}; no progress known: "
                      + (error or "no earlier /metrics reading of this start"))
    advanced, figures = progress(before, reading)
    if not advanced:
        return None, f"{failed}; no progress {figures}"
    count = state.get("failures", 0)
    busy = {"running": reading["running"], "waiting": reading["waiting"], "figures": figures}
    return Outcome(BUSY, (f"{unit}: busy, not counted: it {failed}, but its engine made progress "
                          f"{figures} (failure count stays {count} of {settings.failures})"),
                   dict(state, busy=busy)), None


# What urllib says of a request that outlasted its timeout (socket.timeout's text).
TIMED_OUT = "timed out"
BLIND_WHY = ("/metrics answers without vLLM's counters (vllm:num_requests_running, "
             "vllm:iteration_tokens_total_count ...: --disable-log-stats or "
             "--api-server-count > 1 remove them)")


def _untrusted(unit, detail, found, state, settings):
    """An answer while the unit's own process is not seen listening (nobody, or cannot tell:
    a race, or a probe that may not read other users' /proc/<pid>/fd): not healthy, and
    not counted either: restarting a model because this probe cannot see is no cure."""
    count = state.get("failures", 0)
    return Outcome(SKIPPED, (f"{unit}: answered its health probe ({detail}) but {found.message}; "
                             f"not counted (failure count stays {count} of "
                             f"{settings.failures})"), state)


def _healthy(unit, detail, state, invocation, blind):
    """The Outcome of a gate that passed: the count ends; a blind probe says so once."""
    recovered = state.get("failures", 0) > 0 or "busy" in state or "blind" in state
    first_blind = blind and state.get("blind_invocation") != invocation
    state = dict(state, failures=0, healthy_invocation=invocation)
    state.pop("busy", None)
    state.pop("blind", None)
    if blind:
        state["blind_invocation"] = invocation
    else:
        state.pop("blind_invocation", None)
    lines = [f"{unit}: healthy again ({detail})"] if recovered else []
    if first_blind:
        lines.append(f"{unit}: {CANNOT_TELL}: {BLIND_WHY}; a timed-out probe will not be "
                     "counted")
    return Outcome(OK, "; ".join(lines), state, answer=detail)


def sleeper(record, model):
    """The record's `sleeping` entry for `model` (an active entry: matched by unit, else by
    model name), or None. An absent or empty `sleeping` has none."""
    for entry in (record or {}).get("sleeping") or []:
        if not isinstance(entry, dict):
            continue
        if model.get("unit") and entry.get("unit") == model.get("unit"):
            return entry
        if not model.get("unit") and entry.get("model") == model.get("model"):
            return entry
    return None


def _asleep(record, active, state):
    """The Outcome for an active model the record lists sleeping, else None. Its scheduler is
    paused: a completion would hang (and /health says 200 regardless)."""
    asleep = sleeper(record, active)
    if asleep is None:
        return None
    level = asleep.get("level", "?")
    since = f" since {asleep['since']}" if asleep.get("since") else ""
    state = dict(state, failures=0)
    state.pop("busy", None)
    state.pop("blind", None)
    return Outcome(SLEEPING, f"{active['unit']}: sleeping (level {level}{since}), not probed",
                   state)


def decide(settings, record, state, *, run_command, request, wall, monotonic, stat=os.stat,
           proc=None):
    """One probe run: returns an Outcome. Restarts the unit (through `run_command`) when the
    failures reach `settings.failures`. `proc` reads /proc (the host's own by default)."""
    proc = proc if proc is not None else listener.live_proc()
    active = (record or {}).get("active")
    if not active or not active.get("unit"):
        return Outcome(IDLE, "", {})
    unit = active["unit"]
    if state.get("unit") != unit:
        state = {"unit": unit, "failures": 0, "healthy_invocation": None}
    state = dict(state)
    blocks, note = switch_check(settings, wall(), stat)
    # A switch holds the probe off; a sleeping model is never probed.
    held = (Outcome(SKIPPED, f"{unit}: {note}", dict(state, failures=0)) if blocks
            else _asleep(record, active, state))
    if held is not None:
        return held
    notes = [note] if note else []
    props, error = show(unit, run_command)
    # Not probed now (systemd cannot say, or is acting on it), or a replica's watch acted.
    settled = (_unit_skip(unit, props, error, state)
               or _replica_watch(settings, active, props, state, notes, request, run_command))
    if settled is not None:
        return settled
    if props.get("ActiveState") == "active":
        settled, why = _probe_active(settings, active, props, state, request, monotonic, proc)
        if settled is not None:
            return settled
    else:
        why = (f"is {props.get('ActiveState')} ({props.get('SubState')}) while the deployment "
               f"record names it the active model")
        found = listener_of(active, props, proc)  # who took its port, if anyone
        if found is not None and found.refused:
            why += f"; {found.message}"
    state.pop("busy", None)
    state.pop("blind", None)
    failures = state.get("failures", 0) + 1
    if failures < settings.failures:
        state["failures"] = failures
        line = f"{unit} {why} (failure {failures} of {settings.failures})"
        return Outcome(FAILED, "; ".join([*notes, line]), state)
    rc, out, err = run_command(["systemctl", "restart", "--no-block", unit])
    state.update(failures=0, healthy_invocation=None)
    if rc != 0:
        verdict, line = FAILED, (f"{unit} {why}: {failures} failed probes in a row; systemctl "
                                 f"restart failed (rc={rc}): {(err or out).strip()}")
    else:
        verdict, line = RESTARTED, (f"restarting {unit}: {failures} failed probes in a row, "
                                    f"the last: {unit} {why}")
    return Outcome(verdict, "; ".join([*notes, line]), state)


def _replica_watch(settings, active, props, state, notes, request, run_command):
    """A replica's rank: the worker's whole run, or the head's watch of its workers (an
    Outcome when it acts). None: probe the model as on one host. Updates state and notes."""
    role = (active.get("replica") or {}).get("role")
    read = _rank_reader(request, settings.timeout_s)
    if role == replica_watch.WORKER:
        return _worker_watch(settings, active, props, state, notes, read, run_command)
    if role != replica_watch.HEAD or props.get("ActiveState") != "active":
        return None
    watched = replica_watch.decide_head(active, props, state.get("replica") or {}, read)
    state["replica"] = watched.state
    notes += watched.notes
    if not watched.verb:
        return None
    return _act(watched.verb, active["unit"], watched.why,
                dict(state, failures=0, healthy_invocation=None), notes, run_command, RESTARTED)


def _rank_reader(request, timeout_s):
    def read(url):
        return replica_watch.read_rank(url, request=request,
                                       timeout=min(timeout_s, replica_watch.READ_TIMEOUT_S))
    return read


def _act(verb, unit, why, state, notes, run_command, done):
    """`systemctl <verb> --no-block unit` for a replica watch; the Outcome says why."""
    rc, out, err = run_command(["systemctl", verb, "--no-block", unit])
    if rc != 0:
        line = f"{unit}: {why}; systemctl {verb} failed (rc={rc}): {(err or out).strip()}"
        return Outcome(FAILED, "; ".join([*notes, line]), state)
    doing = {"start": "starting", "stop": "stopping"}.get(verb, "restarting")
    return Outcome(done, "; ".join([*notes, f"{doing} {unit}: {why}"]), state)


def _worker_watch(settings, active, props, state, notes, read, run_command):
    """A replica's worker: it serves no API of its own; it follows its head."""
    unit = active["unit"]
    mine = replica_watch.read_local(replica_watch.rank_file(active["model"], settings.rank_dir))
    decision = replica_watch.decide_worker(active, props, mine, read)
    state = dict(state, failures=0)
    notes = notes + decision.notes
    if decision.verb:
        done = {"start": STARTED, "stop": STOPPED}.get(decision.verb, RESTARTED)
        return _act(decision.verb, unit, decision.why, state, notes, run_command, done)
    return Outcome(SKIPPED if notes else OK, "; ".join(f"{unit}: {note}" for note in notes), state)


def _said(*parts):
    return "; ".join(part for part in parts if part)


def _mend_record(settings, broken, state, run_command, request, wall):
    """A record that cannot be read is a fault, never idle: rebuilt from what the host runs
    where that is unambiguous (heal.rebuild_record), else said with what was found."""
    state = dict(state, faults=[broken.name])
    name = f"fault {broken.name}: {broken.text}"
    blocks, note = switch_check(settings, wall())
    if blocks:
        return Outcome(FAULT, f"{name}; {note}; not repaired while a switch runs", state)
    upstream_file = (settings.frontdoor or {}).get("upstream_file")
    rebuilt, found = heal.rebuild_record(upstream_file, run_command, request,
                                         min(settings.timeout_s, METRICS_TIMEOUT_S))
    if rebuilt is None:
        return Outcome(FAULT, (f"{name}; cannot repair it from what runs ({found}): re-run the "
                               "deployment for the model this host should serve"), state)
    error = heal.repair_record(settings.record, rebuilt, broken.text, wall, settings.lock)
    if error:
        return Outcome(FAULT, f"{name}; rebuilt from what runs ({found}) but {error}", state)
    model = (rebuilt.get("active") or {}).get("model")
    return Outcome(REPAIRED, (f"{name}; repaired from what runs ({found}): the record names "
                              + (f"{model} active" if model else "no active model")
                              + " (its other fields come back with the next deployment); the "
                              f"unreadable bytes, if any, are kept in "
                              f"{settings.record}{heal.UNREADABLE_SUFFIX}"), {})


def _mend_frontdoor(settings, record, outcome, run_command, request, wall):
    """A front door that disagrees with the record (heal.frontdoor_faults): re-pointed at the
    record's active model while it is healthy (this run's probe passed), else reported."""
    active = (record or {}).get("active") or {}
    door = heal.door_of(settings, run_command, request)
    worker = (active.get("replica") or {}).get("role") == replica_watch.WORKER
    if (door is None or not active.get("unit") or not active.get("model") or worker
            or outcome.verdict == SLEEPING):
        return outcome
    blocks, note = switch_check(settings, wall())
    if blocks:
        return outcome
    state = dict(outcome.state)
    state.pop("faults", None)
    faults = heal.frontdoor_faults(door, active)
    if not faults:
        return Outcome(outcome.verdict, outcome.message, state, outcome.answer)
    unit = active["unit"]
    names = ", ".join(fault.name for fault in faults)
    said = f"{unit}: fault {names}: " + "; ".join(fault.text for fault in faults)
    if note and note not in outcome.message:  # an orphaned or stale marker: why it went on
        said = f"{note}; {said}"
    if outcome.verdict == OK:
        error = heal.repair_frontdoor(door, active, settings.lock)
        if error is None:
            return Outcome(REPAIRED, _said(outcome.message, (
                f"{said}; repaired: the front door sends to {active['model']} again (its "
                "upstream written from the record, nginx checked and reloaded, the hold and "
                "the .before-switch copy removed)")), state, outcome.answer)
    else:
        error = f"not repaired while {unit} is not healthy ({outcome.verdict})"
    state["faults"] = [fault.name for fault in faults]
    verdict = FAULT if outcome.verdict == OK else outcome.verdict
    return Outcome(verdict, _said(outcome.message, f"{said}; {error}"), state, outcome.answer)


def write_state(path, state):
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    durable.write_atomic(path, json.dumps(state), prefix=".probe-state.")


def run(settings, *, run_command, request=urllib_request, wall=time.time,
        monotonic=time.monotonic, out=sys.stdout, proc=None):
    """Read the record and the kept state, decide, mend what disagrees (heal.py), keep the
    new state, print the line."""
    record, broken = heal.read_record(settings.record)
    state = _read_json(settings.state_file, {})
    if broken is not None:
        outcome = _mend_record(settings, broken, state, run_command, request, wall)
    else:
        outcome = decide(settings, record, state, run_command=run_command, request=request,
                         wall=wall, monotonic=monotonic, proc=proc)
        outcome = _mend_frontdoor(settings, record, outcome, run_command, request, wall)
    with contextlib.suppress(OSError):
        write_state(settings.state_file, outcome.state)
    if outcome.message:
        # The probe service's stdout is its journal (systemd reads one line per write).
        out.write(outcome.message + "\n")
        out.flush()
    return outcome


def subprocess_run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True, help="the deployment record (JSON)")
    parser.add_argument("--state", required=True, help="where the failure count is kept")
    parser.add_argument("--marker", help="the cutover's switch marker")
    parser.add_argument("--lock", help="the host's switch lock (an flock the cutover holds)")
    parser.add_argument("--marker-max-age", type=float, default=7200.0,
                        help="seconds after which a switch marker is stale")
    parser.add_argument("--failures", type=int, default=3,
                        help="consecutive failed probes before a restart")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument("--prompt", default="Hello", help="prompt of the one completion")
    parser.add_argument("--upstream", help="the front door's upstream file (to mend it)")
    parser.add_argument("--hold-file", help="the front door's hold file")
    parser.add_argument("--warm-file", help="the front door's warm hold file")
    parser.add_argument("--frontdoor-url", help="the front door's URL (to see it mended)")
    parser.add_argument("--frontdoor-key", help="the front door's own API key file")
    args = parser.parse_args(argv)
    frontdoor = ({"upstream_file": args.upstream, "hold_file": args.hold_file,
                  "warm_file": args.warm_file, "url": args.frontdoor_url,
                  "key_file": args.frontdoor_key} if args.upstream else None)
    settings = Settings(args.record, args.state, marker=args.marker, failures=args.failures,
                        marker_max_age_s=args.marker_max_age, timeout_s=args.timeout,
                        smoke_prompt=args.prompt, lock=args.lock, frontdoor=frontdoor)
    outcome = run(settings, run_command=subprocess_run)
    restart_failed = outcome.verdict == FAILED and "systemctl restart failed" in outcome.message
    return 1 if restart_failed or outcome.verdict == FAULT else 0


if __name__ == "__main__":
    raise SystemExit(main())
