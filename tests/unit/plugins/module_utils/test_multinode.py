# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""multinode: a catalog entry with nodes > 1 and a replica's hosts -> each node's plan.

The expected launch lines are vLLM 0.32.0's multi-node form (docs/multinode.md
gives the source lines): every node `--nnodes N --node-rank R --master-addr
HEAD --master-port P`, the workers `--headless` too.
"""

import copy

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
    DEFAULT_DP_RPC_PORT,
    DEFAULT_MASTER_PORT,
    ReplicaLayoutError,
    entry_nodes,
    node_serve_args,
    parallel_layout,
    port_range,
    record_replica,
    replica_firewall,
    replica_node,
    replica_plan,
)
from repo_paths import CATALOG

LAB = [{"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
       {"name": "lab2", "ip": "172.31.250.12", "interface": "eth0"}]
GPU_HOSTS = [{"name": "gpu21", "ip": "10.20.0.21", "interface": "ens1f0np0"},
             {"name": "gpu22", "ip": "10.20.0.22", "interface": "ens1f0np0"}]
EPHEMERAL = {"ports": [32768, 60999], "why": "ephemeral ports: gloo/NCCL pair connections and "
             "the ZMQ message queues between ranks"}
MASTER = {"ports": [29501, 29501], "why": "master port (torch.distributed store of rank 0)"}
STATE = {"ports": [29510, 29510], "why": "rank state port (each host's ranks' states, served by "
         "its nginx)"}


def catalog_entry(name):
    return copy.deepcopy(yaml.safe_load(CATALOG.read_text())["vllm_fleet_catalog"][name])


def tiny_gqa_tp2():
    """The lab's tiny_gqa, tensor parallel 2 across two lab containers (issue 15)."""
    entry = catalog_entry("tiny_gqa")
    entry["nodes"] = 2
    entry["serve"]["tensor_parallel_size"] = 2
    return entry


def kimi_tp16():
    """Kimi-K2.5 INT4 across two 8-GPU hosts, tensor parallel 16 (recipes' multi_node_tp)."""
    entry = catalog_entry("kimi_k25_int4")
    entry["nodes"] = 2
    entry["serve"]["tensor_parallel_size"] = 16
    return entry


# --- the lab's two-node tiny_gqa ----------------------------------------------


def test_tiny_gqa_tp2_head_and_headless_worker():
    plan = replica_plan(tiny_gqa_tp2(), LAB, model="tiny_gqa")
    assert plan["layout"] == {"nodes": 2, "tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                              "data_parallel_size": 1, "prefill_context_parallel_size": 1,
                              "world_size": 2, "ranks_per_node": 1}
    assert (plan["head"], plan["master_addr"], plan["master_port"]) == (
        "lab1", "172.31.250.11", DEFAULT_MASTER_PORT)
    head, worker = plan["members"]
    assert head["argv"] == ["--nnodes", "2", "--node-rank", "0", "--master-addr",
                            "172.31.250.11", "--master-port", "29501"]
    assert worker["argv"] == ["--nnodes", "2", "--node-rank", "1", "--master-addr",
                              "172.31.250.11", "--master-port", "29501", "--headless"]
    assert (head["role"], worker["role"]) == ("head", "worker")
    assert (head["ranks"], worker["ranks"]) == ([0, 0], [1, 1])
    # CPU entry (no gpus): gloo's interface, no NCCL.
    assert head["env"] == {"VLLM_HOST_IP": "172.31.250.11", "GLOO_SOCKET_IFNAME": "eth0"}
    assert worker["env"] == {"VLLM_HOST_IP": "172.31.250.12", "GLOO_SOCKET_IFNAME": "eth0"}
    # The head listens on the master port; both on the rank state port and the ephemeral range.
    assert head["ports"] == [MASTER, STATE, EPHEMERAL]
    assert worker["ports"] == [STATE, EPHEMERAL]
    # Each rank's state, served by its host's nginx to the others (replica_watch.py).
    assert head["state_url"] == "http://172.31.250.11:29510/vllm-fleet/ranks/tiny_gqa.json"
    assert worker["state_url"] == "http://172.31.250.12:29510/vllm-fleet/ranks/tiny_gqa.json"
    assert worker["head_state_url"] == head["state_url"]
    assert head["peers"] == worker["peers"] == ["172.31.250.11", "172.31.250.12"]
    assert worker["master_addr"] == "172.31.250.11"


