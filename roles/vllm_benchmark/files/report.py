# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Plot a `vllm bench serve` sweep and compare it with the previous model's.

    bench/report.py bench/results/<model>/<run id> [--previous MODEL | --baseline DIR]

The benchmark playbook (vllm_fleet.fleet.benchmark) runs it from here, the
collection's copy; bench/report.py in a checkout is a link to this file.

Reads the sweep's JSON files (one per concurrency, written by vllm bench serve
and completed by the vllm_benchmark role), writes report.png (output tok/s,
TTFT and TPOT against concurrency) and report.md (a table against the
baseline) into the run folder, and prints the markdown.

The baseline is --baseline DIR; else the newest run of --previous MODEL (the
deployment record's previous model) under the results root; else the newest
run of the most recently benchmarked other model there; else none, and the
report says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# (JSON key, column title, format) of the compared metrics, in table order.
METRICS = (
    ("output_throughput", "output tok/s", "{:.1f}"),
    ("mean_ttft_ms", "mean TTFT ms", "{:.2f}"),
    ("p99_ttft_ms", "p99 TTFT ms", "{:.2f}"),
    ("mean_tpot_ms", "mean TPOT ms", "{:.2f}"),
    ("p99_tpot_ms", "p99 TPOT ms", "{:.2f}"),
)
MISSING = "-"


class ReportError(Exception):
    """A run folder that cannot be reported on."""


def concurrency_of(result):
    value = result.get("max_concurrency")
    if value is None:
        value = result.get("bench", {}).get("concurrency")
    if value is None:
        raise ReportError(f"{result.get('_path')}: no max_concurrency in the result")
    return int(value)


def load_run(run_dir):
    """Return the sweep's results, sorted by concurrency (report files skipped)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"wanted a run folder of result JSON files, found none at {run_dir}")
    results = []
    for path in sorted(run_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ReportError(f"{path}: not readable as JSON ({exc})") from exc
        if not isinstance(data, dict) or "output_throughput" not in data:
            continue
        data["_path"] = str(path)
        results.append(data)
    if not results:
        raise ReportError(
            f"no vllm bench serve results (*.json with output_throughput) in {run_dir}"
        )
    results.sort(key=concurrency_of)
    seen = [concurrency_of(r) for r in results]
    if len(set(seen)) != len(seen):
        raise ReportError(f"{run_dir}: two results for one concurrency ({seen})")
    return results


def run_date(run_dir):
    """Newest `date` (vllm bench's %Y%m%d-%H%M%S) among a run's results; '' if none."""
    dates = []
    for path in Path(run_dir).glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "output_throughput" in data:
            dates.append(str(data.get("date", "")))
    return max(dates, default="")


def latest_run(model_dir):
    """The run folder under a model's folder with the newest results, or None."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return None
    runs = [(run_date(d), d.name, d) for d in model_dir.iterdir() if d.is_dir()]
    runs = [r for r in runs if r[0]]
    return max(runs)[2] if runs else None


def find_baseline(results_root, model, previous=None):
    """Pick the run to compare with; returns (run folder or None, why)."""
    results_root = Path(results_root)
    if previous:
        run = latest_run(results_root / previous)
        if run is not None:
            return run, f"the previous model ({previous}), newest run"
        return None, f"no results for the previous model {previous} under {results_root}"
    others = []
    if results_root.is_dir():
        for model_dir in results_root.iterdir():
            if not model_dir.is_dir() or model_dir.name == model:
                continue
            run = latest_run(model_dir)
            if run is not None:
                others.append((run_date(run), model_dir.name, run))
    if others:
        _unused, name, run = max(others)
        return run, f"the most recently benchmarked other model ({name})"
    return None, f"no other model's results under {results_root}"


def hardware_summary(result):
    hardware = result.get("hardware") or {}
    gpu = hardware.get("gpu")
    if hardware.get("kind") == "gpu" and gpu:
        names = sorted({g.get("name", "?") for g in gpu.get("gpus", [])})
        link = gpu.get("interconnect") or "unknown link"
        return f"{gpu.get('count')}x {', '.join(names)} ({link})"
    cpu = hardware.get("cpu") or {}
    models = cpu.get("model") or ["unknown CPU"]
    return f"CPU: {', '.join(models)}, {cpu.get('vcpus', '?')} vCPUs"


def describe(results):
    """One run's identity, from its first result (all share it)."""
    first = results[0]
    bench = first.get("bench", {})
    return {
        "model": first.get("model") or first.get("model_id", "?"),
        "served_model_name": first.get("served_model_name", first.get("model_id", "?")),
        "repo_id": first.get("repo_id", "?"),
        "revision": first.get("revision") or "?",
        "vllm_version": first.get("vllm_version", "?"),
        "hardware": hardware_summary(first),
        "lengths": f"in {bench.get('input_len', '?')} / out {bench.get('output_len', '?')} tokens, "
        f"seed {bench.get('seed', '?')}",
        "run": Path(first["_path"]).parent.name,
    }


def fmt(value, pattern):
    return MISSING if value is None else pattern.format(value)


def change(new, old):
    if new is None or old is None or old == 0:
        return MISSING
    return f"{(new - old) / old * 100:+.1f}%"


def _by_concurrency(results):
    return {concurrency_of(r): r for r in results} if results else {}


def markdown(current, baseline=None, baseline_why=""):
    """The report as markdown: the runs, then one row per concurrency."""
    cur = describe(current)
    base = describe(baseline) if baseline else None
    lines = ["# Benchmark: " + cur["model"], ""]
    fields = (
        "served_model_name",
        "repo_id",
        "revision",
        "vllm_version",
        "hardware",
        "lengths",
        "run",
    )
    if base:
        lines += [f"| | {cur['model']} | {base['model']} (baseline) |", "|---|---|---|"]
        lines += [f"| {f} | {cur[f]} | {base[f]} |" for f in fields]
    else:
        lines += [f"| | {cur['model']} |", "|---|---|"]
        lines += [f"| {f} | {cur[f]} |" for f in fields]
    lines.append("")
    if base:
        lines.append(f"Baseline: {baseline_why}. Change = (current - baseline) / baseline.")
    else:
        lines.append(f"No previous results to compare with ({baseline_why or 'none given'}).")
    lines.append("")

    cur_rows, base_rows = _by_concurrency(current), _by_concurrency(baseline)
    header = ["concurrency", "prompts", "failed"]
    if base:
        header[1:] = ["prompts (current / baseline)", "failed (current / baseline)"]
    for _unused, title, _unused2 in METRICS:
        if base:
            header += [f"{title} {cur['model']}", f"{title} {base['model']}", "change"]
        else:
            header.append(title)
    lines += ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for conc in sorted(set(cur_rows) | set(base_rows)):
        row_cur, row_base = cur_rows.get(conc, {}), base_rows.get(conc, {})
        cells = [str(conc), fmt(row_cur.get("num_prompts"), "{}"), fmt(row_cur.get("failed"), "{}")]
        if base:
            cells[1:] = [
                f"{fmt(row_cur.get(k), '{}')} / {fmt(row_base.get(k), '{}')}"
                for k in ("num_prompts", "failed")
            ]
        for key, _unused, pattern in METRICS:
            new = row_cur.get(key)
            cells.append(fmt(new, pattern))
            if base:
                old = row_base.get(key)
                cells += [fmt(old, pattern), change(new, old)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(current, baseline, path):
    """Write the PNG: output tok/s, TTFT and TPOT against concurrency."""
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(describe(current)["model"], current, "-", "o")]
    if baseline:
        runs.append((describe(baseline)["model"] + " (baseline)", baseline, "--", "s"))
    panels = (
        ("Output throughput", "tokens/s", ("output_throughput",)),
        ("Time to first token", "ms (mean, p99 dotted)", ("mean_ttft_ms", "p99_ttft_ms")),
        ("Time per output token", "ms (mean, p99 dotted)", ("mean_tpot_ms", "p99_tpot_ms")),
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ticks = sorted({concurrency_of(r) for run in runs for r in run[1]})
    for axis, (title, unit, keys) in zip(axes, panels, strict=True):
        for index, (label, results, style, marker) in enumerate(runs):
            color = f"C{index}"
            xs = [concurrency_of(r) for r in results]
            for key in keys:
                ys = [r.get(key) for r in results]
                dotted = key.startswith("p99")
                axis.plot(
                    xs,
                    ys,
                    ":" if dotted else style,
                    color=color,
                    label=None if dotted else label,
                    marker="." if dotted else marker,
                )
        axis.set_xscale("log", base=2)
        axis.set_xticks(ticks)
        axis.set_xticklabels([str(t) for t in ticks])
        axis.set_xlabel("concurrency")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.set_ylim(bottom=0)
        axis.grid(visible=True, alpha=0.3)
        axis.legend(fontsize="small")
    first = describe(current)
    fig.suptitle(
        f"vllm bench serve, random dataset, {first['lengths']} - {first['hardware']}, "
        f"vLLM {first['vllm_version']}",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="bench/results/<model>/<run id>")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--previous", help="catalog name of the model to compare with")
    group.add_argument("--baseline", type=Path, help="run folder to compare with")
    parser.add_argument(
        "--results-root", type=Path, help="folder of <model>/<run id>/ (default: two levels up)"
    )
    parser.add_argument("--out-dir", type=Path, help="where report.md/png go (default: run_dir)")
    args = parser.parse_args(argv)

    try:
        current = load_run(args.run_dir)
        root = args.results_root or args.run_dir.resolve().parent.parent
        if args.baseline:
            base_dir, why = args.baseline, f"the run folder {args.baseline}"
        else:
            base_dir, why = find_baseline(root, describe(current)["model"], args.previous)
        baseline = load_run(base_dir) if base_dir else None
        out_dir = args.out_dir or args.run_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        text = markdown(current, baseline, why)
        (out_dir / "report.md").write_text(text)
        try:
            plot(current, baseline, out_dir / "report.png")
            wrote = f"{out_dir / 'report.md'} and {out_dir / 'report.png'}"
        except ImportError as exc:  # the table is the report; the PNG needs matplotlib
            wrote = (f"{out_dir / 'report.md'} (no report.png: {exc.name or exc} is not "
                     "installed in this Python; pip install matplotlib)")
    except ReportError as exc:
        print(f"report.py: {exc}", file=sys.stderr)
        return 1
    print(text, end="")
    print(f"\nWrote {wrote}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
