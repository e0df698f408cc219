# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for a model's `vllm serve` line and unit values (module_utils/engine/serve_args.py)."""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import module_util_filter


def _vllm_serve_argv(entry, vllm_bin, model_dir, host="127.0.0.1", model=None, alias="",
                     node=None, switch_mode="cold"):
    # Imported at the first call (why: plugins/plugin_utils/filters.py).
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.serve_args import (
        sleep_settings,
        vllm_serve_argv,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
        node_serve_args,
    )

    try:
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
            load_format=entry.get("load_format"),
            sleep_mode=sleep_settings(entry, switch_mode)["sleep_flag"],
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_serve_argv: {exc}") from exc


_check_unit_inputs = module_util_filter("vllm_unit_check", "engine.serve_args", "check_unit_inputs")
_check_request = module_util_filter("vllm_request_check", "engine.serve_args", "check_request")


def _vllm_unit_check(entry, model, settings=None):
    return _check_unit_inputs(model, entry, settings or {})


def _vllm_request_check(entry, model, settings=None, host="127.0.0.1", alias=""):
    return _check_request(model, entry, settings or {}, host=host, alias=alias)


class FilterModule:
    """vllm_fleet.fleet serve-argument and unit-value filters."""

    def filters(self):
        return {
            "vllm_serve_argv": _vllm_serve_argv,
            "vllm_unit_check": _vllm_unit_check,
            "vllm_request_check": _vllm_request_check,
            "vllm_sleep_settings": module_util_filter("vllm_sleep_settings", "engine.serve_args",
                                                      "sleep_settings"),
            "unit_name": module_util_filter("unit_name", "common.record"),
            **{name: module_util_filter(name, "engine.serve_args")
               for name in ("nvidia_device_nodes", "cache_environment",
                            "systemd_exec_line", "systemd_quote",
                            "systemd_word", "systemd_environment", "systemd_specifier_text")},
        }