def test_master_port_and_ephemeral_range_come_from_the_inventory():
    plan = replica_plan(tiny_gqa_tp2(), LAB, master_port="29600",
                        ephemeral_ports="40000\t50000", model="tiny_gqa")
    head, worker = plan["members"]
    assert head["argv"][-2:] == ["--master-port", "29600"]
    assert worker["argv"][-3:] == ["--master-port", "29600", "--headless"]
    assert [rule["ports"] for rule in head["ports"]] == [
        [29600, 29600], [29510, 29510], [40000, 50000]]


def test_roles_in_the_inventory_that_agree_with_the_order_are_accepted():
    hosts = [dict(LAB[0], role="head"), dict(LAB[1], role="worker")]
    assert replica_plan(tiny_gqa_tp2(), hosts)["head"] == "lab1"


def test_an_ipv6_replica_keeps_its_addresses_canonical():
    hosts = [{"name": "a", "ip": "FD00::0011", "interface": "eth0"},
             {"name": "b", "ip": "fd00::12", "interface": "eth0"}]
    plan = replica_plan(tiny_gqa_tp2(), hosts)
    assert plan["master_addr"] == "fd00::11"
    assert plan["members"][1]["argv"][5] == "fd00::11"


# --- Kimi-K2.5 across two 8-GPU hosts -----------------------------------------


def test_kimi_tp16_over_two_gpu_hosts():
    plan = replica_plan(kimi_tp16(), GPU_HOSTS, model="kimi_k25_int4")
    assert plan["layout"]["world_size"] == 16
    assert plan["layout"]["ranks_per_node"] == 8
    head, worker = plan["members"]
    assert (head["ranks"], worker["ranks"]) == ([0, 7], [8, 15])
    # GPU entry: NCCL binds to the same interface as gloo.
    assert worker["env"] == {"VLLM_HOST_IP": "10.20.0.22", "GLOO_SOCKET_IFNAME": "ens1f0np0",
                             "NCCL_SOCKET_IFNAME": "ens1f0np0"}
    assert worker["argv"] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.20.0.21",
                              "--master-port", "29501", "--headless"]


def test_tensor_parallel_8_pipeline_parallel_2():
    entry = catalog_entry("kimi_k25_int4")
    entry["nodes"] = 2
    entry["serve"]["pipeline_parallel_size"] = 2
    layout = parallel_layout(entry)
    assert (layout["world_size"], layout["ranks_per_node"]) == (16, 8)


def test_data_parallel_across_nodes_opens_the_rpc_port_on_the_head():
    entry = catalog_entry("kimi_k25_int4")
    entry.update(nodes=2)
    entry["serve"].update(tensor_parallel_size=1, data_parallel_size=16,
                          enable_expert_parallel=True)
    head, worker = replica_plan(entry, GPU_HOSTS)["members"]
    assert [rule["ports"] for rule in head["ports"]] == [
        [29501, 29501], [29510, 29510], [DEFAULT_DP_RPC_PORT, DEFAULT_DP_RPC_PORT],
        [32768, 60999]]
    assert worker["ports"] == [STATE, EPHEMERAL]
    entry["serve"]["data_parallel_rpc_port"] = 13345
    head = replica_plan(entry, GPU_HOSTS)["members"][0]
    assert head["ports"][2]["ports"] == [13345, 13345]


def test_a_data_parallel_replica_may_span_two_nodes():
    # DP 2 x TP 8 over 4 nodes of 4 ranks: each data-parallel replica on 2 nodes.
    entry = {"nodes": 4, "port": 8000, "serve": {"tensor_parallel_size": 8,
                                                 "data_parallel_size": 2}}
    hosts = [{"name": f"h{i}", "ip": f"10.0.0.{i}", "interface": "eth0"} for i in range(1, 5)]
    assert replica_plan(entry, hosts)["layout"]["ranks_per_node"] == 4


# --- refusals: what is wrong, and what fixes it -------------------------------


def _refused(entry=None, hosts=None, **kwargs):
    with pytest.raises(ReplicaLayoutError) as caught:
        replica_plan(tiny_gqa_tp2() if entry is None else entry,
                     LAB if hosts is None else hosts, model="tiny_gqa", **kwargs)
    return str(caught.value)


def test_nodes_must_divide_the_world_size():
    entry = tiny_gqa_tp2()
    entry["serve"]["tensor_parallel_size"] = 3
    assert _refused(entry) == (
        "catalog entry tiny_gqa: nodes 2 does not divide the world size data_parallel_size 1 x "
        "pipeline_parallel_size 1 x tensor_parallel_size 3 x prefill_context_parallel_size 1 = 3;"
        " vLLM refuses it (--nnodes must evenly divide the total world size): change nodes or "
        "the parallel sizes in serve")


