# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Per-GPU memory a vLLM server keeps besides weights and KV cache.

vLLM (vllm/v1/worker/gpu_worker.py, Worker.determine_available_memory, read at
0.32.0) sizes the KV cache as

    available = gpu_memory_utilization x torch's total memory
                - weights - non-torch memory - peak of the profiling run
                - the CUDA graph estimate (from 0.21 on, unless eager)

model_fit starts from nvidia-smi's memory.total, so the overhead it subtracts
after weights is four terms, each a function of the GPU, the layout and the
model's config.json, each said below with where its number comes from:

* driver_reserve: memory.total minus what torch sees, times the utilization;
* non_torch: CUDA context, cuBLAS workspaces; NCCL and custom all-reduce
  buffers with tensor parallel > 1;
* activation: the torch peak of the profiling run, the larger of the forward
  pass over max_num_batched_tokens and the sampler over max_num_seqs rows;
* cuda_graphs: the graph pool estimate vLLM subtracts from 0.21 on.

The constants are derived from the public start-up logs of the "derived from"
set in tests/fixtures/vllm_startup_logs (SOURCE.md); the "held apart" logs
there were committed before this model and set none of them. Standard library
only: this runs on the controller and on targets.
"""

from decimal import Decimal

GIB = 1024**3
MIB = 1024**2

# ---------------------------------------------------------------------------
# driver_reserve: nvidia-smi memory.total minus torch.cuda.mem_get_info()'s total
# ---------------------------------------------------------------------------
# Pairs from the derived-from logs ("Free memory on device (free/TOTAL GiB)",
# two decimals, so +-5 MiB) against nvidia-smi's memory.total for that GPU.
DRIVER_RESERVE_MIB = {
    81_920: 768,    # A100 80GB: 81,920 MiB vs 79.25 GiB (llama-3.1-8b-a100-v0.31)
    143_771: 606,   # H200: 143,771 MiB vs 139.81 GiB (qwen3-next-80b-h200-tp2-v0.10.2)
    24_564: 469,    # 24 GB (RTX 4090): 24,564 MiB vs 23.53 GiB (qwen3-8b-fp8-24gb-v0.10.2)
    189_471: 738,   # GB200: 189,471 MiB (assumed) vs 184.31 GiB (glm-5.2 ... v0.26)
}
# Any other GPU: the mean of the four, 645 MiB.
DEFAULT_DRIVER_RESERVE_MIB = 645

# ---------------------------------------------------------------------------
# non_torch: memory the process holds outside torch's allocator
# ---------------------------------------------------------------------------
# "GiB for non-torch memory" in the derived-from logs: 0.26 (Llama-3.1-8B, TP1,
# 0.31) and 0.02 (Qwen3-8B, TP1, 0.10.2) -> 0.14 GiB on one GPU; 1.38 (Qwen3-Next,
# TP2) and 0.95 (GLM-5.2, TP4) -> 1.17 GiB with tensor parallel, the NCCL
# communicators' buffers and vLLM's custom all-reduce IPC buffers added.
NON_TORCH_BYTES = int(Decimal("0.14") * GIB)
NON_TORCH_TP_BYTES = int(Decimal("1.03") * GIB)

# ---------------------------------------------------------------------------
# activation: the torch peak of the profiling run
# ---------------------------------------------------------------------------
# vLLM's profile_run (vllm/v1/worker/gpu_model_runner.py) runs the model over
# max_num_batched_tokens dummy tokens, then _dummy_sampler_run over the last
# hidden state of min(max_num_seqs, max_num_batched_tokens) requests: full-vocabulary
# logits sampled with temperature, top-k and top-p (fp32 logits, probabilities,
# sorted values, int64 indices, cumulative sums, random draws). The forward
# pass's tensors are freed before sampling, so the peak is the larger of the two.
#
# Sampler bytes per logit element (rows x vocabulary): the derived-from logs that
# print their peak give 38.7 (Qwen3-8B: 1.40 GiB / 256 x 151,936), 39.6 (Llama-3.1-8B:
# 1.44 - 0.23 graph estimate = 1.21 GiB / 256 x 128,256), 38.5 (Qwen3-Next: 5.58 GiB /
# 1,024 x 151,936), 42.7 (GLM-5.2: 6.31 GiB / 1,024 x 154,880, a bound: its MoE
# workspaces may set that peak); MiniMax-M2.5's overhead implies 36.3 with the terms
# above. 38 is taken, inside that range.
SAMPLER_BYTES_PER_LOGIT = 38
# Forward pass, bytes per batched token (model dtype, 2 bytes): the MLP's gate/up
# output and its activation (3 x the intermediate size on this GPU) live together,
# with about four hidden-size tensors (residual, normed input, attention output,
# its projection). For a MoE layer the fused-MoE workspaces per token are top_k x
# (2 x intermediate + intermediate + hidden) (vllm/model_executor/layers/fused_moe/
# fused_moe.py intermediate_cache1..3); the intermediate is split by tensor parallel
# unless expert parallel keeps whole experts on each GPU.
HIDDEN_TENSORS = 4
ACTIVATION_DTYPE_BYTES = 2

# ---------------------------------------------------------------------------
# cuda_graphs: counted only where vLLM subtracts it
# ---------------------------------------------------------------------------
# From vLLM 0.21 on VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 and the
# graph pool estimate is taken from the KV cache (gpu_worker.py); before, graphs were
# captured after the KV cache, outside the figure vLLM logs. enforce_eager: none.
CUDAGRAPH_COUNTED_SINCE = (0, 21, 0)
# Per decoder layer, from the two derived-from logs that subtract it: 0.23 GiB / 32
# layers (Llama-3.1-8B, dense, 0.31) and 4.99 GiB / 78 layers (GLM-5.2, MoE + sparse
# MLA, 0.26). One log each: the weakest term.
CUDAGRAPH_BYTES_PER_LAYER_DENSE = int(Decimal("0.23") * GIB) // 32
CUDAGRAPH_BYTES_PER_LAYER_MOE = int(Decimal("4.99") * GIB) // 78

# vLLM's batch defaults (vllm/engine/arg_utils.py,
# _set_default_max_num_seqs_and_batched_tokens_args, OpenAI server), by the memory
# torch sees: >= 160 GiB; >= 70 GiB and not an A100; otherwise.
_SERVER_DEFAULTS = ((160 * GIB, 16_384, 1_024), (70 * GIB, 8_192, 1_024))
_SMALL_GPU_DEFAULTS = (2_048, 256)


def driver_reserve_bytes(memory_total_bytes):
    """nvidia-smi's memory.total minus what torch reports as the device's total."""
    mib = int(memory_total_bytes) // MIB
    return DRIVER_RESERVE_MIB.get(mib, DEFAULT_DRIVER_RESERVE_MIB) * MIB


def server_batch_defaults(memory_total_bytes, gpu_name=None):
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server picks on this GPU."""
    torch_total = int(memory_total_bytes) - driver_reserve_bytes(memory_total_bytes)
    is_a100 = "a100" in str(gpu_name or "").lower()
    for floor, tokens, seqs in _SERVER_DEFAULTS:
        if torch_total >= floor and (floor >= 160 * GIB or not is_a100):
            return tokens, seqs
    return _SMALL_GPU_DEFAULTS


