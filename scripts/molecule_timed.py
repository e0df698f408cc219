#!/usr/bin/env python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Run the Molecule scenarios in order, print a time table, fail on a failure or an overrun.

    python scripts/molecule_timed.py default,nvidia_driver_host cutover fleet+multinode ...

Each argument is a stage; stages run one after another.

`a+b` runs scenario a, keeps its instances (`--destroy never`, after a
destroy of any left from an earlier run), then scenario b, which creates the
same instances (it finds them and keeps them) and destroys them at its end:
the fleet scenario's balancer and two hosts, already serving, are the
multinode scenario's lab.

`a,b` runs a and b at the same time (each may be an `x+y` chain): for
scenarios that share nothing (containers, ports, units) and leave a core
idle, such as the NVIDIA driver scenarios (no vLLM) beside `default`. Each
one's output goes to .lab/molecule-<scenario>.log and is printed whole when
its stage ends, so a CI log reads as if they had run one after another.

Budgets (minutes per scenario, on 2 cores) are in molecule/budgets.yml; a
scenario without one has none. `total` is the wall time of all stages.
The table goes to stdout and to .lab/molecule-times.txt, a scenario past its
budget marked OVER BUDGET: a finding, not a failure (make test asserts
correctness; the same commit ran 30-35 % slower on one day's machine than on
another's, and CI's own limit bounds the run). Every scenario runs even after
one fails, so a CI log shows them all; the exit status is 1 if any failed.

Every scenario's output is also kept in .lab/molecule-<scenario>.log, and
after the table each failed scenario's failed tasks (the task, its host and
the result Ansible printed) are printed again: a CI system that keeps only
the end of a long log still shows why.
"""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".lab"


def main(stages):
    budgets = yaml.safe_load((ROOT / "molecule" / "budgets.yml").read_text())["budgets_min"]
    LOGS.mkdir(exist_ok=True)
    rows = []
    start_all = time.monotonic()
    for stage in stages:
        rows.extend(run_stage(stage.split(",")))
    wall = (time.monotonic() - start_all) / 60
    return report(rows, wall, budgets)


def run_stage(lanes):
    """Run the lanes of one stage at the same time; their rows in lane order."""
    if len(lanes) == 1:
        return run_lane(lanes[0], echo=True)
    print(f"\n== at the same time: {', '.join(lanes)} (logs under .lab/)", flush=True)
    results = [[] for lane in lanes]

    def lane_worker(index):
        results[index] = run_lane(lanes[index], echo=False)

    threads = [threading.Thread(target=lane_worker, args=(i,)) for i in range(len(lanes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = []
    for lane_rows in results:
        for row in lane_rows:
            name = row[0]
            print(f"\n== output of molecule test -s {name}", flush=True)
            print(log_of(name).read_text(errors="replace"), flush=True)
        rows.extend(lane_rows)
    return rows


def run_lane(lane, echo):
    """Run one lane (`a` or an `a+b` chain); [(scenario, rc, minutes)].

    Molecule's output goes to LOGS/molecule-<scenario>.log and, with `echo`
    (a stage of one lane), to stdout as it comes.
    """
    rows = []
    for name, extra in runs([lane]):
        with open(log_of(name), "w") as out:
            if extra == ["--destroy", "never"]:
                run_logged(["molecule", "destroy", "-s", name], out, echo)
            print(f"\n== molecule test -s {name} {' '.join(extra)}".rstrip(), flush=True)
            start = time.monotonic()
            rc = run_logged(["molecule", "test", "-s", name, *extra], out, echo)
            minutes = (time.monotonic() - start) / 60
            result = "ok" if rc == 0 else "FAILED"
            print(f"== molecule test -s {name}: {result} in {minutes:.1f} min", flush=True)
            rows.append((name, rc, minutes))
    return rows


# Molecule and Ansible without colours: molecule 26 colours its output (and borders each
# Ansible line) whenever TERM names an xterm, even into a pipe; the logs are files and
# failure_excerpt reads them.
PLAIN = dict(os.environ, PY_COLORS="0", NO_COLOR="1", ANSIBLE_FORCE_COLOR="0")


def log_of(name):
    """Where the scenario's output is kept."""
    return LOGS / f"molecule-{name}.log"


def run_logged(argv, out, echo):
    """Run argv in ROOT, its stdout and stderr into the file out (and to stdout if echo); rc."""
    if not echo:
        return subprocess.call(argv, cwd=ROOT, env=PLAIN, stdout=out, stderr=subprocess.STDOUT)
    with subprocess.Popen(argv, cwd=ROOT, env=PLAIN, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace",
                          bufsize=1) as proc:
        for line in proc.stdout:
            out.write(line)
            sys.stdout.write(line)
            sys.stdout.flush()
    return proc.returncode