def test_data_parallel_groups_must_fit_the_nodes():
    entry = {"nodes": 2, "port": 8000, "serve": {"tensor_parallel_size": 2,
                                                 "data_parallel_size": 3}}
    assert "2 nodes of 3 ranks cannot hold data_parallel_size 3 replicas of 2 ranks" in _refused(
        entry)


def test_the_group_must_hold_one_host_per_node():
    message = _refused(hosts=[*LAB, {"name": "lab3", "ip": "172.31.250.13",
                                     "interface": "eth0"}])
    assert message == (
        "catalog entry tiny_gqa spans nodes 2, but the replica's group holds 3 host(s) "
        "(lab1, lab2, lab3); a replica needs exactly one host per node")
    assert "holds 1 host(s) (lab1)" in _refused(hosts=LAB[:1])


def test_the_head_must_be_first():
    hosts = [dict(LAB[0]), dict(LAB[1], role="head")]
    assert _refused(hosts=hosts) == (
        "replica host lab2 is marked head but is number 2 in the group (lab1, lab2); the head "
        "is the group's first host: move it first")
    hosts = [dict(LAB[0], role="worker"), dict(LAB[1])]
    assert "replica host lab1 is marked worker but is first in the group" in _refused(
        hosts=hosts)
    assert "role must be head or worker, got 'leader'" in _refused(
        hosts=[dict(LAB[0], role="leader"), LAB[1]])


@pytest.mark.parametrize(("change", "message"), [
    ({"ip": None}, ("replica host lab2 has no address for the replica's traffic: set "
                    "vllm_fleet_replica_ip")),
    ({"ip": "172.31.250.300"}, ("replica host lab2: vllm_fleet_replica_ip must be an IPv4 or "
                                "IPv6 address, got '172.31.250.300'")),
    ({"ip": "127.0.0.1"}, "replica host lab2: vllm_fleet_replica_ip 127.0.0.1 cannot be reached"),
    ({"ip": "0.0.0.0"}, "replica host lab2: vllm_fleet_replica_ip 0.0.0.0 cannot be reached"),  # noqa: S104
    ({"ip": "172.31.250.11"}, ("replica hosts lab1 and lab2 have the same vllm_fleet_replica_ip "
                               "172.31.250.11")),
    ({"name": "lab1"}, "replica hosts lab1 and lab1 have the same host lab1"),
    ({"name": ""}, "replica host 1 has no name"),
    ({"interface": ""}, ("replica host lab2 has no interface for the replica's traffic: set "
                         "vllm_fleet_replica_interface")),
    ({"interface": "a-very-long-interface"}, ("replica host lab2: vllm_fleet_replica_interface "
                                              "must be a network interface name")),
    ({"interface": "eth0; drop"}, "vllm_fleet_replica_interface must be a network interface"),
])
def test_each_host_needs_its_own_reachable_address_and_an_interface(change, message):
    assert message in _refused(hosts=[LAB[0], dict(LAB[1], **change)])


def test_hosts_must_be_a_list_of_mappings():
    assert "the replica's hosts must be a list" in _refused(hosts="lab1,lab2")
    assert "replica host 0 must be a mapping" in _refused(hosts=["lab1", "lab2"])


@pytest.mark.parametrize(("serve", "message"), [
    ({"nnodes": 2}, "serve must not set nnodes: a multi-node replica's layout sets them per node"),
    ({"master_addr": "10.0.0.1", "headless": True}, "serve must not set headless, master_addr"),
    ({"distributed_executor_backend": "ray"},
     ("serve.distributed_executor_backend is 'ray'; a multi-node replica runs vLLM's own "
      "multiprocessing backend (mp)")),
    ({"data_parallel_backend": "ray"}, "serve.data_parallel_backend is 'ray'"),
    ({"api_server_count": 4}, ("serve sets api_server_count: a multi-node replica here has one API"
                               " server, the head's")),
    ({"data_parallel_hybrid_lb": True}, "serve sets data_parallel_hybrid_lb"),
])
def test_serve_options_the_layout_owns_are_refused(serve, message):
    entry = tiny_gqa_tp2()
    entry["serve"].update(serve)
    assert message in _refused(entry)


def test_mp_backend_spelled_out_is_accepted():
    entry = tiny_gqa_tp2()
    entry["serve"].update(distributed_executor_backend="mp", data_parallel_hybrid_lb=False)
    assert replica_plan(entry, LAB)["layout"]["world_size"] == 2


