# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 33, item 3: what vLLM 0.32 refuses to start is a refusal of the fit, naming the rule
and the numbers: max_model_len against the KV cache one request needs (vLLM's start-up
check, vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory), a quantization the
GPUs' architecture cannot run (vllm/config/vllm.py line 900 against each quantization
config's get_min_capability()) and an uneven expert split where vLLM refuses it (EPLB,
vllm/model_executor/layers/fused_moe/layer.py line 262); elsewhere that split warns."""

import json
import re

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from repo_paths import FIXTURES

MODELS = FIXTURES / "models"
VLLM_SOURCE = FIXTURES / "vllm_source" / "quantization-min-capability-0.32.0.txt"
RTX_PRO_6000 = {"count": 8, "memory_total_bytes": 97_887 * 1_048_576,
                "compute_capability": "12.0", "interconnect": "pcie"}
MINIMAX_TP4 = {"tensor_parallel_size": 4, "max_model_len": 196_608,
               "gpu_memory_utilization": 0.92}


def config(name):
    return json.loads((MODELS / name).read_text())


@pytest.fixture(scope="module")
def minimax():
    return config("MiniMaxAI--MiniMax-M2.5.config.json")


# --- max_model_len against the KV cache for one request ------------------------------------

# usable 94,430,602,199 B (0.92 x 97,887 MiB) - weights 57,573,138,176 per GPU (230 GB / 4,
# plus 3/4 of the MoE routers, which every rank holds whole: 73,138,176 B) - this overhead = a
# KV budget of exactly 8,000,000,000 B per GPU
OVERHEAD_FOR_8E9 = 28_857_464_023


def test_max_model_len_beyond_the_kv_cache_says_it_as_vllm_does(minimax):
    report = mf.model_fit(minimax, serve=MINIMAX_TP4, gpu=RTX_PRO_6000,
                          weight_bytes=230_000_000_000, overhead_bytes_per_gpu=OVERHEAD_FOR_8E9)
    assert report["kv_budget_bytes_per_gpu"] == 8_000_000_000
    # one request: 196,608 / 16 = 12,288 blocks x 62 layers x 16,384 B = 12,482,248,704 B
    # (11.625 GiB, vLLM's round(., 2) prints 11.62); 8e9 B = 7.45 GiB. vLLM's estimate
    # (binary search of estimate_max_model_len): 8e9 // 1,015,808 B per block = 7,875
    # blocks = 126,000 tokens.
    assert report["kv_refusal"] == (
        "KV cache: max_model_len 196608 against the KV cache for one request: "
        '"To serve at least one '
        "request with the model's max seq len (196608), 11.62 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (7.45 GiB). Based on the available memory, "
        'the estimated maximum model length is 126000." (4.17 GiB, 4482248704 bytes, per GPU '
        "short)")
    assert report["refusals"] == [report["kv_refusal"]]
    assert report["fits"] is False
    # The estimate is the longest length that fits: it fits, one token more does not.
    at = mf.model_fit(minimax, serve=dict(MINIMAX_TP4, max_model_len=126_000), gpu=RTX_PRO_6000,
                      weight_bytes=230_000_000_000, overhead_bytes_per_gpu=OVERHEAD_FOR_8E9)
    assert (at["fits"], at["kv_refusal"]) == (True, None)
    above = mf.model_fit(minimax, serve=dict(MINIMAX_TP4, max_model_len=126_001),
                         gpu=RTX_PRO_6000, weight_bytes=230_000_000_000,
                         overhead_bytes_per_gpu=OVERHEAD_FOR_8E9)
    assert above["kv_refusal"].startswith(
        "KV cache: max_model_len 126001 against the KV cache")
    # The plan's table keeps telling memory from layout.
    assert "DOES NOT FIT (-4.17 GiB/GPU)" in "\n".join(mf.render_table({"m": report}))


def test_estimate_max_model_len_is_vllms_binary_search():
    def needed(length):
        return -(-length // 16) * 1000  # 1,000 B per 16-token block
    assert mf.estimate_max_model_len(5_000, 1_000_000, needed) == 80
    assert mf.estimate_max_model_len(999, 1_000_000, needed) == 0
    assert mf.estimate_max_model_len(10**9, 4096, needed) == 4096


# --- a quantization the GPUs' architecture cannot run --------------------------------------


def _vllm_table():
    """{method: (min capability, class, file:line)} from the vLLM 0.32.0 excerpt."""
    text = VLLM_SOURCE.read_text()
    mins = {m[2]: (int(m[3]), m[2], f"{m[0]}:{m[1]}") for m in re.findall(
        r"^(\S+?):(\d+) (\w+)\.get_min_capability\(\) -> (\d+)$", text, re.MULTILINE)}
    methods = dict(re.findall(r"method_to_config ([\w-]+) -> (\w+)$", text, re.MULTILINE))
    return {method: mins[cls] for method, cls in methods.items() if cls in mins}


def test_the_capability_table_is_vllm_0_32s():
    """Every method model_fit maps to is in vLLM 0.32.0's method_to_config with the minimum
    its config class returns, at the cited file and line (tests/fixtures/vllm_source)."""
    vllm = _vllm_table()
    assert set(mf.QUANT_MIN_CAPABILITY) <= set(vllm)
    assert {method: mf.QUANT_MIN_CAPABILITY[method] for method in mf.QUANT_MIN_CAPABILITY} == {
        method: vllm[method] for method in mf.QUANT_MIN_CAPABILITY}
    assert mf.QUANT_MIN_CAPABILITY["modelopt_fp4"] == (
        75, "ModelOptNvFp4Config", "model_executor/layers/quantization/modelopt.py:768")


@pytest.mark.parametrize(("name", "hq", "method", "need", "below", "at"), [
    ("MiniMaxAI--MiniMax-M2.5.config.json", None, "fp8", 75, "7.0", "7.5"),
    ("nvidia--Kimi-K2.5-NVFP4.config.json", None, "modelopt_fp4", 75, "7.0", "7.5"),
    ("nvidia--MiniMax-M2.5-NVFP4.config.json", "nvidia--MiniMax-M2.5-NVFP4.hf_quant_config.json",
     "modelopt_fp4", 75, "7.0", "7.5"),
    ("moonshotai--Kimi-K2.5.config.json", None, "compressed-tensors", 70, "6.1", "7.0"),
])
def test_a_quantization_below_its_minimum_capability_is_refused(
        name, hq, method, need, below, at):
    cfg = config(name)
    hq_cfg = config(hq) if hq else None
    # expert parallel: MiniMax's FP8 blocks refuse pure TP8 (a rule of its own)
    serve = {"tensor_parallel_size": 8, "max_model_len": 4096, "enable_expert_parallel": True}
    big = {"count": 8, "memory_total_bytes": 200 * 1024**3, "interconnect": "nvlink"}
    refused = mf.model_fit(cfg, serve=serve, gpu=dict(big, compute_capability=below),
                           weight_bytes=10**9, hf_quant_config=hq_cfg)
    have = int(below.replace(".", ""))
    quant = refused["quantization"]
    assert refused["refusals"] == [
        (f"quantization: {method} ({quant['scheme']}) needs compute capability "
         f"{need // 10}.{need % 10} or newer ({mf.QUANT_MIN_CAPABILITY[method][1]}"
         f".get_min_capability() = {need}, vLLM 0.32 {mf.QUANT_MIN_CAPABILITY[method][2]}); "
         f'the GPUs are {below} ({have}) ("The quantization method {method} '
         f"is not supported for the current GPU. Minimum capability: {need}. Current "
         f'capability: {have}.")')]
    assert refused["fits"] is False
    passed = mf.model_fit(cfg, serve=serve, gpu=dict(big, compute_capability=at),
                          weight_bytes=10**9, hf_quant_config=hq_cfg)
    assert passed["refusals"] == []


def test_mxfp4_needs_ampere(minimax):
    """gpt-oss's MXFP4 (Mxfp4Config.get_min_capability() = 80): a T4 (7.5) is refused."""
    cfg = dict(minimax, quantization_config={"quant_method": "mxfp4"})
    serve = {"tensor_parallel_size": 8, "max_model_len": 4096}
    gpu = dict(RTX_PRO_6000, compute_capability="7.5")
    report = mf.model_fit(cfg, serve=serve, gpu=gpu, weight_bytes=10**9)
    assert [r[:60] for r in report["refusals"]] == [
        "quantization: mxfp4 (MXFP4 (e2m1, group 32)) needs compute c"]
    assert "Minimum capability: 80. Current capability: 75." in report["refusals"][0]


