# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for a model's `vllm serve` line and unit values (module_utils/serve_args.py)."""

import functools

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.multinode import node_serve_args
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.serve_args import (
    check_unit_inputs,
    nvidia_device_nodes,
    systemd_environment,
    systemd_exec_line,
    systemd_quote,
    systemd_specifier_text,
    systemd_word,
    vllm_serve_argv,
)


def _as_filter_error(name):
    """Re-raise the helpers' errors as AnsibleFilterError naming the filter."""
    def wrap(func):
        @functools.wraps(func)
        def run(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except (KeyError, ValueError, TypeError) as exc:
                raise AnsibleFilterError(f"{name}: {exc}") from exc
        return run
    return wrap


@_as_filter_error("vllm_serve_argv")
def _vllm_serve_argv(entry, vllm_bin, model_dir, host="127.0.0.1", model=None, alias="",
                     node=None):
    return vllm_serve_argv(
        vllm_bin=vllm_bin,
        model_dir=model_dir,
        served_model_name=entry["served_model_name"],
        port=int(entry["port"]),
        options=entry.get("serve") or {},
        extra_args=entry.get("extra_args") or [],
        host=host,
        context=f"catalog entry {model}" if model else "catalog entry",
        aliases=[alias] if alias else [],
        node_args=node_serve_args(entry, node, model),
    )


@_as_filter_error("vllm_unit_check")
def _vllm_unit_check(entry, model, settings=None):
    return check_unit_inputs(model, entry, settings or {})


class FilterModule:
    """vllm_fleet.fleet serve-argument and unit-value filters."""

    def filters(self):
        return {
            "vllm_serve_argv": _vllm_serve_argv,
            "vllm_unit_check": _vllm_unit_check,
            "nvidia_device_nodes": _as_filter_error("nvidia_device_nodes")(nvidia_device_nodes),
            "systemd_exec_line": _as_filter_error("systemd_exec_line")(systemd_exec_line),
            "systemd_quote": _as_filter_error("systemd_quote")(systemd_quote),
            "systemd_word": _as_filter_error("systemd_word")(systemd_word),
            "systemd_environment": _as_filter_error("systemd_environment")(systemd_environment),
            "systemd_specifier_text":
                _as_filter_error("systemd_specifier_text")(systemd_specifier_text),
        }
