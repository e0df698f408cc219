# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/report.py on real `vllm bench serve` results captured in the lab.

The fixtures (tests/fixtures/bench, see its README) are the JSON files the
vllm_benchmark role fetched from the lab host; nothing here is simulated.
"""

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import sys

import pytest
from repo_paths import FIXTURES, ROOT

REPORT = ROOT / "bench" / "report.py"
CAPTURES = FIXTURES / "bench"
MLA_RUN = "tiny_mla/lab_e8c8552e61ce_vllm-0.32.0+cpu_in128_out64_seed0"
GQA_RUN = "tiny_gqa/lab_2105da2f90cd_vllm-0.32.0+cpu_in128_out64_seed0"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# (JSON key, decimals printed) of the compared metrics, in table order.
METRICS = [
    ("output_throughput", 1),
    ("mean_ttft_ms", 2),
    ("p99_ttft_ms", 2),
    ("mean_tpot_ms", 2),
    ("p99_tpot_ms", 2),
]

spec = importlib.util.spec_from_file_location("bench_report", REPORT)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _load(run):
    return {
        json.loads(p.read_text())["max_concurrency"]: json.loads(p.read_text())
        for p in sorted((CAPTURES / run).glob("c*.json"))
    }


def _results(tmp_path, *runs):
    root = tmp_path / "results"
    for run in runs:
        shutil.copytree(CAPTURES / run, root / run)
    return root


def _run(*args):
    return subprocess.run(
        [sys.executable, str(REPORT), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _table(markdown):
    """The per-concurrency table as {concurrency: [cells]} plus its header."""
    lines = [line for line in markdown.splitlines() if line.startswith("| concurrency")]
    assert len(lines) == 1, markdown
    start = markdown.splitlines().index(lines[0])
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in markdown.splitlines()[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[int(cells[0])] = cells
    return header, rows


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("run", [MLA_RUN, GQA_RUN])
def test_captures_carry_model_revision_vllm_and_hardware(run):
    model = run.split("/")[0]
    results = _load(run)
    assert sorted(results) == [1, 4, 8]
    for conc, r in results.items():
        assert r["model"] == model
        assert r["served_model_name"] == model.replace("_", "-")
        assert r["model_id"] == r["served_model_name"]
        assert r["repo_id"] == "vllm-fleet-lab/" + model.replace("_", "-")
        assert re.fullmatch(r"[0-9a-f]{40}", r["revision"])
        assert run.split("/")[1].split("_")[1] == r["revision"][:12]
        assert r["vllm_version"] == "0.32.0+cpu"
        assert r["hardware"]["kind"] == "cpu"
        assert r["hardware"]["gpu"] is None
        assert r["hardware"]["cpu"]["model"]
        assert r["hardware"]["cpu"]["vcpus"] >= 1
        assert r["hardware"]["memory_total_mb"] > 0
        # The lab sweep: random dataset, 128 in / 64 out, seed 0, EOS ignored,
        # prompts = max(8, 2 x concurrency); every request completed in full.
        assert r["bench"] == {
            "dataset": "random",
            "input_len": 128,
            "output_len": 64,
            "seed": 0,
            "ignore_eos": True,
            "num_prompts": max(8, 2 * conc),
            "concurrency": conc,
            "extra_args": [],
        }
        assert r["max_concurrency"] == conc
        assert r["num_prompts"] == r["completed"] == max(8, 2 * conc)
        assert r["failed"] == 0
        assert r["total_output_tokens"] == 64 * r["completed"]
        assert r["output_throughput"] == pytest.approx(r["total_output_tokens"] / r["duration"])


def test_comparison_table_holds_the_json_values(tmp_path):
    root = _results(tmp_path, MLA_RUN, GQA_RUN)
    done = _run(root / MLA_RUN, "--previous", "tiny_gqa")
    assert done.returncode == 0, done.stderr
    markdown = (root / MLA_RUN / "report.md").read_text()
    assert markdown in done.stdout
    assert "Baseline: the previous model (tiny_gqa), newest run." in markdown

    header, rows = _table(markdown)
    assert header[:3] == [
        "concurrency",
        "prompts (current / baseline)",
        "failed (current / baseline)",
    ]
    assert header[3:6] == ["output tok/s tiny_mla", "output tok/s tiny_gqa", "change"]
    assert len(header) == 3 + 3 * len(METRICS)
    mla, gqa = _load(MLA_RUN), _load(GQA_RUN)
    assert sorted(rows) == [1, 4, 8]
    for conc, cells in rows.items():
        assert cells[1] == f"{mla[conc]['num_prompts']} / {gqa[conc]['num_prompts']}"
        assert cells[2] == "0 / 0"
        for index, (key, decimals) in enumerate(METRICS):
            new, old, delta = cells[3 + 3 * index : 6 + 3 * index]
            assert float(new) == pytest.approx(mla[conc][key], abs=0.51 * 10**-decimals)
            assert float(old) == pytest.approx(gqa[conc][key], abs=0.51 * 10**-decimals)
            assert len(new.split(".")[1]) == decimals
            want = (mla[conc][key] - gqa[conc][key]) / gqa[conc][key] * 100
            assert delta.endswith("%")
            assert float(delta[:-1]) == pytest.approx(want, abs=0.051)
    # The run table names both runs' revisions in full.
    assert f"| revision | {mla[1]['revision']} | {gqa[1]['revision']} |" in markdown


def test_png_has_the_magic_bytes_and_the_figure_size(tmp_path):
    root = _results(tmp_path, MLA_RUN, GQA_RUN)
    assert _run(root / MLA_RUN, "--previous", "tiny_gqa").returncode == 0
    png = root / MLA_RUN / "report.png"
    # 15 x 4.5 inches at 100 dpi; three panels with lines are tens of KB.
    assert _png_size(png) == (1500, 450)
    assert 20_000 < png.stat().st_size < 2_000_000


def test_no_previous_results_gives_a_single_run_report(tmp_path):
    root = _results(tmp_path, MLA_RUN)
    done = _run(root / MLA_RUN)
    assert done.returncode == 0, done.stderr
    markdown = (root / MLA_RUN / "report.md").read_text()
    want = f"No previous results to compare with (no other model's results under {root})."
    assert want in markdown
    header, rows = _table(markdown)
    assert header == [
        "concurrency",
        "prompts",
        "failed",
        "output tok/s",
        "mean TTFT ms",
        "p99 TTFT ms",
        "mean TPOT ms",
        "p99 TPOT ms",
    ]
    mla = _load(MLA_RUN)
    for conc, cells in rows.items():
        assert cells[1:3] == [str(mla[conc]["num_prompts"]), "0"]
        for (key, decimals), cell in zip(METRICS, cells[3:], strict=True):
            assert float(cell) == pytest.approx(mla[conc][key], abs=0.51 * 10**-decimals)
    assert _png_size(root / MLA_RUN / "report.png") == (1500, 450)


def test_previous_model_without_results_is_said(tmp_path):
    root = _results(tmp_path, MLA_RUN)
    done = _run(root / MLA_RUN, "--previous", "tiny_gqa")
    assert done.returncode == 0, done.stderr
    assert f"(no results for the previous model tiny_gqa under {root})" in done.stdout


def test_baseline_defaults_to_the_newest_other_model(tmp_path):
    root = _results(tmp_path, MLA_RUN, GQA_RUN)
    run, why = report.find_baseline(root, "tiny_mla")
    assert run == root / GQA_RUN
    assert why == "the most recently benchmarked other model (tiny_gqa)"
    # An older run of the same model is not picked over the newest one.
    older = root / "tiny_gqa" / "older"
    older.mkdir()
    stale = json.loads((root / GQA_RUN / "c0001.json").read_text()) | {"date": "20200101-000000"}
    (older / "c0001.json").write_text(json.dumps(stale))
    assert report.latest_run(root / "tiny_gqa") == root / GQA_RUN


def test_a_folder_without_results_fails_with_a_message(tmp_path):
    (tmp_path / "empty").mkdir()
    done = _run(tmp_path / "empty")
    assert done.returncode == 1
    assert "no vllm bench serve results" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_matplotlib_the_table_is_written_and_the_missing_png_said(tmp_path, monkeypatch,
                                                                          capsys):
    """An installed collection's controller may lack matplotlib: the report is its table."""
    root = _results(tmp_path, MLA_RUN)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert report.main([str(root / MLA_RUN)]) == 0
    out = capsys.readouterr().out
    assert (root / MLA_RUN / "report.md").exists()
    assert not (root / MLA_RUN / "report.png").exists()
    assert out.rstrip().endswith(
        f"Wrote {root / MLA_RUN / 'report.md'} (no report.png: matplotlib is not installed in "
        "this Python; pip install matplotlib)")
