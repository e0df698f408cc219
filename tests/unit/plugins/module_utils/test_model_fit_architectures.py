# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""model_fit on the attention designs of issue 11: decode context parallel, sparse MLA,
hybrid (sliding window and linear attention), refusal of unknown designs, weight formats,
MTP draft layers and serve options it does not understand.

Real configs come from tests/fixtures/models (sources in its SOURCE.md); the few synthetic
configs are small edge cases and say so. Expected numbers are worked out by hand in the
comments.
"""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from repo_paths import FIXTURES

MODELS = FIXTURES / "models"
GIB = 1024**3
NINE_GIB = 9 * GIB
RTX_PRO_6000 = {"count": 8, "memory_total_bytes": 97_887 * 1_048_576,
                "compute_capability": "12.0", "interconnect": "pcie"}
H200 = {"count": 8, "memory_total_bytes": 143_771 * 1_048_576, "compute_capability": "9.0",
        "interconnect": "nvlink"}
# 0.92 x 102,641,958,912 = 94,430,602,199 usable bytes per RTX PRO 6000


def config(name):
    return json.loads((MODELS / name).read_text())


def fit(cfg, serve, weight_bytes, gpu=None, **kwargs):
    gpu = RTX_PRO_6000 if gpu is None else gpu
    kwargs.setdefault("overhead_bytes_per_gpu", NINE_GIB)
    return mf.model_fit(cfg, serve=serve, gpu=gpu, weight_bytes=weight_bytes, **kwargs)


# --- 1. Decode context parallel ------------------------------------------------------------

KIMI_FP8_TP8 = {"tensor_parallel_size": 8, "kv_cache_dtype": "fp8", "max_model_len": 131_072,
                "gpu_memory_utilization": 0.92}


def test_dcp8_splits_the_kimi_latent_instead_of_replicating_it():
    kimi = config("moonshotai--Kimi-K2.5.config.json")
    one = fit(kimi, KIMI_FP8_TP8, 595_000_000_000, vllm_version="0.19.1")
    eight = fit(kimi, dict(KIMI_FP8_TP8, decode_context_parallel_size=8), 595_000_000_000,
                vllm_version="0.19.1")
    # weights per GPU: (595e9 - 2,177,236,992 replicated MLA projections and router) / 8
    # + 2,177,236,992 = 76,280,082,368
    # budget 94,430,602,199 - 76,280,082,368 - 9,663,676,416 = 8,486,843,415 B
    # FP8 latent block of 61 layers = 61 x 16 x 576 = 562,176 B -> 15,096 blocks either way
    assert one["kv_cache_blocks"] == eight["kv_cache_blocks"] == 15_096
    # DCP1: 15,096 x 16 = 241,536 tokens; DCP8: x 8 = 1,932,288 (vLLM <= 0.19 log formula)
    assert one["kv_cache_tokens"] == 241_536
    assert eight["kv_cache_tokens"] == 1_932_288
    # a 131,072-token request needs 8,192 blocks on every rank, or 16,384 / 16 = 1,024 with DCP8
    assert (one["blocks_per_max_len_request"], eight["blocks_per_max_len_request"]) == (8192, 1024)
    # 15,096 / 8,192 = 1.84 and 15,096 / 1,024 = 14.74 requests at once
    assert (one["max_concurrency"], eight["max_concurrency"]) == (1.84, 14.74)
    assert (one["max_len_requests_at_once"], eight["max_len_requests_at_once"]) == (1, 14)
    # each token costs 61 x 576 = 35,136 B on every rank, or 35,136 / 8 = 4,392 with DCP8
    assert (one["kv_bytes_per_token_per_gpu"], eight["kv_bytes_per_token_per_gpu"]) == (
        35_136, 4_392)
    assert (one["kv_replicas"], eight["kv_replicas"]) == (8, 1)
    assert eight["decode_context_parallel_size"] == 8
    assert eight["not_understood"] == []
    assert not any("not understood" in w for w in eight["warnings"])
    assert any("decode context parallel 8 splits the latent cache" in w
               for w in eight["warnings"])


def test_dcp_layouts_vllm_refuses_are_refused():
    kimi = config("moonshotai--Kimi-K2.5.config.json")
    report = fit(kimi, dict(KIMI_FP8_TP8, decode_context_parallel_size=3), 595_000_000_000)
    assert any(w.startswith("decode context parallel: decode_context_parallel_size 3 does not "
                            "divide tensor_parallel_size 8") for w in report["refusals"])
    assert report["fits"] is False
    assert report["verdict"].startswith("vLLM refuses to start it: decode context parallel: "
                                        "decode_context_parallel_size 3")
    minimax = config("MiniMaxAI--MiniMax-M2.5.config.json")
    serve = {"tensor_parallel_size": 8, "enable_expert_parallel": True,
             "decode_context_parallel_size": 2, "max_model_len": 8192}
    # 8 KV heads on 8 ranks: one copy of each, nothing for DCP to share
    report = fit(minimax, serve, 230_000_000_000)
    assert any(w.startswith("decode context parallel: decode_context_parallel_size 2 exceeds "
                            "the 1 tensor-parallel copies of each of the 8 KV heads")
               for w in report["refusals"])
    # 4 KV heads on 8 ranks (Qwen3-235B shape): two copies each, DCP2 shares them
    qwen = {"num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4,
            "head_dim": 128, "max_position_embeddings": 262_144}
    report = fit(qwen, {"tensor_parallel_size": 8, "decode_context_parallel_size": 2},
                 235_000_000_000, gpu=H200)
    assert not any("decode_context_parallel_size" in w
                   for w in report["warnings"] + report["refusals"])


# --- 2. Sparse MLA -------------------------------------------------------------------------


def test_glm5_sparse_mla_counts_indexer_and_fp8_ds_mla():
    glm = config("zai-org--GLM-5-FP8.config.json")
    report = fit(glm, {"tensor_parallel_size": 8, "kv_cache_dtype": "fp8",
                       "max_model_len": 202_752}, 756_000_000_000, gpu=H200)
    assert report["attention"]["kind"] == "sparse MLA"
    assert "sparse (DSA) because of GlmMoeDsaForCausalLM" in report["attention"]["why"]
    # an FP8 request becomes vLLM's fp8_ds_mla layout: 656 B per token and layer
    assert report["kv_cache_dtype"] == "fp8_ds_mla"
    # 78 x (656 latent + 132 indexer) = 61,464 B per token on every rank; plain FP8 MLA
    # would have been 78 x 576 = 44,928
    assert report["kv_bytes_per_token_per_gpu"] == 61_464
    # one UniformTypeKVCacheSpecs group: a block (64 tokens) of all layers
    # = 64 x 788 x 78 = 3,933,696 B
    assert (report["kv_cache_groups"], report["kv_page_bytes_per_layer"]) == (1, 3_933_696)
    assert report["block_size"] == 64
    assert report["overhead_class"] == "sparse_mla"
    # the abridged config has no index_head_dim: the assumption is stated
    assert any(w.startswith("assumption: index_head_dim is not in config.json")
               for w in report["warnings"])


def test_sparse_mla_bf16_request_means_auto_and_auto_is_bf16():
    glm = config("zai-org--GLM-5-FP8.config.json")
    report = fit(glm, {"tensor_parallel_size": 8, "kv_cache_dtype": "bfloat16",
                       "max_model_len": 8192}, 756_000_000_000, gpu=H200)
    # bfloat16 -> auto -> the model dtype: 78 x (576 x 2 + 132) = 100,152 B per token
    assert report["kv_cache_dtype"] == "bfloat16"
    assert report["kv_bytes_per_token_per_gpu"] == 100_152


def test_index_topk_marks_deepseek_style_sparse_mla():
    """Synthetic edge case: a DeepSeek-V3-style config with DeepSeek-V3.2's indexer keys."""
    cfg = config("moonshotai--Kimi-K2-Thinking.config.json")
    cfg.update(index_topk=2048, index_head_dim=128, index_n_heads=64)
    att = mf.attention_info(cfg)
    assert att["kind"] == "sparse MLA"
    assert att["indexer_bytes_per_token"] == 132
    assert "index_topk in config.json" in att["why"]
    assert att["notes"] == []


