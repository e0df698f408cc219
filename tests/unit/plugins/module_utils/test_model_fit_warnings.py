# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""model_fit warnings (versions, SM12x traps, options known to fail, pinning) and the
boundaries of the verdict. Expected numbers are worked out by hand in the comments."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from repo_paths import FIXTURES

MODELS = FIXTURES / "models"
NINE_GIB = 9 * 1024**3
RTX_PRO_6000 = {"count": 8, "memory_total_bytes": 97_887 * 1_048_576,
                "compute_capability": "12.0", "interconnect": "pcie"}
B200 = {"count": 8, "memory_total_bytes": 183_359 * 1_048_576, "compute_capability": "10.0",
        "interconnect": "nvlink"}
MINIMAX_TP4 = {"tensor_parallel_size": 4, "max_model_len": 196_608,
               "gpu_memory_utilization": 0.92}


def config(name):
    return json.loads((MODELS / name).read_text())


@pytest.fixture(scope="module")
def minimax():
    return config("MiniMaxAI--MiniMax-M2.5.config.json")


def fit(cfg, serve, gpu=None, **kwargs):
    gpu = RTX_PRO_6000 if gpu is None else gpu
    kwargs.setdefault("overhead_bytes_per_gpu", NINE_GIB)
    kwargs.setdefault("weight_bytes", 230_000_000_000)
    return mf.model_fit(cfg, serve=serve, gpu=gpu, **kwargs)


def version_warnings(report):
    return [w for w in report["warnings"] if "vLLM" in w]


# --- Versions ------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "expected"), [
    ("0.33.0", [("vLLM 0.33.0 is newer than 0.20.2, the version the catalog marks as verified "
                "for sm120: releases on both sides have regressed sm120 kernels, so verify "
                 "this one before relying on it")]),
    ("0.20.1", [("vLLM 0.20.1 is older than 0.20.2, the version the catalog marks as verified "
                "for sm120: releases on both sides have regressed sm120 kernels, so verify "
                 "this one before relying on it")]),
    ("0.20.2", []),
])
def test_any_version_but_the_verified_one_warns(minimax, version, expected):
    report = fit(minimax, MINIMAX_TP4, vllm_version=version, verified_vllm="0.20.2")
    assert version_warnings(report) == expected


def test_no_verified_version_and_the_minimum(minimax):
    report = fit(minimax, MINIMAX_TP4, vllm_version="0.19.1", min_vllm="0.20.2")
    assert version_warnings(report) == [
        ("vLLM 0.19.1 is older than 0.20.2, the minimum the catalog states for this model "
         "(vllm-project/recipes min_vllm_version)"),
        ("no vLLM version is marked verified for sm120 in the catalog: vLLM 0.19.1 is unproven "
         "on this GPU architecture"),
    ]


def test_the_verified_version_is_per_architecture(minimax):
    # verified_sm120_vllm only speaks for SM 12.x; on SM 10.0 it does not apply
    report = fit(minimax, MINIMAX_TP4, gpu=B200, vllm_version="0.20.2",
                 verified_sm120_vllm="0.20.2")
    assert version_warnings(report) == [
        ("no vLLM version is marked verified for sm100 in the catalog: vLLM 0.20.2 is unproven "
         "on this GPU architecture")]


# --- NVFP4 MoE with expert parallel on SM12x ----------------------------------------------


@pytest.mark.parametrize(("gpu", "ep", "warned"), [
    (RTX_PRO_6000, True, True),
    (RTX_PRO_6000, False, False),
    (B200, True, False),
])
def test_nvfp4_moe_with_expert_parallel_on_sm12x(gpu, ep, warned):
    cfg = config("nvidia--MiniMax-M2.5-NVFP4.config.json")
    hq = config("nvidia--MiniMax-M2.5-NVFP4.hf_quant_config.json")
    report = fit(cfg, {"tensor_parallel_size": 8, "enable_expert_parallel": ep,
                       "max_model_len": 8192}, gpu=gpu, hf_quant_config=hq,
                 weight_bytes=130_000_000_000)
    found = [w for w in report["warnings"] if w.startswith("NVFP4 MoE with expert parallel")]
    assert bool(found) is warned
    if warned:
        assert "(vllm-project/vllm issue 32826)" in found[0]


# --- Options known to fail -----------------------------------------------------------------


@pytest.mark.parametrize(("serve", "warned"), [
    ({"tensor_parallel_size": 8}, True),
    ({"tensor_parallel_size": 8, "enable_expert_parallel": True}, False),
    ({"tensor_parallel_size": 4}, False),
])
def test_pure_tp8_minimax_fp8_is_known_to_fail(minimax, serve, warned):
    report = fit(minimax, dict(serve, max_model_len=8192))
    found = [w for w in report["refusals"] if w.startswith("FP8 block split: known to fail")]
    assert report["fits"] is not warned
    assert bool(found) is warned
    if warned:
        # intermediate_size 1536 / 8 = 192, and 192 % 128 = 64
        assert found == [
            ("FP8 block split: known to fail: FP8 block 128 weights with tensor parallel 8 and "
             "no expert parallel: the expert width 1536 / 8 = 192 is not a multiple of 128, so "
             "the weights cannot be split (vllm-project/recipes MiniMax-M2.5: pure TP8 fails); "
             "enable expert parallel or use a smaller TP")]


# --- Pinning -------------------------------------------------------------------------------


