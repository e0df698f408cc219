# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The fit end to end (issue 33, item 4): from nvidia-smi's memory.total to vLLM's
"Available KV cache memory" and "GPU KV cache size", on every public log in
tests/fixtures/vllm_startup_logs (sources in SOURCE.md there).

Two sets: "held apart" logs were committed (commit 1efd60c) before the overhead model
(plugins/module_utils/fit/fit_overhead.py) and set none of its numbers; "derived from"
logs (commit e2182f1) set them. One more held-apart log (GLM-5.1-FP8, sparse MLA) was
found after the model and committed (08617c9) before the model was run on it. Each row
is asserted within 3 %, or within the wider bound bench/fit.py names for it, with its
reason:

- kimi-k25-rtx-pro-6000-tp8-fp8kv (held apart, MLA), the largest miss, -31 % tokens:
  a published table (rounded, no weights or available line) from a patched nightly
  vLLM on SM120, whose tokens leave about 9 bytes per sampler logit where the
  derived-from logs show 36-43; the model under-promises there.
- qwen3-235b-a22b-fp8-h100-tp4-v0.9.2 (held apart, GQA MoE), +17.5 % tokens: no weights
  line (checkpoint size assumed), an LMCache connector; 1.3 GiB over on an 8.11 GiB KV
  cache (1.6 % of the GPU).
- glm-5.1-fp8-h200-tp8-eager-v0.19.1 (held apart, sparse MLA), -7.5 %: the log implies a
  ~3.2 GiB activation peak where the model takes the sampler's 5.6 GiB (GLM-5.2 logged
  6.31 GiB on 0.26); the model under-promises.

