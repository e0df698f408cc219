# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Hash locks of Python environments (module_utils/engine/python_lock.py; docs: python_lock.yml,
python_lock_drift.yml)."""

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import module_util_filter


class FilterModule:
    """vllm_fleet.fleet lock filters."""

    def filters(self):
        return {
            "python_lock": module_util_filter("python_lock", "engine.python_lock", "summary"),
            "python_lock_drift": module_util_filter("python_lock_drift", "engine.python_lock",
                                                    "describe"),
        }