# --- 3. Hybrid attention -------------------------------------------------------------------


def test_qwen3_next_linear_attention_keeps_a_state_not_a_cache():
    qwen = config("Qwen--Qwen3-Next-80B-A3B-Thinking.config.json")
    report = fit(qwen, {"tensor_parallel_size": 4, "max_model_len": 262_144,
                        "gpu_memory_utilization": 0.92}, 160_000_000_000)
    # full_attention_interval 4: layers 4, 8, ..., 48 are full (12), the other 36 linear
    assert report["attention"]["layer_classes"][0] == {"type": "full", "layers": 12}
    assert report["attention"]["layer_classes"][1]["layers"] == 36
    # gated delta net state per layer at TP4: conv (128 x 16 x 2 + 128 x 32) / 4 = 2,048 x 3
    # = 6,144 values, temporal 32 / 4 x 128 x 128 = 131,072; x 2 B = 274,432 B
    assert report["attention_classes"] == "full x12, linear x36, 274,432 B state"
    # full layers: 2 KV heads on 4 ranks -> 1 each: 2 x 1 x 256 x 2 = 1,024 B per token;
    # attention block raised to 16 x ceil(274,432 / (16 x 1,024)) = 16 x 17 = 272 tokens,
    # page 272 x 1,024 = 278,528 B, the state padded to it
    assert (report["block_size"], report["kv_page_bytes_per_layer"]) == (272, 278_528)
    # 12 full + 36 linear -> groups of 12 layers: 1 full group and 3 linear groups
    assert (report["kv_cache_groups"], report["kv_group_size"]) == (4, 12)
    # only the 12 full layers grow with context: 12 x 1,024 = 12,288 B per token (a
    # full-attention guess would have said 48 x 1,024 = 49,152)
    assert report["kv_bytes_per_token_per_gpu"] == 12_288
    # one request: ceil(262,144 / 272) = 964 full blocks + 3 state blocks = 967
    assert report["blocks_per_max_len_request"] == 967
    # weights: the router (48 x 2,048 x 512 experts x 2 B = 100,663,296) on every GPU, the
    # rest split: (160e9 - 100,663,296) / 4 + 100,663,296 = 40,075,497,472
    # budget 94,430,602,199 - 40,075,497,472 - 9,663,676,416 = 44,691,428,311 B
    # // (278,528 x 12 = 3,342,336) = 13,371 blocks; 13,371 / 967 = 13.83 requests
    assert report["kv_cache_blocks"] == 13_371
    assert report["max_concurrency"] == 13.83
    # newer vLLM logs int(13,371 / 967 x 262,144) = 3,624,743 tokens
    assert report["kv_cache_tokens"] == 3_624_743
    assert report["overhead_class"] == "hybrid"