# --- an uneven expert split: refused with EPLB only -----------------------------------------

# MiniMax-M2.5: 256 experts. TP2 x DP3 = 6 expert-parallel ranks: 256 % 6 = 4.
EP6 = {"tensor_parallel_size": 2, "data_parallel_size": 3, "enable_expert_parallel": True,
       "max_model_len": 8192}


def test_an_uneven_split_warns_without_eplb(minimax):
    report = mf.model_fit(minimax, serve=EP6, gpu=RTX_PRO_6000, weight_bytes=10**9)
    assert "256 experts do not split evenly over expert-parallel size 6" in report["warnings"]
    assert report["refusals"] == []
    assert report["fits"] is True


def test_an_uneven_split_with_eplb_is_refused(minimax):
    report = mf.model_fit(minimax, serve=dict(EP6, enable_eplb=True), gpu=RTX_PRO_6000,
                          weight_bytes=10**9)
    assert report["refusals"] == [
        ("EPLB: enable_eplb with 256 experts (256 + 0 redundant) over 6 expert-parallel "
         'ranks: 256 % 6 = 4, an uneven split ("EPLB currently only supports '
         'even distribution of experts across ranks", model_executor/layers/fused_moe/layer.py)')]
    assert report["fits"] is False
    assert not any("do not split evenly" in w for w in report["warnings"])


