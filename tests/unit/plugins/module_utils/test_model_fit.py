# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""model_fit against the real configs in tests/fixtures/models: the arithmetic.

Every expected number below is worked out by hand in the comment above it;
none is copied from the function's output. These tests pin the overhead at
9 GiB (the old constant) so the sums stay the same; the per-class defaults,
the public logs, the new attention designs and the warnings have their own
test_model_fit_*.py files.

Hardware: 8x RTX PRO 6000 Blackwell. nvidia-smi reports memory.total =
97,887 MiB on the Workstation, Max-Q and Server editions (public nvidia-smi
captures), so one GPU = 97,887 x 1,048,576 = 102,641,958,912 bytes.
"""

import json
from decimal import Decimal

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from repo_paths import FIXTURES

MODELS = FIXTURES / "models"
GIB = 1024**3
RTX_PRO_6000 = {
    "count": 8,
    "memory_total_bytes": 97_887 * 1_048_576,
    "compute_capability": "12.0",
    "interconnect": "pcie",
}
# 0.92 x 102,641,958,912 = 94,430,602,199.04 -> 94,430,602,199 usable per GPU
USABLE = 94_430_602_199
# default overhead: 9 GiB = 9,663,676,416 bytes
OVERHEAD = 9_663_676_416


def load(name):
    return json.loads((MODELS / name).read_text())


@pytest.fixture(scope="module")
def minimax():
    return load("MiniMaxAI--MiniMax-M2.5.config.json")


@pytest.fixture(scope="module")
def kimi_int4():
    return load("moonshotai--Kimi-K2.5.config.json")


@pytest.fixture(scope="module")
def kimi_nvfp4():
    return load("nvidia--Kimi-K2.5-NVFP4.config.json")


def fit(config, serve, weight_bytes, **kwargs):
    kwargs.setdefault("overhead_bytes_per_gpu", OVERHEAD)
    return mf.model_fit(config, serve=serve, gpu=RTX_PRO_6000, weight_bytes=weight_bytes,
                        **kwargs)


MINIMAX_TP4 = {"tensor_parallel_size": 4, "max_model_len": 196608, "gpu_memory_utilization": 0.92}
MINIMAX_TP8_EP = {
    "tensor_parallel_size": "8",  # as the catalog's Jinja may render it
    "enable_expert_parallel": "True",
    "max_model_len": 196608,
    "gpu_memory_utilization": 0.92,
    "kv_cache_dtype": "auto",
}
KIMI_TP8 = {"tensor_parallel_size": 8, "max_model_len": 131072, "gpu_memory_utilization": 0.92}


# --- MiniMax-M2.5 -----------------------------------------------------------


def test_minimax_tp4(minimax):
    report = fit(minimax, MINIMAX_TP4, 230_000_000_000)
    assert report["attention"]["kind"] == "GQA"
    assert "num_key_value_heads=8 < num_attention_heads=48" in report["attention"]["why"]
    # 8 KV heads / TP4 = 2 per GPU, no replication
    assert report["kv_heads_per_gpu"] == 2
    assert report["kv_heads_replicated"] is False
    # 62 layers x 2 heads x 128 head_dim x 2 (K,V) x 2 bytes (bf16, kv auto) = 63,488
    assert report["kv_bytes_per_token_per_gpu"] == 63_488
    assert report["kv_cache_dtype"] == "bfloat16"
    q = report["quantization"]
    assert (q["method"], q["weight_bits"], q["block"]) == ("fp8", 8, [128, 128])
    assert q["scheme"] == "FP8 float8_e4m3fn, block 128x128"
    # the router (62 MoE layers x 3,072 x 256 experts x 2 B = 97,517,568) is on every GPU
    # in full, the rest split: (230,000,000,000 - 97,517,568) / 4 + 97,517,568
    assert report["weights_replicated_bytes_per_gpu"] == 97_517_568
    assert report["weights_bytes_per_gpu"] == 57_573_138_176
    # 94,430,602,199 - 57,573,138,176 - 9,663,676,416 = 27,193,787,607
    assert report["kv_budget_bytes_per_gpu"] == 27_193_787_607
    # page = 2 x 16 x 2 x 128 x 2 = 16,384 B/layer/block
    # 27,193,787,607 // 16,384 = 1,659,777; // 62 = 26,770 blocks x 16 = 428,320 tokens
    assert report["kv_cache_blocks"] == 26_770
    assert report["kv_cache_tokens"] == 428_320
    # one request: ceil(196,608 / 16) = 12,288 blocks; 26,770 // 12,288 = 2
    assert report["max_len_requests_at_once"] == 2
    # 12,288 x 16,384 x 62 = 12,482,248,704; 27,193,787,607 - that = 14,711,538,903
    assert report["margin_bytes_per_gpu"] == 14_711_538_903
    assert report["fits"] is True
    assert report["gpus_needed"] == 4
    assert report["experts_per_gpu"] == 256  # no EP: a 1/4 slice of each of the 256
    assert report["warnings"] == []


def test_minimax_tp8_ep(minimax):
    report = fit(minimax, MINIMAX_TP8_EP, 230_000_000_000)
    assert report["attention"]["kind"] == "GQA"
    # 8 KV heads / TP8 = 1 per GPU: one KV head on each GPU, nothing replicated
    assert report["kv_heads_per_gpu"] == 1
    assert report["kv_heads_replicated"] is False
    # 62 x 1 x 128 x 2 x 2 = 31,744
    assert report["kv_bytes_per_token_per_gpu"] == 31_744
    assert report["enable_expert_parallel"] is True
    # 256 experts / EP 8 = 32 whole experts per GPU
    assert report["experts_per_gpu"] == 32
    # (230,000,000,000 - 97,517,568 router) / 8 + 97,517,568 = 28,835,327,872
    assert report["weights_bytes_per_gpu"] == 28_835_327_872
    # 94,430,602,199 - 28,835,327,872 - 9,663,676,416 = 55,931,597,911
    assert report["kv_budget_bytes_per_gpu"] == 55_931_597_911
    # page 2 x 16 x 1 x 128 x 2 = 8,192; 55,931,597,911 // 8,192 = 6,827,587; // 62 = 110,122
    assert report["kv_cache_tokens"] == 110_122 * 16 == 1_761_952
    # 110,122 // 12,288 = 8
    assert report["max_len_requests_at_once"] == 8
    assert report["fits"] is True
    assert report["warnings"] == []


def test_minimax_tp16_replicates_kv_heads(minimax):
    gpu = dict(RTX_PRO_6000, count=16)
    report = mf.model_fit(minimax, serve={"tensor_parallel_size": 16, "max_model_len": 4096,
                                          "enable_expert_parallel": True},
                          gpu=gpu, weight_bytes=230_000_000_000)
    # 8 KV heads on 16 ranks: each rank holds 1, each head lives on 2 GPUs
    assert (report["kv_heads_per_gpu"], report["kv_replicas"]) == (1, 2)
    assert report["kv_heads_replicated"] is True
    # 48 / 16 = 3 query heads per rank: divisible; with expert parallel the FP8
    # block check does not apply (whole experts per GPU); SM 12.0 without a
    # verified vLLM version and no vllm_version given: no warning at all
    assert report["warnings"] == []


def test_tp_that_does_not_divide_heads_is_refused(minimax):
    gpu = dict(RTX_PRO_6000, count=32)
    report = mf.model_fit(minimax, serve={"tensor_parallel_size": 32, "max_model_len": 4096},
                          gpu=gpu, weight_bytes=230_000_000_000)
    # 48 % 32 = 16: vLLM refuses; 8 KV heads each replicated on 32 / 8 = 4 ranks
    assert report["kv_replicas"] == 4
    assert any("does not divide num_attention_heads 48" in w for w in report["refusals"])
    assert report["fits"] is False
    gpu = dict(RTX_PRO_6000, count=6)
    report = mf.model_fit(minimax, serve={"tensor_parallel_size": 6, "max_model_len": 4096},
                          gpu=gpu, weight_bytes=230_000_000_000)
    # 48 % 6 = 0 but 8 % 6 = 2 and 6 % 8 = 6: KV heads cannot be split
    assert any("neither divides nor is a multiple of the 8 KV heads" in w
               for w in report["refusals"])
    assert report["fits"] is False


# --- Kimi-K2.5 --------------------------------------------------------------


def test_kimi_int4_tp8(kimi_int4):
    report = fit(kimi_int4, KIMI_TP8, 595_000_000_000)
    att = report["attention"]
    # LLM config is under text_config: 61 layers, MLA
    assert (att["kind"], att["num_layers"]) == ("MLA", 61)
    assert (att["kv_lora_rank"], att["qk_rope_head_dim"]) == (512, 64)
    # the latent is held whole on every one of the 8 TP ranks
    assert (report["kv_heads_per_gpu"], report["kv_replicas"]) == (1, 8)
    assert report["kv_heads_replicated"] is True
    # 61 layers x (512 + 64) x 2 bytes (bf16; kv_cache_scheme is null) = 70,272
    assert report["kv_bytes_per_token_per_gpu"] == 70_272
    q = report["quantization"]
    assert q["method"] == "compressed-tensors"
    assert (q["weight_bits"], q["group_size"]) == (4, 32)
    assert q["scheme"] == "compressed-tensors INT4 (group 32, symmetric, pack-quantized)"
    assert q["source"] == "config.json text_config.quantization_config"
    # replicated on every GPU (vLLM deepseek_v2.py): q_a + kv_a projections 61 x 7,168 x
    # (1,536 + 576) x 2 B = 1,846,935,552 and the router 60 x 7,168 x 384 x 2 B =
    # 330,301,440: 2,177,236,992; (595,000,000,000 - that) / 8 + that = 76,280,082,368
    assert report["weights_replicated_bytes_per_gpu"] == 2_177_236_992
    assert report["weights_bytes_per_gpu"] == 76_280_082_368
    # 94,430,602,199 - 76,280,082,368 - 9,663,676,416 = 8,486,843,415
    assert report["kv_budget_bytes_per_gpu"] == 8_486_843_415
    # page 16 x 576 x 2 = 18,432; 8,486,843,415 // 18,432 = 460,440; // 61 = 7,548 blocks
    assert report["kv_cache_tokens"] == 7_548 * 16 == 120_768
    # ceil(131,072 / 16) = 8,192 blocks per request: 7,548 // 8,192 = 0
    assert report["max_len_requests_at_once"] == 0
    # 8,192 x 18,432 x 61 = 9,210,691,584; 8,486,843,415 - that = -723,848,169: with the
    # replicated projections counted, BF16 latent at 131,072 tokens no longer fits at a
    # 9 GiB overhead (the catalog runs it with decode context parallel 8)
    assert report["margin_bytes_per_gpu"] == -723_848_169
    assert report["fits"] is False
    assert len(report["warnings"]) == 1
    assert report["warnings"][0].startswith("MLA with tensor parallel 8 across PCIe-only GPUs: "
                                            "every rank holds the whole latent cache")


def test_kimi_nvfp4_tp8(kimi_nvfp4):
    report = fit(kimi_nvfp4, KIMI_TP8, 540_000_000_000)
    assert report["attention"]["kind"] == "MLA"
    q = report["quantization"]
    assert q["method"] == "modelopt"
    assert (q["weight_format"], q["weight_bits"], q["group_size"]) == ("nvfp4", 4, 16)
    assert q["source"] == "config.json quantization_config"  # top level, not text_config
    # kv_cache_dtype auto + modelopt kv_cache_scheme {num_bits 8, float} -> fp8, 1 byte
    assert (report["kv_cache_dtype"], report["kv_cache_dtype_bytes"]) == ("fp8", 1)
    # 61 x 576 x 1 = 35,136
    assert report["kv_bytes_per_token_per_gpu"] == 35_136
    # (540,000,000,000 - 2,177,236,992 replicated) / 8 + 2,177,236,992 = 69,405,082,368
    assert report["weights_bytes_per_gpu"] == 69_405_082_368
    # 94,430,602,199 - 69,405,082,368 - 9,663,676,416 = 15,361,843,415
    assert report["kv_budget_bytes_per_gpu"] == 15_361_843_415
    # page 16 x 576 x 1 = 9,216; 15,361,843,415 // 9,216 = 1,666,866; // 61 = 27,325
    assert report["kv_cache_tokens"] == 27_325 * 16 == 437_200
    # 27,325 // 8,192 = 3
    assert report["max_len_requests_at_once"] == 3
    assert report["fits"] is True


def test_kimi_nvfp4_on_hopper_and_old_vllm_warns(kimi_nvfp4):
    h200 = {"count": 8, "memory_total_bytes": 143_771 * 1_048_576,
            "compute_capability": "9.0", "interconnect": "nvlink"}
    report = mf.model_fit(kimi_nvfp4, serve=KIMI_TP8, gpu=h200, weight_bytes=540_000_000_000,
                          vllm_version="0.11.0", verified_sm120_vllm="0.12.0")
    warnings = report["warnings"]
    assert any(w.startswith("NVFP4 weights on compute capability 9.0") for w in warnings)
    # NVLink: no all-reduce warning; SM 9.0: the SM120 version does not apply, so
    # nothing is verified for sm90
    assert not any("PCIe" in w for w in warnings)
    assert not any("marks as verified" in w for w in warnings)
    assert ("no vLLM version is marked verified for sm90 in the catalog: vLLM 0.11.0 is "
            "unproven on this GPU architecture") in warnings


def test_old_vllm_on_sm120_warns(kimi_nvfp4):
    report = fit(kimi_nvfp4, KIMI_TP8, 540_000_000_000,
                 vllm_version="0.11.2", verified_sm120_vllm="0.12.0rc1")
    assert any("vLLM 0.11.2 is older than 0.12.0rc1, the version the catalog marks as verified "
               "for sm120" in w for w in report["warnings"])
    report = fit(kimi_nvfp4, KIMI_TP8, 540_000_000_000,
                 vllm_version="0.12.0", verified_sm120_vllm="0.12.0")
    assert not any("marks as verified" in w for w in report["warnings"])


def test_minimax_nvfp4_uses_hf_quant_config():
    config = load("nvidia--MiniMax-M2.5-NVFP4.config.json")
    hq = load("nvidia--MiniMax-M2.5-NVFP4.hf_quant_config.json")
    q = mf.find_quantization(config, hq)
    assert (q["method"], q["weight_format"], q["group_size"]) == ("modelopt", "nvfp4", 16)
    assert q["checkpoint_kv_cache_dtype"] == "fp8"
    assert q["source"].startswith("hf_quant_config.json")


# --- Does not fit -----------------------------------------------------------


def test_kimi_int4_on_four_gpus_does_not_fit(kimi_int4):
    gpu = dict(RTX_PRO_6000, count=4)
    serve = dict(KIMI_TP8, tensor_parallel_size=4)
    report = mf.model_fit(kimi_int4, serve=serve, gpu=gpu, weight_bytes=595_000_000_000,
                          overhead_bytes_per_gpu=OVERHEAD)
    # (595,000,000,000 - 2,177,236,992) / 4 + 2,177,236,992 = 150,382,927,744 > 94,430,602,199
    # budget = 94,430,602,199 - 150,382,927,744 - 9,663,676,416 = -65,616,001,961
    assert report["kv_budget_bytes_per_gpu"] == -65_616_001_961
    assert report["kv_cache_tokens"] == 0
    # short by the budget deficit plus one request (9,210,691,584): 74,826,693,545
    assert report["margin_bytes_per_gpu"] == -74_826_693_545
    assert report["fits"] is False
    # vLLM 0.32's _check_enough_kv_cache_memory refuses a budget <= 0 before anything else
    assert report["kv_refusal"] == (
        "KV cache: max_model_len 131072: no memory is left for the KV cache (-61.11 GiB per "
        'GPU after the weights and the overhead) ("No available '
        'memory for the cache blocks. Try increasing `gpu_memory_utilization`")')
    assert report["verdict"] == "vLLM refuses to start it: " + report["kv_refusal"]


def test_too_few_gpus(minimax):
    gpu = dict(RTX_PRO_6000, count=2)
    report = mf.model_fit(minimax, serve=MINIMAX_TP4, gpu=gpu, weight_bytes=230_000_000_000)
    assert report["fits"] is False
    assert report["verdict"] == "does not fit: needs 4 GPUs, has 2"


def test_expert_count_not_divisible(minimax):
    gpu = dict(RTX_PRO_6000, count=12)
    serve = {"tensor_parallel_size": 2, "data_parallel_size": 6, "enable_expert_parallel": True,
             "max_model_len": 8192}
    report = mf.model_fit(minimax, serve=serve, gpu=gpu, weight_bytes=230_000_000_000)
    assert "256 experts do not split evenly over expert-parallel size 12" in report["warnings"]


# --- vLLM's own accounting --------------------------------------------------
# The public logs are in test_model_fit_calibration.py.


def test_predict_vllm_kv_cache_tokens_single_group():
    # 23.62 GiB = 25,361,781,882 B // 16,384 B per layer-block // 62 layers = 24,967 blocks
    predicted = mf.predict_vllm_kv_cache_tokens(25_361_781_882, 62, 16_384, 16, 196_608)
    assert predicted == {"num_blocks": 24_967, "tokens": 399_472,
                         "blocks_per_max_len_request": 12_288,
                         "max_concurrency": 24_967 / 12_288}


# --- Inputs ------------------------------------------------------------------


def test_weight_bytes_from_index_and_files():
    assert mf.weight_bytes_from_index({"metadata": {"total_size": 1234}, "weight_map": {}}) == 1234
    files = [{"path": "model-00001.safetensors", "size": 10}, {"rfilename": "b.safetensors",
             "size": 5}, {"path": "config.json", "size": 999}]
    assert mf.weight_bytes_from_files(files) == 15
    with pytest.raises(mf.ModelFitError, match=r"metadata\.total_size"):
        mf.weight_bytes_from_index({"weight_map": {}})
    with pytest.raises(mf.ModelFitError, match=r"no \*\.safetensors"):
        mf.weight_bytes_from_files([{"path": "config.json", "size": 3}])


def test_mha_and_head_dim_from_hidden_size():
    att = mf.attention_info({"num_hidden_layers": 2, "num_attention_heads": 4,
                             "hidden_size": 256})
    assert (att["kind"], att["num_kv_heads"], att["head_dim"]) == ("MHA", 4, 64)


def test_bad_inputs_name_what_was_wanted():
    with pytest.raises(mf.ModelFitError, match="num_hidden_layers"):
        mf.attention_info({"model_type": "x"})
    with pytest.raises(mf.ModelFitError, match="kv_cache_dtype must be one of"):
        mf.resolve_kv_cache_dtype("int3", {}, {"method": None})
    with pytest.raises(mf.ModelFitError, match="memory_total_bytes"):
        mf.model_fit({"num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 8,
                      "max_position_embeddings": 64},
                     gpu={"count": 1}, weight_bytes=1)


def test_explicit_fp8_kv_halves_minimax_kv(minimax):
    serve = dict(MINIMAX_TP4, kv_cache_dtype="fp8")
    report = fit(minimax, serve, 230_000_000_000)
    # 62 x 2 x 128 x 2 x 1 = 31,744
    assert report["kv_bytes_per_token_per_gpu"] == 31_744
    assert report["kv_cache_dtype_source"] == "serve option kv_cache_dtype"


def test_version_and_capability_parsing():
    assert mf.parse_version("0.11.1rc2") == (0, 11, 1)
    assert mf.parse_version("v0.9") == (0, 9, 0)
    assert mf.parse_compute_capability("12.0") == (12, 0)
    assert Decimal(mf.gib_to_bytes("1")) == GIB


def test_gpu_from_facts_takes_the_smallest_gpu():
    facts = {"gpus": [{"memory_total_bytes": 200, "compute_capability": "9.0"},
                      {"memory_total_bytes": 100, "compute_capability": "9.0"}],
             "topology": {"interconnect": "nvlink"}}
    assert mf.gpu_from_facts(facts) == {"count": 2, "memory_total_bytes": 100,
                                        "compute_capability": "9.0", "interconnect": "nvlink",
                                        "name": None}


def test_table_lines(minimax, kimi_nvfp4):
    fits = {"kimi_k25_nvfp4": fit(kimi_nvfp4, KIMI_TP8, 540_000_000_000),
            "minimax_m25": fit(minimax, MINIMAX_TP8_EP, 230_000_000_000)}
    lines = mf.render_table(fits)
    header = lines[0]
    assert "kimi_k25_nvfp4" in header
    assert header.index("kimi_k25_nvfp4") < header.index("minimax_m25")
    row = next(line for line in lines if line.startswith("KV bytes/token/GPU"))
    assert "35,136" in row
    assert "31,744" in row
    assert any(line.startswith("kimi_k25_nvfp4: WARNING MLA with tensor parallel 8")
               for line in lines)


def test_table_says_too_few_gpus(kimi_int4):
    gpu = dict(RTX_PRO_6000, count=2)
    lines = mf.render_table({"kimi_k25_int4": mf.model_fit(
        kimi_int4, serve=KIMI_TP8, gpu=gpu, weight_bytes=595_000_000_000,
        overhead_bytes_per_gpu=OVERHEAD)})
    verdict = next(line for line in lines if line.startswith("verdict"))
    assert verdict.endswith("DOES NOT FIT (needs 8 GPUs)")


def test_tp3_on_64_heads_is_refused_before_the_outage():
    """Issue 33: Qwen3-235B-A22B's 64 attention and 4 KV heads at tensor parallel 3. The fit
    used to warn that vLLM refuses it and still say `fits`; the preflight refuses only what
    does not fit, so the deploy stopped the old model and the start failed."""
    qwen = {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 94,
            "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
            "hidden_size": 4096, "max_position_embeddings": 262_144}
    report = mf.model_fit(qwen, serve={"tensor_parallel_size": 3, "max_model_len": 8192},
                          gpu=dict(RTX_PRO_6000, count=8), weight_bytes=235_000_000_000)
    assert report["margin_bytes_per_gpu"] > 0  # memory alone would fit
    assert report["refusals"] == [
        "tensor parallel: tensor_parallel_size 3 does not divide num_attention_heads 64",
        ("tensor parallel: tensor_parallel_size 3 neither divides nor is a multiple of the 4 "
         "KV heads, so they cannot be sharded or replicated evenly")]
    assert report["fits"] is False
    assert report["verdict"] == ("vLLM refuses to start it: " + "; ".join(report["refusals"]))
    lines = mf.render_table({"qwen": report})
    # The verdict cell names the rule, once; the findings give one bullet per refusal.
    assert [line for line in lines if line.startswith("verdict ")] == [
        "verdict                 | REFUSED by vLLM (tensor parallel)"]
    assert [line for line in lines if line.startswith("qwen:   - ")] == [
        f"qwen:   - {r}" for r in report["refusals"]]
    assert "qwen: vLLM refuses to start it:" in lines


def test_max_model_len_beyond_the_models_positions_is_refused(minimax):
    report = mf.model_fit(minimax, serve={"tensor_parallel_size": 4, "enable_expert_parallel": True,
                                          "max_model_len": 1_000_000},
                          gpu=dict(RTX_PRO_6000, count=8), weight_bytes=230_000_000_000)
    assert ("max_model_len: 1000000 exceeds max_position_embeddings 196608 (to allow it, set "
            'env VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1" in the entry, which vLLM warns is unsafe '
            "past the positions the model was trained on)") in report["refusals"]
    assert report["fits"] is False
