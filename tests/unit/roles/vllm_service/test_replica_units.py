# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A multi-node replica's units and firewall, from the vllm_service role's templates.

The head's and the worker's units come from the same vllm.service.j2 as a
single-host model's, with the host's node of the replica plan
(vllm_service_node); they are read back as systemd reads them. The firewall
ruleset is rendered from vllm-fleet-replica.nft.j2 and, where `nft` is
installed, checked by `nft -c -f` inside a network namespace of its own (never
against this machine's own firewall; -c loads nothing anyway).
"""

import copy
import shutil
import subprocess

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
    replica_firewall,
    replica_node,
    replica_plan,
)
from repo_paths import ROOT
from systemd_unit import VLLM, exec_argv, parsed, render_unit, tiny_gqa_entry, verify_unit, words

ROLE = ROOT / "roles" / "vllm_service"
LAB = [{"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
       {"name": "lab2", "ip": "172.31.250.12", "interface": "eth0"}]
MODEL_DIR = "/srv/models/vllm-fleet-lab/tiny-gqa"
PUBLISH = "/usr/bin/python3 -E -s /usr/local/lib/vllm-fleet/probe/replica_watch.py publish"
RANK = ["--file", "/run/vllm-fleet/ranks/tiny_gqa.json", "--model", "tiny_gqa", "--unit",
        "vllm-tiny_gqa.service", "--role"]


def tiny_gqa_tp2():
    entry = copy.deepcopy(tiny_gqa_entry())
    entry["nodes"] = 2
    entry["serve"]["tensor_parallel_size"] = 2
    return entry


@pytest.fixture(scope="module")
def plan():
    return replica_plan(tiny_gqa_tp2(), LAB, model="tiny_gqa")


def unit_for(plan, host):
    return render_unit(tiny_gqa_tp2(), vllm_service_node=replica_node(plan, host))


def environment(unit):
    return dict(word.split("=", 1) for value in parsed(unit)["Service.Environment"]
                for word in words(value))


def test_the_single_host_unit_does_not_change_with_an_empty_node():
    assert render_unit(tiny_gqa_entry(), vllm_service_node={}) == render_unit(tiny_gqa_entry())


def test_head_unit_serves_the_api_with_rank_0(plan):
    unit = unit_for(plan, "lab1")
    assert verify_unit.compare(unit) == []
    service = parsed(unit)
    assert service["Unit.Description"] == [
        "vLLM model server tiny_gqa (tiny-gqa on port 8001, head of 2 nodes)"]
    argv = exec_argv(service["Service.ExecStart"][0])
    assert argv == [VLLM, "serve", MODEL_DIR, "--host", "127.0.0.1", "--port", "8001",
                    "--served-model-name", "tiny-gqa", "--enable-server-load-tracking",
                    "--max-model-len", "512", "--enforce-eager", "--dtype", "bfloat16",
                    "--shutdown-timeout", "0", "--tensor-parallel-size", "2",
                    "--nnodes", "2", "--node-rank", "0", "--master-addr", "172.31.250.11",
                    "--master-port", "29501"]
    env = environment(unit)
    assert (env["VLLM_HOST_IP"], env["GLOO_SOCKET_IFNAME"]) == ("172.31.250.11", "eth0")
    assert "NCCL_SOCKET_IFNAME" not in env
    # Its rank state, written as root before each start and after each stop, never failing it.
    assert service["Service.ExecStartPre"] == [
        "-+" + " ".join([PUBLISH, "started", *RANK, "head"])]
    assert service["Service.ExecStopPost"] == [
        "-+" + " ".join([PUBLISH, "stopped", *RANK, "head"])]
    # The head restarts on a crash (its workers follow it); shared memory goes with the unit.
    assert service["Service.Restart"] == ["on-failure"]
    assert service["Service.RemoveIPC"] == ["yes"]


def test_worker_unit_is_headless_with_its_own_address(plan):
    unit = unit_for(plan, "lab2")
    assert verify_unit.compare(unit) == []
    service = parsed(unit)
    assert service["Unit.Description"] == [
        "vLLM model server tiny_gqa (tiny-gqa headless worker, node 1 of 2, head 172.31.250.11)"]
    argv = exec_argv(service["Service.ExecStart"][0])
    assert argv[-9:] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "172.31.250.11",
                         "--master-port", "29501", "--headless"]
    assert environment(unit)["VLLM_HOST_IP"] == "172.31.250.12"
    # A worker's start reads the head's rank state: which start of the head it joins.
    assert service["Service.ExecStartPre"] == [
        "-+" + " ".join([PUBLISH, "started", *RANK, "worker", "--head-url",
                         "http://172.31.250.11:29510/vllm-fleet/ranks/tiny_gqa.json"])]
    assert service["Service.ExecStopPost"] == [
        "-+" + " ".join([PUBLISH, "stopped", *RANK, "worker"])]
    # Never restarted alone by systemd: its host's probe restarts it with its head.
    assert service["Service.Restart"] == ["no"]
    assert service["Service.RemoveIPC"] == ["yes"]


def test_a_single_host_unit_publishes_no_rank_state():
    service = parsed(render_unit(tiny_gqa_entry()))
    assert "Service.ExecStartPre" not in service
    assert "Service.RemoveIPC" not in service
    assert service["Service.Restart"] == ["on-failure"]


def test_a_multi_node_entry_without_its_node_is_not_rendered():
    with pytest.raises(Exception, match="catalog entry tiny_gqa spans 2 nodes: its units need "
                                        "the host's node of the replica plan"):
        render_unit(tiny_gqa_tp2())


# --- the firewall ------------------------------------------------------------


def render_firewall(firewall, user="vllm"):
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = CoreFilters().filters()["comment"]
    template = env.from_string((ROLE / "templates" / "vllm-fleet-replica.nft.j2").read_text())
    return template.render(ansible_managed="Ansible managed", vllm_service_user=user,
                           __vllm_service_firewall=firewall)


def ruleset_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip()
            and not line.lstrip().startswith("#")]


def test_head_ruleset_opens_the_master_port_and_ephemeral_range_to_the_peers_only(plan):
    text = render_firewall(replica_firewall(plan, "lab1"))
    assert text.startswith("#\n# Ansible managed\n#\n")
    assert "#   tiny_gqa head: 29501 master port (torch.distributed store of rank 0)\n" in text
    assert ruleset_lines(text) == [
        "table inet vllm_fleet_replicas",
        "delete table inet vllm_fleet_replicas",
        "table inet vllm_fleet_replicas {",
        "set peers_v4 {", "type ipv4_addr", "elements = { 172.31.250.11, 172.31.250.12 }", "}",
        "set ports {", "type inet_service", "flags interval",
        "elements = { 29501, 29510, 32768-60999 }", "}",
        "set users {", "type uid", "elements = { 0, vllm }", "}",
        "chain output {",
        "type filter hook output priority filter; policy accept;",
        'oif "lo" ct state new tcp dport @ports meta skuid != @users counter reject with tcp reset',
        ("ip daddr @peers_v4 ct state new tcp dport @ports meta skuid != @users counter reject"
         " with tcp reset"),
        "}",
        "chain input {",
        "type filter hook input priority filter; policy accept;",
        'iif "lo" accept',
        "ct state established,related accept",
        "ip saddr @peers_v4 tcp dport @ports accept",
        "tcp dport @ports counter drop",
        "}", "}"]


def test_worker_ruleset_with_ipv6_peers_too(plan):
    other = replica_plan(tiny_gqa_tp2(), [LAB[1], {"name": "lab3", "ip": "fd00::13",
                                                   "interface": "eth1"}],
                         master_port=29502, model="tiny_mla")
    lines = ruleset_lines(render_firewall(replica_firewall([plan, other], "lab2")))
    assert "elements = { fd00::13 }" in lines
    assert "elements = { 29502, 29510, 32768-60999 }" in lines
    assert lines.index("ip6 saddr @peers_v6 tcp dport @ports accept") < lines.index(
        "tcp dport @ports counter drop")


def _nft_check(path):
    """(rc, stderr) of `nft -c -f` in a network namespace of its own, or skip saying why."""
    nft = shutil.which("nft")
    if not nft:
        pytest.skip("nft is not installed on this controller (apt-get install nftables); the "
                    "ruleset's text is checked above, its syntax is not")
    unshare = shutil.which("unshare")
    attempts = []
    if unshare:
        attempts += [[unshare, "--net", nft, "-c", "-f", str(path)],
                     [unshare, "--user", "--map-root-user", "--net", nft, "-c", "-f", str(path)]]
    for command in attempts:
        run = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if "Operation not permitted" not in run.stderr and "unshare failed" not in run.stderr:
            return run.returncode, run.stderr
    pytest.skip("no network namespace of our own here (unshare --net refused); not checking "
                "the ruleset against this machine's own firewall")
    return None


@pytest.mark.parametrize("host", ["lab1", "lab2"])
def test_nft_accepts_the_rendered_ruleset(plan, host, tmp_path):
    path = tmp_path / "replica.nft"
    # A uid: nft resolves a user name when it reads the file, and this machine has no vllm user.
    path.write_text(render_firewall(replica_firewall(plan, host), user="4242"))
    rc, stderr = _nft_check(path)
    assert (rc, stderr) == (0, "")


def test_nft_refuses_a_broken_ruleset(tmp_path):
    # The check itself works: an empty set of elements is a syntax error.
    path = tmp_path / "broken.nft"
    path.write_text("table inet t {\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { }\n\t}\n}\n")
    rc, stderr = _nft_check(path)
    assert rc != 0
    assert "syntax error" in stderr or "Error" in stderr


def test_the_template_is_in_the_roles_templates_and_has_no_timestamps():
    text = (ROLE / "templates" / "vllm-fleet-replica.nft.j2").read_text()
    assert text.startswith("{{ ansible_managed | comment }}\n")
    assert "now(" not in text
    assert "ansible_date_time" not in text
    assert yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["vllm_service_node"] == {}