@pytest.mark.parametrize(("env", "message"), [
    ({"VLLM_HOST_IP": "172.31.250.11"}, ("env must not set VLLM_HOST_IP: they differ per host and "
                                         "come from the inventory (vllm_fleet_replica_ip")),
    ({"GLOO_SOCKET_IFNAME": "eth0"}, "env must not set GLOO_SOCKET_IFNAME"),
    ({"VLLM_PORT": "40000"}, "env sets VLLM_PORT: vLLM then scans for ports from it"),
])
def test_environment_the_layout_owns_is_refused(env, message):
    entry = tiny_gqa_tp2()
    entry["env"].update(env)
    assert message in _refused(entry)


def test_gpus_list_one_hosts_ranks():
    entry = kimi_tp16()
    entry["gpus"] = [0, 1, 2, 3]
    assert _refused(entry, GPU_HOSTS) == (
        "catalog entry tiny_gqa: each node runs 8 ranks, one per GPU, but gpus lists 4 "
        "(0, 1, 2, 3); list 8 GPUs")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"master_port": 40000}, ("the replica's master port (torch.distributed store of rank 0) 40000"
                              " lies in the ephemeral port range 32768-60999")),
    ({"master_port": 8001}, ("the replica's master port (torch.distributed store of rank 0) 8001 "
                             "is also the model's API port (port); set "
                             "vllm_fleet_replica_master_port")),
    ({"master_port": 0}, "vllm_fleet_replica_master_port must be a port 1-65535, got 0"),
    ({"master_port": "x"}, "vllm_fleet_replica_master_port must be an integer, got 'x'"),
    ({"ephemeral_ports": "60999-32768"}, "ephemeral port range runs backwards: 60999-32768"),
    ({"state_port": 29501}, "the rank state port 29501 is also the master port"),
    ({"state_port": 8001}, ("the replica's rank state port (each host's ranks' states, served by "
                            "its nginx) 8001 is also the model's API port (port)")),
    ({"state_port": 50000}, ("rank state port (each host's ranks' states, served by its nginx) "
                             "50000 lies in the ephemeral port range")),
])
def test_ports_must_be_free_of_each_other_and_the_ephemeral_range(kwargs, message):
    assert message in _refused(**kwargs)


def test_a_single_node_entry_has_no_replica():
    entry = tiny_gqa_tp2()
    del entry["nodes"]
    assert _refused(entry).startswith("catalog entry tiny_gqa declares nodes 1: it is served by "
                                      "each host on its own")


@pytest.mark.parametrize("nodes", [0, "two", True])
def test_nodes_must_be_a_positive_integer(nodes):
    entry = tiny_gqa_tp2()
    entry["nodes"] = nodes
    assert "catalog entry tiny_gqa: nodes must be" in _refused(entry)


def test_model_must_be_a_catalog_name():
    with pytest.raises(ReplicaLayoutError, match="model must be a catalog name"):
        replica_plan(tiny_gqa_tp2(), LAB, model="tiny gqa\n# x")


@pytest.mark.parametrize(("text", "pair"), [
    ("32768-60999", (32768, 60999)), ("32768\t60999\n", (32768, 60999)),
    ([1024, "2048"], (1024, 2048)), ((5, 5), (5, 5)),
])
def test_port_range_reads_the_sysctl_text_and_pairs(text, pair):
    assert port_range(text) == pair


@pytest.mark.parametrize("text", ["32768", "1-2-3", None, [1], "a-b", "1-70000"])
def test_port_range_refuses_anything_else(text):
    with pytest.raises(ReplicaLayoutError, match="ephemeral port range"):
        port_range(text)


# --- one host's node, and its serve arguments ---------------------------------


def test_replica_node_finds_the_host_or_names_the_replica():
    plan = replica_plan(tiny_gqa_tp2(), LAB)
    assert replica_node(plan, "lab2")["node_rank"] == 1
    with pytest.raises(ReplicaLayoutError, match=r"host lab9 is not in the replica \(its hosts: "
                                                 r"lab1, lab2\)"):
        replica_node(plan, "lab9")


def test_node_serve_args():
    entry = tiny_gqa_tp2()
    worker = replica_node(replica_plan(entry, LAB), "lab2")
    assert node_serve_args(entry, worker)[-1] == "--headless"
    single = catalog_entry("tiny_gqa")
    assert node_serve_args(single, None) == []
    assert node_serve_args(single, {}) == []
    with pytest.raises(ReplicaLayoutError, match="catalog entry tiny_gqa spans 2 nodes: its units "
                                                 "need the host's node of the replica plan"):
        node_serve_args(entry, None, model="tiny_gqa")
    with pytest.raises(ReplicaLayoutError, match="declares nodes 1, but the node given belongs to"
                                                 " a replica of 2 nodes"):
        node_serve_args(single, worker)
    with pytest.raises(ReplicaLayoutError, match="node must be one member of a replica plan"):
        node_serve_args(entry, {"role": "worker"})


