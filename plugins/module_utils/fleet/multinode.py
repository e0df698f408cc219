# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""One model across several hosts: a multi-node replica's plan, node by node.

A catalog entry that declares `nodes: N` (N > 1) is served by vLLM's own
multi-node mode with the multiprocessing backend: every host of the replica
runs `vllm serve` with the same options plus `--nnodes N --node-rank R
--master-addr HEAD --master-port P`, and every host but the head (rank 0)
adds `--headless` (no API server there). The hosts come from an inventory
group, in its order; the first is the head.

What vLLM 0.32.0 does with these (the wheel's own source; paths under vllm/):

- engine/arg_utils.py:1143-1146 declares --master-addr, --master-port,
  --nnodes/-n, --node-rank/-r; config/parallel.py:313-323 their defaults
  (127.0.0.1, 29501, 0, 1); entrypoints/launchers/cli_args.py:435 --headless.
- engine/arg_utils.py:2349-2356: nnodes > 1 needs the mp data-parallel
  backend; :2358-2379: nnodes must divide the world size (data parallel x
  pipeline x tensor x prefill-context parallel) and 0 <= node-rank < nnodes;
  :2380-2404: each node runs world / nnodes ranks, and the local data-parallel
  size is inferred from that; config/parallel.py:807-832: nnodes must be a
  multiple of the data-parallel node groups.
- entrypoints/cli/serve.py:69-77 and :149-150: --headless means no API server
  (api_server_count 0, run_headless); :218-232: a node with node rank > 0
  within its data-parallel group runs a MultiprocExecutor for its local
  ranks and waits on them (it does not watch the head).
- distributed/parallel_state.py:1852-1855: with nnodes > 1 every rank joins
  torch.distributed at tcp://master_addr:master_port (rank 0, on the head,
  serves that store; it listens on all interfaces).
- v1/executor/multiproc_executor.py:148-170 and device_communicators/
  shm_broadcast.py:551-565: the head's scheduler-output queue for remote
  readers is a ZMQ XPUB socket bound to tcp://<get_ip()>:0, and every
  worker rank binds its own reply queue the same way (:1009-1050); get_ip()
  (utils/network_utils.py:52-91) is VLLM_HOST_IP, else the address of the
  route to 8.8.8.8 - hence VLLM_HOST_IP per node.