# The lines that open a failure: a failed task's result (fatal, or failed for a loop
# item), an error Ansible raises outside a task result ("ERROR!" before 2.19,
# "[ERROR]:" since; 2.19's "[ERROR]: Task failed" only heads a result that follows),
# and molecule's own error lines.
_FAILURE = re.compile(r"^(fatal: \[|failed: \[|ERROR!? |\[ERROR\]: (?!Task failed)|CRITICAL )")
_MOLECULE = re.compile(r"^(ERROR|CRITICAL) +")
# What continues a failure: the result's indented lines, blank lines inside it, and
# molecule's list after "Idempotence test failed because of the following tasks:".
_BODY = (" ", "\t", "* ")


def failure_excerpt(text, head=25, tail=45, last=4):
    """The failed tasks of one Ansible/molecule output: each task header, its failure line
    and the result under it (long results cut to their first `head` and last `tail`
    lines), the `last` ones in order, as one string; '' if nothing failed.
    A task's failures that Ansible marked "...ignoring" are left out, a loop's failed
    items included (the mark follows the last item only); molecule's error lines, which
    it writes twice (CRITICAL, then ERROR), once. Rescued failures stay: the output
    does not mark them, which is why the last few are kept and not only the last.
    """
    lines = text.splitlines()
    blocks = []  # (task number, the block's text)
    seen = set()  # molecule's messages already kept
    task, task_number = None, 0
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task, task_number = line.rstrip(" *"), task_number + 1
        elif line.strip() == "...ignoring":
            blocks = [block for block in blocks if block[0] != task_number]
        elif _FAILURE.match(line):
            message = _MOLECULE.sub("", line)
            if _MOLECULE.match(line) and message in seen:
                continue
            seen.add(message)
            end = index
            while end < len(lines) and (lines[end].startswith(_BODY) or lines[end] == ""):
                end += 1
            body = [line, *lines[index:end]]
            index = end
            while body and body[-1] == "":
                body.pop()
            if len(body) > head + tail:
                cut = f"    [... {len(body) - head - tail} lines ...]"
                body = [*body[:head], cut, *body[-tail:]]
            header = [task] if task and line.startswith(("fatal", "failed")) else []
            blocks.append((task_number, "\n".join(header + body)))
    texts = [text for _task, text in blocks]
    if len(texts) > last:
        texts = [f"[{len(texts) - last} earlier failed results left out]", *texts[-last:]]
    return "\n\n".join(texts)


def report(rows, wall, budgets):
    lines = [f"{'scenario':<26} {'result':<7} {'minutes':>8} {'budget':>7}  note"]
    for name, rc, minutes in rows:
        budget = budgets.get(name)
        over = budget is not None and minutes > budget
        note = "OVER BUDGET" if over else ""
        lines.append(f"{name:<26} {'ok' if rc == 0 else 'FAILED':<7} {minutes:>8.1f} "
                     f"{budget if budget is not None else '-':>7}  {note}")
    lines.append(f"{'total (wall time)':<26} {'':<7} {wall:>8.1f} {budgets.get('total', '-'):>7}")
    table = "\n".join(lines)
    print("\nMolecule time table\n" + table, flush=True)
    (LOGS / "molecule-times.txt").write_text(table + "\n")
    failed = [row[0] for row in rows if row[1] != 0]
    over = [row[0] for row in rows
            if budgets.get(row[0]) is not None and row[2] > budgets[row[0]]]
    if "total" in budgets and wall > budgets["total"]:
        over.append("total")
    for name in failed:
        excerpt = failure_excerpt(log_of(name).read_text(errors="replace"))
        print(f"\n== why molecule test -s {name} failed (whole output: .lab/molecule-{name}.log)\n"
              f"{excerpt or 'no failed task found in its output; see the log'}", flush=True)
    if over:
        # A speed figure, never a failure: the same commit's scenarios ran 30-35 % slower
        # on one day's machine than on another's, and CI's own limit bounds the whole run.
        print(f"over budget (a finding to trim, not a failure): {over}", flush=True)
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


def runs(scenarios):
    """(scenario, extra molecule test arguments) in order; `a+b` keeps a's instances for b."""
    for item in scenarios:
        chain = item.split("+")
        for index, name in enumerate(chain):
            yield name, (["--destroy", "never"] if index < len(chain) - 1 else [])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
