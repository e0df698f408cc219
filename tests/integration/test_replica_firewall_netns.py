# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The replica's nftables table, loaded for real in network namespaces of its own.

The ruleset is rendered from roles/vllm_service/templates/vllm-fleet-replica.nft.j2
(the replica plan of tiny_gqa across lab1 172.31.250.11 and lab2 172.31.250.12,
as the role renders it for lab1), loaded with `nft -f` into a namespace that
stands for lab1, and probed with real TCP connections:

- on loopback, from the vLLM user's uid (a numeric uid: no system user is
  created) and from another uid, to the distributed ports (the master port,
  the ephemeral range) and to a port outside them;
- over a veth pair from a second namespace holding the peer's address
  (172.31.250.12) and another one (172.31.250.99).

vLLM's docs ask exactly this of the distributed ports: reachable from the
replica's hosts only (docs/usage/security.md, "Firewall Configuration
Guidance"; docs/serving/parallelism_scaling.md, "Network security"). Needs
root, `ip` and `nft`; skipped with the reason otherwise. Nothing is loaded
into this machine's own namespace; the namespaces are deleted afterwards.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import jinja2
import pytest
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
    replica_firewall,
    replica_plan,
)
from repo_paths import ROOT
from systemd_unit import tiny_gqa_entry

TEMPLATE = ROOT / "roles" / "vllm_service" / "templates" / "vllm-fleet-replica.nft.j2"
VLLM_UID = 4242  # stands for the vllm user (nft takes a uid or a user name)
OTHER_UID = 4343  # any other local user
LAB = [{"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
       {"name": "lab2", "ip": "172.31.250.12", "interface": "eth0"}]
# 29501: the master port (torch.distributed's store); 40000: in the ephemeral
# range (ZMQ, gloo); 8001: the API port, not the table's.
PORTS = (29501, 40000, 8001)

SERVER = textwrap.dedent("""
    import socket, sys
    socks = []
    for port in map(int, sys.argv[1:]):
        for family, addr in ((socket.AF_INET, "0.0.0.0"),):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port)); s.listen(16); socks.append(s)
    print("ready", flush=True)
    import selectors
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            conn, _ = key.fileobj.accept(); conn.close()
""")

CLIENT = textwrap.dedent("""
    import json, os, socket, sys
    host, port, source, uid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    if uid:
        os.setgid(uid); os.setgroups([]); os.setuid(uid)
    s = socket.socket(); s.settimeout(3)
    if source:
        s.bind((source, 0))
    try:
        s.connect((host, port)); print(json.dumps("accepted"))
    except ConnectionRefusedError:
        print(json.dumps("refused"))
    except (TimeoutError, socket.timeout):
        print(json.dumps("timeout"))
""")


def render_ruleset(user):
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = CoreFilters().filters()["comment"]
    entry = dict(tiny_gqa_entry(), nodes=2)
    entry["serve"] = dict(entry["serve"], tensor_parallel_size=2)
    plan = replica_plan(entry, LAB, model="tiny_gqa")
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed", vllm_service_user=user,
        __vllm_service_firewall=replica_firewall(plan, "lab1"))


