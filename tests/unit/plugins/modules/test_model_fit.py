# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The model_fit module: arguments in, exit_json/fail_json out, check mode."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.modules import model_fit as module
from repo_paths import FIXTURES

from unit.module_harness import run_module

GPU = {"count": 8, "memory_total_bytes": 102_641_958_912, "compute_capability": "12.0",
       "interconnect": "pcie"}
# The old constant, so the hand sums below stay as they were.
NINE_GIB = 9 * 1024**3


def minimax():
    return json.loads((FIXTURES / "models" / "MiniMaxAI--MiniMax-M2.5.config.json").read_text())


def kimi():
    return json.loads((FIXTURES / "models" / "moonshotai--Kimi-K2.5.config.json").read_text())


@pytest.mark.parametrize("check_mode", [False, True])
def test_reports_minimax_tp8_ep_unchanged(check_mode):
    result = run_module(module.main, {
        "config": minimax(),
        "serve": {"tensor_parallel_size": 8, "enable_expert_parallel": True,
                  "max_model_len": 196608, "gpu_memory_utilization": 0.92},
        "weight_bytes": 230_000_000_000,
        "gpu": GPU,
        "overhead_bytes_per_gpu": NINE_GIB,
    }, check_mode=check_mode)
    assert result["changed"] is False
    fit = result["fit"]
    # 62 layers x 1 KV head x 128 x 2 x 2 bytes
    assert fit["kv_bytes_per_token_per_gpu"] == 31_744
    # weights (230e9 - 97,517,568 router) / 8 + 97,517,568 = 28,835,327,872
    # (94,430,602,199 - 28,835,327,872 - 9,663,676,416) // 8,192 // 62 = 110,122 blocks
    assert fit["kv_cache_tokens"] == 1_761_952
    assert fit["fits"] is True


def test_weights_from_safetensors_index():
    result = run_module(module.main, {
        "config": minimax(),
        "serve": {"tensor_parallel_size": 4, "max_model_len": 4096},
        "safetensors_index": {"metadata": {"total_size": 228_000_000_000}},
        "gpu": GPU,
    })
    # (228,000,000,000 - 97,517,568 router) / 4 + 97,517,568 (62 x 3,072 x 256 x 2 B,
    # replicated on every GPU)
    assert result["fit"]["weights_bytes_per_gpu"] == 57_073_138_176


def test_predicts_vllm_log():
    result = run_module(module.main, {
        "config": minimax(),
        "serve": {"tensor_parallel_size": 4, "max_model_len": 196608},
        "weight_bytes": 230_000_000_000,
        "gpu": GPU,
        "available_kv_bytes": 25_361_781_882,  # 23.62 GiB
        "vllm_version": "0.16.0",
    })
    # 25,361,781,882 // 16,384 // 62 = 24,967 blocks x 16
    assert result["fit"]["predicted_vllm_kv_cache_tokens"] == 399_472


def test_fail_on_no_fit_names_wanted_and_found():
    result = run_module(module.main, {
        "config": kimi(),
        "serve": {"tensor_parallel_size": 4, "max_model_len": 131072,
                  "gpu_memory_utilization": 0.92},
        "weight_bytes": 595_000_000_000,
        "gpu": dict(GPU, count=4),
        "overhead_bytes_per_gpu": NINE_GIB,
        "fail_on_no_fit": True,
    })
    assert result["failed"] is True
    # one request: 8,192 blocks x 18,432 B x 61 layers = 9,210,691,584 bytes per GPU
    assert "9210691584 KV bytes per GPU" in result["msg"]
    # 94,430,602,199 - 150,382,927,744 weights (595e9 split over 4, 2,177,236,992 of
    # replicated MLA projections and router on each) - 9,663,676,416
    assert "KV budget of -65616001961 bytes per GPU" in result["msg"]
    assert result["fit"]["fits"] is False


def test_bad_config_fails_cleanly():
    result = run_module(module.main, {"config": {"model_type": "x"}, "weight_bytes": 1, "gpu": GPU})
    assert result["failed"] is True
    assert result["msg"].startswith("Cannot evaluate the model's fit: config.json needs "
                                    "num_hidden_layers")


def test_weight_source_is_required():
    result = run_module(module.main, {"config": minimax(), "gpu": GPU})
    assert result["failed"] is True
    assert "weight_bytes" in result["msg"]


def test_profile_versions_and_revision_reach_the_report():
    result = run_module(module.main, {
        "config": kimi(),
        "serve": {"tensor_parallel_size": 8, "decode_context_parallel_size": 8,
                  "kv_cache_dtype": "fp8", "max_model_len": 131072,
                  "gpu_memory_utilization": 0.92},
        "weight_bytes": 595_000_000_000,
        "gpu": GPU,
        "vllm_version": "0.33.0",
        "verified_vllm": "0.19.1",
        "min_vllm": "0.19.1",
        "profile": "sm120",
        "revision": "main",
    })
    fit = result["fit"]
    assert result["changed"] is False
    assert fit["profile"] == "sm120"
    assert fit["decode_context_parallel_size"] == 8
    # no overhead given: the MLA class default applies
    assert fit["overhead_class"] == "mla"
    assert any(w.startswith("vLLM 0.33.0 is newer than 0.19.1, the version the catalog marks "
                            "as verified for sm120") for w in fit["warnings"])
    assert any(w.startswith("revision 'main' is not pinned") for w in fit["warnings"])
    assert not any("older than 0.19.1, the minimum" in w for w in fit["warnings"])


def test_unsizable_architecture_fails_with_the_reason():
    config = json.loads((FIXTURES / "models" / "nvidia--DeepSeek-V4-Flash-NVFP4.config.json")
                        .read_text())
    result = run_module(module.main, {"config": config, "weight_bytes": 1, "gpu": GPU})
    assert result["failed"] is True
    assert result["msg"].startswith("Cannot evaluate the model's fit: cannot size this "
                                    "architecture: DeepseekV4ForCausalLM has DeepSeek-V4 "
                                    "compressed sparse attention")