def test_entry_nodes_defaults_to_one():
    assert entry_nodes({}) == 1
    assert entry_nodes({"nodes": "3"}) == 3
    with pytest.raises(ReplicaLayoutError, match="catalog entry x must be a mapping"):
        entry_nodes(["nodes"], model="x")


# --- the firewall's inputs -----------------------------------------------------


def test_firewall_of_the_head_and_of_the_worker():
    plan = replica_plan(tiny_gqa_tp2(), LAB, model="tiny_gqa")
    head = replica_firewall(plan, "lab1")
    assert head == {
        "host": "lab1", "replicas": ["tiny_gqa"],
        "peers_v4": ["172.31.250.11", "172.31.250.12"], "peers_v6": [],
        "ports": [[29501, 29501], [29510, 29510], [32768, 60999]],
        "why": ["tiny_gqa head: 29501 master port (torch.distributed store of rank 0)",
                ("tiny_gqa head: 29510 rank state port (each host's ranks' states, served by its "
                 "nginx)"),
                ("tiny_gqa head: 32768-60999 ephemeral ports: gloo/NCCL pair connections and the "
                 "ZMQ message queues between ranks")]}
    assert replica_firewall([plan], "lab2")["ports"] == [[29510, 29510], [32768, 60999]]


def test_a_host_in_two_replicas_opens_both_to_both_peer_sets():
    old = replica_plan(tiny_gqa_tp2(), LAB, model="tiny_gqa")
    entry = tiny_gqa_tp2()
    entry["port"] = 8002
    new = replica_plan(entry, [LAB[1], {"name": "lab3", "ip": "fd00::13", "interface": "eth1"}],
                       master_port=29502, model="tiny_mla")
    firewall = replica_firewall([old, new], "lab2")
    assert firewall["replicas"] == ["tiny_gqa", "tiny_mla"]
    assert firewall["peers_v4"] == ["172.31.250.11", "172.31.250.12"]
    assert firewall["peers_v6"] == ["fd00::13"]
    # lab2: worker of tiny_gqa, head of tiny_mla (master port 29502).
    assert firewall["ports"] == [[29502, 29502], [29510, 29510], [32768, 60999]]


def test_ranges_that_touch_or_overlap_are_merged():
    plan = replica_plan(tiny_gqa_tp2(), LAB, master_port=32767, ephemeral_ports="32768-60999")
    assert replica_firewall(plan, "lab1")["ports"] == [[29510, 29510], [32767, 60999]]


def test_the_record_keeps_each_ranks_name_role_and_state_url():
    plan = replica_plan(tiny_gqa_tp2(), LAB, model="tiny_gqa", group="replica_a")
    worker = record_replica(plan, "lab2")
    assert worker == {
        "group": "replica_a", "role": "worker", "node_rank": 1, "nodes": 2, "head": "lab1",
        "ranks": [
            {"name": "lab1", "role": "head", "node_rank": 0, "ip": "172.31.250.11",
             "state_url": "http://172.31.250.11:29510/vllm-fleet/ranks/tiny_gqa.json"},
            {"name": "lab2", "role": "worker", "node_rank": 1, "ip": "172.31.250.12",
             "state_url": "http://172.31.250.12:29510/vllm-fleet/ranks/tiny_gqa.json"}],
        "peers": ["172.31.250.11", "172.31.250.12"], "ports": [STATE, EPHEMERAL]}
    assert record_replica(plan, "lab1")["ports"] == [MASTER, STATE, EPHEMERAL]
    with pytest.raises(ReplicaLayoutError, match="host lab3 is not in the replica"):
        record_replica(plan, "lab3")


def test_an_ipv6_rank_state_url_brackets_the_address():
    hosts = [{"name": "a", "ip": "fd00::11", "interface": "eth0"},
             {"name": "b", "ip": "fd00::12", "interface": "eth0"}]
    plan = replica_plan(tiny_gqa_tp2(), hosts, model="tiny_gqa", state_port=29600)
    assert plan["members"][1]["state_url"] == "http://[fd00::12]:29600/vllm-fleet/ranks/tiny_gqa.json"


def test_firewall_needs_a_plan_with_the_host():
    with pytest.raises(ReplicaLayoutError, match="host lab1: no replica plan given"):
        replica_firewall([], "lab1")
