"""Deploy benchmark: first-run and second-run wall time of the demo deploy.

Recreates the lab host (a fresh container: nothing installed), then runs
`site.yml -e model=tiny_gqa` twice through ansible-runner and prints:
  - first run: wall time (s), tasks changed
  - second run (nothing to do): wall time (s), tasks changed (must be 0)
  - the model's time-to-healthy (s), as the cutover's health gate measured it

Usage: make bench-deploy   (or: .venv/bin/python bench/deploy.py [--model tiny_gqa] [--keep])
Needs `make lab` done once (image, wheelhouse, Hub endpoint). Uses the lab
inventory; --keep skips recreating the container (then the first run is warm).
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parent.parent


def run_playbook(playbook, extravars):
    """Run a playbook, return (wall seconds, runner)."""
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


def cutover_result(events):
    for event in events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task_action", "").endswith(
                "vllm_cutover"):
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
    second_wall, second_stats, _ = run_playbook("site.yml", {"model": args.model})
    cutover = cutover_result(first_events)

    print(f"deploy benchmark, model {args.model}, lab host "
          f"{'kept' if args.keep else 'fresh'}:")
    print(f"  first run:  {first_wall:7.1f} s wall, "
          f"{sum(first_stats.get('changed', {}).values())} tasks changed")
    print(f"  second run: {second_wall:7.1f} s wall, "
          f"{sum(second_stats.get('changed', {}).values())} tasks changed")
    tth = cutover.get("time_to_healthy_s")
    print(f"  time-to-healthy of {args.model}: "
          + (f"{tth:.1f} s" if tth is not None else "n/a (model was already active)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