def _num(cfg, *keys):
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return 0


def _experts(cfg):
    return _num(cfg, "n_routed_experts", "num_experts", "num_local_experts")


def forward_bytes_per_token(cfg, tp, expert_parallel):
    """Activation bytes one batched token holds at the forward pass's peak on one GPU."""
    hidden = _num(cfg, "hidden_size")
    if _experts(cfg):
        inter = _num(cfg, "moe_intermediate_size", "intermediate_size")
        top_k = _num(cfg, "num_experts_per_tok", "moe_topk") or 1
        split = inter if expert_parallel else -(-inter // tp)
        mlp = top_k * (3 * split + hidden)
    else:
        mlp = 3 * -(-_num(cfg, "intermediate_size") // tp)
    return ACTIVATION_DTYPE_BYTES * (HIDDEN_TENSORS * hidden + mlp)


def sampler_bytes(cfg, max_num_seqs, max_num_batched_tokens):
    """The dummy sampler run's peak: min(seqs, tokens) rows of full-vocabulary logits."""
    rows = min(int(max_num_seqs), int(max_num_batched_tokens))
    return rows * _num(cfg, "vocab_size") * SAMPLER_BYTES_PER_LOGIT


def cudagraph_bytes(cfg, layers, vllm_version_tuple, enforce_eager):
    """The CUDA graph pool vLLM subtracts from the KV cache (0 where it does not)."""
    if enforce_eager or vllm_version_tuple is None:
        return 0
    if tuple(vllm_version_tuple) < CUDAGRAPH_COUNTED_SINCE:
        return 0
    per_layer = (CUDAGRAPH_BYTES_PER_LAYER_MOE if _experts(cfg)
                 else CUDAGRAPH_BYTES_PER_LAYER_DENSE)
    return per_layer * int(layers)


def overhead_terms(cfg, *, memory_total_bytes, gpu_memory_utilization, tp, pp=1,
                   expert_parallel=False, max_num_batched_tokens, max_num_seqs,
                   layers, vllm_version_tuple=None, enforce_eager=False):
    """The overhead per GPU, term by term (bytes), and their sum under "total".

    cfg is the language model's config (text_config for a multimodal wrapper);
    vllm_version_tuple is None when the release is unknown (CUDA graphs then not
    counted: the releases before 0.21 do not, and an unknown one is not assumed to).
    """
    util = Decimal(str(gpu_memory_utilization))
    reserve = int(util * driver_reserve_bytes(memory_total_bytes))
    non_torch = NON_TORCH_BYTES + (NON_TORCH_TP_BYTES if int(tp) > 1 else 0)
    forward = int(max_num_batched_tokens) * forward_bytes_per_token(
        cfg, int(tp), bool(expert_parallel))
    # Only the last pipeline stage samples; its GPUs are the fullest, the figure for all.
    sampler = sampler_bytes(cfg, max_num_seqs, max_num_batched_tokens)
    activation = max(forward, sampler)
    graphs = cudagraph_bytes(cfg, -(-int(layers) // max(1, int(pp))), vllm_version_tuple,
                             enforce_eager)
    terms = {
        "driver_reserve": reserve,
        "non_torch": non_torch,
        "activation": activation,
        "activation_forward": forward,
        "activation_sampler": sampler,
        "cuda_graphs": graphs,
    }
    terms["total"] = reserve + non_torch + activation + graphs
    return terms