def _run(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory):
    """(lab1's namespace with the table loaded and listeners up, the peer's namespace)."""
    missing = [tool for tool in ("ip", "nft") if not shutil.which(tool)]
    if missing or os.geteuid() != 0:
        pytest.skip("needs root, ip and nft to make network namespaces "
                    f"(missing: {', '.join(missing) or 'root'})")
    server_ns, peer_ns = f"vf-fw-s{os.getpid()}", f"vf-fw-p{os.getpid()}"
    made = []
    server = None
    try:
        for ns in (server_ns, peer_ns):
            if _run("ip", "netns", "add", ns, check=False).returncode != 0:
                pytest.skip(f"ip netns add {ns} refused here (no network namespaces)")
            made.append(ns)
        _run("ip", "-n", server_ns, "link", "add", "eth0", "type", "veth",
             "peer", "name", "eth0", "netns", peer_ns)
        _run("ip", "-n", server_ns, "addr", "add", "172.31.250.11/24", "dev", "eth0")
        _run("ip", "-n", peer_ns, "addr", "add", "172.31.250.12/24", "dev", "eth0")
        _run("ip", "-n", peer_ns, "addr", "add", "172.31.250.99/24", "dev", "eth0")
        for ns in (server_ns, peer_ns):
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        ruleset = tmp_path_factory.mktemp("nft") / "replica.nft"
        ruleset.write_text(render_ruleset(VLLM_UID))
        _run("ip", "netns", "exec", server_ns, "nft", "-f", str(ruleset))
        server = subprocess.Popen(
            ["ip", "netns", "exec", server_ns, sys.executable, "-c", SERVER,
             *map(str, PORTS)], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        # The peer's addresses are usable once duplicate address detection is
        # not in the way (IPv4 has none) and the link is up on both ends.
        deadline = time.monotonic() + 10
        while "state UP" not in _run("ip", "-n", peer_ns, "link", "show", "eth0").stdout:
            assert time.monotonic() < deadline, "the veth pair never came up"
            time.sleep(0.1)
        yield server_ns, peer_ns
    finally:
        if server:
            server.kill()
            server.wait()
        for ns in made:
            _run("ip", "netns", "delete", ns, check=False)


def connect(ns, host, port, source="", uid=0):
    run = _run("ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, host, str(port),
               source, str(uid))
    return json.loads(run.stdout)


def test_the_table_is_the_rendered_one(namespaces):
    server_ns = namespaces[0]
    listed = _run("ip", "netns", "exec", server_ns, "nft", "list", "table", "inet",
                  "vllm_fleet_replicas").stdout
    assert "elements = { 0, 4242 }" in listed
    assert "elements = { 29501, 29510, 32768-60999 }" in listed


@pytest.mark.parametrize("host", ["127.0.0.1", "172.31.250.11"])
@pytest.mark.parametrize("port", [29501, 40000])
def test_on_this_host_only_the_vllm_user_and_root_reach_the_distributed_ports(
        namespaces, host, port):
    server_ns = namespaces[0]
    assert connect(server_ns, host, port, uid=VLLM_UID) == "accepted"
    assert connect(server_ns, host, port, uid=0) == "accepted"
    assert connect(server_ns, host, port, uid=OTHER_UID) == "refused"


def test_another_local_user_still_reaches_ports_outside_the_table(namespaces):
    server_ns = namespaces[0]
    assert connect(server_ns, "127.0.0.1", 8001, uid=OTHER_UID) == "accepted"


@pytest.mark.parametrize("port", [29501, 40000])
def test_the_peer_is_accepted_and_another_address_dropped(namespaces, port):
    peer_ns = namespaces[1]
    assert connect(peer_ns, "172.31.250.11", port, source="172.31.250.12") == "accepted"
    # Dropped, not refused: nothing answers (the client's 3 s timeout).
    assert connect(peer_ns, "172.31.250.11", port, source="172.31.250.99") == "timeout"
    # A port outside the table is open to the other address.
    assert connect(peer_ns, "172.31.250.11", 8001, source="172.31.250.99") == "accepted"


def test_another_local_user_cannot_reach_a_peers_distributed_ports(namespaces):
    # The peer's table admits lab1's address, whoever on lab1 sends: lab1's own
    # output chain refuses the connection before it leaves.
    server_ns, peer_ns = namespaces
    listener = subprocess.Popen(
        ["ip", "netns", "exec", peer_ns, sys.executable, "-c", SERVER, "29502", "29501"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        assert connect(server_ns, "172.31.250.12", 29501, uid=VLLM_UID) == "accepted"
        assert connect(server_ns, "172.31.250.12", 29501, uid=OTHER_UID) == "refused"
        # 29502 is not this table's port: open to anyone.
        assert connect(server_ns, "172.31.250.12", 29502, uid=OTHER_UID) == "accepted"
    finally:
        listener.kill()
        listener.wait()
