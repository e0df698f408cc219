#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

DOCUMENTATION = r"""
---
module: model_fit
short_description: Say whether a model fits on a host's GPUs, from its config.json
description:
  - Reads a model's C(config.json) (and C(hf_quant_config.json)), the catalog's serve options and
    the GPUs' facts, and reports the attention design per layer class (full, sliding window, MLA,
    sparse MLA with its indexer cache, linear attention with its state), KV heads and KV bytes per
    token per GPU, the quantization found in the files, weights per GPU, the KV cache budget and
    capacity (with decode context parallel, MTP draft layers and data-parallel replicas), how many
    max-length requests fit at once, a verdict and warnings.
  - An attention design it cannot size fails with C(cannot size this architecture) and the
    reason; it is never guessed as GQA. Serve options that may change memory and are not
    modelled are listed in C(not_understood).
  - Pure arithmetic, no GPU needed; changes nothing on the host.
  - The same function is the filter P(vllm_fleet.fleet.model_fit#filter).
version_added: "0.1.0"
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
options:
  config:
    description: The model's C(config.json), parsed. Kimi-K2.5's C(text_config) is followed.
    type: dict
    required: true
  hf_quant_config:
    description: The model's C(hf_quant_config.json), parsed, when the repository has one.
    type: dict
  serve:
    description:
      - The catalog entry's C(serve) options, after the GPU architecture's profile is merged
        (P(vllm_fleet.fleet.catalog_profile#filter)). Used keys are C(tensor_parallel_size),
        C(data_parallel_size), C(pipeline_parallel_size), C(decode_context_parallel_size),
        C(prefill_context_parallel_size), C(enable_expert_parallel), C(max_model_len),
        C(gpu_memory_utilization), C(kv_cache_dtype), C(dtype), C(block_size),
        C(max_num_batched_tokens), C(speculative_config), C(kv_cache_memory_bytes) and
        C(mamba_ssm_cache_dtype). Keys known to leave memory alone are ignored; any other key is
        reported as not understood.
    type: dict
    default: {}
  weight_bytes:
    description: Total bytes of the weights (catalog C(size_bytes), or the repository's file sizes).
    type: int
  safetensors_index:
    description: Parsed C(model.safetensors.index.json); its C(metadata.total_size) gives the weight bytes.
    type: dict
  repo_files:
    description: Repository listing, items with C(path) (or C(rfilename)) and C(size) in bytes; C(*.safetensors) sizes are summed.
    type: list
    elements: dict
  gpu:
    description:
      - GPU facts. C(count), C(memory_total_bytes) (per GPU, bytes), C(compute_capability)
        (for example V(12.0)), C(interconnect) (V(pcie) or V(nvlink)).
    type: dict
    required: true
  vllm_version:
    description: The vLLM version that will serve the model.
    type: str
  verified_vllm:
    description:
      - The vLLM version the catalog marks as verified for this GPU architecture (the chosen
        profile's C(vllm.verified_version)). Any other O(vllm_version) warns, older or newer; no
        verified version warns too.
    type: str
  verified_sm120_vllm:
    description: Older name of O(verified_vllm), applied to SM 12.x GPUs only.
    type: str
  min_vllm:
    description: The model's minimum vLLM version (catalog C(vllm.min_version)); an older O(vllm_version) warns.
    type: str
  profile:
    description: Name of the catalog profile in effect (for the report and the plan table).
    type: str
  revision:
    description: The catalog revision of the model; anything but a 40-hex commit warns.
    type: str
  overhead_bytes_per_gpu:
    description:
      - Memory per GPU that is neither weights nor KV cache (activations, CUDA graphs, NCCL,
        driver reserve), bytes. Without it the overhead is modelled from the GPU, the layout
        and config.json, term by term (module_utils/fit/fit_overhead.py, derived from public vLLM
        start-up logs); RV(fit.overhead_terms) shows the terms either way.
    type: int
  available_kv_bytes:
    description:
      - vLLM's logged "Available KV cache memory" in bytes. When given, the result also holds the
        "GPU KV cache size" vLLM will log for it.
    type: int
  fail_on_no_fit:
    description: Fail when the model does not fit (a preflight), instead of only reporting.
    type: bool
    default: false
notes:
  - Weights per GPU are total / tensor_parallel_size; replicated layers make the real figure a
    little higher (MiniMax-M2.5 TP4 logs 53.75 GiB for 53.55 GiB estimated).
seealso:
  - name: vLLM KV cache sizing
    description: kv_cache_utils.get_num_blocks and kv_cache_interface page_size_bytes.
    link: https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py
"""