@pytest.mark.parametrize(("revision", "warned"), [
    ("main", True),
    ("v1.0", True),
    ("f710177d938eff80b684d42c5aa84b382612f21f", False),
    (None, False),
])
def test_unpinned_revision_warns(minimax, revision, warned):
    report = fit(minimax, MINIMAX_TP4, revision=revision)
    assert any(w.startswith(f"revision {revision!r} is not pinned") for w in
               report["warnings"]) is warned


# --- Boundaries ----------------------------------------------------------------------------

# one 196,608-token request: 12,288 blocks x (62 x 16,384 = 1,015,808 B) = 12,482,248,704 B;
# usable 94,430,602,199 - weights 57,573,138,176 (230e9 split over 4, the 97,517,568-byte
# router on each GPU in full) - that = 24,375,215,319 B of overhead leaves exactly one
# request's worth of KV cache
EXACT_OVERHEAD = 24_375_215_319


def test_kv_budget_equal_to_one_request_fits(minimax):
    report = fit(minimax, MINIMAX_TP4, overhead_bytes_per_gpu=EXACT_OVERHEAD)
    assert report["kv_budget_bytes_per_gpu"] == 12_482_248_704
    assert report["margin_bytes_per_gpu"] == 0
    assert report["fits"] is True
    assert report["max_len_requests_at_once"] == 1
    assert report["verdict"] == ("fits: 1 max-length request(s) at once, 0.00 GiB (0 bytes) "
                                 "per GPU to spare after one")
    # Less to spare than the fit's known error (2 % of memory.total = 0.02 x 102,641,958,912 B =
    # 2,052,839,178 B = 1.91 GiB; bench/fit.py's largest over-promise is 1.6 %).
    assert [w for w in report["warnings"] if w.startswith("thin margin")] == [(
        "thin margin: 0.00 GiB per GPU to spare after one max-length request is less than the "
        "fit's known error (2 % of memory.total, 1.91 GiB: bench/fit.py's largest "
        "over-promise is 1.6 %), so the start may still fail vLLM's KV cache check; leave at "
        "least 1.91 GiB per GPU (a lower max_model_len or a higher gpu_memory_utilization)")]


def test_a_margin_of_the_fits_error_is_not_thin(minimax):
    """At exactly 2 % of memory.total to spare (2,052,839,178 B) no warning; a byte less
    warns."""
    at = fit(minimax, MINIMAX_TP4, overhead_bytes_per_gpu=EXACT_OVERHEAD - 2_052_839_178)
    assert at["margin_bytes_per_gpu"] == 2_052_839_178
    assert not any(w.startswith("thin margin") for w in at["warnings"])
    below = fit(minimax, MINIMAX_TP4, overhead_bytes_per_gpu=EXACT_OVERHEAD - 2_052_839_177)
    assert any(w.startswith("thin margin: 1.91 GiB per GPU") for w in below["warnings"])


def test_one_byte_short_does_not_fit(minimax):
    report = fit(minimax, MINIMAX_TP4, overhead_bytes_per_gpu=EXACT_OVERHEAD + 1)
    assert report["margin_bytes_per_gpu"] == -1
    assert report["fits"] is False
    assert report["max_len_requests_at_once"] == 0
    # vLLM's own start-up check (v1/core/kv_cache_utils.py _check_enough_kv_cache_memory) in
    # its words; its estimate: one 16-token block less, 196,592 tokens (12,287 blocks)
    assert report["refusals"] == [report["kv_refusal"]]
    assert report["verdict"] == (
        "vLLM refuses to start it: KV cache: max_model_len 196608 against the KV cache for one "
        "request: "
        "\"To serve at least one request with the model's max seq len (196608), 11.62 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (11.62 GiB). Based "
        'on the available memory, the estimated maximum model length is 196592." (0.00 GiB, 1 '
        "bytes, per GPU short)")


def test_gpus_equal_to_need_is_enough(minimax):
    serve = dict(MINIMAX_TP4, data_parallel_size=2, enable_expert_parallel=True)
    assert fit(minimax, serve)["fits"] is True  # TP4 x DP2 = 8 GPUs of 8
    short = fit(minimax, serve, gpu=dict(RTX_PRO_6000, count=7))
    assert short["fits"] is False
    assert short["verdict"] == "does not fit: needs 8 GPUs, has 7"


def test_max_concurrency_counts_data_parallel_replicas(minimax):
    one = fit(minimax, MINIMAX_TP4)
    two = fit(minimax, dict(MINIMAX_TP4, data_parallel_size=2, enable_expert_parallel=True))
    # budget per GPU 94,430,602,199 - 57,573,138,176 - 9,663,676,416 = 27,193,787,607 B
    # // 1,015,808 = 26,770 blocks per replica; 26,770 // 12,288 = 2 requests, 2.18x
    assert (one["kv_cache_blocks"], two["kv_cache_blocks"]) == (26_770, 26_770)
    assert (one["max_len_requests_at_once"], one["max_concurrency"]) == (2, 2.18)
    # two replicas, each with its own KV cache: 4 requests, 26,770 / 12,288 x 2 = 4.36x
    assert (two["max_len_requests_at_once"], two["max_concurrency"]) == (4, 4.36)


def test_allowed_media_domains_changes_no_memory(minimax):
    """The catalog's Kimi entries set serve.allowed_media_domains
    (roles/vllm_model/defaults/main/catalog.yml); vLLM checks each media URL against it at
    request time (vllm/multimodal/media/connector.py), so it is no "not understood" noise."""
    report = fit(minimax, dict(MINIMAX_TP4, allowed_media_domains=["media.invalid"]))
    assert report["not_understood"] == []
    assert not any("allowed_media_domains" in w for w in report["warnings"])
