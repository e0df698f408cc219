# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Will this model fit on these GPUs, and how much KV cache is left?

Plain functions over the model's config.json (and hf_quant_config.json), the
catalog's serve options and GPU facts. Standard library only: this runs on the
controller through a filter and on targets through the model_fit module.

The arithmetic follows vLLM's own source. Files and the commit read (through the
public code index, 2026) are named at each size; "kv_cache_interface.py" means
vllm-project/vllm:vllm/v1/kv_cache_interface.py at 001cabc1be16, "kv_cache_utils.py"
means vllm-project/vllm:vllm/v1/core/kv_cache_utils.py at the same commit.

* Every attention layer gets a KV cache spec; its page is the bytes of one block
  (block_size tokens) on one GPU:
  - full attention (MHA/GQA), FullAttentionSpec.real_page_size_bytes:
    block_size x kv_heads_per_rank x (head_size + head_size_v) x dtype bytes,
    kv_heads_per_rank = max(1, kv_heads // tp) (a KV head is replicated when
    tensor parallel > KV heads);
  - sliding window (SlidingWindowSpec): the same page; a request holds at most
    cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1 blocks;
  - MLA (MLAAttentionSpec): block_size x (kv_lora_rank + qk_rope_head_dim) x dtype
    bytes on every tensor-parallel rank (one latent, not split by TP), or
    block_size x 656 bytes in the fp8_ds_mla layout;
  - sparse MLA (DeepSeek-V3.2, GLM-5 DSA) adds an indexer key cache per layer,
    DeepseekV32IndexerCache.get_kv_cache_spec (vllm/model_executor/models/
    deepseek_v2.py): MLAAttentionSpec with head_size = index_head_dim +
    index_head_dim // 128 x 4 (FP8 values plus one fp32 scale per 128), uint8;
  - linear attention (gated delta net, Qwen3-Next / Qwen3.5): a MambaSpec holding
    one fixed-size state per request, MambaStateShapeCalculator.
    gated_delta_net_state_shape (vllm/model_executor/layers/mamba/mamba_utils.py):
    conv state conv_dim / tp x (conv_kernel - 1 + num_spec) elements, conv_dim =
    key_dim x key_heads x 2 + value_dim x value_heads, plus a temporal state of
    value_heads / tp x key_dim x value_dim elements.
