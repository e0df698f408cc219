# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Every systemd unit the product writes, as its role renders it: sandboxed, bound to
the replica's firewall where it must be, and kept off the network beyond its peers.

- `systemd-analyze security --offline=true` (systemd 252, as on Debian 12) rates
  each unit; every unit scores 2.5 or less, or names the checks it cannot pass
  and why (EXCEPTIONS, also in docs/multinode.md, "The units' sandbox").
- A replica rank's unit binds to vllm-fleet-replica-firewall.service (BindsTo=
  and After=): systemd.unit(5) - with both, the rank is only active while the
  firewall is, does not start when the firewall failed, and, After= being
  reversed on stop, is stopped before the firewall's ExecStop= deletes the table.
- /etc/vllm-fleet has one mode in every role that makes it.
- Multimodal catalog entries fetch media by URL from no domain, and follow no
  redirect (vLLM's docs/usage/security.md, "--allowed-media-domains",
  VLLM_MEDIA_URL_ALLOW_REDIRECTS); the units let no packet out but to loopback
  and the replica's hosts (IPAddressDeny=any, systemd.resource-control(5)).
"""

import ast
import copy
import os
import re
import shutil
import subprocess
import sys

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.vllm_fleet.fleet.plugins.filter.host_path import host_path
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
    replica_node,
    replica_plan,
)
from repo_paths import ROOT
from systemd_unit import VERIFY_UNIT, catalog, parsed, render_unit, tiny_gqa_entry, words

ROLES = ROOT / "roles"
LAB = [{"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
       {"name": "lab2", "ip": "172.31.250.12", "interface": "eth0"}]
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
FIREWALL_UNIT = "vllm-fleet-replica-firewall.service"
MOST = 2.5

# Checks a unit cannot pass, each with why; its score may then exceed MOST, up to `most`.
EXCEPTIONS = {
    "vllm-fleet-nvidia-nodes.service": {
        "most": 3.0,
        "why": {
            "User=/DynamicUser=": "root: loads nvidia-uvm and makes device nodes",
            "PrivateDevices=": "makes the host's own /dev/nvidia* nodes",
            "DeviceAllow=": "any NVIDIA node, made while it runs",
            "ProtectKernelModules=": "loads nvidia-uvm (nvidia-modprobe -u)",
            "CapabilityBoundingSet=~CAP_SYS_MODULE": "loads nvidia-uvm",
            "CapabilityBoundingSet=~CAP_MKNOD": "mknod of the device nodes",
            "CapabilityBoundingSet=~CAP_(CHOWN|FSETID|SETFCAP)": "the nodes' owner",
            "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)": "the nodes' mode",
            "CapabilityBoundingSet=~CAP_SYS_ADMIN": "the driver's privileged calls",
            "SystemCallFilter=~@module": "finit_module of nvidia-uvm",
            # Not known to be safe for the driver's user space (not run sandboxed on GPUs):
            "SystemCallFilter=~@privileged": "no allow list: untested on GPUs",
            "SystemCallFilter=~@resources": "no allow list: untested on GPUs",
            "SystemCallFilter=~@debug": "no allow list: untested on GPUs",
            "MemoryDenyWriteExecute=": "untested on GPUs",
            "ProtectKernelTunables=": "reads /proc/driver/nvidia; untested read-only on GPUs",
            "ProcSubset=": "reads /proc/driver/nvidia/params (the nodes' mode and owner)",
            "PrivateUsers=": "capabilities in the host's user namespace",
            "RootDirectory=/RootImage=": "the host's driver and /dev",
            "RestrictAddressFamilies=~AF_NETLINK": "kmod and udev",
            "RestrictAddressFamilies=~AF_UNIX": "nvidia-persistenced's socket",
            "UMask=": "device nodes for the video group (the driver's own modes)",
        },
    },
}


def _render(role, name, **variables):
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters.update(CoreFilters().filters())  # comment, dirname, unique ... as Ansible's
    env.filters["vllm_fleet.fleet.host_path"] = host_path
    found = {}
    for part in ("defaults/main.yml", "vars/main.yml"):
        path = ROLES / role / part
        if path.exists():
            found.update(yaml.safe_load(path.read_text()) or {})
    found.update(ansible_managed="Ansible managed", **variables)
    return env.from_string((ROLES / role / "templates" / f"{name}.j2").read_text()).render(found)


def tiny_gqa_tp2():
    entry = copy.deepcopy(tiny_gqa_entry())
    entry["nodes"] = 2
    entry["serve"]["tensor_parallel_size"] = 2
    return entry


def replica_unit(host, **overrides):
    plan = replica_plan(tiny_gqa_tp2(), LAB, model="tiny_gqa")
    return render_unit(tiny_gqa_tp2(), vllm_service_node=replica_node(plan, host), **overrides)


UNITS = {
    "model, one host, CPU": ("vllm-tiny_gqa.service", lambda: render_unit(tiny_gqa_entry())),
    "model, one host, 8 GPUs": ("vllm-tiny_gqa.service", lambda: render_unit(
        {**tiny_gqa_entry(), "gpus": list(range(8))})),
    "model, replica head": ("vllm-tiny_gqa.service", lambda: replica_unit("lab1")),
    "model, replica worker": ("vllm-tiny_gqa.service", lambda: replica_unit("lab2")),
    "probe": ("vllm-fleet-probe.service",
              lambda: _render("vllm_service", "vllm-fleet-probe.service")),
    "replica firewall": (FIREWALL_UNIT, lambda: _render("vllm_service", FIREWALL_UNIT)),
    "model ports' guard": ("vllm-fleet-model-firewall.service",
                           lambda: _render("vllm_service", "vllm-fleet-model-firewall.service")),
    "nvidia nodes": ("vllm-fleet-nvidia-nodes.service",
                     lambda: _render("nvidia_driver", "vllm-fleet-nvidia-nodes.service")),
}


def security(name, text, folder):
    """(overall exposure, names of the failed checks) from systemd-analyze security --offline."""
    path = folder / name
    path.write_text(text)
    result = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=true", str(path)],
                            capture_output=True, text=True, check=False, timeout=60)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert found, result.stdout + result.stderr
    failed = [line[2:].split()[0] for line in result.stdout.splitlines()
              if line.startswith("✗ ")]
    return float(found.group(1)), failed


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze (252+ for --offline)")
@pytest.mark.parametrize("which", list(UNITS))
def test_every_unit_scores_at_most_2_5_or_names_what_it_cannot_pass(which, tmp_path):
    # Before this change: the model units 2.1, the probe 2.4, the replica
    # firewall 9.5 UNSAFE and the NVIDIA nodes 9.6 UNSAFE (systemd 252).
    name, render = UNITS[which]
    score, failed = security(name, render(), tmp_path)
    exception = EXCEPTIONS.get(name)
    if exception is None:
        assert score <= MOST, (score, failed)
        return
    assert score <= exception["most"], (score, failed)
    assert sorted(set(failed) - set(exception["why"])) == []


def test_the_exceptions_are_in_the_docs():
    docs = (ROOT / "docs" / "multinode.md").read_text()
    for name, exception in EXCEPTIONS.items():
        assert f"`{name}`" in docs
        assert f"{exception['most']}" in docs


# --- the replica's ranks live under its firewall ------------------------------

@pytest.mark.parametrize("host", ["lab1", "lab2"])
def test_a_replica_rank_cannot_run_without_its_firewall(host):
    unit = parsed(replica_unit(host))
    assert unit["Unit.BindsTo"] == [FIREWALL_UNIT]
    # After= too: with BindsTo= alone the rank could start beside a firewall still
    # loading and would not be stopped before the firewall's ExecStop=.
    assert FIREWALL_UNIT in unit["Unit.After"]
    assert "Unit.Requires" not in unit  # BindsTo= is the stronger Requires=


def test_a_site_that_owns_the_firewall_and_a_single_host_get_no_binding():
    assert "Unit.BindsTo" not in parsed(replica_unit("lab1", vllm_service_replica_firewall="none"))
    single = parsed(render_unit(tiny_gqa_entry()))
    assert "Unit.BindsTo" not in single
    assert single["Unit.After"] == ["network-online.target"]


def test_the_firewall_unit_deletes_the_table_on_stop_and_runs_sandboxed():
    unit = parsed(_render("vllm_service", FIREWALL_UNIT))
    assert unit["Service.ExecStop"] == ["-/usr/sbin/nft delete table inet vllm_fleet_replicas"]
    assert unit["Service.CapabilityBoundingSet"] == ["CAP_NET_ADMIN"]
    assert unit["Service.RestrictAddressFamilies"] == ["AF_NETLINK AF_UNIX"]


def test_the_role_installs_the_firewall_unit_before_the_model_unit():
    # systemd-analyze verify (the model unit's validate:) refuses a BindsTo= on a
    # unit it cannot find.
    tasks = yaml.safe_load((ROLES / "vllm_service" / "tasks" / "main.yml").read_text())
    names = [task.get("ansible.builtin.import_tasks") or task["name"] for task in tasks]
    assert names.index("firewall.yml") < names.index("Write the model's systemd unit")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("host", ["lab1", "lab2"])
def test_the_verifier_accepts_a_rank_beside_its_firewall_unit(host, tmp_path):
    units = tmp_path / "system"
    units.mkdir()
    (units / FIREWALL_UNIT).write_text(_render("vllm_service", FIREWALL_UNIT))
    path = tmp_path / "vllm-tiny_gqa.service"
    path.write_text(replica_unit(host, vllm_service_vllm_bin=shutil.which("true")))
    # The firewall unit where the host has it (the role writes it first); the
    # system's own units after it (the trailing colon).
    env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"}
    command = [shutil.which("python3"), str(VERIFY_UNIT), str(path), "vllm-tiny_gqa.service"]
    run = subprocess.run(command, capture_output=True, text=True, env=env, check=False,
                         timeout=60)
    assert (run.returncode, run.stderr) == (0, "")
    (units / FIREWALL_UNIT).unlink()
    run = subprocess.run(command, capture_output=True, text=True, env=env, check=False,
                         timeout=60)
    assert run.returncode == 1
    assert f"Unit {FIREWALL_UNIT} not found" in run.stderr


# --- no packet beyond loopback and the replica's hosts ------------------------

def test_a_single_host_unit_reaches_loopback_only_and_keeps_its_ranks_there():
    unit = parsed(render_unit({**tiny_gqa_entry(), "gpus": [0, 1]}))
    assert unit["Service.IPAddressDeny"] == ["any"]
    assert unit["Service.IPAddressAllow"] == ["localhost"]
    env = [word for value in unit["Service.Environment"] for word in words(value)]
    # gloo's and NCCL's bootstrap would take the host's own address, outside the allow list.
    assert {"GLOO_SOCKET_IFNAME=lo", "NCCL_SOCKET_IFNAME=lo"} <= set(env)


def test_a_rank_reaches_its_replicas_hosts_and_the_sites_additions():
    unit = parsed(replica_unit("lab2", vllm_service_ip_address_allow=["192.0.2.0/24"]))
    assert unit["Service.IPAddressAllow"] == ["localhost 172.31.250.11 172.31.250.12 192.0.2.0/24"]
    env = [word for value in unit["Service.Environment"] for word in words(value)]
    assert "GLOO_SOCKET_IFNAME=eth0" in env
    assert "GLOO_SOCKET_IFNAME=lo" not in env


def test_switching_the_egress_rule_off_drops_the_loopback_pins_too():
    unit = parsed(render_unit({**tiny_gqa_entry(), "gpus": [0]},
                              vllm_service_hardening_off=["IPAddressDeny"]))
    assert "Service.IPAddressDeny" not in unit
    assert "Service.IPAddressAllow" not in unit
    assert not any("SOCKET_IFNAME" in value for value in unit["Service.Environment"])


def multimodal_entries():
    entries = catalog()["vllm_fleet_catalog"]
    return {name: entry for name, entry in entries.items()
            if any(key.startswith(("mm_", "limit_mm")) for key in entry.get("serve") or {})}


def test_the_multimodal_entries_are_the_kimi_ones():
    assert sorted(multimodal_entries()) == ["kimi_k25_int4", "kimi_k25_nvfp4"]


@pytest.mark.parametrize("name", ["kimi_k25_int4", "kimi_k25_nvfp4"])
def test_a_multimodal_entry_fetches_media_from_no_domain_and_follows_no_redirect(name):
    entry = copy.deepcopy(multimodal_entries()[name])
    # vLLM reads an empty list as any domain (connector.py _assert_url_in_allowed_media_domains).
    assert entry["serve"]["allowed_media_domains"] == ["media.invalid"]
    assert entry["env"]["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    unit = parsed(render_unit(entry, model=name))
    argv = unit["Service.ExecStart"][0].split()
    assert argv[argv.index("--allowed-media-domains") + 1] == "media.invalid"
    assert unit["Service.IPAddressDeny"] == ["any"]
    assert unit["Service.IPAddressAllow"] == ["localhost"]


# --- /etc/vllm-fleet, one mode ------------------------------------------------

def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "block" in node:
            yield from _tasks(node["block"])
        else:
            yield node


def _role_values(role):
    found = {}
    for part in ("defaults/main.yml", "vars/main.yml"):
        path = role / part
        if path.exists():
            found.update(yaml.safe_load(path.read_text()) or {})
    return found


def _resolve(text, values):
    """A task's path or loop with the role's own values (unknown ones render empty)."""
    env = jinja2.Environment()  # noqa: S701 - text, not HTML
    env.filters.update(dirname=os.path.dirname, unique=lambda items: list(dict.fromkeys(items)))
    rendered = env.from_string(text).render(values) if "{{" in text else text
    return ast.literal_eval(rendered) if rendered.startswith("[") else rendered


def folders_made(target):
    """[(role/tasks file, task name, mode)] of every file task that makes `target`."""
    made = []
    for role in sorted(ROLES.iterdir()):
        values = _role_values(role)
        for path in sorted((role / "tasks").glob("*.yml")):
            for task in _tasks(yaml.safe_load(path.read_text()) or []):
                module = task.get("ansible.builtin.file") or {}
                if module.get("state") != "directory":
                    continue
                paths = [_resolve(module.get("path", ""), values)]
                if module.get("path") == "{{ item }}":
                    loop = task.get("loop") or []
                    paths = [_resolve(item, values) for item in loop] if isinstance(
                        loop, list) else _resolve(loop, values)
                if any(str(found).rstrip("/") == target for found in paths):
                    made.append((f"{role.name}/{path.name}", task["name"], module["mode"]))
    return made


def test_etc_vllm_fleet_has_one_mode_in_every_role():
    # Before: model_download made it 0700 (the Hub token), vllm_service 0755
    # (the replica's ruleset), so a host with both flipped it on every run.
    made = folders_made("/etc/vllm-fleet")
    assert sorted(where for where, _name, _mode in made) == [
        "model_download/download.yml", "vllm_service/firewall.yml",
        "vllm_service/model_firewall.yml"]
    assert {mode for _where, _name, mode in made} == {"0700"}, made


# --- the allow list's preflight, run by ansible-playbook ----------------------

def _preflight(tmp_path, allow, **extra):
    # The role's defaults of the guard's check (defaults/main.yml), as the role has them.
    variables = {"vllm_service_model": "tiny_gqa", "vllm_service_probe": False,
                 "vllm_service_ip_address_allow": allow, "vllm_service_user": "vllm",
                 "vllm_service_model_firewall": "nftables",
                 "vllm_service_frontdoor_user": "www-data", **extra}
    (tmp_path / "vars.yml").write_text(yaml.safe_dump(variables))
    (tmp_path / "play.yml").write_text(
        "- name: Check the inputs\n  hosts: localhost\n  gather_facts: false\n"
        f"  vars_files: [{tmp_path}/vars.yml]\n"
        "  tasks:\n    - name: Run the role's preflight\n"
        f"      ansible.builtin.import_tasks: {ROLES}/vllm_service/tasks/preflight.yml\n")
    env = {"ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "PATH": "/usr/bin:/bin",
           "ANSIBLE_LOCALHOST_WARNING": "false", "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "ansible", "playbook", "-i",
         "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        capture_output=True, text=True, check=False, env=env, cwd=tmp_path, timeout=300)


def test_the_preflight_takes_addresses_and_prefixes(tmp_path):
    result = _preflight(tmp_path, ["192.0.2.0/24", "2001:db8::/32", "198.51.100.7"])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("allow", [["any"], ["10.0.0.0/8 localhost"], "192.0.2.1"])
def test_the_preflight_refuses_anything_else_naming_the_variable(tmp_path, allow):
    result = _preflight(tmp_path, allow)
    assert result.returncode == 2
    assert "vllm_service_ip_address_allow must be a list of IP addresses or prefixes" in (
        result.stdout)


@pytest.mark.parametrize("user", ["vllm", "root", "www data"])
def test_the_preflight_refuses_the_model_user_or_root_as_the_guards_front_door_user(
        tmp_path, user):
    # Issue 45 case 1: the guard of the models' ports lets root and this user through;
    # the model user would let every model's unit reach every other model's port.
    result = _preflight(tmp_path, [], vllm_service_frontdoor_user=user)
    assert result.returncode == 2
    assert "vllm_service_frontdoor_user must name the front door's nginx user" in result.stdout
