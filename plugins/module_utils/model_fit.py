# Copyright 2026 vllm-fleet contributors
# Apache License 2.0 (see galaxy.yml)
"""Will this model fit on these GPUs, and how much KV cache is left?

Plain functions over the model's config.json (and hf_quant_config.json), the
catalog's serve options and GPU facts. Standard library only: this runs on the
controller through a filter and on targets through the model_fit module.

The KV cache arithmetic follows vLLM v1 (vllm/v1/kv_cache_interface.py and
vllm/v1/core/kv_cache_utils.py):

* GQA/MHA layer page = 2 (K and V) x block_size x kv_heads_per_rank x head_dim
  x dtype bytes, with kv_heads_per_rank = max(1, kv_heads // tp) (a KV head is
  replicated when tensor parallel > KV heads).
* MLA layer page = block_size x (kv_lora_rank + qk_rope_head_dim) x dtype bytes,
  the same on every tensor-parallel rank (the latent is not split).
* num_blocks = available_bytes // page_bytes // num_layers; the logged
  "GPU KV cache size" is num_blocks x block_size tokens; "Maximum concurrency"
  is num_blocks / ceil(max_model_len / block_size).
"""

from decimal import Decimal

GIB = 1024**3
MIB = 1024**2
DEFAULT_BLOCK_SIZE = 16
# Memory vLLM takes per GPU besides weights and KV cache: activation peak of the
# profiling run, CUDA graphs, NCCL and cuBLAS workspaces, the driver's reserved
# memory that nvidia-smi counts in memory.total. vLLM measures it at start-up;
# this estimate is an assumption, override it per model or hardware profile.
DEFAULT_OVERHEAD_BYTES = 9 * GIB

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
# vLLM's fp8_ds_mla layout (FlashMLA sparse) stores 656 bytes per token and layer.
_FP8_DS_MLA_BYTES_PER_TOKEN = 656


class ModelFitError(ValueError):
    """The inputs cannot be evaluated; the message names what was wanted and found."""


def text_config(config):
    """Return the language model's config: Kimi-K2.5 keeps it under text_config."""
    if not isinstance(config, dict):
        raise ModelFitError(
            f"config must be the parsed config.json (a dict), got {type(config).__name__}"
        )
    inner = config.get("text_config")
    if isinstance(inner, dict) and inner.get("num_hidden_layers"):
        return inner
    return config


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
    """'12.0' -> (12, 0)."""
    text = str(value).strip()
    major, _, minor = text.partition(".")
    try:
        return (int(major), int(minor or 0))
    except ValueError as exc:
        raise ModelFitError(f"compute capability must look like '12.0', got {value!r}") from exc


def gib_to_bytes(gib):
    """A GiB figure as vLLM logs it (two decimals) to bytes."""
    return int(Decimal(str(gib)) * GIB)


# ---------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------


