# Copyright 2026 vllm-fleet contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters model_fit, model_fit_table, model_fit_gpu: the plan's arithmetic in templates."""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.model_fit import (
    ModelFitError,
    gpu_from_facts,
    model_fit,
    render_table,
)

DOCUMENTATION = r"""
name: model_fit
short_description: Whether a model fits on GPUs, from its config.json
description:
  - Same report as the M(vllm_fleet.fleet.model_fit) module, computed on the controller.
  - C(model_fit_table) turns a dict of reports into lines of a side-by-side table.
positional: config
options:
  _input:
    description: The parsed config.json.
    type: dict
    required: true
  serve:
    description: The catalog's serve options.
    type: dict
  gpu:
    description: GPU facts (count, memory_total_bytes, compute_capability, interconnect).
    type: dict
    required: true
  weight_bytes:
    description: Total bytes of the weights.
    type: int
    required: true
  hf_quant_config:
    description: The parsed hf_quant_config.json.
    type: dict
  vllm_version:
    description: vLLM version to serve with.
    type: str
  verified_sm120_vllm:
    description: The catalog's vLLM version verified on SM120.
    type: str
  overhead_bytes_per_gpu:
    description: Non-weight, non-KV memory per GPU in bytes.
    type: int
"""

EXAMPLES = r"""
fit: >-
  {{ config | vllm_fleet.fleet.model_fit(serve=entry.serve, gpu=profile,
                                         weight_bytes=entry.size_bytes) }}
gpu: "{{ gpu_facts | vllm_fleet.fleet.model_fit_gpu }}"
lines: "{{ fits | vllm_fleet.fleet.model_fit_table(['kimi_k25_nvfp4', 'minimax_m25']) }}"
"""

RETURN = r"""
_value:
  description: The report (see the module's RETURN), or the table's lines.
  type: raw
"""


def _model_fit(config, **kwargs):
    try:
        return model_fit(config, **kwargs)
    except ModelFitError as exc:
        raise AnsibleFilterError(f"model_fit: {exc}") from exc


def _model_fit_gpu(gpu_facts):
    try:
        return gpu_from_facts(gpu_facts)
    except ModelFitError as exc:
        raise AnsibleFilterError(f"model_fit_gpu: {exc}") from exc


def _model_fit_table(fits, names=None, title=None):
    try:
        return render_table(fits, names, title)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"model_fit_table wants model_fit reports: {exc}") from exc


class FilterModule:
    def filters(self):
        return {
            "model_fit": _model_fit,
            "model_fit_gpu": _model_fit_gpu,
            "model_fit_table": _model_fit_table,
        }
