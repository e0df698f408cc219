# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters model_fit, model_sizing, model_fit_table, model_fit_gpu: the fit in templates."""

from ansible.errors import AnsibleFilterError

# module_utils imported at a filter's first call (why: plugins/plugin_utils/filters.py).


def _model_fit(config, **kwargs):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.model_fit import (
        ModelFitError,
        model_fit,
    )

    try:
        return model_fit(config, **kwargs)
    except ModelFitError as exc:
        raise AnsibleFilterError(f"model_fit: {exc}") from exc


def _model_sizing(config, **kwargs):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.model_fit import size_model

    return size_model(config, **kwargs)


def _model_fit_gpu(gpu_facts):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.model_fit import (
        ModelFitError,
        gpu_from_facts,
    )

    try:
        return gpu_from_facts(gpu_facts)
    except ModelFitError as exc:
        raise AnsibleFilterError(f"model_fit_gpu: {exc}") from exc


def _model_fit_table(fits, names=None, title=None):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.model_fit import render_table

    try:
        return render_table(fits, names, title)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"model_fit_table wants model_fit reports: {exc}") from exc


class FilterModule:
    """vllm_fleet.fleet model fit filters."""

    def filters(self):
        return {
            "model_fit": _model_fit,
            "model_sizing": _model_sizing,
            "model_fit_gpu": _model_fit_gpu,
            "model_fit_table": _model_fit_table,
        }