* Grouping (kv_cache_utils.get_kv_cache_groups): identical specs form one group
  (num_blocks = available // page // layers); specs of one type with different
  pages (MLA + indexer) form one UniformTypeKVCacheSpecs group whose page is the
  sum of the layers' pages (num_blocks = available // sum); otherwise (hybrid)
  pages are unified (HybridAttentionMambaModelConfig in vllm/model_executor/
  models/config.py raises the attention block size until its page >= the mamba
  state and pads the state) and layers of each type are split into groups of
  group_size layers (the smallest type count, or the largest when it is < 1.5x
  the smallest): num_blocks = available // page // group_size.
* Decode context parallel (DCP) splits every full-attention/MLA cache by token
  position across the DCP ranks: a request needs cdiv(max_model_len, dcp) tokens
  on each rank (FullAttentionSpec.max_memory_usage_bytes), so capacity grows
  DCP-fold instead of replicating the latent on every tensor-parallel rank.
* Memory per GPU besides weights and KV cache (the overhead): fit_overhead.py, term by
  term (driver reserve, non-torch, the profiling run's activation peak, CUDA graphs),
  derived from public start-up logs (tests/fixtures/vllm_startup_logs); weights per GPU
  count what vLLM replicates on every tensor-parallel rank (replicated_weight_bytes).
* Logged "GPU KV cache size": vLLM <= 0.19 logs num_blocks // groups x min block
  size x dcp x pcp (kv_cache_utils._report_kv_cache_config; vllm-project/vllm
  issue 40691 shows it on 0.19.0); newer releases log int(max_concurrency x
  max_model_len) (same function after the fix for hybrid models; a 0.24.0 log in
  noonghunna/club-3090 issue 612 already shows it). "Maximum concurrency" is
  num_blocks / sum over groups of the blocks one max-length request needs.
"""

import json
import re
from decimal import Decimal

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import vllm_engine as engine
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import fit_overhead
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    parse_compute_capability as _parse_cc,
)

GIB = 1024**3
MIB = 1024**2
DEFAULT_BLOCK_SIZE = 16
# FlashMLA sparse (the DSA backends) and the DeepGEMM indexer use 64-token blocks.
SPARSE_MLA_BLOCK_SIZE = 64
# Tokens scheduled per step when serve does not set max_num_batched_tokens and the
# GPU is not known; with GPU facts the fit takes vLLM's own default for that GPU
# (fit_overhead.server_batch_defaults: 16384 on >= 160 GiB, 8192 on >= 70 GiB other
# than A100, 2048 otherwise). Sliding-window layers and the activation peak use it.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# vLLM's fp8_ds_mla layout (vllm/v1/attention/backends/mla/flashmla_sparse.py):
# 512 FP8 latent values + 4 fp32 scales + 64 bf16 RoPE values = 656 bytes.
FP8_DS_MLA_BYTES_PER_TOKEN = 656
INDEXER_QUANT_BLOCK = 128
# The first vLLM release that logs int(max_concurrency x max_model_len); 0.19.0
# still logs blocks (issue 40691), 0.24.0 already the product (club-3090 #612).
# The exact release in between is not known; 0.20.0 is assumed.
CONCURRENCY_LOG_SINCE = (0, 20, 0)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

_DTYPE_BYTES = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}


# ---------------------------------------------------------------------------
# Per-GPU overhead: modelled term by term in fit_overhead.py
# ---------------------------------------------------------------------------
#
# overhead = everything vLLM keeps per GPU besides weights and KV cache. It was one
# constant per attention class (each from a single log, 6-13.5 % high end to end);
# it is now the sum of four terms from the GPU, the layout and config.json
# (driver reserve, non-torch memory, the profiling run's activation peak, CUDA
# graphs where vLLM counts them), see fit_overhead.py. A catalog entry or hardware
# profile can still set overhead_bytes_per_gpu from its own log.


def overhead_from_log(log):
    """Bytes per GPU that are neither weights nor KV cache, from one public log:
    gpu_memory_utilization x memory.total - weights - available KV cache."""
    usable = int(Decimal(log["gpu_memory_utilization"]) * log["memory_total_bytes"])
    weights = log.get("weights_bytes")
    if weights is None:
        weights = gib_to_bytes(log["weights_gib"])
    available = log.get("available_kv_bytes")
    if available is None:
        available = gib_to_bytes(log["available_kv_gib"])
    return usable - weights - available


def gib_to_bytes(gib):
    """A GiB figure as vLLM logs it (two decimals) to bytes."""
    return int(Decimal(str(gib)) * GIB)


_LOG_PATTERNS = {
    "weights_gib": r"(?:Model loading took|Loading model weights took) ([0-9.]+) Gi?B",
    "available_kv_gib": r"Available KV cache memory: ([0-9.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([0-9,]+) tokens",
    "max_model_len": r"Maximum concurrency for ([0-9,]+) tokens per request",
    "max_concurrency": r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+)x",
    "cp_world_size": r"Multiplying the GPU KV cache size by the \w+ (\d+)",
    "vllm_version": r"version (\d+\.\d+\.\d+\S*)",
}


def parse_startup_log(text):
    """The KV-cache figures of a vLLM start-up log: weights_gib and available_kv_gib
    (strings, as logged), kv_cache_tokens, max_model_len and cp_world_size (ints),
    max_concurrency (float), vllm_version; only what the log holds."""
    found = {}
    for key, pattern in _LOG_PATTERNS.items():
        match = re.search(pattern, str(text))
        if not match:
            continue
        value = match.group(1)
        if key in ("kv_cache_tokens", "max_model_len", "cp_world_size"):
            found[key] = int(value.replace(",", ""))
        elif key == "max_concurrency":
            found[key] = float(value)
        else:
            found[key] = value
    return found


class ModelFitError(ValueError):
    """The inputs cannot be evaluated; the message names what was wanted and found."""


class CannotSizeError(ModelFitError):
    """The config declares an attention design model_fit does not size; never guessed."""


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def text_config(config):
    """Return the language model's config: Kimi-K2.5 keeps it under text_config."""
    if not isinstance(config, dict):
        raise ModelFitError(
            f"config must be the parsed config.json (a dict), got {type(config).__name__}"
        )
    inner = config.get("text_config")
    # The key, not its value: a text_config whose num_hidden_layers is 0 or broken is the
    # one to refuse (check_config_numbers), not a reason to read the outer config.
    if isinstance(inner, dict) and "num_hidden_layers" in inner:
        return inner
    return config


# Every number of config.json the fit (and fit_overhead) reads, and the ones that may not
# be 0 where present. A hostile or broken config.json (a mirror's, a typo) gave "fits:
# -135 requests" or a traceback (issue 45 case 6): each is checked once, first, and a
# value that is not a whole number in range makes the model "cannot size", naming it.
CONFIG_NUMBERS = (
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "hidden_size", "vocab_size", "max_position_embeddings", "intermediate_size",
    "moe_intermediate_size", "n_routed_experts", "num_experts", "num_local_experts",
    "num_experts_per_tok", "moe_topk", "n_shared_experts", "first_k_dense_replace",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "sliding_window", "index_head_dim", "index_topk", "index_n_heads",
    "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules",
    "mtp_transformer_layers", "linear_num_key_heads", "linear_num_value_heads",
    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
    "full_attention_interval",
)
CONFIG_POSITIVE = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                   "head_dim", "hidden_size", "vocab_size", "max_position_embeddings")
CONFIG_NUMBER_MAX = 2**31 - 1


def check_config_numbers(cfg):
    """Refuse (CannotSizeError, naming the field) a number the fit cannot use.

    Absent or null is left to the fit (it knows which it needs); present, a number
    must be a whole number (an int, an integral float, or digits as text) from 0
    (from 1 for CONFIG_POSITIVE) to 2**31 - 1; true/false, NaN, infinities,
    fractions, negatives, lists and objects are refused.
    """
    for key in CONFIG_NUMBERS:
        value = cfg.get(key)
        if value is None:
            continue
        low = 1 if key in CONFIG_POSITIVE else 0
        number = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and value.is_integer():  # NaN and infinities are not
            number = int(value)
        elif isinstance(value, str) and value.strip().isdigit():
            number = int(value.strip())
        if number is None or not low <= number <= CONFIG_NUMBER_MAX:
            raise CannotSizeError(
                f"config.json's {key} is {value!r}: wanted a whole number from {low} to "
                f"{CONFIG_NUMBER_MAX}")


def _int(value, name):
    if isinstance(value, bool):
        raise ModelFitError(f"{name} must be an integer, got {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError) as exc:
        raise ModelFitError(f"{name} must be an integer, got {value!r}") from exc


def _bool(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _cdiv(a, b):
    return -(-a // b)


def parse_version(text):
    """'0.11.1rc2' -> (0, 11, 1); numeric release parts only."""
    parts = []
    for piece in str(text).strip().lstrip("v").split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    while len(parts) < 3:  # noqa: PLR2004 - major.minor.patch
        parts.append(0)
    return tuple(parts)


def parse_compute_capability(value):
    """'12.0' -> (12, 0) (nvidia_smi.parse_compute_capability), else ModelFitError."""
    try:
        cc = _parse_cc(value)
    except GpuFactsError:
        cc = None
    if cc is None:
        raise ModelFitError(f"compute capability must look like '12.0', got {value!r}")
    return cc


def _architecture(config, cfg):
    return (cfg.get("architectures") or config.get("architectures") or ["?"])[0]


# ---------------------------------------------------------------------------
# Attention: what each layer keeps, or a refusal
# ---------------------------------------------------------------------------

# Architectures whose attention or state model_fit does not size. Each is refused
# with the reason rather than guessed as GQA.
UNSIZABLE_ARCHITECTURES = {
    "DeepseekV4ForCausalLM": "DeepSeek-V4 compressed sparse attention (compress_ratios: 4x and "
                             "128x compressed MLA caches, sliding-window MLA and an indexer per "
                             "compression level, grouped by vLLM's DeepseekV4 planner)",
    "KimiLinearForCausalLM": "Kimi Delta Attention (KDA) linear-attention layers beside MLA; "
                             "model_fit does not model the KDA state",
    "MiniMaxText01ForCausalLM": "lightning (linear) attention layers",
    "MiniMaxM1ForCausalLM": "lightning (linear) attention layers",
    "NemotronHForCausalLM": "Mamba2 layers (hybrid_override_pattern)",
    "JambaForCausalLM": "Mamba layers",
    "BambaForCausalLM": "Mamba2 layers",
    "FalconH1ForCausalLM": "Mamba2 layers",
    "Zamba2ForCausalLM": "Mamba2 layers",
    "GraniteMoeHybridForCausalLM": "Mamba2 layers",
    "MambaForCausalLM": "Mamba layers (no attention KV cache)",
    "Mamba2ForCausalLM": "Mamba2 layers (no attention KV cache)",
    "Lfm2ForCausalLM": "short-convolution layers",
    "Llama4ForConditionalGeneration": "chunked local attention (attention_chunk_size)",
}
# Config keys that mark a scheme model_fit does not size (any architecture name).
UNSIZABLE_KEYS = {
    "compress_ratios": "compressed attention caches (compress_ratios)",
    "linear_attn_config": "linear-attention layers described by linear_attn_config",
    "hybrid_override_pattern": "Mamba layers (hybrid_override_pattern)",
    "layers_block_type": "Mamba layers (layers_block_type)",
    "attn_layer_period": "Mamba layers (attn_layer_period)",
    "ssm_cfg": "state-space layers (ssm_cfg)",
    "attention_chunk_size": "chunked local attention (attention_chunk_size)",
}
SPARSE_MLA_ARCHITECTURES = {"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"}
_LAYER_TYPES = {"full_attention", "sliding_attention", "linear_attention"}


def _refuse(architecture, reason):
    raise CannotSizeError(f"cannot size this architecture: {architecture} has {reason}")


def _check_sizable(config, cfg):
    arch = _architecture(config, cfg)
    if arch in UNSIZABLE_ARCHITECTURES:
        _refuse(arch, UNSIZABLE_ARCHITECTURES[arch])
    for key, reason in UNSIZABLE_KEYS.items():
        if cfg.get(key) not in (None, "", [], {}):
            _refuse(arch, reason)
    attn_types = cfg.get("attn_type_list")
    if isinstance(attn_types, list) and any(int(t) != 1 for t in attn_types):
        # MiniMax: 1 = softmax attention, 0 = lightning (linear) attention.
        _refuse(arch, "lightning (linear) attention layers (attn_type_list has 0 entries)")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        unknown = sorted({str(t) for t in layer_types} - _LAYER_TYPES)
        if unknown:
            _refuse(arch, f"layer types {unknown} in layer_types (known: {sorted(_LAYER_TYPES)})")
    if (cfg.get("index_topk") or cfg.get("index_head_dim")) and not cfg.get("kv_lora_rank"):
        _refuse(arch, "a sparse-attention indexer (index_topk) without MLA's kv_lora_rank")
    if not cfg.get("kv_lora_rank") and cfg.get("q_lora_rank") and cfg.get("head_dim"):
        _refuse(arch, "low-rank attention projections (q_lora_rank) without kv_lora_rank")


def _layer_types(cfg, layers):
    """Per-layer type: full_attention, sliding_attention or linear_attention."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ModelFitError(
                f"layer_types lists {len(types)} layers, num_hidden_layers is {layers}"
            )
        return [str(t) for t in types]
    interval = cfg.get("full_attention_interval")
    if interval and (cfg.get("linear_num_value_heads") or cfg.get("linear_num_key_heads")):
        # Qwen3-Next / Qwen3.5 configs derive layer_types this way.
        interval = _int(interval, "full_attention_interval")
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                for i in range(layers)]
    window = cfg.get("sliding_window")
    if window and cfg.get("use_sliding_window", True) is not False:
        # Mistral-style: one window on every layer (vLLM ModelConfig.get_sliding_window).
        return ["sliding_attention"] * layers
    return ["full_attention"] * layers


def _gqa_shape(cfg, heads):
    kv_heads = _int(cfg.get("num_key_value_heads") or heads, "num_key_value_heads")
    head_dim = cfg.get("head_dim")
    if not head_dim:
        hidden = _int(cfg.get("hidden_size") or 0, "hidden_size")
        if not hidden:
            raise ModelFitError("config.json has neither head_dim nor hidden_size")
        head_dim = hidden // heads  # vLLM's own default when config.json has none
        if head_dim < 1:
            raise ModelFitError(f"config.json has no head_dim, and hidden_size {hidden} over "
                                f"num_attention_heads {heads} leaves none")
    return kv_heads, _int(head_dim, "head_dim")


def _mtp_layers(cfg):
    """Draft layers the checkpoint carries for multi-token prediction."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if cfg.get(key):
            return _int(cfg[key], key), key
    if cfg.get("use_mtp") and cfg.get("num_mtp_modules"):
        # MiniMax-M2: num_mtp_modules modules of mtp_transformer_layers each.
        per = _int(cfg.get("mtp_transformer_layers") or 1, "mtp_transformer_layers")
        return _int(cfg["num_mtp_modules"], "num_mtp_modules") * per, "num_mtp_modules"
    return 0, None


def attention_info(config):
    """Attention design, why, and the sizes the KV cache uses; refuses unknown designs."""
    cfg = text_config(config)
    check_config_numbers(cfg)
    layers = cfg.get("num_hidden_layers")
    heads = cfg.get("num_attention_heads")
    if not layers or not heads:
        raise ModelFitError(
            "config.json needs num_hidden_layers and num_attention_heads "
            f"(found num_hidden_layers={layers!r}, num_attention_heads={heads!r})"
        )
    layers = _int(layers, "num_hidden_layers")
    heads = _int(heads, "num_attention_heads")
    _check_sizable(config, cfg)
    arch = _architecture(config, cfg)
    mtp, mtp_key = _mtp_layers(cfg)
    info = {
        "num_layers": layers,
        "num_attention_heads": heads,
        "architecture": arch,
        "model_type": cfg.get("model_type"),
        "mtp_layers": mtp,
        "mtp_source": mtp_key,
        "notes": [],
    }
    if cfg.get("kv_lora_rank"):
        _mla_info(cfg, info)
    else:
        _gqa_info(cfg, info)
    return info


def _mla_info(cfg, info):
    arch, layers, heads = info["architecture"], info["num_layers"], info["num_attention_heads"]
    rank = _int(cfg["kv_lora_rank"], "kv_lora_rank")
    rope = _int(cfg.get("qk_rope_head_dim") or 0, "qk_rope_head_dim")
    sparse = arch in SPARSE_MLA_ARCHITECTURES or bool(cfg.get("index_topk"))
    info.update(
        kind="sparse MLA" if sparse else "MLA",
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        num_kv_heads=1,
        head_dim=rank + rope,
        layer_classes=[{"type": "mla", "layers": layers}],
        why=(
            f"kv_lora_rank={rank} and qk_rope_head_dim={rope} in config.json: "
            f"multi-head latent attention caches one compressed latent of {rank + rope} "
            f"values per token and layer instead of K and V for {heads} heads"
        ),
    )
    if not sparse:
        return
    index_dim = cfg.get("index_head_dim")
    if not index_dim:
        index_dim = 128
        info["notes"].append(
            "index_head_dim is not in config.json: DeepSeek-V3.2's 128 assumed "
            "for the indexer key cache"
        )
    index_dim = _int(index_dim, "index_head_dim")
    info["index_head_dim"] = index_dim
    info["indexer_bytes_per_token"] = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4
    signal = "index_topk in config.json" if cfg.get("index_topk") else f"{arch}"
    info["why"] += (
        f"; sparse (DSA) because of {signal}: each layer also keeps an indexer key "
        f"cache of {info['indexer_bytes_per_token']} bytes per token"
    )


def _gqa_info(cfg, info):
    arch, heads = info["architecture"], info["num_attention_heads"]
    kv_heads, head_dim = _gqa_shape(cfg, heads)
    types = _layer_types(cfg, info["num_layers"])
    classes = []
    for name in ("full_attention", "sliding_attention", "linear_attention"):
        count = types.count(name)
        if not count:
            continue
        entry = {"type": name.replace("_attention", ""), "layers": count}
        if name == "sliding_attention":
            window = cfg.get("sliding_window")
            if not window:
                _refuse(arch, "sliding_attention layers but no sliding_window in config.json")
            entry["window"] = _int(window, "sliding_window")
        if name == "linear_attention":
            entry.update(_linear_attention_shape(arch, cfg))
        classes.append(entry)
    if kv_heads < heads:
        kind, why = "GQA", (
            f"num_key_value_heads={kv_heads} < num_attention_heads={heads}: "
            f"grouped-query attention, {heads // kv_heads} query heads share each KV head"
        )
    else:
        kind, why = "MHA", (
            f"num_key_value_heads={kv_heads} == num_attention_heads={heads}: "
            "every query head has its own K and V"
        )
    if len(classes) > 1 or classes[0]["type"] != "full":
        parts = ", ".join(_class_text(c) for c in classes)
        why += f"; hybrid layers from config.json: {parts}"
    info.update(kind=kind, num_kv_heads=kv_heads, head_dim=head_dim, layer_classes=classes,
                why=why)


def _linear_attention_shape(arch, cfg):
    keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim")
    missing = [k for k in keys if not cfg.get(k)]
    if missing:
        _refuse(arch, f"linear_attention layers without {', '.join(missing)} "
                      "(only gated delta net state is modelled)")
    return {
        "key_heads": _int(cfg["linear_num_key_heads"], "linear_num_key_heads"),
        "value_heads": _int(cfg["linear_num_value_heads"], "linear_num_value_heads"),
        "key_dim": _int(cfg["linear_key_head_dim"], "linear_key_head_dim"),
        "value_dim": _int(cfg["linear_value_head_dim"], "linear_value_head_dim"),
        "conv_kernel": _int(cfg["linear_conv_kernel_dim"], "linear_conv_kernel_dim"),
    }


def _class_text(entry):
    if entry["type"] == "sliding":
        return f"{entry['layers']} sliding window {entry['window']}"
    if entry["type"] == "linear":
        return f"{entry['layers']} linear attention (gated delta net state)"
    return f"{entry['layers']} {entry['type']}"


def kv_heads_per_gpu(attention, tensor_parallel_size, decode_context_parallel_size=1):
    """KV heads each tensor-parallel rank holds and how many ranks hold each.

    With decode context parallel the ranks that share a KV head (or the MLA
    latent) hold different tokens of it, so a head is replicated tp / kv / dcp
    times instead of tp / kv."""
    tp = tensor_parallel_size
    dcp = max(1, decode_context_parallel_size)
    if attention["kind"] in ("MLA", "sparse MLA"):
        replicas = max(1, tp // dcp)
        return {"kv_heads_per_gpu": 1, "kv_replicas": replicas, "kv_heads_replicated": replicas > 1}
    kv = attention["num_kv_heads"]
    per_gpu = max(1, kv // tp)
    replicas = max(1, tp // kv // dcp)
    return {"kv_heads_per_gpu": per_gpu, "kv_replicas": replicas,
            "kv_heads_replicated": replicas > 1}


# ---------------------------------------------------------------------------
# Quantization
# ---------------------------------------------------------------------------


def _groups_weights(qc):
    groups = qc.get("config_groups") or {}
    for group in groups.values():
        weights = (group or {}).get("weights")
        if isinstance(weights, dict):
            return weights
    return {}


def _fp8_kv_scheme(scheme):
    return (
        isinstance(scheme, dict)
        and scheme.get("num_bits") == 8  # noqa: PLR2004 - 8-bit
        and scheme.get("type") == "float"
    )


def _fp8_quant(qc, result):
    block = qc.get("weight_block_size")
    fmt = qc.get("fmt") or "float8_e4m3fn"
    result.update(weight_bits=8, weight_format="fp8")
    if block:
        result["scheme"] = f"FP8 {fmt}, block {'x'.join(str(b) for b in block)}"
        result["block"] = list(block)
    else:
        result["scheme"] = f"FP8 {fmt}, per-tensor/channel"


def _modelopt_quant(qc, hq, result):
    algo = str((hq or {}).get("quant_algo") or qc.get("quant_algo") or "").upper()
    group = (hq or {}).get("group_size") or _groups_weights(qc).get("group_size")
    result["group_size"] = group
    if algo == "NVFP4":
        result.update(
            weight_bits=4, weight_format="nvfp4", scheme=f"modelopt NVFP4 (FP4 e2m1, group {group})"
        )
    elif algo.startswith("FP8"):
        result.update(weight_bits=8, weight_format="fp8", scheme=f"modelopt {algo}")
    else:
        result["scheme"] = f"modelopt {algo or '?'}"
    kv_algo = (hq or {}).get("kv_cache_quant_algo") or qc.get("kv_cache_quant_algo")
    if _fp8_kv_scheme(qc.get("kv_cache_scheme")) or str(kv_algo or "").upper() == "FP8":
        result["checkpoint_kv_cache_dtype"] = "fp8"
    if hq:
        result["source"] = "hf_quant_config.json + " + result["source"] if qc else (
            "hf_quant_config.json")


def _compressed_tensors_quant(qc, result):
    weights = _groups_weights(qc)
    bits = weights.get("num_bits")
    wtype = weights.get("type")
    group = weights.get("group_size")
    result["group_size"] = group
    fmt = qc.get("format") or "?"
    if bits == 4 and wtype == "float":  # noqa: PLR2004 - 4-bit
        result.update(
            weight_bits=4,
            weight_format="nvfp4",
            scheme=f"compressed-tensors NVFP4 (group {group}, {fmt})",
        )
    elif bits:
        kind = "INT" if wtype == "int" else "FP"
        sym = ", symmetric" if weights.get("symmetric") else ""
        result.update(
            weight_bits=_int(bits, "num_bits"),
            weight_format=f"{kind.lower()}{bits}",
            scheme=(
                f"compressed-tensors {kind}{bits} "
                f"({weights.get('strategy') or 'group'} {group}{sym}, {fmt})"
            ),
        )
    else:
        result["scheme"] = f"compressed-tensors ({fmt})"
    if _fp8_kv_scheme(qc.get("kv_cache_scheme")):
        result["checkpoint_kv_cache_dtype"] = "fp8"


def _mxfp4_quant(qc, result):
    # gpt-oss: OCP microscaling FP4 (e2m1 values, one e8m0 scale per 32) on the MoE
    # experts; modules_to_not_convert (attention, router, embeddings) stay bf16.
    kept = qc.get("modules_to_not_convert") or []
    result.update(weight_bits=4, weight_format="mxfp4", group_size=32,
                  scheme="MXFP4 (e2m1, group 32)" + (
                      f", {len(kept)} module patterns kept in 16-bit" if kept else ""))


def _gptq_awq_quant(method, qc, result):
    bits = qc.get("bits") or qc.get("w_bit")
    group = qc.get("group_size") or qc.get("q_group_size")
    result["group_size"] = group
    if bits:
        result.update(weight_bits=_int(bits, "bits"), weight_format=f"int{bits}",
                      scheme=f"{method.upper()} INT{bits} (group {group})")
    else:
        result["scheme"] = method.upper()


def find_quantization(config, hf_quant_config=None):
    """Quantization as the files say it, not as the repository name suggests."""
    cfg = text_config(config)
    top_qc = config.get("quantization_config")
    inner_qc = cfg.get("quantization_config") if cfg is not config else None
    qc = top_qc if isinstance(top_qc, dict) else inner_qc if isinstance(inner_qc, dict) else None
    where = (
        "config.json quantization_config"
        if qc is top_qc
        else "config.json text_config.quantization_config"
    )
    hq = hf_quant_config.get("quantization") if isinstance(hf_quant_config, dict) else None

    result = {
        "method": None,
        "scheme": None,
        "weight_bits": 16,
        "weight_format": "bf16",
        "group_size": None,
        "checkpoint_kv_cache_dtype": None,
        "source": None,
        "understood": True,
    }
    if qc is None and not hq:
        dtype = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("dtype") or "bfloat16"
        result.update(
            scheme=f"none ({dtype})",
            weight_format=str(dtype),
            source="no quantization_config in config.json",
        )
        return result

    qc = qc or {}
    method = str(qc.get("quant_method") or ("modelopt" if hq else "")).lower()
    result["method"] = method
    result["source"] = where if qc else "hf_quant_config.json"
    if method == "fp8":
        _fp8_quant(qc, result)
    elif method.startswith("modelopt"):
        _modelopt_quant(qc, hq, result)
    elif method == "compressed-tensors":
        _compressed_tensors_quant(qc, result)
    elif method == "mxfp4":
        _mxfp4_quant(qc, result)
    elif method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        _gptq_awq_quant(method, qc, result)
    else:
        result.update(scheme=f"{method or 'unknown'} (not understood)", understood=False)
    return result


def resolve_kv_cache_dtype(kv_cache_dtype, config, quantization, attention=None):
    """(name, bytes per element, where it came from) for the KV cache.

    'auto' takes the checkpoint's FP8 KV scheme for modelopt checkpoints (as
    vLLM's resolve_kv_cache_dtype_string does), else the model dtype. For sparse
    MLA an FP8 request becomes the fp8_ds_mla layout and bfloat16 becomes auto
    (DeepseekV32ForCausalLM.verify_and_update_config, vllm/model_executor/models/
    config.py)."""
    requested = str(kv_cache_dtype or "auto").strip().lower()
    if requested not in _DTYPE_BYTES:
        raise ModelFitError(
            f"kv_cache_dtype must be one of {sorted(_DTYPE_BYTES)}, got {kv_cache_dtype!r}"
        )
    sparse = bool(attention) and attention.get("kind") == "sparse MLA"
    if sparse and requested.startswith("fp8"):
        return "fp8_ds_mla", 1, (
            f"serve option kv_cache_dtype {requested}: sparse MLA stores FP8 in vLLM's "
            f"fp8_ds_mla layout ({FP8_DS_MLA_BYTES_PER_TOKEN} bytes per token and layer)")
    if sparse and requested == "bfloat16":
        requested = "auto"
    if requested != "auto":
        return requested, _DTYPE_BYTES[requested], "serve option kv_cache_dtype"
    ckpt = quantization.get("checkpoint_kv_cache_dtype")
    if ckpt and str(quantization.get("method") or "").startswith("modelopt"):
        if sparse:
            return "fp8_ds_mla", 1, "auto: the checkpoint's kv_cache_scheme (modelopt), fp8_ds_mla"
        return ckpt, _DTYPE_BYTES[ckpt], "auto: the checkpoint's kv_cache_scheme (modelopt)"
    cfg = text_config(config)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("dtype") or "bfloat16")
    size = _DTYPE_BYTES.get(dtype, 2)
    return dtype, size, "auto: the model dtype"


# ---------------------------------------------------------------------------
# KV cache arithmetic
# ---------------------------------------------------------------------------


def kv_page_bytes_per_layer(attention, tensor_parallel_size, dtype_bytes, kv_dtype="auto",
                            block_size=DEFAULT_BLOCK_SIZE):
    """Bytes of one KV block (block_size tokens) of one attention layer on one GPU
    (the main cache; the sparse-MLA indexer is counted separately)."""
    if attention["kind"] in ("MLA", "sparse MLA"):
        if kv_dtype == "fp8_ds_mla":
            return block_size * FP8_DS_MLA_BYTES_PER_TOKEN
        return block_size * attention["head_dim"] * dtype_bytes
    per_gpu = kv_heads_per_gpu(attention, tensor_parallel_size)["kv_heads_per_gpu"]
    return 2 * block_size * per_gpu * attention["head_dim"] * dtype_bytes


def kv_bytes_per_token_per_gpu(attention, tensor_parallel_size, dtype_bytes, kv_dtype="auto"):
    """Bytes one token costs on each GPU in the layers that grow with context
    (full attention, MLA and its indexer); sliding and linear layers excluded."""
    page = kv_page_bytes_per_layer(attention, tensor_parallel_size, dtype_bytes, kv_dtype, 1)
    layers = sum(c["layers"] for c in attention["layer_classes"] if c["type"] in ("full", "mla"))
    total = layers * page
    if attention["kind"] == "sparse MLA":
        total += layers * attention["indexer_bytes_per_token"]
    return total


def predict_vllm_kv_cache_tokens(available_bytes, num_layers, page_bytes_per_layer,
                                 block_size=DEFAULT_BLOCK_SIZE, max_model_len=None):
    """What vLLM logs as "GPU KV cache size: N tokens" for a given
    "Available KV cache memory" (bytes), one KV cache group of identical layers."""
    available = max(0, int(available_bytes))
    num_blocks = available // page_bytes_per_layer // num_layers
    result = {"num_blocks": num_blocks, "tokens": num_blocks * block_size}
    if max_model_len:
        blocks_per_request = _cdiv(int(max_model_len), block_size)
        result["blocks_per_max_len_request"] = blocks_per_request
        result["max_concurrency"] = num_blocks / blocks_per_request
    return result


def _gdn_state_bytes(entry, tp, num_spec, conv_bytes, ssm_bytes):
    # MambaStateShapeCalculator.gated_delta_net_state_shape, mamba_utils.py.
    conv_dim = entry["key_dim"] * entry["key_heads"] * 2 + entry["value_dim"] * entry["value_heads"]
    conv = conv_dim // tp * (entry["conv_kernel"] - 1 + num_spec)
    temporal = entry["value_heads"] // tp * entry["key_dim"] * entry["value_dim"]
    return conv * conv_bytes + temporal * ssm_bytes


def _layer_specs(attention, opts, kv_dtype, kv_dtype_bytes, mamba_ssm_bytes, model_dtype_bytes):
    """One spec per kind of layer on one GPU: type, layers, page bytes, block size."""
    tp = opts["tensor_parallel_size"]
    block = opts["block_size"]
    extra = opts["draft_layers"]

    def per_stage(layers):
        return _cdiv(layers, opts["pipeline_parallel_size"])

    if attention["kind"] in ("MLA", "sparse MLA"):
        layers = per_stage(attention["num_layers"]) + extra
        page = kv_page_bytes_per_layer(attention, tp, kv_dtype_bytes, kv_dtype, block)
        specs = [{"type": "mla", "layers": layers, "page": page, "block": block}]
        if attention["kind"] == "sparse MLA":
            specs.append({"type": "indexer", "layers": layers,
                          "page": block * attention["indexer_bytes_per_token"], "block": block})
        return specs
    kv_per_gpu = kv_heads_per_gpu(attention, tp)["kv_heads_per_gpu"]
    token_page = 2 * kv_per_gpu * attention["head_dim"] * kv_dtype_bytes
    specs = []
    for cls in attention["layer_classes"]:
        layers = per_stage(cls["layers"])
        if cls["type"] == "linear":
            state = _gdn_state_bytes(cls, tp, opts["num_speculative_tokens"], model_dtype_bytes,
                                     mamba_ssm_bytes)
            specs.append({"type": "mamba", "layers": layers, "page": state,
                          "block": opts["max_model_len"], "state_bytes": state})
            continue
        spec = {"type": cls["type"], "layers": layers, "page": block * token_page,
                "block": block, "token_page": token_page}
        if cls["type"] == "sliding":
            spec["window"] = cls["window"]
        specs.append(spec)
    # MTP draft layers are full attention layers of the same shape.
    full = [s for s in specs if s["type"] == "full"]
    if extra and full:
        full[0]["layers"] += extra
    elif extra:
        specs.append({"type": "full", "layers": extra, "page": block * token_page,
                      "block": block, "token_page": token_page})
    return specs


def _blocks_for(spec, opts):
    """Blocks one max_model_len request needs in one layer of this spec (max_memory_usage)."""
    max_len = opts["max_model_len"]
    if spec["type"] in ("full", "mla", "indexer"):
        cp = opts["decode_context_parallel_size"] * opts["prefill_context_parallel_size"]
        return _cdiv(_cdiv(max_len, cp), spec["block"])
    if spec["type"] == "sliding":
        tokens = min(spec["window"] - 1 + opts["max_num_batched_tokens"], max_len)
        return _cdiv(tokens, spec["block"]) + 1
    return 1 + opts["num_speculative_tokens"]  # mamba state (mamba_cache_mode none)


def kv_layout(attention, opts, kv_dtype, kv_dtype_bytes, mamba_ssm_bytes, model_dtype_bytes):
    """vLLM's KV cache groups on one GPU: pages, group size and what one
    max-length request needs. Returns a dict; see the module docstring."""
    specs = _layer_specs(attention, opts, kv_dtype, kv_dtype_bytes, mamba_ssm_bytes,
                         model_dtype_bytes)

    def blocks_for(spec):
        return _blocks_for(spec, opts)

    if len(specs) == 1:
        spec = specs[0]
        return _layout(specs, groups=[(spec, 1)], group_size=spec["layers"],
                       page=spec["page"], blocks_per_request=blocks_for(spec))
    if {s["type"] for s in specs} <= {"mla", "indexer", "full"}:
        # UniformTypeKVCacheSpecs: one group, the page is the sum over layers.
        page = sum(s["page"] * s["layers"] for s in specs)
        return _layout(specs, groups=[(specs[0], 1)], group_size=1, page=page,
                       blocks_per_request=blocks_for(specs[0]), uniform_type=True)
    return _hybrid_layout(specs, attention, opts["block_size"], blocks_for)


def _hybrid_layout(specs, attention, block, blocks_for):
    attn = [s for s in specs if s["type"] != "mamba"]
    mamba = [s for s in specs if s["type"] == "mamba"]
    if mamba:
        # HybridAttentionMambaModelConfig.verify_and_update_config (no prefix
        # caching): attention block = 16 x cdiv(state, 16 x attention bytes/token),
        # and the mamba state is padded up to that page.
        align = 64 if attention["kind"] in ("MLA", "sparse MLA") else DEFAULT_BLOCK_SIZE
        token_page = attn[0]["token_page"] if attn else 1
        state = max(s["state_bytes"] for s in mamba)
        attn_block = align * _cdiv(state, align * token_page)
        attn_block = max(attn_block, block)
        for spec in attn:
            spec["block"] = attn_block
            spec["page"] = attn_block * spec["token_page"]
        page = attn[0]["page"] if attn else state
        for spec in mamba:
            spec["page"] = page
    else:
        # unify_kv_cache_spec_page_size: smaller pages get a larger block size.
        page = max(s["page"] for s in specs)
        for spec in specs:
            if page % spec["page"]:
                raise ModelFitError("hybrid layer pages do not divide each other; vLLM refuses")
            spec["block"] *= page // spec["page"]
            spec["page"] = page
    counts = [s["layers"] for s in specs]
    group_size = min(counts)
    if max(counts) < group_size * 1.5:
        group_size = max(counts)
    groups = [(spec, _cdiv(spec["layers"], group_size)) for spec in specs]
    blocks = sum(n * blocks_for(spec) for spec, n in groups)
    return _layout(specs, groups=groups, group_size=group_size, page=page,
                   blocks_per_request=blocks)


def _layout(specs, *, groups, group_size, page, blocks_per_request, uniform_type=False):
    return {
        "specs": specs,
        "num_groups": sum(n for _unused, n in groups),
        "group_size": group_size,
        "page_bytes": page,
        "pool_bytes_per_block": page * group_size,
        "blocks_per_max_len_request": blocks_per_request,
        "min_block_size": min(s["block"] for s in specs if s["type"] != "mamba")
        if any(s["type"] != "mamba" for s in specs) else specs[0]["block"],
        "uniform_type": uniform_type,
    }


def kv_capacity(layout, available_bytes, opts, vllm_version=None):
    """num_blocks, the logged token count and max concurrency for a KV budget."""
    available = max(0, int(available_bytes))
    num_blocks = available // layout["pool_bytes_per_block"]
    per_request = layout["blocks_per_max_len_request"]
    concurrency = num_blocks / per_request if per_request else 0.0
    cp = opts["decode_context_parallel_size"] * opts["prefill_context_parallel_size"]
    blocks_tokens = num_blocks // layout["num_groups"] * layout["min_block_size"] * cp
    concurrency_tokens = int(concurrency * opts["max_model_len"])
    if vllm_version and parse_version(vllm_version) < CONCURRENCY_LOG_SINCE:
        formula, tokens = "blocks", blocks_tokens
    else:
        formula, tokens = "concurrency", concurrency_tokens
    return {
        "num_blocks": num_blocks,
        "tokens": tokens,
        "log_formula": formula,
        "tokens_by_blocks": blocks_tokens,
        "tokens_by_concurrency": concurrency_tokens,
        "max_concurrency": concurrency,
    }


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def replicated_weight_bytes(config, quantization=None):
    """Bytes of weights every tensor-parallel rank holds in full (vLLM does not split them).

    In vLLM's deepseek_v2.py (DeepSeek-V3/V3.2, Kimi-K2, GLM-5; read at 0.32.0) the MLA
    down-projections q_a_proj and kv_a_proj_with_mqa (fused_qkv_a_proj, disable_tp),
    the sparse-MLA indexer's wq_b (ReplicatedLinear) and wk + weights_proj (BF16,
    disable_tp), and the MoE router (GateLinear, hidden x experts) are replicated. A
    checkpoint's size split over tensor parallel counts them once in total instead of
    once per GPU. Block-FP8 checkpoints keep the projections in FP8 (1 byte), others
    in BF16; other designs: 0 (their replicated norms and biases are small).
    """
    cfg = text_config(config)
    layers = _int(cfg.get("num_hidden_layers") or 0, "num_hidden_layers")
    hidden = _int(cfg.get("hidden_size") or 0, "hidden_size")
    method = str((quantization or {}).get("method") or "").lower()
    proj_bytes = 1 if method == "fp8" else 2
    total = 0
    if cfg.get("kv_lora_rank"):
        q_rank = _int(cfg.get("q_lora_rank") or 0, "q_lora_rank")
        latent = (_int(cfg["kv_lora_rank"], "kv_lora_rank")
                  + _int(cfg.get("qk_rope_head_dim") or 0, "qk_rope_head_dim"))
        total += layers * hidden * (q_rank + latent) * proj_bytes
        if _architecture(config, cfg) in SPARSE_MLA_ARCHITECTURES or cfg.get("index_topk"):
            heads = _int(cfg.get("index_n_heads") or 64, "index_n_heads")
            dim = _int(cfg.get("index_head_dim") or 128, "index_head_dim")
            total += layers * (q_rank * heads * dim * proj_bytes + hidden * (dim + heads) * 2)
    experts = _num_experts(cfg)
    if experts:
        dense = _int(cfg.get("first_k_dense_replace") or 0, "first_k_dense_replace")
        total += max(0, layers - dense) * hidden * experts * 2
    return total


def weight_bytes_from_index(index):
    """metadata.total_size of model.safetensors.index.json."""
    try:
        return _int(index["metadata"]["total_size"], "metadata.total_size")
    except (KeyError, TypeError) as exc:
        raise ModelFitError(
            "model.safetensors.index.json needs metadata.total_size "
            f"(found keys {sorted(index) if isinstance(index, dict) else type(index).__name__})"
        ) from exc


def weight_bytes_from_files(files):
    """Sum of *.safetensors sizes in a repository listing (path/rfilename, size)."""
    total = 0
    for item in files or []:
        name = str(item.get("path") or item.get("rfilename") or "")
        if name.endswith(".safetensors") and item.get("size") is not None:
            total += _int(item["size"], f"size of {name}")
    if not total:
        raise ModelFitError("the repository file listing holds no *.safetensors file with a size")
    return total


# ---------------------------------------------------------------------------
# Serve options
# ---------------------------------------------------------------------------

_SERVE_DEFAULTS = {
    "tensor_parallel_size": 1,
    "data_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "decode_context_parallel_size": 1,
    "prefill_context_parallel_size": 1,
    "enable_expert_parallel": False,
    "max_model_len": None,
    "gpu_memory_utilization": None,  # engine.gpu_share: the entry's, else vLLM's default
    "kv_cache_dtype": "auto",
    "block_size": None,
    "max_num_batched_tokens": None,
    "max_num_seqs": None,
    "enforce_eager": False,
    "speculative_config": None,
    "kv_cache_memory_bytes": None,
    "mamba_ssm_cache_dtype": "auto",
    "dtype": "auto",
    # Expert-parallel load balancing (vLLM's --enable-eplb, --eplb-config): only its
    # refusals are modelled; redundant experts' weights are not counted.
    "enable_eplb": False,
    "eplb_config": None,
}
# Serve options with no effect on GPU memory (parsers, names, network, logging).
NO_MEMORY_EFFECT = {
    "trust_remote_code", "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser",
    "served_model_name", "host", "port", "shutdown_timeout", "uvicorn_log_level",
    "disable_log_requests", "disable_log_stats", "enable_log_requests", "api_key",
    "chat_template", "default_chat_template_kwargs", "override_generation_config",
    "generation_config", "tokenizer", "tokenizer_mode", "revision", "download_dir",
    "load_format", "seed", "enable_prefix_caching", "enable_chunked_prefill",
    "async_scheduling", "attention_backend", "distributed_executor_backend",
    "enable_force_include_usage", "enable_prompt_tokens_details", "max_log_len",
    "limit_mm_per_prompt", "mm_processor_cache_gb", "mm_processor_cache_type",
    "allowed_local_media_path", "quantization", "model_loader_extra_config",
    "enable_flashinfer_autotune",
    # Only lowers memory (no vision encoder); the estimate stays on the safe side.
    "language_model_only",
    # Which domains media URLs may come from (vllm/multimodal/media/connector.py): a
    # request-time check, no memory.
    "allowed_media_domains",
}


_MTP_METHODS = {"mtp", "deepseek_mtp", "qwen3_next_mtp", "glm4_moe_mtp", "mimo_mtp",
                "ernie_mtp", "minimax_m2_mtp"}


def _speculative(spec, attention):
    """(num_speculative_tokens, draft layers sized, what is not understood)."""
    if isinstance(spec, str) and spec:
        try:
            spec = json.loads(spec)
        except ValueError:
            spec = {"invalid": spec}
    if spec in (None, "", {}):
        return 0, 0, []
    if not isinstance(spec, dict) or "invalid" in spec:
        return 0, 0, [f"speculative_config {spec!r} (wanted a dict or JSON)"]
    tokens = _int(spec.get("num_speculative_tokens") or 0, "num_speculative_tokens")
    method = str(spec.get("method") or "").lower()
    layers, notes = 0, []
    if method in _MTP_METHODS or method.endswith("_mtp"):
        layers = attention["mtp_layers"]
        if not layers:
            notes.append(
                f"speculative_config method {method}: config.json declares no MTP layers "
                "(num_nextn_predict_layers), so the draft's KV cache is not counted"
            )
    elif method not in ("ngram", "suffix"):
        notes.append(
            f"speculative_config method {method or '?'} with draft model "
            f"{spec.get('model') or '?'}: the draft model's KV cache is not counted"
        )
    return tokens, layers, notes


def _serve(serve, attention, hw=None):
    serve = dict(serve or {})
    out = {}
    for key, default in _SERVE_DEFAULTS.items():
        value = serve.get(key)
        out[key] = default if value is None or value == "" else value
    for key in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                "decode_context_parallel_size", "prefill_context_parallel_size"):
        out[key] = _int(out[key], key)
        if out[key] < 1:
            raise ModelFitError(f"{key} must be >= 1, got {out[key]}")
    out["enable_expert_parallel"] = _bool(out["enable_expert_parallel"])
    if out["block_size"] is not None:
        out["block_size"] = _int(out["block_size"], "block_size")
    else:
        out["block_size"] = (SPARSE_MLA_BLOCK_SIZE if attention["kind"] == "sparse MLA"
                             else DEFAULT_BLOCK_SIZE)
    out["enforce_eager"] = _bool(out["enforce_eager"])
    # vLLM's own batch defaults for this GPU (an OpenAI server), else the >= 70 GiB ones.
    tokens_default, seqs_default = (
        fit_overhead.server_batch_defaults(hw["memory_total_bytes"], hw.get("name")) if hw
        else (DEFAULT_MAX_NUM_BATCHED_TOKENS, 1024))
    out["max_num_batched_tokens"] = _int(
        out["max_num_batched_tokens"] or tokens_default, "max_num_batched_tokens")
    out["max_num_seqs"] = _int(out["max_num_seqs"] or seqs_default, "max_num_seqs")
    try:
        util = Decimal(str(engine.gpu_share(serve)))  # the entry's, else vLLM's default
    except ValueError as exc:
        raise ModelFitError(str(exc)) from None
    if not Decimal(0) < util <= Decimal(1):
        raise ModelFitError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    out["gpu_memory_utilization"] = util
    tokens, draft, spec_notes = _speculative(out["speculative_config"], attention)
    out["num_speculative_tokens"] = tokens
    out["draft_layers"] = draft
    out["not_understood"] = spec_notes + [
        f"{key}={serve[key]!r}" for key in sorted(serve)
        if key not in _SERVE_DEFAULTS and key not in NO_MEMORY_EFFECT
    ]
    return out


def _gpu(gpu):
    gpu = dict(gpu or {})
    missing = [k for k in ("count", "memory_total_bytes") if gpu.get(k) in (None, "")]
    if missing:
        raise ModelFitError(f"GPU facts need {', '.join(missing)} (found keys {sorted(gpu)})")
    return {
        "count": _int(gpu["count"], "gpu count"),
        "memory_total_bytes": _int(gpu["memory_total_bytes"], "memory_total_bytes"),
        "compute_capability": gpu.get("compute_capability"),
        "interconnect": str(gpu.get("interconnect") or "unknown").lower(),
        "name": gpu.get("name"),
    }


def _num_experts(cfg):
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        if cfg.get(key):
            return _int(cfg[key], key)
    return 0


def _expert_intermediate(cfg):
    for key in ("moe_intermediate_size", "intermediate_size"):
        if cfg.get(key):
            return _int(cfg[key], key)
    return 0


# ---------------------------------------------------------------------------
# Warnings
# ---------------------------------------------------------------------------


def _layout_warnings(attention, opts, hw, cfg, quant, refusals):
    """Warnings about the layout; what vLLM refuses to start goes to `refusals`."""
    warnings = []
    tp = opts["tensor_parallel_size"]
    dp = opts["data_parallel_size"]
    dcp = opts["decode_context_parallel_size"]
    nodes = opts.get("nodes", 1)
    gpus_needed = tp * dp * opts["pipeline_parallel_size"] // nodes
    experts = _num_experts(cfg)
    mla = attention["kind"] in ("MLA", "sparse MLA")
    if gpus_needed > hw["count"]:
        across = f" on each of {nodes} hosts" if nodes > 1 else ""
        warnings.append(
            f"tensor_parallel_size {tp} x pipeline_parallel_size "
            f"{opts['pipeline_parallel_size']} x data_parallel_size {dp} needs {gpus_needed} "
            f"GPUs{across}, the host has {hw['count']}"
        )
    if mla and tp > 1 and hw["interconnect"] == "pcie":
        where = ("every rank holds the whole latent cache" if dcp == 1
                 else f"decode context parallel {dcp} splits the latent cache")
        warnings.append(
            f"MLA with tensor parallel {tp} across PCIe-only GPUs: {where} and each layer "
            "all-reduces over PCIe, so decode is all-reduce bound; prefer expert/data "
            "parallel or NVLink GPUs"
        )
    if attention["num_attention_heads"] % tp:
        refusals.append(
            f"tensor parallel: tensor_parallel_size {tp} does not divide num_attention_heads "
            f"{attention['num_attention_heads']}"
        )
    kvh = attention["num_kv_heads"]
    if not mla and kvh % tp and tp % kvh:
        # vLLM's QKVParallelLinear asserts tp % kv_heads == 0 (replicated) or
        # kv_heads % tp == 0 (split).
        refusals.append(
            f"tensor parallel: tensor_parallel_size {tp} neither divides nor is a multiple of "
            f"the {kvh} KV heads, so they cannot be sharded or replicated evenly"
        )
    refusals += _dcp_refusals(attention, opts)
    refusals += _eplb_refusals(opts, experts)
    if opts["enable_expert_parallel"]:
        if not experts:
            warnings.append("enable_expert_parallel is set but config.json declares no experts")
        elif experts % (tp * dp) and not opts["enable_eplb"]:
            # Without EPLB vLLM places the remainder (expert_map_manager.py: remainder =
            # global_num_experts % ep_size) and starts: a warning, not a refusal.
            warnings.append(
                f"{experts} experts do not split evenly over expert-parallel size {tp * dp}"
            )
    block = quant.get("block")
    inter = _expert_intermediate(cfg)
    if (quant["weight_format"] == "fp8" and block and experts and inter
            and not opts["enable_expert_parallel"] and (inter // tp) % int(block[0])):
        # vllm-project/recipes models/MiniMaxAI/MiniMax-M2.5.yaml (strategy_overrides):
        # "Pure TP=8 fails on the FP8 block-quantized gate_up weights:
        # intermediate_size / 8 = 192 is not divisible by block_n = 128."
        refusals.append(
            f"FP8 block split: known to fail: FP8 block {block[0]} weights with tensor "
            f"parallel {tp} and no "
            f"expert parallel: the expert width {inter} / {tp} = {inter // tp} is not a "
            f"multiple of {block[0]}, so the weights cannot be split (vllm-project/recipes "
            "MiniMax-M2.5: pure TP8 fails); enable expert parallel or use a smaller TP"
        )
    return warnings


def _dcp_refusals(attention, opts):
    """Decode context parallel layouts vLLM refuses to start."""
    warnings = []
    tp = opts["tensor_parallel_size"]
    dcp = opts["decode_context_parallel_size"]
    if dcp == 1:
        return warnings
    if tp % dcp:
        warnings.append(
            f"decode context parallel: decode_context_parallel_size {dcp} does not divide "
            f"tensor_parallel_size {tp} (vLLM runs DCP inside the tensor-parallel group)"
        )
    if attention["kind"] not in ("MLA", "sparse MLA"):
        copies = max(1, tp // attention["num_kv_heads"])
        if dcp > copies:
            warnings.append(
                f"decode context parallel: decode_context_parallel_size {dcp} exceeds the "
                f"{copies} tensor-parallel copies of each of the {attention['num_kv_heads']} KV "
                "heads (DCP shares a KV head's tokens among its copies)"
            )
    if any(c["type"] == "sliding" for c in attention["layer_classes"]):
        warnings.append(
            "decode context parallel: with sliding-window layers vLLM's SlidingWindowSpec "
            "asserts decode_context_parallel_size == 1 (kv_cache_interface.py)"
        )
    return warnings


def _redundant_experts(opts):
    eplb = opts["eplb_config"]
    if isinstance(eplb, str) and eplb:
        try:
            eplb = json.loads(eplb)
        except ValueError:
            eplb = {}
    return _int((eplb or {}).get("num_redundant_experts") or 0, "num_redundant_experts") if (
        isinstance(eplb, dict)) else 0


def _eplb_refusals(opts, experts):
    """Expert-parallel load balancing layouts vLLM 0.32 refuses to start.

    vllm/config/parallel.py (ParallelConfig validation): EPLB needs
    enable_expert_parallel, and tensor x prefill-context x data parallel > 1;
    num_redundant_experts needs EPLB. vllm/model_executor/layers/fused_moe/layer.py
    (line 262 in 0.32.0): with EPLB "EPLB currently only supports even distribution of
    experts across ranks. Got {global_num_experts} experts and {ep_size} EP ranks.",
    global_num_experts = experts + num_redundant_experts (determine_expert_counts),
    ep_size = tensor x data (x prefill-context) parallel."""
    refusals = []
    eplb = _bool(opts["enable_eplb"])
    redundant = _redundant_experts(opts)
    tp, dp, pcp = (opts[k] for k in ("tensor_parallel_size", "data_parallel_size",
                                     "prefill_context_parallel_size"))
    if not eplb:
        if redundant:
            refusals.append(
                f"EPLB: eplb_config.num_redundant_experts {redundant} without enable_eplb "
                "(redundant experts need EPLB on, config/parallel.py)")
        return refusals
    if not opts["enable_expert_parallel"]:
        refusals.append("EPLB: enable_eplb without enable_expert_parallel "
                        '("enable_expert_parallel must be True to use EPLB", config/parallel.py)')
    if tp * pcp * dp <= 1:
        refusals.append(f"EPLB: enable_eplb with tensor {tp} x prefill-context {pcp} x data "
                        f"{dp} parallel = 1, and EPLB needs more than one rank "
                        "(config/parallel.py)")
    ep_size = tp * dp * pcp
    total = experts + redundant
    if experts and opts["enable_expert_parallel"] and total % ep_size:
        refusals.append(
            f"EPLB: enable_eplb with {total} experts ({experts} + {redundant} redundant) over "
            f"{ep_size} expert-parallel ranks: {total} % {ep_size} = {total % ep_size}, an "
            'uneven split ("EPLB currently only supports even '
            'distribution of experts across ranks", model_executor/layers/fused_moe/layer.py)')
    return refusals


# vLLM 0.32's quantization configs' get_min_capability() (major x 10 + minor), which
# VllmConfig._get_quantization_config (vllm/config/vllm.py, line 900 in 0.32.0) compares
# with the GPU's: "The quantization method X is not supported for the current GPU.
# Minimum capability: Y. Current capability: Z." Keyed by the method vLLM resolves for
# the checkpoints model_fit recognises (get_quantization_config's method_to_config,
# vllm/model_executor/layers/quantization/__init__.py); file:line in vLLM 0.32.0.
QUANT_MIN_CAPABILITY = {
    "fp8": (75, "Fp8Config", "model_executor/layers/quantization/fp8.py:146"),
    "modelopt": (80, "ModelOptFp8Config", "model_executor/layers/quantization/modelopt.py:445"),
    "modelopt_fp4": (75, "ModelOptNvFp4Config",
                     "model_executor/layers/quantization/modelopt.py:768"),
    "modelopt_mxfp8": (80, "ModelOptMxFp8Config",
                       "model_executor/layers/quantization/modelopt.py:1200"),
    "modelopt_mixed": (75, "ModelOptMixedPrecisionConfig",
                       "model_executor/layers/quantization/modelopt.py:1616"),
    "compressed-tensors": (70, "CompressedTensorsConfig",
                           ("model_executor/layers/quantization/compressed_tensors/"
                            "compressed_tensors.py:123")),
    "mxfp4": (80, "Mxfp4Config", "model_executor/layers/quantization/mxfp4.py:71"),
    "gptq": (60, "AutoGPTQConfig", "model_executor/layers/quantization/auto_gptq.py:182"),
    "gptq_marlin": (60, "AutoGPTQConfig", "model_executor/layers/quantization/auto_gptq.py:182"),
    "awq": (75, "AutoAWQConfig", "model_executor/layers/quantization/auto_awq.py:233"),
    "awq_marlin": (75, "AutoAWQConfig", "model_executor/layers/quantization/auto_awq.py:233"),
}


def vllm_quant_method(quant):
    """The method name vLLM 0.32 resolves for a find_quantization result, or None.

    modelopt checkpoints resolve by their quant_algo (override_quantization_method in
    modelopt.py): NVFP4 to modelopt_fp4, MXFP8 to modelopt_mxfp8, MIXED_PRECISION to
    modelopt_mixed, FP8 variants to modelopt."""
    method = quant.get("method")
    if not method:
        return None
    if method.startswith("modelopt"):
        scheme = str(quant.get("scheme") or "").upper()
        if quant.get("weight_format") == "nvfp4":
            return "modelopt_fp4"
        if "MXFP8" in scheme:
            return "modelopt_mxfp8"
        if "MIXED" in scheme:
            return "modelopt_mixed"
        return "modelopt"
    return method if method in QUANT_MIN_CAPABILITY else None


def _quant_capability_refusals(quant, hw):
    cc = parse_compute_capability(hw["compute_capability"]) if hw["compute_capability"] else None
    method = vllm_quant_method(quant)
    if cc is None or method is None:
        return []
    need, cls, where = QUANT_MIN_CAPABILITY[method]
    have = cc[0] * 10 + cc[1]
    if have >= need:
        return []
    return [(f"quantization: {method} ({quant['scheme']}) needs compute capability "
             f"{need // 10}.{need % 10} or newer ({cls}.get_min_capability() = {need}, vLLM "
             f"0.32 {where}); the GPUs are {hw['compute_capability']} ({have}) "
             f'("The quantization method {method} is not supported for the current GPU. '
             f'Minimum capability: {need}. Current capability: {have}.")')]


def _platform_warnings(quant, hw, opts, cfg, versions):
    warnings = []
    cc = parse_compute_capability(hw["compute_capability"]) if hw["compute_capability"] else None
    vllm_version = versions.get("vllm_version")
    if vllm_version and versions.get("min_vllm") and (
            parse_version(vllm_version) < parse_version(versions["min_vllm"])):
        warnings.append(
            f"vLLM {vllm_version} is older than {versions['min_vllm']}, the minimum the "
            "catalog states for this model (vllm-project/recipes min_vllm_version)"
        )
    if cc is None:
        return warnings
    sm12x = cc[0] == 12  # noqa: PLR2004 - SM 12.x
    if quant["weight_format"] == "nvfp4" and cc < (10, 0):
        warnings.append(
            f"NVFP4 weights on compute capability {hw['compute_capability']}: FP4 tensor cores "
            "need Blackwell (10.x/12.x); older GPUs fall back to slower kernels or refuse"
        )
    if (sm12x and quant["weight_format"] == "nvfp4" and _num_experts(cfg)
            and opts["enable_expert_parallel"]):
        warnings.append(
            f"NVFP4 MoE with expert parallel on SM {hw['compute_capability']}: vLLM's NVFP4 MoE "
            "GEMM has failed on SM12x with expert parallel while the same model ran without it "
            "(vllm-project/vllm issue 32826); test it or run without enable_expert_parallel"
        )
    verified = versions.get("verified_vllm")
    arch = f"sm{cc[0]}{cc[1]}"
    if not verified and sm12x:
        verified = versions.get("verified_sm120_vllm")
    if vllm_version and not verified:
        warnings.append(
            f"no vLLM version is marked verified for {arch} in the catalog: vLLM {vllm_version} "
            "is unproven on this GPU architecture"
        )
    if vllm_version and verified and parse_version(vllm_version) != parse_version(verified):
        relation = "older than" if parse_version(vllm_version) < parse_version(verified) else (
            "newer than")
        warnings.append(
            f"vLLM {vllm_version} is {relation} {verified}, the version the catalog marks as "
            f"verified for {arch}: releases on both sides have regressed {arch} kernels, so "
            "verify this one before relying on it"
        )
    return warnings


# ---------------------------------------------------------------------------
# The whole report
# ---------------------------------------------------------------------------


def _overhead_class(attention):
    if attention["kind"] == "sparse MLA":
        return "sparse_mla"
    if attention["kind"] == "MLA":
        return "mla"
    if any(c["type"] != "full" for c in attention["layer_classes"]):
        return "hybrid"
    return "full"


# The fit's end-to-end error on the unsafe side (it promises more KV cache than vLLM
# finds), as a share of the GPU's memory.total: bench/fit.py's largest over-promise is
# +1.31 GiB (qwen3-235b-a22b-fp8-h100-tp4-v0.9.2, held apart: 1.6 % of the H100's 79.6
# GiB); rounded up to 2 %. A fit whose margin is smaller may still fail vLLM's KV check.
FIT_ERROR_FRACTION = Decimal("0.02")

# vLLM 0.32's own text when VLLM_ALLOW_LONG_MAX_MODEL_LEN lets max_model_len past the
# model's positions (vllm/config/model.py, _get_and_verify_max_len).
LONG_MAX_MODEL_LEN_WARNING = (
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
    "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to "
    "nan. If the model uses absolute position encoding, positions exceeding "
    "derived_max_model_len will cause a CUDA array out-of-bounds error.")


def refusal_rule(refusal):
    """The rule a refusal names: its text before the first ': '."""
    return str(refusal).split(": ", 1)[0]


def _verdict(report):
    fits = report["fits"]
    gpus_needed = report["gpus_needed"]
    margin = report["margin_bytes_per_gpu"]
    if report["refusals"]:
        return "vLLM refuses to start it: " + "; ".join(report["refusals"])
    if fits:
        return (
            f"fits: {report['max_len_requests_at_once']} max-length request(s) at once, "
            f"{_gib(margin)} ({margin} bytes) per GPU to spare after one"
        )
    if gpus_needed > report["gpus_available"]:
        across = f" on each of {report['nodes']} hosts" if report.get("nodes", 1) > 1 else ""
        return (f"does not fit: needs {gpus_needed} GPUs{across}, "
                f"has {report['gpus_available']}")
    return (
        f"does not fit: {_gib(-margin)} ({-margin} bytes) per GPU short of one "
        f"{report['max_model_len']}-token request after the weights and the overhead"
    )


def _thin_margin_warning(report, hw):
    """A fit with less to spare than the fit's own error may still fail vLLM's KV check."""
    advised = int(FIT_ERROR_FRACTION * hw["memory_total_bytes"])
    margin = report["margin_bytes_per_gpu"]
    if report["fits"] and margin < advised:
        report["warnings"].append(
            f"thin margin: {_gib(margin)} per GPU to spare after one max-length request is "
            f"less than the fit's known error ({FIT_ERROR_FRACTION * 100:.0f} % of "
            f"memory.total, {_gib(advised)}: bench/fit.py's largest over-promise is 1.6 %), so "
            "the start may still fail vLLM's KV cache check; leave at least "
            f"{_gib(advised)} per GPU (a lower max_model_len or a higher "
            "gpu_memory_utilization)")


def _dtype_bytes(name, fallback):
    return _DTYPE_BYTES.get(str(name).lower()) or fallback


def _resolve_overhead(context, overhead_bytes_per_gpu):
    """(bytes, class, source, terms): the given figure, or the modelled terms."""
    attention, cfg, opts, hw = (context[k] for k in ("attention", "cfg", "opts", "hw"))
    overhead_class = _overhead_class(attention)
    version = context["vllm_version"]
    terms = fit_overhead.overhead_terms(
        cfg, memory_total_bytes=hw["memory_total_bytes"],
        gpu_memory_utilization=opts["gpu_memory_utilization"],
        tp=opts["tensor_parallel_size"], pp=opts["pipeline_parallel_size"],
        expert_parallel=opts["enable_expert_parallel"],
        max_num_batched_tokens=opts["max_num_batched_tokens"],
        max_num_seqs=opts["max_num_seqs"], layers=attention["num_layers"],
        vllm_version_tuple=parse_version(version) if version not in (None, "") else None,
        enforce_eager=opts["enforce_eager"])
    if overhead_bytes_per_gpu in (None, ""):
        return (terms["total"], overhead_class, _overhead_source(terms), terms)
    return (_int(overhead_bytes_per_gpu, "overhead_bytes_per_gpu"), overhead_class, "given",
            terms)


def _model_and_state_bytes(config, cfg, opts):
    """Bytes per element of the model dtype (conv state) and of the linear-attention state."""
    model_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("dtype")
                      or "bfloat16")
    if str(opts["dtype"]).lower() != "auto":
        model_dtype = str(opts["dtype"]).lower()
    model_bytes = _dtype_bytes(model_dtype, 2)
    ssm_dtype = opts["mamba_ssm_cache_dtype"]
    if ssm_dtype == "auto":
        ssm_dtype = cfg.get("mamba_ssm_dtype") or model_dtype
    return model_bytes, _dtype_bytes(ssm_dtype, model_bytes)


def _all_warnings(context):
    attention, opts, hw, cfg, quant = (context[k] for k in ("attention", "opts", "hw", "cfg",
                                                            "quant"))
    refusals = context["refusals"]
    warnings = _layout_warnings(attention, opts, hw, cfg, quant, refusals)
    warnings += _platform_warnings(quant, hw, opts, cfg, context["versions"])
    refusals += _quant_capability_refusals(quant, hw)
    limit = context["position_limit"]
    if limit and opts["max_model_len"] > limit:
        # vLLM's ModelConfig refuses a max_model_len beyond the model's positions unless
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN is 1 or true (vllm/envs.py), then it warns.
        allow = str((context["env"] or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0"))
        if allow.strip().lower() in ("1", "true"):
            warnings.append(
                f"max_model_len {opts['max_model_len']} exceeds max_position_embeddings "
                f"{limit}, allowed by the entry's env VLLM_ALLOW_LONG_MAX_MODEL_LEN={allow}; "
                f'vLLM warns: "{LONG_MAX_MODEL_LEN_WARNING}"')
        else:
            refusals.append(
                f"max_model_len: {opts['max_model_len']} exceeds max_position_embeddings "
                f'{limit} (to allow it, set env VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1" in the '
                "entry, which vLLM warns is unsafe past the positions the model was trained "
                "on)")
    if not quant["understood"]:
        warnings.append(f"quantization {quant['scheme']}: weight format not understood; the "
                        "weights are sized from weight_bytes only")
    warnings += [f"not understood (may change memory; not counted): {item}"
                 for item in opts["not_understood"]]
    warnings += [f"assumption: {note}" for note in attention["notes"]]
    revision = context["revision"]
    if revision not in (None, "") and not _COMMIT.match(str(revision)):
        warnings.append(
            f"revision {revision!r} is not pinned: a branch or tag moves, so the weights "
            "served can change between runs; pin a 40-hex commit in the catalog"
        )
    return warnings


def model_fit(config, *, serve=None, gpu=None, weight_bytes=None, hf_quant_config=None,
              vllm_version=None, verified_sm120_vllm=None, overhead_bytes_per_gpu=None,
              available_kv_bytes=None, verified_vllm=None, min_vllm=None, profile=None,
              revision=None, nodes=1, env=None):
    """The fit report for one model on one GPU box. Returns a JSON-able dict.

    env: the entry's environment (the catalog's `env`); VLLM_ALLOW_LONG_MAX_MODEL_LEN
    there turns the max_position_embeddings refusal into a warning, as in vLLM.

    nodes: the hosts one replica spans (the catalog's `nodes`); the parallel
    layout's GPUs are split evenly over them, so each host needs
    tensor x pipeline x data parallel / nodes GPUs of its own.
    """
    attention = attention_info(config)
    hw = _gpu(gpu)
    opts = _serve(serve, attention, hw)
    opts["nodes"] = _nodes(nodes, opts)
    cfg = text_config(config)
    overhead, overhead_class, overhead_source, overhead_terms = _resolve_overhead(
        {"attention": attention, "cfg": cfg, "opts": opts, "hw": hw,
         "vllm_version": vllm_version}, overhead_bytes_per_gpu)
    if weight_bytes in (None, ""):
        raise ModelFitError("weight_bytes (total bytes of the weights) is required")
    weights_total = _int(weight_bytes, "weight_bytes")
    quant = find_quantization(config, hf_quant_config)
    kv_dtype, kv_dtype_bytes, kv_dtype_source = resolve_kv_cache_dtype(
        opts["kv_cache_dtype"], config, quant, attention)
    model_bytes, ssm_bytes = _model_and_state_bytes(config, cfg, opts)
    position_limit = _int(cfg.get("max_position_embeddings") or 0, "max_position_embeddings")
    opts["max_model_len"] = _int(opts["max_model_len"] or position_limit, "max_model_len")
    if not opts["max_model_len"]:
        raise ModelFitError("max_model_len is neither in serve nor max_position_embeddings")

    layout = kv_layout(attention, opts, kv_dtype, kv_dtype_bytes, ssm_bytes, model_bytes)
    tp, dp, dcp = (opts[k] for k in ("tensor_parallel_size", "data_parallel_size",
                                     "decode_context_parallel_size"))
    gpus_needed = tp * dp * opts["pipeline_parallel_size"] // opts["nodes"]
    # Each data-parallel replica holds a full tensor-parallel shard of the
    # weights (with expert parallel the experts spread over tp x dp GPUs, so
    # this is an upper bound when dp > 1).
    # Replicated weights (the MLA down-projections, the indexer, the router) are on
    # every tensor-parallel rank in full; the rest is split.
    replicated = min(replicated_weight_bytes(config, quant), weights_total) if tp > 1 else 0
    weights_per_gpu = (_cdiv(weights_total - replicated, tp * opts["pipeline_parallel_size"])
                       + _cdiv(replicated, opts["pipeline_parallel_size"]))
    usable = int(opts["gpu_memory_utilization"] * hw["memory_total_bytes"])
    if opts["kv_cache_memory_bytes"] not in (None, ""):
        kv_budget = _int(opts["kv_cache_memory_bytes"], "kv_cache_memory_bytes")
    else:
        kv_budget = usable - weights_per_gpu - overhead
    capacity = kv_capacity(layout, kv_budget, opts, vllm_version)
    one_request_bytes = layout["blocks_per_max_len_request"] * layout["pool_bytes_per_block"]
    margin = kv_budget - one_request_bytes
    kv_refusal = _kv_cache_refusal(kv_budget, one_request_bytes, opts["max_model_len"],
                                   lambda length: _one_request_bytes(
                                       attention, dict(opts, max_model_len=length),
                                       (kv_dtype, kv_dtype_bytes, ssm_bytes, model_bytes)))
    refusals = []
    warnings = _all_warnings({
        "attention": attention, "opts": opts, "hw": hw, "cfg": cfg, "quant": quant,
        "refusals": refusals,
        "position_limit": position_limit, "revision": revision, "env": env,
        "versions": {"vllm_version": vllm_version, "verified_vllm": verified_vllm,
                     "verified_sm120_vllm": verified_sm120_vllm, "min_vllm": min_vllm}})
    # In vLLM's order: the layout and quantization checks come at configuration and model
    # construction, the KV cache check after the weights are loaded.
    refusals += [kv_refusal] if kv_refusal else []
    experts = _num_experts(cfg)
    report = {
        "architecture": attention["architecture"],
        "revision": revision,
        "attention": {k: v for k, v in attention.items() if k != "architecture"},
        "attention_classes": attention_classes_text(attention, opts, layout),
        "tensor_parallel_size": tp,
        "data_parallel_size": dp,
        "pipeline_parallel_size": opts["pipeline_parallel_size"],
        "decode_context_parallel_size": dcp,
        "enable_expert_parallel": opts["enable_expert_parallel"],
        "num_speculative_tokens": opts["num_speculative_tokens"],
        "draft_layers": opts["draft_layers"],
        "num_experts": experts,
        # With expert parallel each GPU holds whole experts; without, a 1/tp
        # slice of every expert.
        "experts_per_gpu": (experts // (tp * dp) if opts["enable_expert_parallel"]
                            else experts) if experts else None,
        **kv_heads_per_gpu(attention, tp, dcp),
        "quantization": quant,
        "kv_cache_dtype": kv_dtype,
        "kv_cache_dtype_bytes": kv_dtype_bytes,
        "kv_cache_dtype_source": kv_dtype_source,
        "kv_bytes_per_token_per_gpu": _bytes_per_token(layout, dcp),
        "kv_page_bytes_per_layer": layout["page_bytes"],
        "kv_cache_groups": layout["num_groups"],
        "kv_layout_specs": layout["specs"],
        "kv_group_size": layout["group_size"],
        "block_size": layout["min_block_size"],
        "weights_bytes_total": weights_total,
        "weights_bytes_per_gpu": weights_per_gpu,
        "weights_replicated_bytes_per_gpu": replicated,
        "nodes": opts["nodes"],
        # GPUs each host of the replica needs (all of them when nodes is 1).
        "gpus_needed": gpus_needed,
        "gpus_available": hw["count"],
        "gpu_memory_bytes": hw["memory_total_bytes"],
        "gpu_memory_utilization": float(opts["gpu_memory_utilization"]),
        "usable_bytes_per_gpu": usable,
        "overhead_bytes_per_gpu": overhead,
        "overhead_class": overhead_class,
        "overhead_source": overhead_source,
        # The modelled terms (bytes per GPU), also when overhead_bytes_per_gpu is given.
        "overhead_terms": overhead_terms,
        "max_num_batched_tokens": opts["max_num_batched_tokens"],
        "max_num_seqs": opts["max_num_seqs"],
        "kv_budget_bytes_per_gpu": kv_budget,
        "kv_cache_blocks": capacity["num_blocks"],
        "kv_cache_tokens": capacity["tokens"],
        "kv_cache_log_formula": capacity["log_formula"],
        "max_model_len": opts["max_model_len"],
        "blocks_per_max_len_request": layout["blocks_per_max_len_request"],
        "kv_bytes_per_max_len_request_per_gpu": one_request_bytes,
        # Every data-parallel replica has its own KV cache of this size.
        "max_len_requests_at_once": capacity["num_blocks"]
        // layout["blocks_per_max_len_request"] * dp,
        "max_concurrency": round(capacity["max_concurrency"] * dp, 2),
        # Enough GPUs and room for one max-length request (equal counts as enough), in a
        # layout vLLM starts.
        "fits": gpus_needed <= hw["count"] and margin >= 0 and not refusals,
        # What vLLM refuses to start, each with the rule and the numbers.
        "refusals": refusals,
        # The one of them that is vLLM's start-up KV cache check (None when it passes).
        "kv_refusal": kv_refusal,
        "margin_bytes_per_gpu": margin,
        "not_understood": opts["not_understood"],
        "profile": profile,
        "warnings": warnings,
    }
    report["verdict"] = _verdict(report)
    _thin_margin_warning(report, hw)
    if available_kv_bytes not in (None, ""):
        logged = kv_capacity(layout, _int(available_kv_bytes, "available_kv_bytes"), opts,
                             vllm_version)
        report["predicted_vllm_kv_cache_tokens"] = logged["tokens"]
        report["predicted_vllm_kv_cache_blocks"] = logged["num_blocks"]
        report["predicted_vllm_max_concurrency"] = round(logged["max_concurrency"], 2)
    return report


def _one_request_bytes(attention, opts, dtypes):
    layout = kv_layout(attention, opts, *dtypes)
    return layout["blocks_per_max_len_request"] * layout["pool_bytes_per_block"]


def _format_gib(value):
    """vLLM's format_gib (vllm/utils/mem_utils.py): round(bytes / GiB, 2)."""
    return f"{round(value / GIB, 2)}"


def estimate_max_model_len(available_bytes, max_model_len, needed_bytes):
    """The longest max_model_len whose one request fits available_bytes, 0 if none.

    vLLM's estimate_max_model_len (vllm/v1/core/kv_cache_utils.py): a binary search over
    1..max_model_len of the memory one request of that length needs."""
    if needed_bytes(1) > available_bytes:
        return 0
    left, right, result = 1, max_model_len, 1
    while left <= right:
        mid = (left + right) // 2
        if needed_bytes(mid) <= available_bytes:
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


def _kv_cache_refusal(available, needed, max_model_len, needed_bytes):
    """vLLM 0.32's start-up check, _check_enough_kv_cache_memory (vllm/v1/core/
    kv_cache_utils.py, line 1003 in 0.32.0), in its own words and with its estimate."""
    if available <= 0:
        return (f"KV cache: max_model_len {max_model_len}: no memory is left for the KV cache "
                f"({_format_gib(available)} GiB per GPU after the weights and the "
                'overhead) ("No available memory for the cache '
                'blocks. Try increasing `gpu_memory_utilization`")')
    if needed <= available:
        return None
    estimate = estimate_max_model_len(available, max_model_len, needed_bytes)
    estimated = (f" Based on the available memory, the estimated maximum model length is "
                 f"{estimate}." if estimate > 0 else "")
    return (f"KV cache: max_model_len {max_model_len} against the KV cache for one request: "
            f'"To serve '
            f"at least one request with the model's max seq len ({max_model_len}), "
            f"{_format_gib(needed)} GiB KV cache is needed, which is larger than the "
            f'available KV cache memory ({_format_gib(available)} GiB).{estimated}" '
            f"({_gib(needed - available)}, {needed - available} bytes, per GPU short)")


def size_model(config, *, unsized_why=None, repo_id=None, **kwargs):
    """model_fit's report with sized=True, or the report of a model that cannot be sized.

    A model is not sized when its config.json could not be read (unsized_why says why),
    when no GPU facts are known, or when model_fit cannot size it (an attention design
    it does not know, a config.json without the sizes it needs). That report has
    sized=False, fits=False, no refusals or warnings, `unsized_why`, and a verdict
    naming the repository, the revision and the reason."""
    revision = kwargs.get("revision")
    why = unsized_why
    if not why and not isinstance(config, dict):
        why = "no config.json"
    if not why and not isinstance(kwargs.get("gpu"), dict):
        why = ("no GPU facts: nvidia-smi did not answer and no hardware profile describes the "
               "GPUs")
    if not why:
        try:
            return dict(model_fit(config, **kwargs), sized=True)
        except ModelFitError as exc:
            why = str(exc)
    return {"sized": False, "fits": False, "refusals": [], "warnings": [],
            "repo_id": repo_id, "revision": revision, "unsized_why": why,
            "verdict": f"cannot size {repo_id or 'the model'} at revision {revision}: {why}"}


def _nodes(nodes, opts):
    """The replica's host count, which must split the layout's GPUs evenly."""
    count = _int(1 if nodes in (None, "") else nodes, "nodes")
    total = (opts["tensor_parallel_size"] * opts["data_parallel_size"]
             * opts["pipeline_parallel_size"])
    if count < 1 or total % count:
        raise ModelFitError(
            f"nodes {count} must be 1 or more and divide the layout's {total} GPUs "
            "(tensor x pipeline x data parallel)")
    return count


def _overhead_source(terms):
    """The modelled overhead in words, term by term."""
    which = ("sampler" if terms["activation_sampler"] >= terms["activation_forward"]
             else "forward pass")
    return (f"modelled: driver reserve {_gib(terms['driver_reserve'])}, non-torch "
            f"{_gib(terms['non_torch'])}, activation peak ({which}) {_gib(terms['activation'])}, "
            f"CUDA graphs {_gib(terms['cuda_graphs'])} (fit_overhead.py, from public start-up "
            "logs)")


def _bytes_per_token(layout, dcp):
    """KV bytes a token of context costs on each GPU in the layers that grow with it."""
    total = 0
    for spec in layout["specs"]:
        if spec["type"] in ("full", "mla", "indexer"):
            total += spec["page"] // spec["block"] * spec["layers"]
    return total // dcp if total % dcp == 0 else total / dcp


def attention_classes_text(attention, opts=None, layout=None):
    """One line per layer class for people: 'full x12', 'sliding(128) x18', ..."""
    parts = []
    if attention["kind"] in ("MLA", "sparse MLA"):
        text = f"MLA latent {attention['head_dim']} x{attention['num_layers']}"
        if attention["kind"] == "sparse MLA":
            text += f" + indexer {attention['indexer_bytes_per_token']} B"
        parts.append(text)
    else:
        for cls in attention["layer_classes"]:
            if cls["type"] == "sliding":
                parts.append(f"sliding({cls['window']}) x{cls['layers']}")
            elif cls["type"] == "linear":
                state = ""
                if layout:
                    found = [s for s in layout["specs"] if s["type"] == "mamba"]
                    if found:
                        state = f", {found[0]['state_bytes']:,} B state"
                parts.append(f"linear x{cls['layers']}{state}")
            else:
                parts.append(f"full x{cls['layers']}")
    if opts and opts.get("draft_layers"):
        parts.append(f"MTP +{opts['draft_layers']}")
    return ", ".join(parts)


def gpu_from_facts(gpu_facts):
    """GPU facts as model_fit wants them, from the gpu_facts module's result.

    Takes the smallest GPU (vLLM sizes every rank by the tightest one)."""
    gpus = (gpu_facts or {}).get("gpus") or []
    if not gpus:
        raise ModelFitError("gpu_facts lists no GPU (gpus is empty)")
    smallest = min(gpus, key=lambda g: _int(g.get("memory_total_bytes") or 0, "memory"))
    return {
        "count": len(gpus),
        "memory_total_bytes": _int(smallest.get("memory_total_bytes"), "memory_total_bytes"),
        "compute_capability": smallest.get("compute_capability"),
        "interconnect": ((gpu_facts.get("topology") or {}).get("interconnect") or "unknown"),
        "name": smallest.get("name"),
    }


# ---------------------------------------------------------------------------
# Side-by-side table for reviews
# ---------------------------------------------------------------------------


def _gib(value):
    return f"{value / GIB:,.2f} GiB"


def _layout_text(fit):
    text = f"TP{fit['tensor_parallel_size']}"
    if fit.get("pipeline_parallel_size", 1) > 1:
        text += f" x PP{fit['pipeline_parallel_size']}"
    if fit["data_parallel_size"] > 1:
        text += f" x DP{fit['data_parallel_size']}"
    if fit["enable_expert_parallel"]:
        text += " + EP"
    return text + f" on {fit['gpus_needed']}/{fit['gpus_available']} GPUs"


def _dcp_text(fit):
    dcp = fit.get("decode_context_parallel_size", 1)
    if dcp == 1:
        return "1 (KV replicated per TP rank)" if fit["kv_heads_replicated"] else "1"
    return f"{dcp} (each rank holds 1/{dcp} of every request's tokens)"


def _kv_heads(fit):
    att = fit["attention"]
    if att["kind"] in ("MLA", "sparse MLA"):
        dcp = fit.get("decode_context_parallel_size", 1)
        if dcp > 1:
            return f"1 latent ({att['head_dim']}), split by token over {dcp} DCP ranks"
        return f"1 latent ({att['head_dim']}), whole on all {fit['tensor_parallel_size']} ranks"
    text = f"{fit['kv_heads_per_gpu']} of {att['num_kv_heads']}"
    if fit["kv_heads_replicated"]:
        text += f" (each on {fit['kv_replicas']} GPUs)"
    return text


def _verdict_cell(fit):
    if not fit.get("sized", True):
        return "UNSIZED"
    rules = [refusal_rule(r) for r in fit.get("refusals") or [] if r != fit.get("kv_refusal")]
    if rules:
        return f"REFUSED by vLLM ({', '.join(dict.fromkeys(rules))})"
    if fit["gpus_needed"] > fit["gpus_available"]:
        return f"DOES NOT FIT (needs {fit['gpus_needed']} GPUs)"
    margin = fit["margin_bytes_per_gpu"]
    word = "fits" if fit["fits"] else "DOES NOT FIT"
    return f"{word} ({'+' if margin >= 0 else '-'}{_gib(abs(margin))}/GPU)"


def _experts_cell(f):
    if not f["num_experts"]:
        return "dense"
    if f["enable_expert_parallel"]:
        return f"{f['num_experts']} ({f['experts_per_gpu']} whole)"
    return f"{f['num_experts']} (1/{f['tensor_parallel_size']} of each)"


def _terms_cell(f, names):
    """Two of the modelled overhead's terms, GiB (given: the model's, for comparison)."""
    terms = f.get("overhead_terms") or {}
    if not terms:
        return "-"
    return " + ".join(_gib(terms[name]) for name in names)


def _revision_cell(revision):
    """The commit pinned, short; a branch or tag says it is not pinned."""
    if revision in (None, ""):
        return "(not given)"
    if _COMMIT.match(str(revision)):
        return f"{str(revision)[:12]} (pinned)"
    return f"{revision} (NOT pinned)"


def _vllm_cell(fit):
    """'0.33.0-cuda, lock 3f0c9a61d2b84e07': the vLLM a deploy installs and its lock's digest."""
    return f"{fit.get('vllm_install') or '?'}, lock {fit.get('vllm_lock') or '(none: make lock)'}"


# Rows shown only where a report carries their key (the plan adds the vLLM lock).
OPTIONAL_ROWS = {"vLLM": "vllm_lock"}

ROWS = (
    ("architecture", lambda f: f["architecture"]),
    ("revision", lambda f: _revision_cell(f.get("revision"))),
    ("vLLM", _vllm_cell),
    ("profile", lambda f: f.get("profile") or "(none)"),
    ("attention", lambda f: f["attention"]["kind"]),
    ("layer classes", lambda f: f.get("attention_classes") or ""),
    ("layers", lambda f: str(f["attention"]["num_layers"])),
    ("layout", _layout_text),
    ("decode context parallel", _dcp_text),
    ("experts (per GPU)", _experts_cell),
    ("KV heads per GPU", _kv_heads),
    ("quantization", lambda f: f["quantization"]["scheme"]),
    ("KV cache dtype", lambda f: f"{f['kv_cache_dtype']} ({f['kv_cache_dtype_bytes']} B)"),
    ("KV bytes/token/GPU", lambda f: f"{f['kv_bytes_per_token_per_gpu']:,}"),
    ("weights total", lambda f: f"{f['weights_bytes_total'] / 1e9:,.1f} GB"),
    ("weights per GPU", lambda f: _gib(f["weights_bytes_per_gpu"])),
    ("GPU memory x util", lambda f: f"{_gib(f['gpu_memory_bytes'])} x "
     f"{f['gpu_memory_utilization']}"),
    ("overhead per GPU", lambda f: f"{_gib(f['overhead_bytes_per_gpu'])} "
     f"({f.get('overhead_class', '?')})"),
    ("  reserve+nontorch", lambda f: _terms_cell(f, ("driver_reserve", "non_torch"))),
    ("  activation+graphs", lambda f: _terms_cell(f, ("activation", "cuda_graphs"))),
    ("KV budget per GPU", lambda f: _gib(f["kv_budget_bytes_per_gpu"])),
    ("KV capacity (tokens)", lambda f: f"{f['kv_cache_tokens']:,}"),
    ("max_model_len", lambda f: f"{f['max_model_len']:,}"),
    ("max-len requests", lambda f: f"{f['max_len_requests_at_once']} "
     f"({f['max_concurrency']:.2f}x)"),
    ("verdict", _verdict_cell),
)


TABLE_LEGEND = ((
    "verdict: fits / DOES NOT FIT (+/-N GiB/GPU): the KV cache memory per GPU left after "
    "the weights, the overhead and one max_model_len request (negative: that much short "
    "of one max-length request); REFUSED by vLLM (rules): vLLM 0.32 refuses to start it; "
    "UNSIZED: no config.json or sizes to fit from"),
)


def render_table(fits, names=None, title=None):
    """Lines of a side-by-side comparison; fits is {name: report} or a list."""
    if isinstance(fits, dict):
        names = list(names or fits)
        reports = [fits[name] for name in names]
    else:
        reports = list(fits)
        names = list(names or [f"model {i + 1}" for i in range(len(reports))])
    rows = [(label, fn) for label, fn in ROWS
            if label not in OPTIONAL_ROWS or any(OPTIONAL_ROWS[label] in r for r in reports)]
    label_width = max(len(label) for label, _unused in rows)
    columns = [[fn(report) if report.get("sized", True) or fn in (_verdict_cell, _vllm_cell)
                else "-" for _unused, fn in rows] for report in reports]
    widths = [
        max([len(name)] + [len(cell) for cell in col])
        for name, col in zip(names, columns, strict=True)
    ]
    lines = []
    if title:
        lines.append(title)
    header = [n.ljust(w) for n, w in zip(names, widths, strict=True)]
    lines.append(" | ".join([" " * label_width, *header]).rstrip())
    lines.append("-+-".join(["-" * label_width] + ["-" * w for w in widths]))
    for i, (label, _unused) in enumerate(rows):
        cells = [col[i].ljust(w) for col, w in zip(columns, widths, strict=True)]
        lines.append(" | ".join([label.ljust(label_width), *cells]).rstrip())
    lines.append("")
    lines.extend(TABLE_LEGEND)
    for name, report in zip(names, reports, strict=True):
        lines.append("")
        if not report.get("sized", True):
            lines.append(f"{name}: UNSIZED: {report['verdict']}")
            lines.append(f"{name}: ways out: prefill the controller's Hugging Face cache with "
                         "the model's config.json and run with HF_HUB_OFFLINE=1 "
                         "(docs/operations.md), or deploy it unsized with "
                         "vllm_fleet_allow_unsized: true (no preflight fit)")
            continue
        lines.append(f"{name}: {report['attention']['kind']} because {report['attention']['why']}")
        lines.append(f"{name}: quantization from {report['quantization']['source']}; "
                     f"KV dtype {report['kv_cache_dtype_source']}")
        if report.get("overhead_source"):
            lines.append(f"{name}: overhead {report['overhead_source']}")
        if report["refusals"]:
            lines.append(f"{name}: vLLM refuses to start it:")
            lines.extend(f"{name}:   - {r}" for r in report["refusals"])
        else:
            lines.append(f"{name}: {report['verdict']}")
        lines.extend(f"{name}: WARNING {w}" for w in report["warnings"])
    return lines
