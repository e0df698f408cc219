# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The GPU suite's host: vLLM processes in place of systemd units, and its readers.

ProcessHost answers the few systemctl and journalctl calls the product's switch makes
(plugins/module_utils/switch/units.py's Systemd, unit_pids) from processes it starts itself, so
the product's own Cutover steps and UnitGate drive real `vllm serve` processes on a GPU
host without systemd:

- ``systemctl start UNIT`` starts the unit's argv in a new session, its log to a file;
  ``stop`` ends that session; ``show`` answers MainPID, ActiveState (active while the
  process runs, failed once it exited), SubState, NRestarts (0: nothing restarts it),
  LoadState, UnitFileState and ControlGroup; ``reset-failed``, ``enable`` and ``disable``
  succeed and change nothing;
- a unit's cgroup is a folder under ``cgroup_root`` whose cgroup.procs lists the
  processes of the unit's session (vLLM's API server and its engine core), rewritten each
  time the product asks for the unit's ControlGroup;
- ``journalctl -u UNIT`` reads the unit's log file (``-o cat`` or ``-o json`` with a line
  number as the cursor).

The readers (nvidia-smi's per-process memory, /proc/meminfo, /proc/PID/status, vLLM's log
lines) are plain functions of text, tested without a GPU.
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

MIB = 1024**2
GIB = 1024**3
KIB = 1024
CGROUP_PREFIX = "/vllm-gpu-bench"
STOP_WAIT_S = 30.0


class Unit:
    """One process started as a unit would be: argv, environment, log file."""

    def __init__(self, name, argv, env, log_path):
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.proc = None
        self.started_wall = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else 0

    def running(self):
        return self.proc is not None and self.proc.poll() is None


def session_pids(sid, proc_root="/proc"):
    """Pids whose session id is `sid` (a unit's processes: started with a new session)."""
    pids = set()
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        try:
            stat = Path(proc_root, entry, "stat").read_text(encoding="utf-8")
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and fields[3] == str(sid):
            pids.add(int(entry))
    return pids