Honest note: the replicated-weights term (model_fit.replicated_weight_bytes) was added
after a first run of the table, which printed the held-apart rows too; it came from
the derived-from Kimi-K2-Thinking row (+5.9 %) and vLLM's deepseek_v2.py, and moved
the held-apart Kimi rows (DCP8: +5.9 -> +2.1 %; K2.5: -18.8 -> -30.9 %).
"""

import importlib.util
import subprocess
import sys

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import fit_overhead as fo
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from repo_paths import FIXTURES, ROOT

BENCH = ROOT / "bench" / "fit.py"
spec = importlib.util.spec_from_file_location("bench_fit", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

GIB = 1024**3
MIB = 1024**2
FIXTURES_BY_NAME = {s["name"]: s for s in bench.fixtures()}
# Every log and its set, as committed (held apart first).
SETS = {
    "glm-5.1-fp8-h200-tp8-eager-v0.19.1": "held_apart",  # added after the model
    "llava-v16-mistral-7b-h100-v0.10.2": "held_apart",
    "qwen3-235b-a22b-fp8-h100-tp4-v0.9.2": "held_apart",
    "kimi-k2-thinking-h200-tp8-dcp8-v0.11": "held_apart",
    "kimi-k25-rtx-pro-6000-tp8-fp8kv": "held_apart",
    # the GPU suite's own runs (issue 43, bench/output/gpu/), added after the model
    "gpu-suite-deepseek-v3-mla-h100-v0.26.0": "held_apart",
    "gpu-suite-deepseek-v3-mla-h200-v0.26.0": "held_apart",
    "gpu-suite-llama-gqa-h100-v0.26.0": "held_apart",
    "gpu-suite-minimax-m2-h100-v0.26.0": "held_apart",
    "gpu-suite-minimax-m2-h200-v0.26.0": "held_apart",
    "gpu-suite-qwen3-moe-m2-h100-v0.26.0": "held_apart",
    "gpu-suite-qwen3-moe-m2-h200-v0.26.0": "held_apart",
    "llama-3.1-8b-a100-v0.31": "derived_from",
    "qwen3-8b-fp8-24gb-v0.10.2": "derived_from",
    "qwen3-next-80b-h200-tp2-v0.10.2": "derived_from",
    "minimax-m25-fp8-rtx-pro-6000-tp4": "derived_from",
    "kimi-k2-thinking-h200-tp8-v0.11": "derived_from",
    "glm-5.2-nvfp4-gb200-tp4-ep-v0.26": "derived_from",
}


def test_every_cited_log_is_here_with_its_set():
    assert {name: s["set"] for name, s in FIXTURES_BY_NAME.items()} == SETS
    source = (FIXTURES / "vllm_startup_logs" / "SOURCE.md").read_text()
    for name in SETS:
        assert f"| {name} |" in source


def test_the_derived_from_set_covers_gqa_mla_and_sparse_mla():
    kinds = {s["kind"].split(" (")[0] for s in FIXTURES_BY_NAME.values()
             if s["set"] == "derived_from"}
    assert {"GQA", "MLA", "sparse MLA"} <= kinds


def test_the_held_apart_set_covers_gqa_mla_and_sparse_mla():
    kinds = {s["kind"].split(" (")[0] for s in FIXTURES_BY_NAME.values()
             if s["set"] == "held_apart"}
    assert kinds == {"GQA", "MLA", "sparse MLA"}


@pytest.mark.parametrize("name", sorted(SETS))
def test_end_to_end_error_within_its_bound(name):
    """Predicted available KV memory and KV tokens against the logged ones: 3 %, or the
    named bound (bench/fit.py BOUNDS) for the two rows that cannot reach it."""
    row = bench.evaluate(FIXTURES_BY_NAME[name])
    bound = {"kimi-k25-rtx-pro-6000-tp8-fp8kv": 0.35,
             "qwen3-235b-a22b-fp8-h100-tp4-v0.9.2": 0.20,
             "glm-5.1-fp8-h200-tp8-eager-v0.19.1": 0.08}.get(name, 0.03)
    assert row["bound"] == bound
    errors = [e for e in (row["available_error"], row["tokens_error"]) if e is not None]
    assert errors, "a row compares at least one figure"
    for error in errors:
        assert abs(error) <= bound, (name, row["set"], error)


# Each row's error, as the table prints it (per cent, two decimals): a change to the
# model that moves any of them shows here, the held-apart ones included.
EXPECTED_TOKENS_ERROR = {
    "glm-5.1-fp8-h200-tp8-eager-v0.19.1": -7.47,
    "llava-v16-mistral-7b-h100-v0.10.2": -0.11,
    "qwen3-235b-a22b-fp8-h100-tp4-v0.9.2": 17.52,
    "kimi-k2-thinking-h200-tp8-dcp8-v0.11": 2.12,
    "kimi-k25-rtx-pro-6000-tp8-fp8kv": -30.90,
    "llama-3.1-8b-a100-v0.31": 0.29,
    "qwen3-8b-fp8-24gb-v0.10.2": -1.07,
    "qwen3-next-80b-h200-tp2-v0.10.2": 0.61,
    "minimax-m25-fp8-rtx-pro-6000-tp4": -1.36,
    "kimi-k2-thinking-h200-tp8-v0.11": 2.13,
}


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED_TOKENS_ERROR.items()))
def test_token_errors_as_tabled(name, expected):
    row = bench.evaluate(FIXTURES_BY_NAME[name])
    assert round(row["tokens_error"] * 100, 2) == expected


def test_sparse_mla_row_compares_available_memory_only():
    """GLM-5.2's config is not held (GLM-5's sizes the overhead); its tokens are not
    compared, its available memory is: 50.62 GiB logged, +0.95 %."""
    row = bench.evaluate(FIXTURES_BY_NAME["glm-5.2-nvfp4-gb200-tp4-ep-v0.26"])
    assert row["logged_tokens"] is None
    assert row["tokens_error"] is None
    assert row["logged_available"] == mf.gib_to_bytes("50.62")
    assert round(row["available_error"] * 100, 2) == 0.95


def test_the_bench_prints_the_table_and_passes_its_check(tmp_path):
    out = tmp_path / "fit.txt"
    proc = subprocess.run([sys.executable, str(BENCH), "--check", "--output", str(out)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_text() == proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["log", "kind", "set"]
    rows = [line for line in lines if line.split() and line.split()[0] in SETS]
    assert len(rows) == len(SETS)
    assert sum("held_apart" in line for line in rows) == 12
    assert lines[-1] == ("18 logs (12 held apart), 18 within their bound (3 % unless stated); "
                         "largest error: kimi-k25-rtx-pro-6000-tp8-fp8kv")
    # Issue 33 (a new user's findings): the sign convention and the held-apart logs' own
    # count (llava -0.12 %, kimi DCP8 +2.13 % within 3 %; GLM-5.1, Kimi-K2.5, Qwen3-235B
    # not), the DCP8 row named as sharing the derived-from TP8 row's source.
    assert lines[-4].startswith("legend: err % = (predicted - logged) / logged: + means the "
                                "fit promises more than vLLM found (the unsafe side")
    assert lines[-3] == (
        "held apart: 9 of 12 within 3 % (8 independent: kimi-k2-thinking-h200-tp8-dcp8-v0.11 "
        "shares kimi-k2-thinking-h200-tp8-v0.11's source: the same recipe section and the "
        "same 46.80 GiB available; only DCP8's token count differs)")
    assert lines[-2] == "derived from: 6 of 6 within 3 %"


def test_the_gpu_suites_own_cold_starts_are_within_2_percent():
    """The GPU suite's cold starts (bench/output/gpu/, vLLM 0.26.0, H100 80GB and H200, TP 1,
    random-weight models of the catalog's shapes), held apart: the fit was never set from
    them. Every row within 2 %; the MLA green (started beside a sleeper at the product's
    share) is the fit's one over-promise, by about 1.1 GiB, the same order as the 1.1 GiB
    its process kept asleep beyond the MoE shapes' residual (3.33 vs 1.77 GiB on the H200)."""
    rows = {name: bench.evaluate(settings) for name, settings in FIXTURES_BY_NAME.items()
            if name.startswith("gpu-suite-")}
    assert len(rows) == 7
    errors = {name: round(row["available_error"] * 100, 2) for name, row in rows.items()}
    assert errors == {
        "gpu-suite-deepseek-v3-mla-h100-v0.26.0": 1.81,
        "gpu-suite-deepseek-v3-mla-h200-v0.26.0": 1.08,
        "gpu-suite-llama-gqa-h100-v0.26.0": -0.24,
        "gpu-suite-minimax-m2-h100-v0.26.0": 0.13,
        "gpu-suite-minimax-m2-h200-v0.26.0": 0.2,
        "gpu-suite-qwen3-moe-m2-h100-v0.26.0": 0.13,
        "gpu-suite-qwen3-moe-m2-h200-v0.26.0": 0.2,
    }
    assert all(row["set"] == "held_apart" for row in rows.values())
    over = {name: round(row["miss_bytes"] / 1024**3, 2) for name, row in rows.items()
            if row["miss_bytes"] > 0.5 * 1024**3}
    assert over == {"gpu-suite-deepseek-v3-mla-h100-v0.26.0": 1.06,
                    "gpu-suite-deepseek-v3-mla-h200-v0.26.0": 1.22}


