# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 45 case 1: the guard of the models' API ports, as the vllm_service role writes it.

The table (vllm-fleet-models.nft.j2), a model's port file, the unit that loads
them and the nftables.service drop-in, rendered with the role's own defaults and
vars; the ruleset checked by `nft -c -f` in a network namespace of its own where
root and nft allow it. The role's tasks: the guard is loaded before the model's
unit is written, one port file per model. Connections through the loaded table:
tests/integration/test_model_firewall_netns.py.
"""

import os
import shutil
import subprocess

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from repo_paths import ROOT

ROLE = ROOT / "roles" / "vllm_service"
FRONTDOOR = ROOT / "roles" / "vllm_frontdoor"


def _yaml(path):
    return yaml.safe_load(path.read_text())


def render(name, **overrides):
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    core = CoreFilters().filters()
    env.filters["comment"] = core["comment"]
    env.filters["to_json"] = core["to_json"]
    variables = _yaml(ROLE / "defaults" / "main.yml")
    variables.update(_yaml(ROLE / "vars" / "main.yml"))
    variables.update(ansible_managed="Ansible managed", vllm_service_frontdoor_user="www-data",
                     vllm_service_unit_dir="/etc/systemd/system", **overrides)
    return env.from_string((ROLE / "templates" / name).read_text()).render(variables)


def directives(text):
    return [line.partition("=")[::2] for line in text.splitlines()
            if line and not line.startswith(("#", "["))]


def rules(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not
            line.strip().startswith("#")]


def test_only_root_and_the_front_door_may_connect_to_the_models_ports():
    text = render("vllm-fleet-models.nft.j2")
    assert text.startswith("#\n# Ansible managed\n#\n")
    lines = rules(text)
    # Replaced whole on each load; the ports come from one file per model.
    assert lines[:3] == ["table inet vllm_fleet_models", "delete table inet vllm_fleet_models",
                         "table inet vllm_fleet_models {"]
    assert lines[-1] == 'include "/etc/vllm-fleet/models.d/*.nft"'
    assert 'elements = { 0, "www-data" }' in lines
    # Never the model user: every model's unit runs as it.
    assert not [line for line in lines if "elements" in line and "vllm" in line]
    assert ('oif "lo" ct state new tcp dport @model_ports meta skuid != @users counter '
            'reject with tcp reset') in lines
    assert "type filter hook output priority filter; policy accept;" in lines


def test_a_models_port_file_adds_its_port_to_the_set():
    text = render("vllm-fleet-model-port.nft.j2", vllm_service_unit="vllm-tiny_gqa.service",
                  vllm_service_entry={"port": 8001})
    assert rules(text) == ["add element inet vllm_fleet_models model_ports { 8001 }"]


def test_the_front_door_user_has_one_owner():
    # vllm_service reads vllm_frontdoor's variable; its fallback is that role's default.
    service = _yaml(ROLE / "defaults" / "main.yml")
    frontdoor = _yaml(FRONTDOOR / "defaults" / "main.yml")
    assert service["vllm_service_frontdoor_user"] == (
        "{{ vllm_frontdoor_nginx_user | default('www-data') }}")
    assert frontdoor["vllm_frontdoor_nginx_user"] == "www-data"
    conf = _yaml(FRONTDOOR / "tasks" / "nginx_conf.yml")
    assert [task["ansible.builtin.lineinfile"]["line"] for task in conf
            if task["ansible.builtin.lineinfile"]["regexp"] == r"^\s*user\s"] == [
        "user {{ vllm_frontdoor_nginx_user }};"]


def test_the_unit_loads_the_guard_at_boot_and_after_the_hosts_firewall():
    text = render("vllm-fleet-model-firewall.service.j2")
    values = {}
    for key, value in directives(text):
        values.setdefault(key, []).append(value)
    assert values["ExecStart"] == ["/usr/sbin/nft -f /etc/vllm-fleet/models.nft"]
    assert values["ExecReload"] == ["/usr/sbin/nft -f /etc/vllm-fleet/models.nft"]
    assert values["ExecStop"] == ["-/usr/sbin/nft delete table inet vllm_fleet_models"]
    # Before any model's unit at boot (they start after network-online.target).
    assert values["Before"] == ["network-pre.target"]
    assert values["After"] == ["local-fs.target nftables.service"]
    assert values["PartOf"] == ["nftables.service"]
    assert values["ReloadPropagatedFrom"] == ["nftables.service"]
    assert values["WantedBy"] == ["multi-user.target"]
    assert values["CapabilityBoundingSet"] == ["CAP_NET_ADMIN"]
    dropin = render("vllm-fleet-models.nftables-dropin.conf.j2")
    assert directives(dropin) == [(
        "ExecStartPost",
        "-/usr/bin/systemctl try-reload-or-restart --no-block vllm-fleet-model-firewall.service")]


def test_the_role_guards_the_port_before_it_writes_the_models_unit():
    main = _yaml(ROLE / "tasks" / "main.yml")
    names = [task["name"] for task in main]
    guard = names.index("Let only root and the front door reach the model's API port")
    assert main[guard]["ansible.builtin.import_tasks"] == "model_firewall.yml"
    assert guard < names.index("Write the model's systemd unit")
    block = _yaml(ROLE / "tasks" / "model_firewall.yml")[0]
    assert block["when"] == "vllm_service_model_firewall == 'nftables'"
    tasks = {task["name"]: task for task in block["block"]}
    port_file = tasks["Write this model's port file (one element of the guarded ports)"]
    assert port_file["ansible.builtin.template"]["dest"] == (
        "{{ __vllm_service_model_ports_dir }}/{{ vllm_service_model }}.nft")
    guard_file = tasks["Write the models' guard (checked by nft -c -f first)"]
    assert guard_file["ansible.builtin.template"]["validate"] == "nft -c -f %s"
    assert guard_file["ansible.builtin.template"]["mode"] == "0600"
    load = tasks["Load the guard now and at boot"]["ansible.builtin.systemd_service"]
    assert load["name"] == "vllm-fleet-model-firewall.service"
    assert load["enabled"] is True


def test_nft_takes_the_ruleset(tmp_path):
    if not (shutil.which("nft") and shutil.which("unshare") and os.geteuid() == 0):
        pytest.skip("needs root, nft and unshare (a network namespace of its own)")
    ports = tmp_path / "models.d"
    ports.mkdir()
    for model, port in (("tiny_gqa", 8001), ("other", 8002), ("same_port", 8001)):
        (ports / f"{model}.nft").write_text(render(
            "vllm-fleet-model-port.nft.j2", vllm_service_unit=f"vllm-{model}.service",
            vllm_service_entry={"port": port}))
    guard = tmp_path / "models.nft"
    guard.write_text(render("vllm-fleet-models.nft.j2", __vllm_service_model_ports_dir=str(ports)))
    check = subprocess.run(["unshare", "-n", "nft", "-c", "-f", str(guard)],
                           capture_output=True, text=True, check=False, timeout=60)
    if check.returncode != 0 and "Operation not permitted" in check.stderr:
        pytest.skip(f"unshare -n refused here: {check.stderr.strip()}")
    assert check.returncode == 0, check.stderr
    # With no model installed yet the table still loads (an empty set).
    for path in ports.iterdir():
        path.unlink()
    assert subprocess.run(["unshare", "-n", "nft", "-c", "-f", str(guard)], capture_output=True,
                          text=True, check=False, timeout=60).returncode == 0


@pytest.mark.skipif(not (shutil.which("systemd-analyze")
                         and os.path.exists("/usr/lib/systemd/system/nftables.service")),
                    reason="needs systemd-analyze and Debian's nftables.service")
def test_systemd_verifies_the_unit_beside_debians_nftables_unit(tmp_path):
    units = tmp_path / "system"
    (units / "nftables.service.d").mkdir(parents=True)
    unit = units / "vllm-fleet-model-firewall.service"
    unit.write_text(render("vllm-fleet-model-firewall.service.j2"))
    (units / "nftables.service.d" / "vllm-fleet-models.conf").write_text(
        render("vllm-fleet-models.nftables-dropin.conf.j2"))
    env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"}
    run = subprocess.run(["systemd-analyze", "verify", str(unit), "nftables.service"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
                         timeout=60)
    assert (run.returncode, run.stderr) == (0, "")