class ProcessHost:
    """run_command(argv) -> (rc, stdout, stderr) for systemctl/journalctl over Units."""

    def __init__(self, cgroup_root):
        self.cgroup_root = str(cgroup_root)
        self.units = {}
        self.calls = []  # every command the product ran, for the report

    def add(self, unit):
        self.units[unit.name] = unit

    def group(self, name):
        return f"{CGROUP_PREFIX}/{name}"

    def pids(self, name):
        unit = self.units.get(name)
        if not unit or not unit.running():
            return set()
        return session_pids(unit.pid) | {unit.pid}

    def _write_cgroup(self, name):
        folder = Path(self.cgroup_root + self.group(name))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup.procs").write_text(
            "".join(f"{pid}\n" for pid in sorted(self.pids(name))), encoding="utf-8")

    def start(self, name):
        unit = self.units[name]
        if unit.running():
            return
        unit.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = unit.log_path.open("ab")
        unit.started_wall = time.time()
        unit.proc = subprocess.Popen(unit.argv, env=unit.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def stop(self, name, wait_s=STOP_WAIT_S):
        unit = self.units.get(name)
        if not unit or not unit.running():
            return
        try:
            os.killpg(unit.pid, signal.SIGTERM)
            unit.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(unit.pid, signal.SIGKILL)
            unit.proc.wait(timeout=wait_s)
        except ProcessLookupError:
            pass

    def show(self, name, props):
        unit = self.units.get(name)
        if unit is None:
            return {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                    "NRestarts": "0", "UnitFileState": "", "MainPID": "0", "ControlGroup": ""}
        if unit.running():
            state, sub = "active", "running"
        elif unit.proc is None:
            state, sub = "inactive", "dead"
        else:
            state, sub = "failed", "failed"
        if "ControlGroup" in props:
            self._write_cgroup(name)
        values = {"LoadState": "loaded", "ActiveState": state, "SubState": sub,
                  "NRestarts": "0", "UnitFileState": "enabled",
                  "MainPID": str(unit.pid if unit.running() else 0),
                  "ControlGroup": self.group(name) if unit.running() else ""}
        return {key: values.get(key, "") for key in props}

    def log_lines(self, name):
        unit = self.units.get(name)
        if unit is None or not unit.log_path.exists():
            return []
        return unit.log_path.read_text(encoding="utf-8", errors="replace").splitlines()

    def _systemctl(self, args):
        verb, name = args[0], args[1] if len(args) > 1 else ""
        if verb == "show":
            props = []
            value_only = "--value" in args
            for arg in args[2:]:
                if arg.startswith("--property="):
                    props = arg.split("=", 1)[1].split(",")
            values = self.show(name, props)
            if value_only:
                return 0, "".join(f"{values[p]}\n" for p in props), ""
            return 0, "".join(f"{k}={v}\n" for k, v in values.items()), ""
        if verb in ("start", "restart"):
            if verb == "restart":
                self.stop(name)
            self.start(name)
            return 0, "", ""
        if verb == "stop":
            self.stop(name)
            return 0, "", ""
        if verb in ("reset-failed", "enable", "disable", "daemon-reload"):
            return 0, "", ""
        return 1, "", f"ProcessHost: systemctl {verb} is not modelled"

    def _journalctl(self, args):
        name = args[args.index("-u") + 1]
        lines = self.log_lines(name)
        if "json" in args:
            after = int(args[args.index("--after-cursor") + 1]) if "--after-cursor" in args else 0
            out = "".join(json.dumps({"MESSAGE": text, "__CURSOR": str(number)}) + "\n"
                          for number, text in enumerate(lines, 1) if number > after)
            return 0, out, ""
        count = int(args[args.index("-n") + 1]) if "-n" in args else len(lines)
        return 0, "".join(f"{text}\n" for text in reversed(lines[-count:])), ""

    def run_command(self, argv):
        argv = list(argv)
        self.calls.append(" ".join(argv[:3]))
        if argv and argv[0] == "systemctl":
            return self._systemctl(argv[1:])
        if argv and argv[0] == "journalctl":
            return self._journalctl(argv[1:])
        return 127, "", f"ProcessHost: {argv[0] if argv else ''} is not modelled"

    def stop_all(self):
        for name in list(self.units):
            self.stop(name)


# -- readers ----------------------------------------------------------------------------
def parse_kib_fields(text):
    """{field: bytes} from /proc/meminfo or /proc/PID/status ("VmLck:   123 kB")."""
    fields = {}
    for line in (text or "").splitlines():
        name, _sep, rest = line.partition(":")
        words = rest.split()
        if len(words) >= 2 and words[0].isdigit() and words[1].lower() == "kb":
            fields[name.strip()] = int(words[0]) * KIB
    return fields


def proc_memory(pids, proc_root="/proc"):
    """RSS and locked memory of `pids` (bytes, summed), from /proc/PID/status."""
    total = {"VmRSS": 0, "VmLck": 0, "VmPin": 0}
    for pid in pids:
        try:
            fields = parse_kib_fields(Path(proc_root, str(pid), "status").read_text("utf-8"))
        except OSError:
            continue
        for key in total:
            total[key] += fields.get(key, 0)
    return {"rss_bytes": total["VmRSS"], "locked_bytes": total["VmLck"],
            "pinned_bytes": total["VmPin"]}


def parse_gpus_csv(text):
    """nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits"""
    gpus = []
    for line in (text or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 4 and cells[0].isdigit():
            gpus.append({"index": int(cells[0]), "uuid": cells[1],
                         "memory_total_bytes": int(cells[2]) * MIB,
                         "memory_used_bytes": int(cells[3]) * MIB})
    return gpus


def parse_apps_csv(text, gpus):
    """nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory (csv,noheader,nounits)."""
    index = {g["uuid"]: g["index"] for g in gpus}
    procs = []
    for line in (text or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and cells[0].isdigit() and cells[2].isdigit():
            procs.append({"pid": int(cells[0]), "gpu_index": index.get(cells[1]),
                          "used_memory_bytes": int(cells[2]) * MIB})
    return procs


def smi_snapshot(run=subprocess.run):
    """{"gpus", "processes"} as the product's gpu_facts gives them (nvidia-smi)."""
    gpus_out = run(["nvidia-smi", "--query-gpu=index,uuid,memory.total,memory.used",
                    "--format=csv,noheader,nounits"], capture_output=True, text=True,
                   check=True).stdout
    gpus = parse_gpus_csv(gpus_out)
    apps_out = run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                    "--format=csv,noheader,nounits"], capture_output=True, text=True,
                   check=True).stdout
    return {"gpus": gpus, "processes": parse_apps_csv(apps_out, gpus)}


def pids_bytes(snapshot, pids):
    """GPU memory the processes `pids` hold, all GPUs together (bytes)."""
    wanted = set(pids)
    return sum(p["used_memory_bytes"] for p in snapshot["processes"] if p["pid"] in wanted)


# vLLM 0.26.0's own lines, the figures a cold start splits into (their words in a real log:
# bench/output/gpu/gpu-h200-vllm-0.26.0-20261206T0521.vllm-bench-minimax_m2.log).
LOG_FIGURES = {
    "weights_load_s": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "model_load_s": re.compile(r"Model loading took [\d.]+ ?GiB(?: memory)? and ([\d.]+) seconds"),
    "model_load_gib": re.compile(r"Model loading took ([\d.]+) ?GiB"),
    "dynamo_bytecode_s": re.compile(r"Dynamo bytecode transform time: ([\d.]+) s"),
    "compile_total_s": re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total"),
    "graphs_s": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "graphs_gib": re.compile(r"Graph capturing finished in [\d.]+ secs, took ([\d.]+) GiB"),
    "engine_init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took "
                                r"([\d.]+) s"),
    "kv_available_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,]+ tokens per request: "
                                  r"([\d.]+)x"),
}


def log_figures(lines):
    """{figure: value} from vLLM's log lines (the last of each), and the lines they came from."""
    found, source = {}, {}
    for line in lines:
        for name, pattern in LOG_FIGURES.items():
            match = pattern.search(line)
            if match:
                value = match.group(1).replace(",", "")
                found[name] = int(value) if name == "kv_cache_tokens" else float(value)
                source[name] = line.strip()[-240:]
    return found, source


CAUSE = re.compile(r"((?:[A-Za-z_][\w.]*(?:Error|Exception))): (.+)$")


def first_error(lines):
    """The first 'SomeError: message' line in a log (what killed or failed it), or None."""
    for line in lines:
        if " WARNING " in line:  # vLLM's advice names errors it did not meet (ulimit's)
            continue
        match = CAUSE.search(line.strip())
        if match:
            return f"{match.group(1)}: {match.group(2)}"[:300]
    return None
