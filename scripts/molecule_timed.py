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
scenario without one has no limit. `total` is the wall time of all stages.
The table goes to stdout and to .lab/molecule-times.txt. Every scenario runs
even after one fails, so a CI log shows them all; the exit status is 1 if any
failed or ran over its budget.
"""

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
        return run_lane(lanes[0], log=None)
    print(f"\n== at the same time: {', '.join(lanes)} (logs under .lab/)", flush=True)
    results = [[] for lane in lanes]

    def lane_worker(index):
        results[index] = run_lane(lanes[index], log=LOGS)

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
            print((LOGS / f"molecule-{name}.log").read_text(errors="replace"), flush=True)
        rows.extend(lane_rows)
    return rows


def run_lane(lane, log):
    """Run one lane (`a` or an `a+b` chain); [(scenario, rc, minutes)]."""
    rows = []
    for name, extra in runs([lane]):
        out = None
        if log is not None:
            out = open(log / f"molecule-{name}.log", "w")  # noqa: SIM115 - closed below
        try:
            if extra == ["--destroy", "never"]:
                subprocess.call(["molecule", "destroy", "-s", name], cwd=ROOT,
                                stdout=out, stderr=out)
            print(f"\n== molecule test -s {name} {' '.join(extra)}".rstrip(), flush=True)
            start = time.monotonic()
            rc = subprocess.call(["molecule", "test", "-s", name, *extra], cwd=ROOT,
                                 stdout=out, stderr=subprocess.STDOUT if out else None)
            minutes = (time.monotonic() - start) / 60
            result = "ok" if rc == 0 else "FAILED"
            print(f"== molecule test -s {name}: {result} in {minutes:.1f} min", flush=True)
            rows.append((name, rc, minutes))
        finally:
            if out is not None:
                out.close()
    return rows


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
    if failed or over:
        print(f"FAILED: {failed}  over budget: {over}", file=sys.stderr)
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