def test_qwen3_next_old_log_formula_divides_blocks_by_groups():
    qwen = config("Qwen--Qwen3-Next-80B-A3B-Thinking.config.json")
    report = fit(qwen, {"tensor_parallel_size": 4, "max_model_len": 262_144,
                        "gpu_memory_utilization": 0.92}, 160_000_000_000, vllm_version="0.19.0")
    # vLLM <= 0.19 logs 13,371 // 4 groups x 272 = 909,024 tokens (issue 40691)
    assert report["kv_cache_log_formula"] == "blocks"
    assert report["kv_cache_tokens"] == 909_024


GPT_OSS_SHAPE = {
    # Synthetic: gpt-oss-20b's attention shape (24 layers alternating sliding 128 / full,
    # 64 heads, 8 KV heads, head_dim 64) without its MoE details.
    "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 24,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "sliding_window": 128, "max_position_embeddings": 131_072, "torch_dtype": "bfloat16",
    "layer_types": ["sliding_attention", "full_attention"] * 12,
}


def test_sliding_window_layers_hold_only_their_window():
    report = fit(GPT_OSS_SHAPE, {"max_model_len": 131_072, "gpu_memory_utilization": 0.92},
                 13_000_000_000)
    assert report["attention_classes"] == "full x12, sliding(128) x12"
    # 2 x 8 x 64 x 2 B = 2,048 B per token and layer; only the 12 full layers grow
    assert report["kv_bytes_per_token_per_gpu"] == 12 * 2_048
    # one request: full 131,072 / 16 = 8,192 blocks; sliding ceil(min(127 + 8,192,
    # 131,072) / 16) + 1 = 520 + 1 = 521 -> 8,713 blocks
    assert report["blocks_per_max_len_request"] == 8_713
    # budget 94,430,602,199 - 13,000,000,000 - 9,663,676,416 = 71,766,925,783 B
    # // (32,768 x 12 = 393,216) = 182,512 blocks; 182,512 / 8,713 = 20.95
    assert report["kv_cache_blocks"] == 182_512
    assert report["max_concurrency"] == 20.95
    assert report["kv_cache_tokens"] == 2_745_577  # int(182,512 / 8,713 x 131,072)


def test_sliding_window_with_dcp_is_refused():
    report = fit(GPT_OSS_SHAPE, {"tensor_parallel_size": 8, "decode_context_parallel_size": 8,
                                 "max_model_len": 8192}, 13_000_000_000)
    assert any("SlidingWindowSpec asserts decode_context_parallel_size == 1" in w
               for w in report["refusals"])


