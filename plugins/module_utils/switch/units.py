# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A model server's unit under systemd: start it, gate it, stop it, see who holds its port.

The few systemctl/journalctl/ss calls a switch needs, each through a
`run_command` the caller passes in (AnsibleModule.run_command on a host, a
fake host in the tests), and the health gate of a started unit: health,
model list and one completion (health.wait_healthy), failing at once when
systemd says the process died or was restarted, or when its journal has been
silent for the model's `startup_stall_s` (a load that hangs).

One JournalFollower reads a starting unit's journal: the stall check and the
start progress written for the controller both read it.
"""

import collections
import json
import os
import re
import socket
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import write_atomic
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import wait_healthy
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.listener import (
    judge,
    url_endpoint,
)

CGROUP_ROOT = "/sys/fs/cgroup"
BYTE_VALUES = 256  # journalctl's JSON writes a binary message as a list of byte values
SHOW_PROPS = ("LoadState", "ActiveState", "SubState", "NRestarts", "UnitFileState", "MainPID")


class UnitError(FieldsError):
    """A systemctl call failed; `msg` names the verb, the unit and what systemd said."""


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

    def act(self, verb, unit, *flags):
        argv = ["systemctl", verb, unit, *flags]
        rc, out, err = self.run(argv)
        if rc != 0:
            raise UnitError(f"{' '.join(argv)} failed (rc={rc}): {(err or out).strip()}",
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

    def journal_entries(self, unit, since_epoch, cursor=None):
        """The unit's journal entries after `cursor` (or since `since_epoch` without one).

        Returns (entries, cursor, ok): entries as (text, monotonic seconds or None), oldest
        first; the cursor of the last one (the given one when none is new); ok False when
        journalctl failed. JSON output carries each entry's cursor and its
        __MONOTONIC_TIMESTAMP (CLOCK_MONOTONIC, the clock of time.monotonic); --all keeps
        messages over 4 KiB, which journalctl otherwise writes as null.
        """
        argv = ["journalctl", "-u", unit, "-o", "json", "--output-fields=MESSAGE", "--all",
                "--no-pager"]
        argv += ["--after-cursor", cursor] if cursor else ["--since", f"@{int(since_epoch)}"]
        rc, out, _err = self.run(argv)
        if rc != 0:
            return [], cursor, False
        entries = []
        for line in out.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            cursor = entry.get("__CURSOR") or cursor
            stamp = entry.get("__MONOTONIC_TIMESTAMP")
            entries.append((journal_text(entry.get("MESSAGE")),
                            int(stamp) / 1e6 if str(stamp or "").isdigit() else None))
        return entries, cursor, True

    def is_active(self, unit):
        return self.show(unit)["ActiveState"] == "active"


def journal_text(message):
    """A journal MESSAGE as the line a terminal would show.

    journalctl's JSON writes a message with control characters as a list of bytes; a
    progress bar (tqdm) redraws with carriage returns and reaches the journal as one
    entry when it ends with a newline: the text after its last carriage return is what
    it showed last.
    """
    if isinstance(message, list):
        message = bytes(b for b in message if isinstance(b, int) and b in range(BYTE_VALUES)
                        ).decode("utf-8", "replace")
    text = str(message or "").rstrip("\r\n")
    return text.rsplit("\r", 1)[-1]


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


def unit_cgroup(unit, run_command):
    """systemd's ControlGroup of `unit` ("" when it has no processes or cannot be read)."""
    rc, out, _err = run_command(["systemctl", "show", unit, "--property=ControlGroup", "--value"])
    return out.strip() if rc == 0 else ""


def cgroup_procs(group, cgroup_root=None):
    """Pids in the cgroup `group` (a ControlGroup path) and its children; None when no
    hierarchy has it.

    systemd keeps its tree at the cgroup root on a cgroup v2 host, under unified/ on a
    hybrid one (cgroup v1 controllers beside it, as Docker hosts often run) and under
    systemd/ on a legacy one; the first that holds `group` is read.
    """
    if not group:
        return None
    root = cgroup_root or CGROUP_ROOT
    for base in (root, os.path.join(root, "unified"), os.path.join(root, "systemd")):
        top = base + group
        if not os.path.isdir(top):
            continue
        pids = set()
        for folder, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(folder, "cgroup.procs"), encoding="utf-8") as handle:
                        pids.update(int(line) for line in handle if line.strip())
                except OSError:
                    continue
        return pids
    return None


def unit_pids(unit, run_command, cgroup_root=None):
    """Pids in a unit's cgroup, its children included (empty when none can be read)."""
    return cgroup_procs(unit_cgroup(unit, run_command), cgroup_root) or set()