- gloo (CPU, and vLLM's CPU groups on GPUs) and NCCL open their pair
  connections on ports the kernel picks; GLOO_SOCKET_IFNAME and
  NCCL_SOCKET_IFNAME (read by torch's libtorch_cpu / NCCL, not by vLLM) name
  the interface. VLLM_PORT (envs.py:720-727) moves only the ports vLLM asks
  get_open_port() for (utils/network_utils.py:192-247), not these.

So between the replica's hosts: the master port on the head, the data-parallel
RPC port on the head when data parallel > 1 (serve.py:235-237; its address
is --master-addr, engine/arg_utils.py:2500-2512), and the
kernel's ephemeral range (net.ipv4.ip_local_port_range) on every node. And
one of our own on every node: the rank state port, where each host's nginx
serves its ranks' states to the replica's other hosts (replica_watch.py).

Standard library only; a filter (plugins/filter/multinode.py) calls it.
"""

import ipaddress
import re

# vllm/config/parallel.py:316 and :160 (vLLM 0.32.0).
DEFAULT_MASTER_PORT = 29501
DEFAULT_DP_RPC_PORT = 29550
# Each replica host's rank state (nginx, replica_watch.py): below the ephemeral
# range, apart from vLLM's defaults.
DEFAULT_STATE_PORT = 29510
# Linux's default net.ipv4.ip_local_port_range.
DEFAULT_EPHEMERAL_PORTS = (32768, 60999)
MAX_PORT = 65535
# The inventory variables that feed a plan (named in errors).
IP_VARIABLE = "vllm_fleet_replica_ip"
INTERFACE_VARIABLE = "vllm_fleet_replica_interface"
MASTER_PORT_VARIABLE = "vllm_fleet_replica_master_port"
STATE_PORT_VARIABLE = "vllm_fleet_replica_state_port"
# Serve options the replica's layout sets, per node: a catalog entry may not.
LAYOUT_OPTIONS = ("nnodes", "node_rank", "master_addr", "master_port", "headless",
                  "data_parallel_address", "data_parallel_rank", "data_parallel_start_rank",
                  "data_parallel_size_local")
# Environment the layout sets per node (from inventory); VLLM_PORT: see _check_env.
LAYOUT_ENV = ("VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
# Serve options that make other hosts than the head answer requests (data-parallel
# load balancing modes) or that a headless worker refuses (api_server_count,
# vllm/entrypoints/cli/serve.py:69-75): a replica here has one API server, the
# head's, behind the front door.
ONE_API_SERVER_OPTIONS = ("data_parallel_external_lb", "data_parallel_hybrid_lb",
                          "data_parallel_multi_port_external_lb", "api_server_count")
PARALLEL_SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                  "prefill_context_parallel_size")
# Linux interface names: at most 15 bytes (IFNAMSIZ 16 with the NUL), no '/',
# no white space, not '.' or '..'.
_INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
# A catalog name (module_utils/engine/serve_args.py checks the same for the unit).
_MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
HEAD = "head"
WORKER = "worker"
# InfiniBand/RoCE between the replica's hosts (the entry's `rdma: true`): NCCL's
# IB transport registers (pins) its buffers with the NIC, so the rank needs the
# verbs devices and a locked-memory limit far above the 8 MiB default (NCCL's
# troubleshooting guide, "Memory issues": `--ulimit memlock=-1` for containers;
# an ibv_reg_mr under the limit fails with "Cannot allocate memory",
# NVIDIA/nccl#563). The unit then allows these devices and sets
# LimitMEMLOCK=infinity. /dev/infiniband/uverbsN have the driver name
# infiniband_verbs in /proc/devices (a major of their own); rdma_cm is a misc
# device, named by its path (char-misc would allow every misc device).
RDMA_DEVICE_ALLOW = ("char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw")
RDMA_MEMLOCK = "infinity"


class ReplicaLayoutError(ValueError):
    """A multi-node layout vLLM would refuse, or inputs that cannot make one."""


def _int(value, what):
    if isinstance(value, bool):
        raise ReplicaLayoutError(f"{what} must be an integer, got {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ReplicaLayoutError(f"{what} must be an integer, got {value!r}") from None


def _context(model):
    return f"catalog entry {model}" if model else "catalog entry"


def entry_nodes(entry, model=None):
    """The number of hosts the entry's model spans (its `nodes`, 1 when absent)."""
    if not isinstance(entry, dict):
        raise ReplicaLayoutError(
            f"{_context(model)} must be a mapping, got {type(entry).__name__}")
    value = entry.get("nodes")
    nodes = 1 if value is None else _int(value, f"{_context(model)}: nodes")
    if nodes < 1:
        raise ReplicaLayoutError(f"{_context(model)}: nodes must be 1 or more, got {nodes}")
    return nodes


def parallel_layout(entry, model=None):
    """The entry's parallel sizes and how its ranks spread over its nodes.

    Returns nodes, the four sizes (read from `serve`, 1 when absent),
    world_size (their product, vLLM's world size across data parallel) and
    ranks_per_node. Raises ReplicaLayoutError for a layout vLLM 0.32 refuses.
    """
    context = _context(model)
    nodes = entry_nodes(entry, model)
    serve = entry.get("serve") or {}
    if not isinstance(serve, dict):
        raise ReplicaLayoutError(f"{context}: serve must be a mapping, got {serve!r}")
    sizes = {}
    for key in PARALLEL_SIZES:
        value = serve.get(key)
        sizes[key] = 1 if value in (None, "") else _int(value, f"{context}: serve.{key}")
        if sizes[key] < 1:
            raise ReplicaLayoutError(f"{context}: serve.{key} must be 1 or more, got {sizes[key]}")
    tp, pp, dp, pcp = (sizes[key] for key in PARALLEL_SIZES)
    within_dp = tp * pp * pcp
    world = dp * within_dp
    product = (f"data_parallel_size {dp} x pipeline_parallel_size {pp} x tensor_parallel_size "
               f"{tp} x prefill_context_parallel_size {pcp} = {world}")
    if world % nodes:
        # vllm/engine/arg_utils.py:2365-2372
        raise ReplicaLayoutError(
            f"{context}: nodes {nodes} does not divide the world size {product}; vLLM "
            "refuses it (--nnodes must evenly divide the total world size): change nodes or "
            "the parallel sizes in serve")
    ranks_per_node = world // nodes
    if nodes > 1 and dp > 1:
        # vllm/engine/arg_utils.py:2400-2404, vllm/config/parallel.py:807-832
        dp_local = max(ranks_per_node // within_dp, 1)
        dp_node_groups = dp // dp_local
        if dp % dp_local or nodes % dp_node_groups:
            raise ReplicaLayoutError(
                f"{context}: {nodes} nodes of {ranks_per_node} ranks cannot hold "
                f"data_parallel_size {dp} replicas of {within_dp} ranks each: vLLM refuses it "
                "(nnodes must be "
                "divisible by data_parallel_size / data_parallel_size_local)")
    return {"nodes": nodes, **sizes, "world_size": world, "ranks_per_node": ranks_per_node}


def _check_serve(entry, context):
    serve = entry.get("serve") or {}
    owned = sorted(set(LAYOUT_OPTIONS).intersection(serve))
    if owned:
        raise ReplicaLayoutError(
            f"{context}: serve must not set {', '.join(owned)}: a multi-node replica's layout "
            f"sets them per node (nodes in the catalog, the head's {IP_VARIABLE} and "
            f"{MASTER_PORT_VARIABLE} in the inventory)")
    other = sorted(key for key in ONE_API_SERVER_OPTIONS if serve.get(key) not in (None, False))
    if other:
        raise ReplicaLayoutError(
            f"{context}: serve sets {', '.join(other)}: a multi-node replica here has one API "
            "server, the head's, and headless workers (which refuse api_server_count); "
            "remove them")
    for key in ("distributed_executor_backend", "data_parallel_backend"):
        value = serve.get(key)
        if value not in (None, "", "mp"):
            # vllm/engine/arg_utils.py:2349-2356, vllm/config/parallel.py:1088-1094
            raise ReplicaLayoutError(
                f"{context}: serve.{key} is {value!r}; a multi-node replica runs vLLM's own "
                "multiprocessing backend (mp), started on each host by its own unit")


def _check_env(entry, context):
    env = entry.get("env") or {}
    owned = sorted(set(LAYOUT_ENV).intersection(env))
    if owned:
        raise ReplicaLayoutError(
            f"{context}: env must not set {', '.join(owned)}: they differ per host and come from "
            f"the inventory ({IP_VARIABLE}, {INTERFACE_VARIABLE})")
    if "VLLM_PORT" in env:
        raise ReplicaLayoutError(
            f"{context}: env sets VLLM_PORT: vLLM then scans for ports from it "
            "(vllm/utils/network_utils.py:207-247), outside the ephemeral range the replica's "
            "firewall opens between its hosts; leave it unset for a multi-node model")


def entry_rdma(entry, context="catalog entry"):
    """Whether the entry's replica talks InfiniBand/RoCE (its `rdma`), refusing NCCL
    settings that name IB HCAs without it.

    NCCL_IB_HCA set, or NCCL_NET=IB, in the entry's env (and NCCL_IB_DISABLE not 1)
    makes NCCL use the IB transport; without `rdma: true` the unit denies the
    verbs devices and leaves the 8 MiB memlock limit, and the ranks fail at their
    first collective rather than here.
    """
    value = entry.get("rdma", False)
    if value is None:
        value = False
    if not isinstance(value, bool):
        raise ReplicaLayoutError(f"{context}: rdma must be true or false, got {value!r}")
    env = entry.get("env") or {}
    disabled = str(env.get("NCCL_IB_DISABLE", "")).strip() == "1"
    named = [f"{name}={env[name]}" for name in ("NCCL_IB_HCA", "NCCL_NET")
             if name in env and str(env[name]).strip()
             and (name == "NCCL_IB_HCA" or str(env[name]).strip().upper() == "IB")]
    if named and not value and not disabled:
        raise ReplicaLayoutError(
            f"{context}: env sets {', '.join(named)}, which has NCCL talk InfiniBand/RoCE between "
            "the replica's hosts, but the entry does not set rdma: true; NCCL pins its buffers "
            "with the NIC, which needs the /dev/infiniband devices and a locked-memory limit "
            'above the default 8 MiB ("Cannot allocate memory" otherwise): set rdma: true in '
            "the catalog entry (the unit then allows the devices and sets "
            "LimitMEMLOCK=infinity), or drop those variables to use sockets")
    return value


def _check_gpus(entry, context, ranks_per_node):
    gpus = entry.get("gpus") or []
    if gpus and len(gpus) != ranks_per_node:
        raise ReplicaLayoutError(
            f"{context}: each node runs {ranks_per_node} ranks, one per GPU, but gpus lists "
            f"{len(gpus)} ({', '.join(str(g) for g in gpus)}); list {ranks_per_node} GPUs")


def _port(value, what):
    port = _int(value, what)
    if not 0 < port <= MAX_PORT:
        raise ReplicaLayoutError(f"{what} must be a port 1-{MAX_PORT}, got {port}")
    return port


def port_range(value, what="ephemeral port range"):
    """(low, high) from '32768-60999', '32768 60999' (the sysctl's text) or a pair."""
    if isinstance(value, str):
        parts = value.replace("-", " ").split()
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = []
    try:
        low_text, high_text = parts
    except ValueError:
        raise ReplicaLayoutError(f"{what} must be 'LOW-HIGH', got {value!r}") from None
    low, high = _port(low_text, what), _port(high_text, what)
    if low > high:
        raise ReplicaLayoutError(f"{what} runs backwards: {low}-{high}")
    return low, high


def _host(item, index):
    if not isinstance(item, dict):
        raise ReplicaLayoutError(
            f"replica host {index} must be a mapping with name, ip and interface, got {item!r}")
    name = str(item.get("name") or "").strip()
    if not name:
        raise ReplicaLayoutError(f"replica host {index} has no name: {item!r}")
    ip = item.get("ip")
    if ip in (None, ""):
        raise ReplicaLayoutError(
            f"replica host {name} has no address for the replica's traffic: set {IP_VARIABLE} "
            "(the address of the interface the hosts reach each other on)")
    try:
        address = ipaddress.ip_address(str(ip).strip())
    except ValueError:
        raise ReplicaLayoutError(
            f"replica host {name}: {IP_VARIABLE} must be an IPv4 or IPv6 address, "
            f"got {ip!r}") from None
    if address.is_unspecified or address.is_loopback or address.is_multicast:
        raise ReplicaLayoutError(
            f"replica host {name}: {IP_VARIABLE} {address} cannot be reached from the other "
            "hosts; give the address of the interface they reach each other on")
    interface = item.get("interface")
    if interface in (None, ""):
        raise ReplicaLayoutError(
            f"replica host {name} has no interface for the replica's traffic: set "
            f"{INTERFACE_VARIABLE} (gloo and NCCL bind to it)")
    interface = str(interface)
    if not _INTERFACE.fullmatch(interface) or interface in (".", ".."):
        raise ReplicaLayoutError(
            f"replica host {name}: {INTERFACE_VARIABLE} must be a network interface name "
            f"(at most 15 characters, no '/' or white space), got {interface!r}")
    role = item.get("role")
    if role not in (None, "", HEAD, WORKER):
        raise ReplicaLayoutError(
            f"replica host {name}: role must be {HEAD} or {WORKER}, got {role!r}")
    return {"name": name, "ip": str(address), "interface": interface, "role": role or None}


def _hosts(hosts, nodes, context):
    if isinstance(hosts, (str, dict)) or not isinstance(hosts, (list, tuple)):
        raise ReplicaLayoutError(
            f"the replica's hosts must be a list (the inventory group's hosts, head first), "
            f"got {hosts!r}")
    parsed = [_host(item, index) for index, item in enumerate(hosts)]
    names = [host["name"] for host in parsed]
    if len(parsed) != nodes:
        raise ReplicaLayoutError(
            f"{context} spans nodes {nodes}, but the replica's group holds {len(parsed)} "
            f"host(s) ({', '.join(names) or 'none'}); a replica needs exactly one host per node")
    for key, label in (("name", "host"), ("ip", IP_VARIABLE)):
        seen = {}
        for host in parsed:
            if host[key] in seen:
                raise ReplicaLayoutError(
                    f"replica hosts {seen[host[key]]} and {host['name']} have the same {label} "
                    f"{host[key]}; each node of a replica is its own host")
            seen[host[key]] = host["name"]
    for index, host in enumerate(parsed):
        wanted = HEAD if index == 0 else WORKER
        if host["role"] and host["role"] != wanted:
            if host["role"] == HEAD:
                raise ReplicaLayoutError(
                    f"replica host {host['name']} is marked head but is number {index + 1} in the "
                    f"group ({', '.join(names)}); the head is the group's first host: move it "
                    "first")
            raise ReplicaLayoutError(
                f"replica host {host['name']} is marked worker but is first in the group "
                f"({', '.join(names)}); the first host is the head")
    return parsed


def _fixed_ports(entry, layout, master_port, state_port, ephemeral, context):
    """The fixed ports [(port, why, on the head only)], checked against each other and the
    range."""
    api_port = entry.get("port")
    fixed = [(master_port, "master port (torch.distributed store of rank 0)", True),
             (state_port, "rank state port (each host's ranks' states, served by its nginx)",
              False)]
    if layout["data_parallel_size"] > 1:
        serve = entry.get("serve") or {}
        rpc = serve.get("data_parallel_rpc_port")
        rpc = DEFAULT_DP_RPC_PORT if rpc in (None, "") else _port(
            rpc, f"{context}: serve.data_parallel_rpc_port")
        fixed.append((rpc, "data-parallel RPC port (engine handshake)", True))
    seen = {}
    if api_port not in (None, ""):
        seen[_int(api_port, f"{context}: port")] = "the model's API port (port)"
    low, high = ephemeral
    for port, why, _head in fixed:
        if port in seen:
            raise ReplicaLayoutError(
                f"{context}: the replica's {why} {port} is also {seen[port]}; set "
                f"{MASTER_PORT_VARIABLE}, {STATE_PORT_VARIABLE} (or serve.data_parallel_rpc_port) "
                "to a free port")
        if low <= port <= high:
            raise ReplicaLayoutError(
                f"{context}: the replica's {why} {port} lies in the ephemeral port range "
                f"{low}-{high} the kernel hands out to other sockets; pick one below {low} "
                f"(vLLM's default master port is {DEFAULT_MASTER_PORT})")
        seen[port] = f"the replica's {why}"
    return fixed


def replica_plan(entry, hosts, master_port=DEFAULT_MASTER_PORT,
                 ephemeral_ports=DEFAULT_EPHEMERAL_PORTS, model=None,
                 state_port=DEFAULT_STATE_PORT, group=None):
    """Each node's role, vLLM arguments, environment and ports for one replica.

    entry: the catalog entry (nodes, serve, env, gpus, port); hosts: the
    replica group's hosts in inventory order, each {name, ip, interface} and
    optionally role (head/worker, checked against the order); master_port:
    the head's torch.distributed port; ephemeral_ports: the hosts'
    net.ipv4.ip_local_port_range; state_port: where each host serves its
    ranks' states to the others; group: the inventory group's name (the
    replica's name in the deployment record). Returns a JSON-able dict; raises
    ReplicaLayoutError naming what is wrong and the variable that fixes it.
    """
    if model is not None and not _MODEL_NAME.fullmatch(str(model)):
        raise ReplicaLayoutError(
            f"model must be a catalog name like tiny_gqa (a-z, 0-9, _ and -), got {model!r}")
    context = _context(model)
    layout = parallel_layout(entry, model)
    nodes = layout["nodes"]
    if nodes == 1:
        raise ReplicaLayoutError(
            f"{context} declares nodes 1: it is served by each host on its own, not by a "
            "multi-node replica (set nodes: N in the catalog entry for one)")
    _check_serve(entry, context)
    _check_env(entry, context)
    _check_gpus(entry, context, layout["ranks_per_node"])
    rdma = entry_rdma(entry, context)
    master_port = _port(master_port, MASTER_PORT_VARIABLE)
    state_port = _port(state_port, STATE_PORT_VARIABLE)
    if state_port == master_port:
        raise ReplicaLayoutError(
            f"{context}: the rank state port {state_port} is also the master port; set "
            f"{STATE_PORT_VARIABLE} or {MASTER_PORT_VARIABLE} to another port")
    ephemeral = port_range(ephemeral_ports)
    fixed = _fixed_ports(entry, layout, master_port, state_port, ephemeral, context)
    members = _hosts(hosts, nodes, context)
    head = members[0]
    gpus = entry.get("gpus") or []
    peers = [host["ip"] for host in members]
    ephemeral_rule = {"ports": list(ephemeral), "why": "ephemeral ports: gloo/NCCL pair "
                      "connections and the ZMQ message queues between ranks"}
    plan_members = []
    for rank, host in enumerate(members):
        role = HEAD if rank == 0 else WORKER
        argv = ["--nnodes", str(nodes), "--node-rank", str(rank),
                "--master-addr", head["ip"], "--master-port", str(master_port)]
        if role == WORKER:
            argv.append("--headless")
        env = {"VLLM_HOST_IP": host["ip"], "GLOO_SOCKET_IFNAME": host["interface"]}
        if gpus:
            env["NCCL_SOCKET_IFNAME"] = host["interface"]
        ports = [{"ports": [port, port], "why": why} for port, why, head_only in fixed
                 if role == HEAD or not head_only]
        ports.append(dict(ephemeral_rule))
        first_rank = rank * layout["ranks_per_node"]
        plan_members.append({
            "name": host["name"], "role": role, "node_rank": rank, "nodes": nodes,
            "ip": host["ip"], "interface": host["interface"], "master_addr": head["ip"],
            "ranks": [first_rank, first_rank + layout["ranks_per_node"] - 1],
            "argv": argv, "env": env, "ports": ports, "peers": peers,
            "state_url": state_url(host["ip"], state_port, model),
            "rdma": rdma, "device_allow": list(RDMA_DEVICE_ALLOW) if rdma else [],
        })
    for member in plan_members:
        member["head_state_url"] = plan_members[0]["state_url"]
    return {
        "model": model, "group": group, "layout": layout, "head": head["name"],
        "master_addr": head["ip"], "master_port": master_port, "state_port": state_port,
        "ephemeral_ports": list(ephemeral), "peers": peers, "members": plan_members,
    }


def state_url(ip, port, model):
    """Where a replica host serves a model's rank state (its nginx, replica_watch.py)."""
    host = f"[{ip}]" if ":" in str(ip) else str(ip)
    return f"http://{host}:{port}/vllm-fleet/ranks/{model or 'replica'}.json"


def record_replica(plan, name):
    """What the deployment record keeps of host `name`'s place in the replica: the group,
    its role and rank, the head, and every rank's name, role and state URL (the probe's
    replica watch reads its peers from it)."""
    member = replica_node(plan, name)
    return {
        "group": plan.get("group"), "role": member["role"], "node_rank": member["node_rank"],
        "nodes": member["nodes"], "head": plan["head"],
        "ranks": [{"name": m["name"], "role": m["role"], "node_rank": m["node_rank"],
                   "ip": m["ip"], "state_url": m["state_url"]} for m in plan["members"]],
        "peers": list(member["peers"]), "ports": [dict(rule) for rule in member["ports"]],
    }


def replica_node(plan, name):
    """The member of a replica plan that host `name` runs."""
    for member in (plan or {}).get("members", []):
        if member["name"] == str(name):
            return member
    names = ", ".join(m["name"] for m in (plan or {}).get("members", [])) or "none"
    raise ReplicaLayoutError(f"host {name} is not in the replica (its hosts: {names})")


def node_serve_args(entry, node, model=None):
    """The replica arguments one host's `vllm serve` adds, or [] for a single-node entry.

    A multi-node entry without its node, or a node that belongs to another
    layout, is refused: a unit rendered without them would start a lone
    server that waits for peers forever (or serves alone on one host).
    """
    context = _context(model)
    nodes = entry_nodes(entry, model)
    if not node:
        if nodes > 1:
            raise ReplicaLayoutError(
                f"{context} spans {nodes} nodes: its units need the host's node of the replica "
                "plan (vllm_fleet.fleet.replica_plan, then replica_node)")
        return []
    if not isinstance(node, dict) or "argv" not in node or "nodes" not in node:
        raise ReplicaLayoutError(
            f"{context}: node must be one member of a replica plan, got {node!r}")
    if node["nodes"] != nodes:
        raise ReplicaLayoutError(
            f"{context} declares nodes {nodes}, but the node given belongs to a replica of "
            f"{node['nodes']} nodes")
    return list(node["argv"])


def _merge_ranges(ranges):
    merged = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return merged


def replica_firewall(plans, name):
    """What host `name`'s firewall opens to its replicas' hosts, and to them only.

    plans: one replica plan or a list of them (a host may be in the replica
    being replaced and in the one replacing it). Returns the host's peers
    (IPv4 and IPv6, sorted), its TCP port ranges merged, and why each is
    open. One table per host, not per replica: nftables' drop is final
    across tables, so a table per replica would drop the other replica's
    peers.
    """
    if isinstance(plans, dict):
        plans = [plans]
    members = [replica_node(plan, name) for plan in plans or []]
    if not members:
        raise ReplicaLayoutError(f"host {name}: no replica plan given for its firewall")
    peers = {ipaddress.ip_address(ip) for member in members for ip in member["peers"]}
    ranges, why = [], []
    for plan, member in zip(plans, members, strict=True):
        for rule in member["ports"]:
            low, high = rule["ports"]
            ranges.append((low, high))
            text = f"{low}" if low == high else f"{low}-{high}"
            why.append(f"{plan.get('model') or 'replica'} {member['role']}: {text} {rule['why']}")
    return {
        "host": str(name),
        "replicas": [plan.get("model") or "" for plan in plans],
        "peers_v4": [str(ip) for ip in sorted(ip for ip in peers
                                              if isinstance(ip, ipaddress.IPv4Address))],
        "peers_v6": [str(ip) for ip in sorted(ip for ip in peers
                                              if isinstance(ip, ipaddress.IPv6Address))],
        "ports": _merge_ranges(ranges),
        "why": why,
    }