def test_sliding_window_everywhere_and_switched_off():
    """Synthetic: a Mistral-style window on every layer; a Qwen2-style window switched off."""
    mistral = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
               "head_dim": 128, "sliding_window": 4096, "max_position_embeddings": 32_768}
    assert mf.attention_info(mistral)["layer_classes"] == [
        {"type": "sliding", "layers": 32, "window": 4096}]
    qwen2 = dict(mistral, use_sliding_window=False)
    assert mf.attention_info(qwen2)["layer_classes"] == [{"type": "full", "layers": 32}]


# --- 4. Unknown attention designs are refused ----------------------------------------------


def test_deepseek_v4_compressed_attention_is_refused_not_guessed():
    cfg = config("nvidia--DeepSeek-V4-Flash-NVFP4.config.json")
    with pytest.raises(mf.CannotSizeError, match=r"^cannot size this architecture: "
                       r"DeepseekV4ForCausalLM has DeepSeek-V4 compressed sparse attention"):
        mf.attention_info(cfg)
    # the same config under another architecture name is still refused by its keys
    cfg["architectures"] = ["SomethingNewForCausalLM"]
    with pytest.raises(mf.CannotSizeError, match=r"compressed attention caches \(compress_ratios"):
        mf.attention_info(cfg)


@pytest.mark.parametrize(("changes", "reason"), [
    # Synthetic: MiniMax-Text-01 style, 0 = lightning (linear) attention
    ({"attn_type_list": [0, 1]}, r"lightning \(linear\) attention layers \(attn_type_list"),
    ({"layer_types": ["chunked_attention", "full_attention"]},
     r"layer types \['chunked_attention'\] in layer_types"),
    ({"layer_types": ["linear_attention", "full_attention"]},
     r"linear_attention layers without linear_num_key_heads"),
    ({"architectures": ["KimiLinearForCausalLM"]}, r"Kimi Delta Attention"),
    ({"hybrid_override_pattern": "M-M*"}, r"Mamba layers \(hybrid_override_pattern\)"),
    ({"index_topk": 2048}, r"indexer \(index_topk\) without MLA's kv_lora_rank"),
])
def test_unknown_designs_are_refused(changes, reason):
    cfg = {"architectures": ["X"], "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 64, **changes}
    with pytest.raises(mf.CannotSizeError, match="cannot size this architecture: .*" + reason):
        mf.attention_info(cfg)


def test_minimax_m25_attn_type_list_of_ones_is_plain_attention():
    att = mf.attention_info(config("nvidia--MiniMax-M2.5-NVFP4.config.json"))
    assert (att["kind"], att["layer_classes"]) == ("GQA", [{"type": "full", "layers": 62}])


# --- 5. Weight formats ---------------------------------------------------------------------


@pytest.mark.parametrize(("qc", "expected"), [
    # gpt-oss config.json quantization_config (quoted from huggingface.co/openai/gpt-oss-20b)
    ({"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                 "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
     ("mxfp4", 4, 32, "MXFP4 (e2m1, group 32), 4 module patterns kept in 16-bit")),
    # Synthetic GPTQ and AWQ blocks as AutoGPTQ/AutoAWQ write them
    ({"quant_method": "gptq", "bits": 4, "group_size": 128},
     ("int4", 4, 128, "GPTQ INT4 (group 128)")),
    ({"quant_method": "awq", "bits": 4, "group_size": 128},
     ("int4", 4, 128, "AWQ INT4 (group 128)")),
])
def test_weight_formats(qc, expected):
    q = mf.find_quantization({"num_hidden_layers": 1, "quantization_config": qc})
    assert (q["weight_format"], q["weight_bits"], q["group_size"], q["scheme"]) == expected
    assert q["understood"] is True


def test_declared_formats_of_the_shipped_configs():
    # every format the configs in tests/fixtures/models declare
    seen = {}
    for path in sorted(MODELS.glob("*.config.json")):
        hq_path = path.with_name(path.name.replace(".config.json", ".hf_quant_config.json"))
        hq = json.loads(hq_path.read_text()) if hq_path.exists() else None
        q = mf.find_quantization(json.loads(path.read_text()), hq)
        seen[path.name.removesuffix(".config.json")] = (q["weight_format"], q["understood"])
    assert seen == {
        "MiniMaxAI--MiniMax-M2.5": ("fp8", True),
        "Qwen--Qwen3-Next-80B-A3B-Thinking": ("bfloat16", True),
        "moonshotai--Kimi-K2-Thinking": ("bfloat16", True),
        "moonshotai--Kimi-K2.5": ("int4", True),
        "nvidia--DeepSeek-V4-Flash-NVFP4": ("bfloat16", True),
        "nvidia--Kimi-K2.5-NVFP4": ("nvfp4", True),
        "nvidia--MiniMax-M2.5-NVFP4": ("nvfp4", True),
        "zai-org--GLM-5-FP8": ("bfloat16", True),
    }


def test_unknown_quantization_is_said_not_guessed():
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64,
           "max_position_embeddings": 4096, "quantization_config": {"quant_method": "quark"}}
    report = fit(cfg, {}, 1_000_000_000)
    assert report["quantization"]["scheme"] == "quark (not understood)"
    assert any(w.startswith("quantization quark (not understood): weight format not "
                            "understood") for w in report["warnings"])


# --- 6. Speculative decoding ---------------------------------------------------------------


def test_mtp_layers_join_the_kv_cache():
    minimax = config("MiniMaxAI--MiniMax-M2.5.config.json")
    serve = {"tensor_parallel_size": 4, "max_model_len": 196_608,
             "speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}
    report = fit(minimax, serve, 230_000_000_000)
    # use_mtp with num_mtp_modules 3 x mtp_transformer_layers 1 = 3 draft layers
    assert report["draft_layers"] == 3
    # (62 + 3) layers x 2 KV heads x 128 x 2 x 2 B = 66,560 B per token (63,488 without)
    assert report["kv_bytes_per_token_per_gpu"] == 66_560
    assert report["attention_classes"] == "full x62, MTP +3"
    as_json = fit(minimax, dict(serve, speculative_config=json.dumps(serve["speculative_config"])),
                  230_000_000_000)
    assert as_json["kv_bytes_per_token_per_gpu"] == 66_560


def test_draft_models_and_missing_mtp_layers_are_not_understood():
    kimi = config("moonshotai--Kimi-K2.5.config.json")
    eagle = {"model": "lightseekorg/kimi-k2.5-eagle3-mla", "method": "eagle3",
             "num_speculative_tokens": 3}
    report = fit(kimi, dict(KIMI_FP8_TP8, speculative_config=eagle), 595_000_000_000)
    assert report["not_understood"] == [
        ("speculative_config method eagle3 with draft model lightseekorg/kimi-k2.5-eagle3-mla: "
         "the draft model's KV cache is not counted")]
    report = fit(kimi, dict(KIMI_FP8_TP8, speculative_config={"method": "mtp"}),
                 595_000_000_000)
    assert report["not_understood"][0].startswith("speculative_config method mtp: config.json "
                                                  "declares no MTP layers")
    assert report["draft_layers"] == 0


# --- Serve options -------------------------------------------------------------------------


def test_serve_options_that_may_change_memory_are_listed():
    minimax = config("MiniMaxAI--MiniMax-M2.5.config.json")
    serve = {"tensor_parallel_size": 4, "max_model_len": 196_608, "trust_remote_code": True,
             "tool_call_parser": "minimax_m2", "reasoning_parser": "minimax_m2_append_think",
             "enable_auto_tool_choice": True, "shutdown_timeout": 60, "enforce_eager": True,
             "cpu_offload_gb": 10, "compilation_config": {"cudagraph_mode": "PIECEWISE"},
             "mm_encoder_tp_mode": "data"}
    report = fit(minimax, serve, 230_000_000_000)
    assert report["not_understood"] == [
        "compilation_config={'cudagraph_mode': 'PIECEWISE'}", "cpu_offload_gb=10",
        "mm_encoder_tp_mode='data'"]
    assert sum(w.startswith("not understood (may change memory; not counted): ")
               for w in report["warnings"]) == 3


def test_kv_cache_memory_bytes_replaces_the_budget():
    minimax = config("MiniMaxAI--MiniMax-M2.5.config.json")
    report = fit(minimax, {"tensor_parallel_size": 4, "max_model_len": 196_608,
                           "kv_cache_memory_bytes": 25_361_781_882}, 230_000_000_000)
    # the logged 23.62 GiB again: 24,967 blocks x 16 = 399,472 tokens
    assert report["kv_budget_bytes_per_gpu"] == 25_361_781_882
    assert report["kv_cache_tokens"] == 399_472
