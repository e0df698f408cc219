# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for the controller's decisions in a roll (module_utils/fleet/roll.py), and host_facts,
which reads what they decide from out of hostvars as plain data."""

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import module_util_filter

# module_utils imported at a filter's first call (why: plugins/plugin_utils/filters.py).
DECISIONS = ("switch_stops_model", "batch_leaving", "replica_hosts", "ephemeral_cover",
             "firewall_plans",
             "replica_members", "replica_scope", "replica_action", "replica_refusals",
             "replica_failures", "replica_blue_labels")


def host_facts(hostvars, hosts, names):
    """host -> its value of `names` (a variable's name: None where the host lacks it), or
    host -> {name: value} of those it has (a list of names), for each of `hosts` in order.

    Reads hostvars as Jinja's hostvars[host][name] does (each value templated in its host's
    context); a host not in the inventory has no values.
    """
    single = isinstance(names, str)
    facts = {}
    for host in hosts:
        # hostvars[unknown host] is an undefined marker, not a KeyError: no .get here
        known = hostvars[host] if host in hostvars else {}  # noqa: SIM401
        if single:
            facts[host] = known.get(names)
        else:
            facts[host] = {name: known[name] for name in names if name in known}
    return facts


class FilterModule:
    """vllm_fleet.fleet roll filters."""

    def filters(self):
        filters = {name: module_util_filter(name, "fleet.roll") for name in DECISIONS}
        filters["host_facts"] = host_facts
        return filters