# The cause a failed start names in its journal: Python's "SomeError: message" (the exception
# vLLM raised, after its log prefix) or argparse's "prog: error: message" (a flag vLLM does
# not know). Wrappers that only point at the cause ("Engine core initialization failed. See
# root cause above.") are skipped.
_CAUSE = re.compile(r"(?:^|[\s\]])((?:[A-Za-z_][\w.]*(?:Error|Exception))|(?:[\w.-]+: error))"
                    r": (.+)$")
_WRAPPERS = ("See root cause above", "Engine core initialization failed")
CAUSE_CHARS = 300


def journal_cause(lines):
    """The first line of a failed start's journal that names its cause, without its log
    prefix ("ValueError: Free memory on device ..."), or None."""
    for line in lines or ():
        found = _CAUSE.search(line.strip())
        if found and not any(w in found.group(2) for w in _WRAPPERS):
            text = f"{found.group(1)}: {found.group(2).strip()}"
            return text if len(text) <= CAUSE_CHARS else text[:CAUSE_CHARS - 3] + "..."
    return None


# What changes in a log line that says the same thing again: clock times and dates
# (vLLM's "05-28 14:44:28", ISO stamps, glog's "W1209 11:24:53.753104426"), process ids,
# clients' ports, and a progress bar's elapsed/remaining times and rate. Counts stay: a bar
# going from 22/85 to 23/85 is progress (tests/fixtures/vllm_logs/SOURCE.md), which masking
# every digit would hide; vLLM's "No available shared memory broadcast block found in 60
# seconds", printed every minute by a hung start, is the same line each time.
_VOLATILE = re.compile(
    r"\b\d{1,3}(?:\.\d{1,3}){3}:\d+"  # a client's address and port (an access log line)
    r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b[IWEF]?\d{2}-?\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
    r"|\b\d+:\d{2}(?::\d{2})?(?:\.\d+)?"
    r"|\bpid=\d+"
    r"|(?:\d+(?:\.\d+)?|\?)\s*(?:s/it|it/s)")
SHAPES_KEPT = 100000  # distinct lines remembered per start (a bound on memory)


def line_shape(text):
    """`text` with its times, dates, pids and rates masked: equal shapes say the same."""
    return _VOLATILE.sub("~", text).strip()


class JournalFollower:
    """Follows a starting unit's journal, one read per health probe.

    Keeps the last `keep` lines and when the unit last made progress: printed a line
    not shown before in this start (line_shape(): a repeated line with a new time stamp
    is not progress), at that entry's own monotonic time, clamped between the previous
    read and now (a new entry was written in between), so a silence is measured from the
    line itself, not from when it was read. `repeats` counts the lines that were not new.
    """

    def __init__(self, systemd, unit, since_wall, clock, keep=40):
        self.systemd = systemd
        self.unit = unit
        self.since_wall = since_wall
        self.clock = clock
        self.cursor = None
        self.lines = collections.deque(maxlen=max(1, keep))
        self.count = 0
        self.repeats = 0
        self.shapes = set()
        self.readable = True
        self.started = clock()
        self.last_progress = self.started
        self.last_read = self.started

    def poll(self):
        """Read what the unit printed since the last read; returns how many new lines."""
        entries, self.cursor, self.readable = self.systemd.journal_entries(
            self.unit, self.since_wall, self.cursor)
        now = self.clock()
        for text, stamp in entries:
            self.lines.append(text)
            self.count += 1
            shape = line_shape(text)
            if shape in self.shapes:
                self.repeats += 1
                continue
            if len(self.shapes) < SHAPES_KEPT:
                self.shapes.add(shape)
            seen = now if stamp is None else min(max(stamp, self.last_read), now)
            self.last_progress = max(self.last_progress, seen)
        self.last_read = now
        return len(entries)

    @property
    def last_line(self):
        return self.lines[-1] if self.lines else ""

    def silent_s(self):
        """Seconds since the unit last printed a new line (since the start, before its first)."""
        return self.clock() - self.last_progress


def stall_check(journal, stall_s, unit, tail=3):
    """(False, why) once `journal` has shown nothing new for `stall_s` seconds, else (True, "").

    0 or None turns the check off; so does a journal that cannot be read (a silence we
    cannot see is not one: the startup timeout still bounds the start).
    """
    if not stall_s or not journal.readable:
        return True, ""
    silent = journal.silent_s()
    if silent < stall_s:
        return True, ""
    last = list(journal.lines)[-tail:]
    repeats = getattr(journal, "repeats", 0)
    said = (f"printed nothing new for {silent:.1f} s ({repeats} lines it repeated)"
            if repeats else f"printed nothing for {silent:.1f} s")
    return False, (f"{unit} {said} while starting, wanted a new journal line at least every "
                   f"{stall_s} s (startup_stall_s); its last lines: "
                   + (" | ".join(last) if last else "(none)"))


