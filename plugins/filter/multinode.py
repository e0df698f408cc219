# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for a multi-node replica's plan (module_utils/multinode.py)."""

import functools

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.multinode import (
    DEFAULT_EPHEMERAL_PORTS,
    DEFAULT_MASTER_PORT,
    DEFAULT_STATE_PORT,
    record_replica,
    replica_firewall,
    replica_node,
    replica_plan,
)


def _as_filter_error(name):
    def wrap(func):
        @functools.wraps(func)
        def run(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except (KeyError, ValueError, TypeError) as exc:
                raise AnsibleFilterError(f"{name}: {exc}") from exc
        return run
    return wrap


@_as_filter_error("replica_plan")
def _replica_plan(entry, hosts, master_port=DEFAULT_MASTER_PORT,
                  ephemeral_ports=DEFAULT_EPHEMERAL_PORTS, model=None,
                  state_port=DEFAULT_STATE_PORT, group=None):
    return replica_plan(entry, hosts, master_port=master_port, ephemeral_ports=ephemeral_ports,
                        model=model, state_port=state_port, group=group)


class FilterModule:
    """vllm_fleet.fleet multi-node replica filters."""

    def filters(self):
        return {
            "replica_plan": _replica_plan,
            "replica_node": _as_filter_error("replica_node")(replica_node),
            "replica_firewall": _as_filter_error("replica_firewall")(replica_firewall),
            "record_replica": _as_filter_error("record_replica")(record_replica),
        }