EXAMPLES = r"""
- name: Check that MiniMax-M2.5 fits on this host
  vllm_fleet.fleet.model_fit:
    config: "{{ lookup('ansible.builtin.file', 'MiniMaxAI--MiniMax-M2.5.config.json') | from_json }}"
    serve: "{{ vllm_fleet_catalog.minimax_m25.serve }}"
    weight_bytes: "{{ vllm_fleet_catalog.minimax_m25.size_bytes }}"
    gpu:
      count: 8
      memory_total_bytes: 102641958912
      compute_capability: "12.0"
      interconnect: pcie
    fail_on_no_fit: true
  register: __fit

- name: Predict vLLM's logged KV cache size from its available memory
  vllm_fleet.fleet.model_fit:
    config: "{{ minimax_config }}"
    serve: {tensor_parallel_size: 4, max_model_len: 196608}
    weight_bytes: 230000000000
    gpu: {count: 4, memory_total_bytes: 102641958912}
    available_kv_bytes: 25361781882  # 23.62 GiB
"""

RETURN = r"""
fit:
  description: The report.
  returned: always
  type: dict
  contains:
    attention:
      description: C(kind) (sparse MLA, MLA, GQA, MHA), C(why), C(num_layers), C(num_kv_heads), C(head_dim), C(layer_classes), C(mtp_layers) (values).
      type: dict
    attention_classes:
      description: One line per layer class, for example C(full x12, linear x36, 274,432 B state).
      type: str
    decode_context_parallel_size:
      description: DCP ranks that split every request's KV cache by token position.
      type: int
    kv_cache_groups:
      description: KV cache groups vLLM forms (hybrid models have several).
      type: int
    blocks_per_max_len_request:
      description: KV blocks one max_model_len request needs across all groups (blocks).
      type: int
    max_concurrency:
      description: Max-length requests the KV cache holds at once, all data-parallel replicas.
      type: float
    overhead_class:
      description: Attention class of the model (full, mla, sparse_mla, hybrid).
      type: str
    overhead_source:
      description: C(given), or the modelled overhead in words, term by term.
      type: str
    overhead_terms:
      description:
        - The modelled overhead per GPU (bytes) - C(driver_reserve), C(non_torch), C(activation)
          (the larger of C(activation_forward) and C(activation_sampler)), C(cuda_graphs) - and
          their C(total), reported also when O(overhead_bytes_per_gpu) is given.
      type: dict
    weights_replicated_bytes_per_gpu:
      description: Weights every tensor-parallel rank holds in full (MLA projections, indexer, MoE router), bytes.
      type: int
    max_num_batched_tokens:
      description: Tokens per step, as served or vLLM's default for this GPU.
      type: int
    max_num_seqs:
      description: Requests per step, as served or vLLM's default for this GPU.
      type: int
    not_understood:
      description: Serve options that may change memory and are not modelled.
      type: list
      elements: str
    profile:
      description: The catalog profile in effect, as given.
      type: str
    kv_heads_per_gpu:
      description: KV heads (MLA, one latent) each tensor-parallel rank holds.
      type: int
    kv_heads_replicated:
      description: Whether a KV head (or the MLA latent) is held by more than one GPU.
      type: bool
    kv_bytes_per_token_per_gpu:
      description: KV cache bytes one token costs on each GPU (bytes).
      type: int
    quantization:
      description: C(method), C(scheme), C(weight_bits), C(group_size), C(checkpoint_kv_cache_dtype), C(source).
      type: dict
    weights_bytes_total:
      description: Weights, all GPUs (bytes).
      type: int
    weights_bytes_per_gpu:
      description: Weights on each GPU (bytes).
      type: int
    kv_budget_bytes_per_gpu:
      description: memory x utilization - weights - overhead, per GPU (bytes).
      type: int
    kv_cache_tokens:
      description: The "GPU KV cache size" vLLM logs, by the formula of O(vllm_version) (tokens).
      type: int
    max_len_requests_at_once:
      description: Requests of max_model_len tokens that fit at once, all data-parallel replicas.
      type: int
    fits:
      description: Whether the GPUs are enough, one max-length request fits and vLLM starts the layout (no RV(fit.refusals)).
      type: bool
    refusals:
      description:
        - What vLLM refuses to start, each with its rule and numbers - attention or KV heads that tensor
          parallel cannot split, decode context parallel layouts, max_model_len beyond the model's
          positions or beyond the KV cache left for one request (vLLM's start-up check, in its words,
          with its estimate of the length that fits), a quantization below its minimum compute
          capability, an uneven expert split or other EPLB settings vLLM refuses, FP8 block splits
          known to fail. Any makes RV(fit.fits) false.
      type: list
      elements: str
    kv_refusal:
      description: The refusal of RV(fit.refusals) that is vLLM's start-up KV cache check; null when it passes.
      type: str
    margin_bytes_per_gpu:
      description: KV budget left after one max-length request; negative when short (bytes).
      type: int
    verdict:
      description: One line for people.
      type: str
    warnings:
      description: Layout and version warnings.
      type: list
      elements: str
    predicted_vllm_kv_cache_tokens:
      description: The "GPU KV cache size" vLLM logs for O(available_kv_bytes) (tokens).
      type: int
      returned: when available_kv_bytes is given
  sample:
    attention: {kind: GQA, num_kv_heads: 8, head_dim: 128, num_layers: 62}
    kv_heads_per_gpu: 2
    kv_bytes_per_token_per_gpu: 63488
    kv_cache_tokens: 435168  # MiniMax-M2.5 TP4 on RTX PRO 6000 at 0.92
    fits: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import (
    ModelFitError,
    model_fit,
    weight_bytes_from_files,
    weight_bytes_from_index,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict", "required": True},
            "hf_quant_config": {"type": "dict"},
            "serve": {"type": "dict", "default": {}},
            "weight_bytes": {"type": "int"},
            "safetensors_index": {"type": "dict"},
            "repo_files": {"type": "list", "elements": "dict"},
            "gpu": {"type": "dict", "required": True},
            "vllm_version": {"type": "str"},
            "verified_vllm": {"type": "str"},
            "verified_sm120_vllm": {"type": "str"},
            "min_vllm": {"type": "str"},
            "profile": {"type": "str"},
            "revision": {"type": "str"},
            "overhead_bytes_per_gpu": {"type": "int"},
            "available_kv_bytes": {"type": "int"},
            "fail_on_no_fit": {"type": "bool", "default": False},
        },
        required_one_of=[("weight_bytes", "safetensors_index", "repo_files")],
        mutually_exclusive=[("weight_bytes", "safetensors_index", "repo_files")],
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["safetensors_index"] is not None:
            weight_bytes = weight_bytes_from_index(params["safetensors_index"])
        elif params["repo_files"] is not None:
            weight_bytes = weight_bytes_from_files(params["repo_files"])
        else:
            weight_bytes = params["weight_bytes"]
        fit = model_fit(
            params["config"],
            serve=params["serve"],
            gpu=params["gpu"],
            weight_bytes=weight_bytes,
            hf_quant_config=params["hf_quant_config"],
            vllm_version=params["vllm_version"],
            verified_vllm=params["verified_vllm"],
            verified_sm120_vllm=params["verified_sm120_vllm"],
            min_vllm=params["min_vllm"],
            profile=params["profile"],
            revision=params["revision"],
            overhead_bytes_per_gpu=params["overhead_bytes_per_gpu"],
            available_kv_bytes=params["available_kv_bytes"],
        )
    except ModelFitError as exc:
        module.fail_json(msg=f"Cannot evaluate the model's fit: {exc}")
    if params["fail_on_no_fit"] and not fit["fits"]:
        module.fail_json(
            msg=f"Model does not fit: wanted {fit['gpus_needed']} GPUs and "
            f"{fit['kv_bytes_per_max_len_request_per_gpu']} KV bytes per GPU for one "
            f"{fit['max_model_len']}-token request; found {fit['gpus_available']} GPUs and a "
            f"KV budget of {fit['kv_budget_bytes_per_gpu']} bytes per GPU ({fit['verdict']})",
            fit=fit,
        )
    module.exit_json(changed=False, fit=fit)


if __name__ == "__main__":
    main()