class StartProgress:
    """Writes where a start stands (elapsed of its limit, the unit's last log line, from the
    start's JournalFollower) to a JSON file every `interval` seconds, for async_follow to
    print on the controller."""

    def __init__(self, path, interval=10.0, wall=time.time):
        self.path = path
        self.interval = interval
        self.wall = wall
        self.last_write = None

    def __call__(self, svc, role, elapsed, journal, force=False):
        if not self.path:
            return
        now = self.wall()
        if not force and self.last_write is not None and now - self.last_write < self.interval:
            return
        self.last_write = now
        data = {"phase": "starting", "model": svc["model"], "role": role,
                "elapsed_s": round(elapsed, 1), "limit_s": svc["startup_timeout_s"],
                "silent_s": round(journal.silent_s(), 1),
                "last_line": journal.last_line, "updated": now}
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            write_atomic(self.path, json.dumps(data) + "\n", prefix=".vllm-fleet-progress.")
        except OSError:
            pass  # progress is a courtesy; the switch goes on


class UnitGate:
    """Start (or restart) a model's unit and wait for its health gate."""

    def __init__(self, systemd, request, clock, sleep, interval=2.0, smoke_prompt="Hello",
                 progress=None, journal_lines=40, proc=None):
        self.systemd = systemd
        # What reads /proc (listener.ProcFs): who listens on the unit's port. None: nobody
        # is asked (a caller that trusts any answer; the cutover always passes its host's).
        self.proc = proc
        self.journal_lines = journal_lines
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

    def start(self, svc, verb="start", role="green", wall=time.time, baseline=None):
        """Start (or restart) `svc` and wait for its gate; returns the gate's outcome.

        Each probe reads the unit's journal once (one follower): a unit silent for
        svc["startup_stall_s"] seconds fails the gate at stage `stall` without waiting
        for svc["startup_timeout_s"], which stays the outer bound. The gate's seconds
        (time-to-healthy) count from the start command. `baseline` (from baseline(),
        read earlier) saves reading it here.
        """
        if baseline is None:
            baseline = self.baseline(svc)
        since = self.clock()
        _unused, started_wall = self.launch(svc, verb, wall, baseline)
        return self.watch(svc, baseline, started_wall, role, since=since)

    def baseline(self, svc):
        """Clear the unit's failed state; systemd's restart count, which a start is judged by."""
        self.systemd.try_act("reset-failed", svc["unit"])
        return int(self.systemd.show(svc["unit"]).get("NRestarts") or 0)

    def launch(self, svc, verb="start", wall=time.time, baseline=None):
        """Start (or restart) `svc` without waiting: (systemd's restart count before, wall time)."""
        if baseline is None:
            baseline = self.baseline(svc)
        started_wall = wall()
        self.systemd.act(verb, svc["unit"])
        return baseline, started_wall

    def watch(self, svc, baseline, started_wall, role="green", peers_alive=None, since=None):
        """Wait for the gate of `svc`, launched at `started_wall` with `baseline` restarts.

        peers_alive: optional, returns (True, "") or (False, why) - a multi-node replica's
        head also fails its gate at once when a worker that joined it stopped.
        since: the clock's time of the start command (default: now); the gate's seconds
        and the startup timeout count from it.
        """
        process_alive = self._alive(svc["unit"], baseline)
        journal = JournalFollower(self.systemd, svc["unit"], started_wall - 1, self.clock,
                                  keep=self.journal_lines)
        start = journal.started

        def alive():
            """systemd's view of the process, the journal's silence, a progress line."""
            journal.poll()
            if self.progress is not None:
                self.progress(svc, role, self.clock() - start, journal)
            up, why = process_alive()
            if not up:
                return up, why, "process"
            if peers_alive is not None:
                up, why = peers_alive()
                if not up:
                    return up, why, "replica"
            up, why = stall_check(journal, svc.get("startup_stall_s"), svc["unit"])
            return up, why, "stall"

        return wait_healthy(
            svc["url"], svc["served_model_name"], svc["startup_timeout_s"],
            interval_s=self.interval, smoke_prompt=self.smoke_prompt, request=self.request,
            alive=alive, clock=self.clock, sleep=self.sleep, since=since,
            listener=self.listener(svc))

    def listener(self, svc):
        """Who listens where the gate connects (svc["url"]): listener.judge against the
        unit's cgroup; None without a /proc to read or a TCP port (out of scope: a Unix
        socket, which the product refuses)."""
        address, port = url_endpoint(svc["url"])
        if self.proc is None or not port:
            return None

        def check():
            return judge(self.proc, port, address, svc["unit"], lambda: self.systemd.show(
                svc["unit"], ("ControlGroup",)).get("ControlGroup", ""))
        return check
