#!/usr/bin/env python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Run the Molecule scenarios in order, print a time table, fail on a failure or an overrun.

    python scripts/molecule_timed.py default cutover fleet+multinode ...

`a+b` runs scenario a, keeps its instances (`--destroy never`, after a
destroy of any left from an earlier run), then scenario b, which creates the
same instances (it finds them and keeps them) and destroys them at its end:
the fleet scenario's balancer and two hosts, already serving, are the
multinode scenario's lab.

Budgets (minutes per scenario, on 2 cores) are in molecule/budgets.yml; a
scenario without one has no limit. The table goes to stdout and to
.lab/molecule-times.txt. Every scenario runs even after one fails, so a CI log
shows them all; the exit status is 1 if any failed or ran over its budget.
"""

import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main(scenarios):
    budgets = yaml.safe_load((ROOT / "molecule" / "budgets.yml").read_text())["budgets_min"]
    rows = []
    for name, extra in runs(scenarios):
        if extra == ["--destroy", "never"]:
            subprocess.call(["molecule", "destroy", "-s", name], cwd=ROOT)
        print(f"\n== molecule test -s {name} {' '.join(extra)}".rstrip(), flush=True)
        start = time.monotonic()
        rc = subprocess.call(["molecule", "test", "-s", name, *extra], cwd=ROOT)
        rows.append((name, rc, (time.monotonic() - start) / 60, budgets.get(name)))
    lines = [f"{'scenario':<26} {'result':<7} {'minutes':>8} {'budget':>7}  note"]
    for name, rc, minutes, budget in rows:
        over = budget is not None and minutes > budget
        note = "OVER BUDGET" if over else ""
        lines.append(f"{name:<26} {'ok' if rc == 0 else 'FAILED':<7} {minutes:>8.1f} "
                     f"{budget if budget is not None else '-':>7}  {note}")
    total = sum(r[2] for r in rows)
    lines.append(f"{'total':<26} {'':<7} {total:>8.1f} {budgets.get('total', '-'):>7}")
    table = "\n".join(lines)
    print("\nMolecule time table\n" + table, flush=True)
    (ROOT / ".lab").mkdir(exist_ok=True)
    (ROOT / ".lab" / "molecule-times.txt").write_text(table + "\n")
    failed = [r[0] for r in rows if r[1] != 0]
    over = [r[0] for r in rows if r[3] is not None and r[2] > r[3]]
    if "total" in budgets and total > budgets["total"]:
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