def test_redundant_experts_can_even_the_split(minimax):
    # 256 + 2 redundant = 258 = 6 x 43 (determine_expert_counts adds them)
    serve = dict(EP6, enable_eplb=True, eplb_config={"num_redundant_experts": 2})
    assert mf.model_fit(minimax, serve=serve, gpu=RTX_PRO_6000,
                        weight_bytes=10**9)["refusals"] == []
    as_json = dict(serve, eplb_config='{"num_redundant_experts": 2}')
    assert mf.model_fit(minimax, serve=as_json, gpu=RTX_PRO_6000,
                        weight_bytes=10**9)["refusals"] == []


@pytest.mark.parametrize(("serve", "refusal"), [
    ({"tensor_parallel_size": 4, "enable_eplb": True, "max_model_len": 8192},
     ('EPLB: enable_eplb without enable_expert_parallel ("enable_expert_parallel '
     'must be True to use EPLB", config/parallel.py)')),
    ({"tensor_parallel_size": 4, "enable_expert_parallel": True, "max_model_len": 8192,
      "eplb_config": {"num_redundant_experts": 4}},
     ("EPLB: eplb_config.num_redundant_experts 4 without enable_eplb (redundant experts need "
     "EPLB on, config/parallel.py)")),
])
def test_eplb_settings_vllm_refuses(minimax, serve, refusal):
    report = mf.model_fit(minimax, serve=serve, gpu=RTX_PRO_6000, weight_bytes=10**9)
    assert report["refusals"] == [refusal]