def attention_info(config):
    """Attention kind (MLA / GQA / MHA), why, and the sizes the KV cache uses."""
    cfg = text_config(config)
    layers = cfg.get("num_hidden_layers")
    heads = cfg.get("num_attention_heads")
    if not layers or not heads:
        raise ModelFitError(
            "config.json needs num_hidden_layers and num_attention_heads "
            f"(found num_hidden_layers={layers!r}, num_attention_heads={heads!r})"
        )
    layers = _int(layers, "num_hidden_layers")
    heads = _int(heads, "num_attention_heads")
    info = {
        "num_layers": layers,
        "num_attention_heads": heads,
        "architecture": (cfg.get("architectures") or config.get("architectures") or ["?"])[0],
        "model_type": cfg.get("model_type"),
    }
    kv_lora_rank = cfg.get("kv_lora_rank")
    if kv_lora_rank:
        rope = _int(cfg.get("qk_rope_head_dim") or 0, "qk_rope_head_dim")
        info.update(
            kind="MLA",
            kv_lora_rank=_int(kv_lora_rank, "kv_lora_rank"),
            qk_rope_head_dim=rope,
            num_kv_heads=1,
            head_dim=_int(kv_lora_rank, "kv_lora_rank") + rope,
            why=(
                f"kv_lora_rank={kv_lora_rank} and qk_rope_head_dim={rope} in config.json: "
                "multi-head latent attention caches one compressed latent of "
                f"{_int(kv_lora_rank, 'kv_lora_rank') + rope} values per token and layer "
                f"instead of K and V for {heads} heads"
            ),
        )
        return info
    kv_heads = cfg.get("num_key_value_heads") or heads
    kv_heads = _int(kv_heads, "num_key_value_heads")
    head_dim = cfg.get("head_dim")
    if not head_dim:
        hidden = _int(cfg.get("hidden_size") or 0, "hidden_size")
        if not hidden:
            raise ModelFitError("config.json has neither head_dim nor hidden_size")
        head_dim = hidden // heads
    head_dim = _int(head_dim, "head_dim")
    if kv_heads < heads:
        kind = "GQA"
        why = (
            f"num_key_value_heads={kv_heads} < num_attention_heads={heads}: "
            f"grouped-query attention, {heads // kv_heads} query heads share each KV head"
        )
    else:
        kind = "MHA"
        why = (
            f"num_key_value_heads={kv_heads} == num_attention_heads={heads}: "
            "every query head has its own K and V"
        )
    info.update(kind=kind, num_kv_heads=kv_heads, head_dim=head_dim, why=why)
    return info