def test_the_check_fails_when_a_row_is_past_its_bound(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench, "ERROR_BOUND", 0.001)
    monkeypatch.setattr(bench, "BOUNDS", {})
    assert bench.main(["--check", "--output", str(tmp_path / "fit.txt")]) == 1
    assert "PAST BOUND" in capsys.readouterr().out


# --- The terms ------------------------------------------------------------------------------

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072}
A100 = {"count": 1, "memory_total_bytes": 81_920 * MIB, "name": "NVIDIA A100-SXM4-80GB"}


def test_terms_for_llama_on_a100_by_hand():
    """llama-3.1-8b-a100-v0.31, term by term."""
    report = mf.model_fit(LLAMA, serve={"gpu_memory_utilization": 0.92}, gpu=A100,
                          weight_bytes=mf.gib_to_bytes("15.0"), vllm_version="0.31.0")
    terms = report["overhead_terms"]
    # an A100 gets vLLM's small-GPU defaults: 2,048 tokens, 256 sequences
    assert (report["max_num_batched_tokens"], report["max_num_seqs"]) == (2048, 256)
    # 0.92 x 768 MiB (81,920 MiB - 79.25 GiB)
    assert terms["driver_reserve"] == int(0.92 * 768 * MIB) == 740_881_858
    # one GPU: no NCCL buffers, 0.14 GiB
    assert terms["non_torch"] == 150_323_855
    # sampler: 256 rows x 128,256 x 38 B = 1,247,674,368 > forward 2,048 x 2 x (4 x 4,096
    # + 3 x 14,336) = 243,269,632
    assert terms["activation_sampler"] == 1_247_674_368
    assert terms["activation_forward"] == 243_269_632
    assert terms["activation"] == 1_247_674_368
    # vLLM 0.31 counts graphs: 32 layers x (0.23 GiB = 246,960,619 B) // 32
    assert terms["cuda_graphs"] == 32 * 7_717_519 == 246_960_608
    assert report["overhead_bytes_per_gpu"] == terms["total"] == sum(
        terms[k] for k in ("driver_reserve", "non_torch", "activation", "cuda_graphs"))
    assert report["overhead_source"] == (
        "modelled: driver reserve 0.69 GiB, non-torch 0.14 GiB, activation peak (sampler) "
        "1.16 GiB, CUDA graphs 0.23 GiB (fit_overhead.py, from public start-up logs)")