@pytest.mark.parametrize("allow", ["1", "true", "True "])
def test_vllm_allow_long_max_model_len_in_the_entrys_env_is_a_warning(minimax, allow):
    """Issue 33, a new user's finding: vLLM 0.32 lets max_model_len past the derived
    maximum when VLLM_ALLOW_LONG_MAX_MODEL_LEN is 1 or true (vllm/envs.py: .strip().lower()
    in ("1", "true")) and then warns (vllm/config/model.py, _get_and_verify_max_len:
    logger.warning_once with this text); the fit refused it whatever the entry's env."""
    serve = dict(MINIMAX_TP4, max_model_len=262_144)
    refused = mf.model_fit(minimax, serve=serve, gpu=RTX_PRO_6000, weight_bytes=10**9)
    assert refused["refusals"][0] == (
        "max_model_len: 262144 exceeds max_position_embeddings 196608 (to allow it, set env "
        'VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1" in the entry, which vLLM warns is unsafe past the '
        "positions the model was trained on)")
    allowed = mf.model_fit(minimax, serve=serve, gpu=RTX_PRO_6000, weight_bytes=10**9,
                           env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": allow})
    assert not any(r.startswith("max_model_len:") for r in allowed["refusals"])
    assert allowed["max_model_len"] == 262_144
    assert [w for w in allowed["warnings"] if "max_position_embeddings" in w] == [(
        f"max_model_len 262144 exceeds max_position_embeddings 196608, allowed by the entry's "
        f'env VLLM_ALLOW_LONG_MAX_MODEL_LEN={allow}; vLLM warns: "VLLM_ALLOW_LONG_MAX_MODEL_LEN '
        "must be used with extreme caution. If the model uses relative position encoding "
        "(RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses "
        "absolute position encoding, positions exceeding derived_max_model_len will cause a "
        'CUDA array out-of-bounds error."')]
    # "0" (vLLM's default) keeps the refusal.
    kept = mf.model_fit(minimax, serve=serve, gpu=RTX_PRO_6000, weight_bytes=10**9,
                        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"})
    assert kept["refusals"][0] == refused["refusals"][0]


@pytest.mark.parametrize(("value", "low"), [
    (-135, 1), (0, 1), (float("nan"), 1), (float("inf"), 1), (1.5, 1), (True, 1), ("x", 1),
    ([], 1), (2**31, 1)])
def test_a_hostile_config_number_cannot_be_sized_and_is_named(value, low):
    """Issue 45 case 6: a config.json number the fit reads that is not a whole number in range
    was "fits: -135 requests" or a traceback; now "cannot size", naming the field."""
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": value,
              "num_attention_heads": 32, "hidden_size": 4096, "max_position_embeddings": 8192}
    report = mf.size_model(config, serve={}, gpu={"count": 1, "memory_total_bytes": 80 * 2**30,
                                                  "compute_capability": "9.0"},
                           repo_id="org/m", revision="r")
    assert report["sized"] is False
    assert report["unsized_why"] == (
        f"config.json's num_hidden_layers is {value!r}: wanted a whole number from {low} to "
        "2147483647")


def test_more_heads_than_hidden_size_without_head_dim_cannot_be_sized():
    """Each number in range, yet hidden_size // num_attention_heads is 0: a ZeroDivisionError
    out of the fit (kv_capacity) before; now "cannot size" naming both fields."""
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32,
              "num_attention_heads": 8192, "hidden_size": 4096, "max_position_embeddings": 8192}
    report = mf.size_model(config, serve={}, gpu={"count": 1, "memory_total_bytes": 80 * 2**30,
                                                  "compute_capability": "9.0"},
                           repo_id="org/m", revision="r")
    assert report["sized"] is False
    assert report["unsized_why"] == ("config.json has no head_dim, and hidden_size 4096 over "
                                     "num_attention_heads 8192 leaves none")


def test_config_numbers_spelt_as_floats_or_digits_still_size():
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32.0,
              "num_attention_heads": "32", "hidden_size": 4096, "max_position_embeddings": 8192,
              "first_k_dense_replace": 0}
    mf.check_config_numbers(config)  # no refusal
