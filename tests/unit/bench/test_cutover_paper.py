# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/cutover.py --paper: the level-1 wake on paper and the lab's section (issue 35).

The paper wake is weights per GPU / 55 GB/s, the pinned host<->GPU copy rate measured
with torch on an H200 (issue 35: "about 0.5 s for MiniMax-M2.5 TP8 and 1.4 s for
Kimi-K2.5 INT4 TP8"); the weights per GPU are model_fit's on the shipped config.json
on rtx_pro_6000_x8_pcie, as plan.yml sizes them. The lab section never invents a figure.
"""

import importlib.util
import json

import pytest
from repo_paths import ROOT

spec = importlib.util.spec_from_file_location("bench_cutover", ROOT / "bench" / "cutover.py")
cutover = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cutover)

GIB = 1024**3


def test_the_wake_is_weights_per_gpu_over_the_copy_rate():
    # vLLM 0.26.0's wake on an H100 (issue 43's first run, not committed: 27.35 GiB in
    # 0.78 s; the committed runs 0.81-0.86 s), not torch's 55 GB/s
    assert cutover.COPY_RATE_BYTES_S == 37.7e9
    assert cutover.paper_wake_s(37.7e9) == pytest.approx(1.0)
    assert cutover.paper_wake_s(110e9, rate_bytes_s=55e9) == pytest.approx(2.0)
    assert cutover.paper_wake_s(32 * GIB) == pytest.approx(32 * GIB / 37.7e9)
    assert cutover.paper_wake_s(None) is None
    assert cutover.paper_wake_s(0) is None


@pytest.fixture(scope="module")
def rows():
    catalog, profiles = cutover._role_defaults()
    return {r["model"]: r for r in cutover.paper_rows(catalog, profiles)}


def test_the_catalogs_cuda_models_on_the_target_as_the_issue_puts_them(rows):
    # CUDA models only: the lab's CPU models are the lab section's.
    assert sorted(rows) == ["kimi_k25_int4", "kimi_k25_nvfp4", "minimax_m25"]
    minimax, kimi = rows["minimax_m25"], rows["kimi_k25_int4"]
    assert (minimax["profile"], minimax["tensor_parallel_size"]) == ("rtx_pro_6000_x8_pcie", 8)
    assert minimax["wake_s"] == pytest.approx(minimax["weights_bytes_per_gpu"] / 37.7e9)
    # at vLLM's measured wake rate: about 0.8 s and 2.0 s (issue 35 had 0.5 s and 1.4 s at
    # torch's raw copy rate)
    assert round(minimax["wake_s"], 1) == 0.8
    assert round(kimi["wake_s"], 1) == 2.0
    # ~230 GB over 8 GPUs (+ what each GPU holds replicated), ~595 GB over 8
    assert 230e9 / 8 <= minimax["weights_bytes_per_gpu"] < 230e9 / 8 * 1.05
    assert 595e9 / 8 <= kimi["weights_bytes_per_gpu"] < 595e9 / 8 * 1.05
    assert (minimax["cold_load_s"], kimi["cold_load_s"]) == (75.0, 2160.0)
    assert rows["kimi_k25_nvfp4"]["cold_load"] == "not measured"


def test_the_table_says_paper_and_the_copy_rate(rows):
    lines = cutover.paper_table(list(rows.values()))
    assert lines[0].startswith("Warm switch on paper: level-1 wake = weights per GPU / 37.7 GB/s "
                               "(vLLM 0.26.0's level-1 wake on an H100 80GB in issue 43's first "
                               "run, not committed; the committed H100 runs woke at 34.1-36.4 "
                               "GB/s)")
    minimax = next(line for line in lines if line.startswith("minimax_m25"))
    assert f"{rows['minimax_m25']['wake_s']:.2f} s" in minimax
    assert "75 s" in minimax


def test_the_lab_section_without_its_file_says_not_measured(tmp_path):
    lines = cutover.lab_section(tmp_path / "cutover-warm.json")
    assert lines[1] == ("  not measured yet: the Molecule cutover scenario writes this file "
                        "(cold sequential, warm first switch, warm return, warm rollback)")
    assert len(lines) == 2


def test_the_lab_section_shows_the_files_runs_marked_cpu(tmp_path):
    path = tmp_path / "cutover-warm.json"
    path.write_text(json.dumps({"runs": [
        {"case": "warm first switch", "outage_s": 1.234, "time_until_serving_s": 0.5,
         "failed_requests": 0},
        {"case": "warm return", "outage_s": 0.61, "time_until_serving_s": 0.4, "sent": 871,
         "failed_requests": 0, "held": {"held": 14, "refused": 0, "max_s": 10.0,
                                        "wait_p50_s": 0.412, "wait_p99_s": 0.774}},
        {"case": "warm rollback", "outage_s": None, "failed_requests": 3}]}))
    lines = cutover.lab_section(path)
    assert lines[2:] == [
        ("  warm first switch          1.23               0.50     -       0     -"
         "                  -  CPU"),
        ("  warm return                0.61               0.40   871       0    14"
         "            412/774  CPU"),
        ("  warm rollback                 -                  -     -       3     -"
         "                  -  CPU")]
    path.write_text("{")
    assert lines[0] in cutover.lab_section(path)[0]
    assert cutover.lab_section(path)[1].startswith("  unreadable (")


def test_the_gpu_warm_return_is_shown_beside_the_labs_from_the_committed_runs(tmp_path):
    lines = cutover.gpu_section()
    # the H200 run of 2026-12-06 05:21 (bench/output/gpu/): its return went through
    row = next(line for line in lines if "NVIDIA H200" in line)
    assert row.split()[-5:] == ["12.18", "11.40", "0.78", "1.14", "GPU"]
    assert any("3571449856 bytes" in line for line in lines)  # green's failed check, shown
    # the first H100 runs' return was not judged (no fingerprint): not shown as a figure;
    # the three at MiniMax-M2.5's per-GPU share (08:07, 08:14, 08:19) are
    h100 = [line.split()[-5] for line in lines if "H100" in line]
    assert h100 == ["13.19", "12.50", "14.34"]
    assert cutover.gpu_section(tmp_path)[-1] == (
        "  not measured yet: make bench-gpu on a GPU host writes these runs")