def test_graphs_are_not_counted_eager_or_before_0_21():
    base = {"gpu_memory_utilization": 0.92}
    kwargs = {"gpu": A100, "weight_bytes": 16_000_000_000}
    counted = mf.model_fit(LLAMA, serve=base, vllm_version="0.21.0", **kwargs)
    assert counted["overhead_terms"]["cuda_graphs"] > 0
    assert mf.model_fit(LLAMA, serve=base, vllm_version="0.20.2",
                        **kwargs)["overhead_terms"]["cuda_graphs"] == 0
    eager = mf.model_fit(LLAMA, serve=dict(base, enforce_eager=True), vllm_version="0.32.0",
                         **kwargs)
    assert eager["overhead_terms"]["cuda_graphs"] == 0
    assert eager["kv_budget_bytes_per_gpu"] - counted["kv_budget_bytes_per_gpu"] == 246_960_608
    assert not any("enforce_eager" in w for w in eager["warnings"])


def test_tensor_parallel_adds_the_communication_buffers():
    one = fo.overhead_terms(LLAMA, memory_total_bytes=143_771 * MIB, gpu_memory_utilization=0.9,
                            tp=1, max_num_batched_tokens=8192, max_num_seqs=1024, layers=32)
    two = fo.overhead_terms(LLAMA, memory_total_bytes=143_771 * MIB, gpu_memory_utilization=0.9,
                            tp=2, max_num_batched_tokens=8192, max_num_seqs=1024, layers=32)
    assert two["non_torch"] - one["non_torch"] == int(1.03 * GIB)
    # the MLP's share of the forward pass halves: 8,192 x 2 x 3 x 7,168 less
    assert one["activation_forward"] - two["activation_forward"] == 8192 * 2 * 3 * 7168


@pytest.mark.parametrize(("mib", "name", "expected"), [
    (81_920, "NVIDIA A100-SXM4-80GB", (2048, 256)),   # A100: vLLM's small defaults
    (81_559, "NVIDIA H100 80GB HBM3", (8192, 1024)),  # >= 70 GiB, not A100
    (143_771, "NVIDIA H200", (8192, 1024)),
    (189_471, "NVIDIA GB200", (16384, 1024)),         # >= 160 GiB
    (24_564, "NVIDIA GeForce RTX 4090", (2048, 256)),
    (97_887, "NVIDIA RTX PRO 6000 Blackwell Server Edition", (8192, 1024)),
])
def test_server_batch_defaults_follow_vllm(mib, name, expected):
    """vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args (0.32.0),
    the OpenAI server's row, on the memory torch sees."""
    assert fo.server_batch_defaults(mib * MIB, name) == expected


def test_given_overhead_still_wins_and_the_terms_are_still_reported():
    report = mf.model_fit(LLAMA, serve={}, gpu=A100, weight_bytes=16_000_000_000,
                          overhead_bytes_per_gpu=9 * GIB)
    assert (report["overhead_bytes_per_gpu"], report["overhead_source"]) == (9 * GIB, "given")
    assert report["overhead_terms"]["total"] != 9 * GIB
    table = "\n".join(mf.render_table({"llama": report}))
    assert "  reserve+nontorch" in table
    assert "  activation+graphs" in table


def test_replicated_weights_of_a_sparse_mla_model():
    """GLM-5 (tests/fixtures/models/zai-org--GLM-5-FP8.config.json, no quantization block:
    BF16 projections): q_a + kv_a 78 x 6,144 x (2,048 + 576) x 2 B; the indexer's wq_b
    78 x 2,048 x 64 x 128 x 2 B and wk + weights_proj 78 x 6,144 x (128 + 64) x 2 B; the
    router 75 MoE layers x 6,144 x 256 x 2 B."""
    import json
    glm = json.loads((FIXTURES / "models" / "zai-org--GLM-5-FP8.config.json").read_text())
    expected = (78 * 6144 * 2624 * 2 + 78 * (2048 * 64 * 128 * 2 + 6144 * 192 * 2)
                + 75 * 6144 * 256 * 2)
    assert mf.replicated_weight_bytes(glm) == expected == 5_552_209_920
    # block FP8 keeps the projections in 1 byte; the BF16 indexer key and the router stay 2
    fp8 = {"method": "fp8"}
    assert mf.replicated_weight_bytes(glm, fp8) == (
        78 * 6144 * 2624 + 78 * (2048 * 64 * 128 + 6144 * 192 * 2) + 75 * 6144 * 256 * 2)
    # dense GQA: nothing replicated
    assert mf.replicated_weight_bytes(LLAMA) == 0
