# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The multi-node filters, and vllm_serve_argv's node keyword, as templates call them."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.multinode import FilterModule
from ansible_collections.vllm_fleet.fleet.plugins.filter.serve_args import (
    FilterModule as ServeArgsFilters,
)

FILTERS = FilterModule().filters()
SERVE_ARGV = ServeArgsFilters().filters()["vllm_serve_argv"]
VLLM = "/opt/vllm/0.32.0-cpu/bin/vllm"
ENTRY = {"served_model_name": "tiny-gqa", "port": 8001, "nodes": 2,
         "serve": {"tensor_parallel_size": 2, "enforce_eager": True}, "extra_args": ["--seed", 0]}
HOSTS = [{"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
         {"name": "lab2", "ip": "172.31.250.12", "interface": "eth0"}]


def test_filter_names():
    assert sorted(FILTERS) == ["record_replica", "replica_firewall", "replica_node",
                               "replica_plan"]


def test_plan_node_and_argv_chain():
    plan = FILTERS["replica_plan"](ENTRY, HOSTS, model="tiny_gqa")
    worker = FILTERS["replica_node"](plan, "lab2")
    argv = SERVE_ARGV(ENTRY, VLLM, "/m", model="tiny_gqa", node=worker)
    # The replica's arguments follow the serve options; extra_args stay last.
    assert argv == [VLLM, "serve", "/m", "--host", "127.0.0.1", "--port", "8001",
                    "--served-model-name", "tiny-gqa", "--enable-server-load-tracking",
                    "--tensor-parallel-size", "2",
                    "--enforce-eager", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                    "172.31.250.11", "--master-port", "29501", "--headless", "--seed", "0"]
    firewall = FILTERS["replica_firewall"](plan, "lab2")
    assert firewall["ports"] == [[29510, 29510], [32768, 60999]]


def test_single_node_argv_is_unchanged_by_an_empty_node():
    entry = {key: value for key, value in ENTRY.items() if key != "nodes"}
    assert SERVE_ARGV(entry, VLLM, "/m", node={}) == SERVE_ARGV(entry, VLLM, "/m")


@pytest.mark.parametrize(("call", "message"), [
    (lambda: FILTERS["replica_plan"](ENTRY, HOSTS[:1], model="tiny_gqa"),
     "replica_plan: catalog entry tiny_gqa spans nodes 2, but the replica's group holds 1"),
    (lambda: FILTERS["replica_plan"](ENTRY, HOSTS, master_port=40000),
     "replica_plan: catalog entry: the replica's master port"),
    (lambda: FILTERS["replica_node"]({"members": []}, "lab1"),
     "replica_node: host lab1 is not in the replica (its hosts: none)"),
    (lambda: FILTERS["replica_firewall"]([], "lab1"),
     "replica_firewall: host lab1: no replica plan given"),
    (lambda: SERVE_ARGV(ENTRY, VLLM, "/m", model="tiny_gqa"),
     "vllm_serve_argv: catalog entry tiny_gqa spans 2 nodes: its units need the host's node"),
])
def test_errors_name_the_filter(call, message):
    with pytest.raises(AnsibleFilterError) as caught:
        call()
    assert str(caught.value).startswith(message)
