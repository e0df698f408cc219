# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/gpu (the GPU suite) without a GPU: its readers on captured text, its process
host answering the product's systemctl/journalctl calls, and the whole suite run end to
end against a stand-in vLLM (gpu_fake/fake_vllm.py) and nvidia-smi (gpu_fake/nvidia-smi)
with shapes shrunk for a CPU. What the GPU measured is checked in test_gpu_figures.py."""

import json
import os
import sys
import time

import pytest
from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "bench" / "gpu"))
import procs
import shapes
import table

FAKE = ROOT / "tests" / "unit" / "bench" / "gpu_fake"
MIB = 1024**2

# vLLM 0.26.0's own log of a cold start on an H200 (the suite's run, committed).
REAL_LOG = ROOT / "bench" / "output" / "gpu" / (
    "gpu-h200-vllm-0.26.0-20261206T0521.vllm-bench-minimax_m2.log")


def test_log_figures_split_a_cold_start_from_vllms_own_lines():
    lines = REAL_LOG.read_text(encoding="utf-8").splitlines()
    found, source = procs.log_figures(lines)
    assert found == {"weights_load_s": 2.92, "model_load_s": 3.411765, "model_load_gib": 13.68,
                     "compile_total_s": 17.47, "kv_available_gib": 110.53,
                     "kv_cache_tokens": 14487712, "graphs_s": 5.0, "graphs_gib": 0.11,
                     "engine_init_s": 36.5, "dynamo_bytecode_s": 2.48, "max_concurrency": 3537.04}
    assert source["kv_cache_tokens"].endswith("GPU KV cache size: 14,487,712 tokens")
    # the words of vLLM before 0.26 ("takes ... in total", "took ... seconds") still read
    old, _src = procs.log_figures(["torch.compile takes 11.30 s in total",
                                   ("init engine (profile, create kv cache, warmup model) took "
                                    "26.10 seconds")])
    assert old == {"compile_total_s": 11.3, "engine_init_s": 26.1}


def test_first_error_names_what_killed_a_level_2_wake():
    lines = ["INFO starting", "(EngineCore) ERROR Traceback (most recent call last):",
             "AttributeError: 'functools.partial' object has no attribute '__name__'",
             "RuntimeError: Engine core died"]
    assert procs.first_error(lines) == (
        "AttributeError: 'functools.partial' object has no attribute '__name__'")
    assert procs.first_error(["INFO all good"]) is None
    # vLLM's advice at start names an error it did not meet: not what failed (the first
    # real run's table blamed "Too many open files" for a wake the suite had misjudged)
    lines = REAL_LOG.read_text(encoding="utf-8").splitlines()
    assert "Too many open files" in lines[7]
    assert procs.first_error(lines[:130]) is None  # the cold start, sleeps and wakes
    assert procs.first_error(lines) == (  # its level-2 wake, later in the same log
        "AttributeError: 'functools.partial' object has no attribute '__name__'. "
        "Did you mean: '__ne__'?")


def test_nvidia_smi_and_proc_readers():
    gpus = procs.parse_gpus_csv("0, GPU-aaa, 81559, 75444\n1, GPU-bbb, 81559, 4\n")
    assert gpus[0] == {"index": 0, "uuid": "GPU-aaa", "memory_total_bytes": 81559 * MIB,
                       "memory_used_bytes": 75444 * MIB}
    apps = procs.parse_apps_csv("812, GPU-aaa, 2254\n901, GPU-bbb, 71000\nbad line\n", gpus)
    assert apps == [{"pid": 812, "gpu_index": 0, "used_memory_bytes": 2254 * MIB},
                    {"pid": 901, "gpu_index": 1, "used_memory_bytes": 71000 * MIB}]
    assert procs.pids_bytes({"processes": apps}, {812}) == 2254 * MIB
    status = "Name:\tpython3\nVmLck:\t  51904512 kB\nVmRSS:\t  53000000 kB\nVmPin:\t 0 kB\n"
    assert procs.parse_kib_fields(status)["VmLck"] == 51904512 * 1024


def test_process_host_answers_the_products_systemctl_and_journal_calls(tmp_path):
    host = procs.ProcessHost(tmp_path / "cgroup")
    argv = [sys.executable, "-c", "import time; print('hello', flush=True); time.sleep(30)"]
    host.add(procs.Unit("u1", argv, dict(os.environ), tmp_path / "u1.log"))
    rc, out, _err = host.run_command(["systemctl", "show", "u1", "--property=ActiveState"])
    assert (rc, out) == (0, "ActiveState=inactive\n")
    assert host.run_command(["systemctl", "start", "u1"])[0] == 0
    try:
        _rc, out, _err = host.run_command(
            ["systemctl", "show", "u1", "--property=ActiveState,MainPID,NRestarts"])
        assert out == f"ActiveState=active\nMainPID={host.units['u1'].pid}\nNRestarts=0\n"
        _rc, group, _err = host.run_command(
            ["systemctl", "show", "u1", "--property=ControlGroup", "--value"])
        procs_file = tmp_path / "cgroup" / group.strip().lstrip("/") / "cgroup.procs"
        assert str(host.units["u1"].pid) in procs_file.read_text().split()
        for _try in range(50):
            if host.log_lines("u1"):
                break
            time.sleep(0.1)
        rc, out, _err = host.run_command(["journalctl", "-u", "u1", "-n", "5", "-o", "cat"])
        assert (rc, out) == (0, "hello\n")
        _rc, out, _err = host.run_command(["journalctl", "-u", "u1", "-o", "json"])
        assert json.loads(out.splitlines()[0]) == {"MESSAGE": "hello", "__CURSOR": "1"}
        assert host.run_command(["systemctl", "frobnicate", "u1"])[0] == 1
        assert host.run_command(["ss", "-H"])[0] == 127
    finally:
        host.stop_all()
    _rc, out, _err = host.run_command(["systemctl", "show", "u1", "--property=ActiveState"])
    assert out == "ActiveState=failed\n"


def test_random_weights_are_drawn_so_greedy_output_can_vary():
    assert shapes.init_std("model.layers.0.self_attn.q_proj.weight", (6144, 3072)) == \
        pytest.approx(3072**-0.5)
    assert shapes.init_std("model.layers.0.input_layernorm.weight", (3072,)) is None
    assert shapes.init_std("model.layers.0.block_sparse_moe.e_score_correction_bias",
                           (256,)) == 0
    assert shapes.init_std("model.embed_tokens.weight", (1024, 3072)) == 1.0
    cfg = shapes.config_for("minimax_m2", 1024, layers=4)
    assert (cfg["hidden_size"], cfg["num_local_experts"], cfg["num_hidden_layers"],
            cfg["vocab_size"]) == (3072, 256, 4, 1024)
    small = shapes.config_for("deepseek_v3_mla", 1024, shrink=16)
    assert (small["hidden_size"], small["n_routed_experts"], small["kv_lora_rank"]) == \
        (448, 16, 512)


def test_table_rewrites_only_the_measured_section():
    page = f"intro\n{table.BEGIN}\nold\n{table.END}\nafter\n"
    want = f"intro\n{table.BEGIN}\na\nb\n{table.END}\nafter\n"
    assert table.rewrite_doc(page, ["a", "b"]) == want
    with pytest.raises(ValueError, match="no"):
        table.rewrite_doc("no markers", ["a"])


def test_the_measured_section_is_what_the_documented_command_gives_from_every_committed_run():
    """docs/warm-switch.md's measured section is `table.py --doc docs/warm-switch.md`'s: every
    run under bench/output/gpu/, one table each, in the order they started (none left out)."""
    runs = table.committed_runs()
    assert [run["started"][:16] for run in runs] == [
        "2026-12-06T05:03", "2026-12-06T05:09", "2026-12-06T05:21", "2026-12-06T05:26",
        "2026-12-06T08:07", "2026-12-06T08:14", "2026-12-06T08:19"]
    assert len(runs) == len(list(table.RUNS.glob("gpu-*.json")))
    page = (ROOT / "docs" / "warm-switch.md").read_text(encoding="utf-8")
    assert table.rewrite_doc(page, table.section(runs)) == page
    assert "python3 bench/gpu/table.py --doc docs/warm-switch.md" in (
        ROOT / "docs" / "gpu-suite.md").read_text(encoding="utf-8")


def _rows():
    """docs/gpu-suite.md's table of issue 43's rows, by its first cell."""
    lines = table.rows_table(table.committed_runs())
    cells = [line[2:-2].split(" | ") for line in lines
             if line.startswith("| ") and not line.startswith("| issue")]
    return lines, {row[0]: row for row in cells}


def test_the_issue_43_rows_are_what_the_documented_command_gives_from_every_committed_run():
    """docs/gpu-suite.md's "The issue's rows, re-measured" is `table.py --rows --doc
    docs/gpu-suite.md`'s, one line per row of issue 43's table, in the issue's order."""
    lines, rows = _rows()
    page = (ROOT / "docs" / "gpu-suite.md").read_text(encoding="utf-8")
    assert table.rewrite_doc(page, lines, table.ROWS_BEGIN, table.ROWS_END) == page
    assert "python3 bench/gpu/table.py --rows --doc docs/gpu-suite.md" in page
    assert list(rows) == list(table.ROW_NAMES.values())
    assert {len(cells) for cells in rows.values()} == {5}, rows
    # the product before: issue 43's right-hand column, quoted as the issue has it
    issue = "residual of a level-1 sleeper"
    assert rows[issue][2].startswith("1.20 GiB at TP 1")
    assert rows["level-1 wake"][2] == "0.53 s (weights / 55 GB/s)"


def test_the_issue_43_rows_measured_cells_are_the_runs_and_the_now_cells_the_products():
    """Each measured figure is the JSON's (the largest residual, the fastest wake, the failed
    level-2 wake); each 'now' the product's own constant or decide()."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import warm_switch as ws

    runs = table.committed_runs()
    _lines, rows = _rows()
    residuals = [value for value, _at, _shape in table.level1_residuals(runs)]
    kept = [run["switch"]["return"]["green_residual_bytes"] for run in runs
            if (run["switch"].get("return") or {}).get("green_residual_bytes")]
    assert max(residuals) == max(kept) == 3825205248  # green (MLA), H100 T0814
    residual = rows["residual of a level-1 sleeper"]
    assert "3.56 GiB (H100 T0814)" in residual[1]
    default = table.gib(ws.MEASURED_SLEEPER_BYTES)
    assert residual[3] == f"warm_switch.sleep_residual_bytes(1): {default}"
    assert residual[4].startswith("default holds the largest sleeper (3.56 GiB)")
    assert "5 of 5 passed, agreeing with the GPU 5 of 5" in residual[4]
    host = rows["host memory of a level-1 sleeper (pinned factor)"]
    factors = [run["switch"]["blue_sleep"]["host_ram_factor"] for run in runs
               if run["switch"].get("blue_sleep")]
    assert f"{max(factors):.3f}x (H200 T0521)" in host[1]
    assert host[3].startswith(f"warm_switch.PINNED_HOST_FACTOR: {ws.PINNED_HOST_FACTOR}x")
    wakes = [c["wake_s"] for run in runs for c in run["switch"].get("blue_cycles") or []]
    wake = rows["level-1 wake"]
    assert f"{table.secs(max(wakes))} (H100 T0819)" in wake[1]
    assert "ids identical 19 of 19" in wake[1]
    assert wake[3].startswith("bench/cutover.py paper_wake_s: 0.78 s for 27.35 GiB")
    # auto: the level whose wake a run showed working, never the one it showed failing
    minimax = rows["level 2, MiniMax-M2 shape"]
    assert "failed 4 of 4" in minimax[1]
    assert "'functools.partial'" in minimax[1]
    assert "stops (cold switch) where it does not" in minimax[3]
    assert "LEVEL_2_FAILS" in minimax[3]
    mla = rows["level 2, DeepSeek-V3 (MLA) shape"]
    assert "worked 4 of 4" in mla[1]
    assert "ids identical 4 of 4" in mla[1]
    assert "level 2 where it does not" in mla[3]
    qwen = rows["level 2, Qwen3-MoE (same shapes)"]
    assert "woken alone" in qwen[1]
    assert "stops (cold switch)" in qwen[3]
    assert all(rows[name][4].startswith("agrees") for name in (
        "level 2, MiniMax-M2 shape", "level 2, DeepSeek-V3 (MLA) shape",
        "level 2, Qwen3-MoE (same shapes)"))
    green = rows["blue asleep + green at decide()'s share"]
    assert "vLLM accepted 5 of 5" in green[1]
    assert green[4].endswith("passes at the share now in 5 of 5 runs")


def test_the_suite_end_to_end_against_a_stand_in_vllm(tmp_path):
    pytest.importorskip("transformers")
    smi = tmp_path / "smi"
    smi.mkdir()
    env = dict(os.environ, FAKE_SMI_DIR=str(smi), PATH=f"{FAKE}:{os.environ['PATH']}")
    out = tmp_path / "out"
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu" / "suite.py"), "--out", str(out),
         "--models", str(tmp_path / "models"), "--device", "cpu", "--shrink", "16",
         "--phases", "switch", "--server", f"{sys.executable} {FAKE / 'fake_vllm.py'}"],
        env=env, capture_output=True, text=True, timeout=220, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(next(out.glob("gpu-*.json")).read_text())
    assert result["env"]["card"] == "NVIDIA Fake 80GB"
    assert result["errors"] == []
    sw = result["switch"]
    # The stand-in keeps 2,200 MiB asleep, as vLLM 0.26.0 did on the H100.
    assert sw["blue_sleep"]["residual_bytes"] == 2200 * MIB
    assert sw["blue_sleep"]["post_sleep_check"] == "passed"  # green fits beside it
    assert sw["blue_sleep"]["check_agrees_with_gpu"] is True
    # the product's check measured what blue kept (the record keeps it) and weighed green's
    # need at the plan's share against what nvidia-smi showed free
    assert sw["blue_sleep"]["product_residual_per_gpu"] == {"0": 2200 * MIB}
    assert sw["blue_sleep"]["green_share_checked"] == sw["decide"]["share"]
    assert sw["blue_sleep"]["green_room"]["short_bytes"] == 0
    assert sw["return"]["green_residual_bytes"] == 2200 * MIB
    assert sw["green_start"]["vllm_accepted"] is True
    assert sw["green_start"]["share"] == sw["decide"]["share"]
    # the warm return through the product: blue's fingerprint taken by the product before it
    # slept (Cutover._cold_because), checked by its wake (the first real run missed it)
    assert sw["blue_cold_because"] is None
    assert sw["return"]["gate"]["ok"] is True, sw["return"]["gate"]
    assert sw["return"]["gate"]["fingerprint"] == "matched"
    assert sw["return"]["ids_identical"] is True
    assert set(result["level2"]) == {"deepseek_v3_mla", "minimax_m2"}
    # the stand-in's MiniMax fails its level-2 wake as vLLM 0.26.0 did; auto's choice on a
    # short host is level 2 for it (the product before the run's rule), cold for MLA
    assert sw["decide_host_short"]["deepseek_v3_mla"]["mode"] == "cold"
    assert "systemctl show vllm-bench-minimax_m2" in result["product_calls"]
    assert any("| product's decide()" in line for line in done.stdout.splitlines())


# A new user's trial (no GPU): `suite.py --budget-s 200` printed "Torch not compiled with
# CUDA enabled", exited 0 and wrote gpu-gpu-vllm-None-<stamp>.json into the runs' folder,
# after which `table.py --rows` died on a TypeError; `--phases level2` (in the docstring)
# was an AttributeError, also rc 0.
def test_an_unknown_phase_is_refused_naming_the_phases(tmp_path, capsys):
    import suite

    with pytest.raises(SystemExit) as done:
        suite.main(["--phases", "switch,level2", "--out", str(tmp_path), "--device", "cpu"])
    assert done.value.code == 2
    assert "--phases: no phase 'level2' (phases: switch, shapes)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_python_whose_torch_sees_no_gpu_is_refused_before_anything_is_made(
        tmp_path, monkeypatch):
    import types

    import suite

    cuda = types.SimpleNamespace(is_available=lambda: False)
    torch = types.SimpleNamespace(__version__="2.11.0+cpu", cuda=cuda,
                                  version=types.SimpleNamespace(cuda=None))
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(SystemExit, match=r"torch 2.11.0\+cpu in .* sees no CUDA GPU"):
        suite.main(["--out", str(tmp_path / "out"), "--models", str(tmp_path / "models")])
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "models").exists()


def test_a_run_that_measured_nothing_is_left_out_of_the_tables(tmp_path, capsys):
    committed = min((ROOT / "bench" / "output" / "gpu").glob("gpu-*.json"))
    (tmp_path / committed.name).write_text(committed.read_text())
    (tmp_path / "gpu-gpu-vllm-None-20261207T0100.json").write_text(json.dumps({
        "started": "2026-12-07T01:00:00Z", "env": {"card": "gpu", "vllm": None},
        "errors": [{"where": "switch",
                    "error": "AssertionError: Torch not compiled with CUDA enabled"}]}))
    runs = table.committed_runs(tmp_path)
    assert [run["started"] for run in runs] == [json.loads(committed.read_text())["started"]]
    assert ("gpu-gpu-vllm-None-20261207T0100.json left out: it measured nothing "
            "(AssertionError: Torch not compiled with CUDA enabled)") in capsys.readouterr().err
