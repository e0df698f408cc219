# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for API keys (module_utils/frontdoor/api_keys.py)."""

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import module_util_filter


class FilterModule:
    """vllm_fleet.fleet API key filters."""

    def filters(self):
        return {"api_key_problems": module_util_filter("api_key_problems", "frontdoor.api_keys")}
