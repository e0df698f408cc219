# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Deploy benchmark: first run, no-op re-run, their ratio, and where the time goes.

Recreates the lab host (a fresh container from the base lab image: nothing
installed), then runs `site.yml -e model=tiny_gqa` twice through
ansible-runner and prints:
  - first run: wall time (s), tasks changed
  - no-op re-run: wall time (s), tasks changed (must be 0)
  - their ratio, against the standing budget (<= 0.15 and <= 35 s)
  - seconds per phase of the vllm_model role (preflight, driver, install,
    download, unit, cutover), from each task's own start and end
  - the model's time-to-healthy, as the cutover's health gate measured it

Usage: make bench-deploy   (or: .venv/bin/python bench/deploy.py [--model tiny_gqa] [--keep])
Needs `make lab` done once (image, wheelhouse, Hub endpoint). Uses the lab
inventory; --keep skips recreating the container (then the first run is warm).
Exit status 1 when the no-op budget is missed.
"""

import argparse
import collections
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parent.parent
RATIO_BUDGET = 0.15
NOOP_BUDGET_S = 35.0
PHASES = ("preflight", "driver", "install", "download", "unit", "cutover")
# Where a task's file says which phase it belongs to (vllm_model's phase files
# import these roles); the download plan in the preflight is the preflight's.
ROLE_PHASE = {"nvidia_driver": "driver", "vllm_install": "install",
              "model_download": "download", "vllm_service": "unit",
              "vllm_frontdoor": "cutover"}
FILE_PHASE = {"request": "preflight", "fit": "preflight", "preflight": "preflight",
              "driver": "driver", "install": "install", "download": "download",
              "unit": "unit", "cutover": "cutover"}


def run_playbook(playbook, extravars):
    """Run a playbook, return (wall seconds, stats, events)."""
    with tempfile.TemporaryDirectory() as private:
        start = time.monotonic()
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(ROOT),
            playbook=str(ROOT / playbook),
            inventory=str(ROOT / "inventory" / "lab"),
            extravars=extravars,
            envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
            quiet=True,
        )
        wall = time.monotonic() - start
        # Read what the run left before its private folder goes away.
        events = list(runner.events)
        stats = runner.stats or {}
    if runner.rc != 0:
        tail = [e.get("stdout", "") for e in events[-15:]]
        sys.exit(f"{playbook} failed (rc={runner.rc}):\n" + "\n".join(tail))
    return wall, stats, events


def phase_of(task_path, previous):
    """The vllm_model phase a task belongs to, from the file it is written in."""
    path = (task_path or "").rsplit(":", 1)[0]
    parts = Path(path).parts
    if "roles" in parts:
        role = parts[parts.index("roles") + 1]
        name = Path(path).stem
        if role == "vllm_model":
            return FILE_PHASE.get(name, previous)
        if role == "model_download" and name == "plan" and previous == "preflight":
            return "preflight"
        return ROLE_PHASE.get(role, previous)
    return previous


def phase_seconds(events):
    """Seconds per phase: the sum of each task's own run time (start to end)."""
    totals = collections.Counter()
    phase = "preflight"
    for event in events:
        data = event.get("event_data", {})
        if not event.get("event", "").startswith("runner_on_"):
            continue
        if not (data.get("start") and data.get("end")):
            continue
        phase = phase_of(data.get("task_path"), phase)
        seconds = (dt.datetime.fromisoformat(data["end"])
                   - dt.datetime.fromisoformat(data["start"])).total_seconds()
        totals[phase] += seconds
    return totals


def cutover_result(events):
    for event in events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task_action", "").endswith(
                "async_follow") and "action" in data.get("res", {}):
            return data["res"]
    return {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_gqa")
    parser.add_argument("--keep", action="store_true", help="keep the lab host as it is")
    args = parser.parse_args()

    if not args.keep:
        subprocess.run(["docker", "rm", "-f", "vllm-fleet-lab"], check=False,
                       capture_output=True)
        run_playbook("playbooks/lab.yml", {})

    first_wall, first_stats, first_events = run_playbook("site.yml", {"model": args.model})
    second_wall, second_stats, second_events = run_playbook("site.yml", {"model": args.model})
    cutover = cutover_result(first_events)
    ratio = second_wall / first_wall
    changed = sum(second_stats.get("changed", {}).values())
    ok = ratio <= RATIO_BUDGET and second_wall <= NOOP_BUDGET_S and changed == 0

    print(f"deploy benchmark, model {args.model}, lab host "
          f"{'kept' if args.keep else 'fresh'}:")
    print(f"  first run:     {first_wall:7.1f} s wall, "
          f"{sum(first_stats.get('changed', {}).values())} tasks changed")
    print(f"  no-op re-run:  {second_wall:7.1f} s wall, {changed} tasks changed")
    print(f"  ratio:         {ratio:7.3f} (budget <= {RATIO_BUDGET} and <= {NOOP_BUDGET_S:.0f} s, "
          f"changed 0): {'met' if ok else 'MISSED'}")
    first_phases, second_phases = phase_seconds(first_events), phase_seconds(second_events)
    print("  seconds per phase (sum of the tasks' own run time):")
    print(f"    {'phase':<10} {'first':>8} {'no-op':>8}")
    for phase in PHASES:
        print(f"    {phase:<10} {first_phases[phase]:8.1f} {second_phases[phase]:8.1f}")
    tth = cutover.get("time_to_healthy_s")
    print(f"  time-to-healthy of {args.model}: "
          + (f"{tth:.1f} s" if tth is not None else "n/a (model was already active)"))
    print(f"speed target no-op re-run <= {RATIO_BUDGET} of the first run and <= "
          f"{NOOP_BUDGET_S:.0f} s, 0 changed: {ratio:.3f}, {second_wall:.1f} s, {changed} changed"
          f" - {'met' if ok else 'missed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
