# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for a multi-node replica's plan (module_utils/fleet/multinode.py)."""

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import module_util_filter


class FilterModule:
    """vllm_fleet.fleet multi-node replica filters."""

    def filters(self):
        return {name: module_util_filter(name, "fleet.multinode")
                for name in ("replica_plan", "replica_node", "replica_firewall", "record_replica")}