def kv_heads_per_gpu(attention, tensor_parallel_size):
    """KV heads each tensor-parallel rank holds and how many ranks hold each."""
    tp = tensor_parallel_size
    if attention["kind"] == "MLA":
        return {"kv_heads_per_gpu": 1, "kv_replicas": tp, "kv_heads_replicated": tp > 1}
    kv = attention["num_kv_heads"]
    per_gpu = max(1, kv // tp)
    replicas = max(1, tp // kv)
    return {"kv_heads_per_gpu": per_gpu, "kv_replicas": replicas, "kv_heads_replicated": tp > kv}


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
    else:
        result["scheme"] = method or "unknown quantization_config"
    return result


def resolve_kv_cache_dtype(kv_cache_dtype, config, quantization):
    """(name, bytes per element, where it came from) for the KV cache.

    'auto' takes the checkpoint's FP8 KV scheme for modelopt checkpoints (as
    vLLM's resolve_kv_cache_dtype_string does), else the model dtype.
    """
    requested = str(kv_cache_dtype or "auto").strip().lower()
    if requested not in _DTYPE_BYTES:
        raise ModelFitError(
            f"kv_cache_dtype must be one of {sorted(_DTYPE_BYTES)}, got {kv_cache_dtype!r}"
        )
    if requested != "auto":
        return requested, _DTYPE_BYTES[requested], "serve option kv_cache_dtype"
    ckpt = quantization.get("checkpoint_kv_cache_dtype")
    if ckpt and str(quantization.get("method") or "").startswith("modelopt"):
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
    """Bytes of one KV block (block_size tokens) of one layer on one GPU."""
    if attention["kind"] == "MLA":
        if kv_dtype == "fp8_ds_mla":
            return block_size * _FP8_DS_MLA_BYTES_PER_TOKEN
        return block_size * attention["head_dim"] * dtype_bytes
    per_gpu = kv_heads_per_gpu(attention, tensor_parallel_size)["kv_heads_per_gpu"]
    return 2 * block_size * per_gpu * attention["head_dim"] * dtype_bytes


def kv_bytes_per_token_per_gpu(attention, tensor_parallel_size, dtype_bytes, kv_dtype="auto"):
    """GQA: layers x KV heads per GPU x head_dim x 2 x dtype bytes.
    MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes, on every rank."""
    page = kv_page_bytes_per_layer(attention, tensor_parallel_size, dtype_bytes, kv_dtype, 1)
    return attention["num_layers"] * page


def predict_vllm_kv_cache_tokens(available_bytes, num_layers, page_bytes_per_layer,
                                 block_size=DEFAULT_BLOCK_SIZE, max_model_len=None):
    """What vLLM logs as "GPU KV cache size: N tokens" for a given
    "Available KV cache memory" (bytes), single KV cache group (all layers
    full attention of one spec)."""
    available = max(0, int(available_bytes))
    num_blocks = available // page_bytes_per_layer // num_layers
    result = {"num_blocks": num_blocks, "tokens": num_blocks * block_size}
    if max_model_len:
        blocks_per_request = _cdiv(int(max_model_len), block_size)
        result["blocks_per_max_len_request"] = blocks_per_request
        result["max_concurrency"] = num_blocks / blocks_per_request
    return result


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def weight_bytes_from_index(index):
    """metadata.total_size of model.safetensors.index.json."""
    try:
        return _int(index["metadata"]["total_size"], "metadata.total_size")
    except (KeyError, TypeError) as exc:
        raise ModelFitError(
            "safetensors index needs metadata.total_size "
            f"(found keys {sorted(index) if isinstance(index, dict) else type(index).__name__})"
        ) from exc


def weight_bytes_from_files(files):
    """Sum of *.safetensors sizes from a repo listing ([{path|rfilename, size}])."""
    total = 0
    for entry in files or []:
        name = entry.get("path") or entry.get("rfilename") or ""
        if name.endswith(".safetensors"):
            total += _int(entry.get("size") or 0, f"size of {name}")
    if not total:
        raise ModelFitError("the repo file listing holds no *.safetensors file with a size")
    return total


# ---------------------------------------------------------------------------
# The whole report
# ---------------------------------------------------------------------------

_SERVE_DEFAULTS = {
    "tensor_parallel_size": 1,
    "data_parallel_size": 1,
    "enable_expert_parallel": False,
    "max_model_len": None,
    "gpu_memory_utilization": 0.9,
    "kv_cache_dtype": "auto",
    "block_size": DEFAULT_BLOCK_SIZE,
}


def _serve(serve):
    serve = dict(serve or {})
    out = {}
    for key, default in _SERVE_DEFAULTS.items():
        value = serve.get(key)
        out[key] = default if value is None or value == "" else value
    out["tensor_parallel_size"] = _int(out["tensor_parallel_size"], "tensor_parallel_size")
    out["data_parallel_size"] = _int(out["data_parallel_size"], "data_parallel_size")
    out["enable_expert_parallel"] = _bool(out["enable_expert_parallel"])
    out["block_size"] = _int(out["block_size"], "block_size")
    util = Decimal(str(out["gpu_memory_utilization"]))
    if not Decimal(0) < util <= Decimal(1):
        raise ModelFitError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    out["gpu_memory_utilization"] = util
    if out["tensor_parallel_size"] < 1 or out["data_parallel_size"] < 1:
        raise ModelFitError(
            "tensor_parallel_size and data_parallel_size must be >= 1, got "
            f"{out['tensor_parallel_size']} and {out['data_parallel_size']}"
        )
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


def _layout_warnings(attention, opts, hw, experts):
    warnings = []
    tp = opts["tensor_parallel_size"]
    dp = opts["data_parallel_size"]
    gpus_needed = tp * dp
    if gpus_needed > hw["count"]:
        warnings.append(
            f"tensor_parallel_size {tp} x data_parallel_size {dp} needs {gpus_needed} GPUs, "
            f"the host has {hw['count']}"
        )
    if attention["kind"] == "MLA" and tp > 1 and hw["interconnect"] == "pcie":
        warnings.append(
            f"MLA with tensor parallel {tp} across PCIe-only GPUs: every rank holds the whole "
            "latent cache and each layer all-reduces over PCIe, so decode is all-reduce bound; "
            "prefer expert/data parallel or NVLink GPUs"
        )
    if attention["num_attention_heads"] % tp:
        warnings.append(
            f"tensor_parallel_size {tp} does not divide num_attention_heads "
            f"{attention['num_attention_heads']}: vLLM refuses this layout"
        )
    kvh = attention["num_kv_heads"]
    if attention["kind"] != "MLA" and kvh % tp and tp % kvh:
        warnings.append(
            f"tensor_parallel_size {tp} neither divides nor is a multiple of the "
            f"{kvh} KV heads: vLLM cannot shard or replicate them evenly"
        )
    if opts["enable_expert_parallel"]:
        if not experts:
            warnings.append("enable_expert_parallel is set but config.json declares no experts")
        elif experts % gpus_needed:
            warnings.append(
                f"{experts} experts do not split evenly over expert-parallel size {gpus_needed}"
            )
    return warnings


def _platform_warnings(quant, hw, vllm_version, verified_sm120_vllm):
    warnings = []
    cc = parse_compute_capability(hw["compute_capability"]) if hw["compute_capability"] else None
    if cc is None:
        return warnings
    if quant["weight_format"] == "nvfp4" and cc < (10, 0):
        warnings.append(
            f"NVFP4 weights on compute capability {hw['compute_capability']}: FP4 tensor cores "
            "need Blackwell (10.x/12.x); older GPUs fall back to slower kernels or refuse"
        )
    sm120 = cc[0] == 12  # noqa: PLR2004 - SM 12.x
    if (sm120 and vllm_version and verified_sm120_vllm
            and parse_version(vllm_version) < parse_version(verified_sm120_vllm)):
        warnings.append(
            f"vLLM {vllm_version} is older than {verified_sm120_vllm}, the version the catalog "
            "marks as verified for SM120"
        )
    return warnings


def _verdict(report):
    fits = report["fits"]
    gpus_needed = report["gpus_needed"]
    margin = report["margin_bytes_per_gpu"]
    if fits:
        return (
            f"fits: {report['max_len_requests_at_once']} max-length request(s) at once, "
            f"{margin} bytes per GPU to spare after one"
        )
    if gpus_needed > report["gpus_available"]:
        return f"does not fit: needs {gpus_needed} GPUs, has {report['gpus_available']}"
    return (
        f"does not fit: {-margin} bytes per GPU short of one "
        f"{report['max_model_len']}-token request"
    )


def model_fit(config, *, serve=None, gpu=None, weight_bytes=None, hf_quant_config=None,
              vllm_version=None, verified_sm120_vllm=None, overhead_bytes_per_gpu=None,
              available_kv_bytes=None):
    """The fit report for one model on one GPU box. Returns a JSON-able dict."""
    opts = _serve(serve)
    hw = _gpu(gpu)
    cfg = text_config(config)
    tp = opts["tensor_parallel_size"]
    dp = opts["data_parallel_size"]
    block = opts["block_size"]
    overhead = DEFAULT_OVERHEAD_BYTES if overhead_bytes_per_gpu in (None, "") else _int(
        overhead_bytes_per_gpu, "overhead_bytes_per_gpu")
    if weight_bytes in (None, ""):
        raise ModelFitError("weight_bytes (total bytes of the weights) is required")
    weights_total = _int(weight_bytes, "weight_bytes")

    attention = attention_info(config)
    quant = find_quantization(config, hf_quant_config)
    kv_dtype, kv_dtype_bytes, kv_dtype_source = resolve_kv_cache_dtype(
        opts["kv_cache_dtype"], config, quant)
    page = kv_page_bytes_per_layer(attention, tp, kv_dtype_bytes, kv_dtype, block)

    position_limit = _int(cfg.get("max_position_embeddings") or 0, "max_position_embeddings")
    max_model_len = _int(opts["max_model_len"] or position_limit, "max_model_len")

    gpus_needed = tp * dp
    # Each data-parallel replica holds a full tensor-parallel shard of the
    # weights (with expert parallel the experts spread over tp x dp GPUs, so
    # this is an upper bound when dp > 1).
    weights_per_gpu = _cdiv(weights_total, tp)
    usable = int(opts["gpu_memory_utilization"] * hw["memory_total_bytes"])
    kv_budget = usable - weights_per_gpu - overhead
    kv = predict_vllm_kv_cache_tokens(kv_budget, attention["num_layers"], page, block,
                                      max_model_len)
    one_request_bytes = kv["blocks_per_max_len_request"] * page * attention["num_layers"]
    margin = kv_budget - one_request_bytes
    requests_at_once = kv["num_blocks"] // kv["blocks_per_max_len_request"]

    experts = _num_experts(cfg)
    warnings = _layout_warnings(attention, opts, hw, experts)
    warnings += _platform_warnings(quant, hw, vllm_version, verified_sm120_vllm)
    if position_limit and max_model_len > position_limit:
        warnings.append(
            f"max_model_len {max_model_len} exceeds max_position_embeddings {position_limit}"
        )
    fits = gpus_needed <= hw["count"] and margin >= 0

    report = {
        "architecture": attention["architecture"],
        "attention": {k: v for k, v in attention.items() if k != "architecture"},
        "tensor_parallel_size": tp,
        "data_parallel_size": dp,
        "enable_expert_parallel": opts["enable_expert_parallel"],
        "num_experts": experts,
        # With expert parallel each GPU holds whole experts; without, a 1/tp
        # slice of every expert.
        "experts_per_gpu": (experts // gpus_needed if opts["enable_expert_parallel"]
                            else experts) if experts else None,
        **kv_heads_per_gpu(attention, tp),
        "quantization": quant,
        "kv_cache_dtype": kv_dtype,
        "kv_cache_dtype_bytes": kv_dtype_bytes,
        "kv_cache_dtype_source": kv_dtype_source,
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token_per_gpu(
            attention, tp, kv_dtype_bytes, kv_dtype),
        "kv_page_bytes_per_layer": page,
        "block_size": block,
        "weights_bytes_total": weights_total,
        "weights_bytes_per_gpu": weights_per_gpu,
        "gpus_needed": gpus_needed,
        "gpus_available": hw["count"],
        "gpu_memory_bytes": hw["memory_total_bytes"],
        "gpu_memory_utilization": float(opts["gpu_memory_utilization"]),
        "usable_bytes_per_gpu": usable,
        "overhead_bytes_per_gpu": overhead,
        "kv_budget_bytes_per_gpu": kv_budget,
        "kv_cache_blocks": kv["num_blocks"],
        "kv_cache_tokens": kv["tokens"],
        "max_model_len": max_model_len,
        "kv_bytes_per_max_len_request_per_gpu": one_request_bytes,
        "max_len_requests_at_once": requests_at_once * dp,
        "max_concurrency": round(kv["max_concurrency"] * dp, 2),
        "fits": fits,
        "margin_bytes_per_gpu": margin,
        "warnings": warnings,
    }
    report["verdict"] = _verdict(report)
    if available_kv_bytes not in (None, ""):
        vllm_kv = predict_vllm_kv_cache_tokens(
            _int(available_kv_bytes, "available_kv_bytes"), attention["num_layers"], page,
            block, max_model_len)
        report["predicted_vllm_kv_cache_tokens"] = vllm_kv["tokens"]
        report["predicted_vllm_max_concurrency"] = round(vllm_kv["max_concurrency"], 2)
    return report


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


def _layout(fit):
    text = f"TP{fit['tensor_parallel_size']}"
    if fit["data_parallel_size"] > 1:
        text += f" x DP{fit['data_parallel_size']}"
    if fit["enable_expert_parallel"]:
        text += " + EP"
    return text + f" on {fit['gpus_needed']}/{fit['gpus_available']} GPUs"


def _kv_heads(fit):
    att = fit["attention"]
    if att["kind"] == "MLA":
        return f"1 latent ({att['head_dim']}), on all {fit['kv_replicas']} ranks"
    text = f"{fit['kv_heads_per_gpu']} of {att['num_kv_heads']}"
    if fit["kv_heads_replicated"]:
        text += f" (each on {fit['kv_replicas']} GPUs)"
    return text


def _verdict_cell(fit):
    if fit["gpus_needed"] > fit["gpus_available"]:
        return f"DOES NOT FIT (needs {fit['gpus_needed']} GPUs)"
    margin = fit["margin_bytes_per_gpu"]
    word = "fits" if fit["fits"] else "DOES NOT FIT"
    return f"{word} ({'+' if margin >= 0 else '-'}{_gib(abs(margin))}/GPU)"


ROWS = (
    ("architecture", lambda f: f["architecture"]),
    ("attention", lambda f: f["attention"]["kind"]),
    ("layers", lambda f: str(f["attention"]["num_layers"])),
    ("layout", _layout),
    ("experts (per GPU)", lambda f: (
        f"{f['num_experts']} ({f['experts_per_gpu']} whole)" if f["enable_expert_parallel"]
        else f"{f['num_experts']} (1/{f['tensor_parallel_size']} of each)")
     if f["num_experts"] else "dense"),
    ("KV heads per GPU", _kv_heads),
    ("quantization", lambda f: f["quantization"]["scheme"]),
    ("KV cache dtype", lambda f: f"{f['kv_cache_dtype']} ({f['kv_cache_dtype_bytes']} B)"),
    ("KV bytes/token/GPU", lambda f: f"{f['kv_bytes_per_token_per_gpu']:,}"),
    ("weights total", lambda f: f"{f['weights_bytes_total'] / 1e9:,.1f} GB"),
    ("weights per GPU", lambda f: _gib(f["weights_bytes_per_gpu"])),
    ("GPU memory x util", lambda f: f"{_gib(f['gpu_memory_bytes'])} x "
     f"{f['gpu_memory_utilization']}"),
    ("overhead per GPU", lambda f: _gib(f["overhead_bytes_per_gpu"])),
    ("KV budget per GPU", lambda f: _gib(f["kv_budget_bytes_per_gpu"])),
    ("KV capacity (tokens)", lambda f: f"{f['kv_cache_tokens']:,}"),
    ("max_model_len", lambda f: f"{f['max_model_len']:,}"),
    ("max-len requests", lambda f: f"{f['max_len_requests_at_once']} "
     f"({f['max_concurrency']:.2f}x)"),
    ("verdict", _verdict_cell),
)


def render_table(fits, names=None, title=None):
    """Lines of a side-by-side comparison; fits is {name: report} or a list."""
    if isinstance(fits, dict):
        names = list(names or fits)
        reports = [fits[name] for name in names]
    else:
        reports = list(fits)
        names = list(names or [f"model {i + 1}" for i in range(len(reports))])
    label_width = max(len(label) for label, _ in ROWS)
    columns = [[fn(report) for _, fn in ROWS] for report in reports]
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
    for i, (label, _) in enumerate(ROWS):
        cells = [col[i].ljust(w) for col, w in zip(columns, widths, strict=True)]
        lines.append(" | ".join([label.ljust(label_width), *cells]).rstrip())
    for name, report in zip(names, reports, strict=True):
        lines.append("")
        lines.append(f"{name}: {report['attention']['kind']} because {report['attention']['why']}")
        lines.append(f"{name}: quantization from {report['quantization']['source']}; "
                     f"KV dtype {report['kv_cache_dtype_source']}")
        lines.append(f"{name}: {report['verdict']}")
        lines.extend(f"{name}: WARNING {w}" for w in report["warnings"])
    return lines
