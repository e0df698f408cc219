# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters model_fit, model_sizing, model_fit_table, model_fit_gpu, warm_switch_plan.

The fit in templates, and the warm switch plan built on it."""

from ansible.errors import AnsibleFilterError

# module_utils imported at a filter's first call (why: plugins/plugin_utils/filters.py).


def _model_fit(config, **kwargs):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import (
        ModelFitError,
        model_fit,
    )

    try:
        return model_fit(config, **kwargs)
    except ModelFitError as exc:
        raise AnsibleFilterError(f"model_fit: {exc}") from exc


def _model_sizing(config, **kwargs):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import size_model

    return size_model(config, **kwargs)


def _model_fit_gpu(gpu_facts):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import (
        ModelFitError,
        gpu_from_facts,
    )

    try:
        return gpu_from_facts(gpu_facts)
    except ModelFitError as exc:
        raise AnsibleFilterError(f"model_fit_gpu: {exc}") from exc


def _model_fit_table(fits, names=None, title=None):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import render_table

    try:
        return render_table(fits, names, title)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"model_fit_table wants model_fit reports: {exc}") from exc


def _warm_switch_plan(fits, names, entries, fit_args, gpu_profile, settings=None):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import (
        ModelFitError,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.warm_switch import (
        WarmSwitchError,
        plan_pairs,
    )

    try:
        return plan_pairs(names, entries, fits, fit_args, gpu_profile, settings)
    except (WarmSwitchError, ModelFitError, KeyError) as exc:
        raise AnsibleFilterError(f"warm_switch_plan: {exc}") from exc


class FilterModule:
    """vllm_fleet.fleet model fit filters."""

    def filters(self):
        return {
            "model_fit": _model_fit,
            "model_sizing": _model_sizing,
            "model_fit_gpu": _model_fit_gpu,
            "model_fit_table": _model_fit_table,
            "warm_switch_plan": _warm_switch_plan,
        }
