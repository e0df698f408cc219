# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The probe's timer and service as the role renders them: headed by ansible_managed, the
probe's command line from the role's variables, the timer's period, and the sandbox."""

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.vllm_fleet.fleet.plugins.filter.host_path import host_path
from repo_paths import ROOT
from systemd_unit import exec_argv

ROLE = ROOT / "roles" / "vllm_service"


def render(name, **overrides):
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = CoreFilters().filters()["comment"]
    env.filters["vllm_fleet.fleet.host_path"] = host_path
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    variables.update(ansible_managed="Ansible managed", **overrides)
    return env.from_string((ROLE / "templates" / f"{name}.j2").read_text()).render(variables)


def directives(text):
    return [line.partition("=") for line in text.splitlines()
            if line and not line.startswith(("#", "["))]


def test_the_service_runs_the_probe_with_the_roles_settings():
    text = render("vllm-fleet-probe.service", vllm_service_probe_failures=2,
                  vllm_service_probe_timeout_s=10)
    assert text.startswith("#\n# Ansible managed\n#\n")
    values = {key: value for key, _eq, value in directives(text)}
    argv = exec_argv(values["ExecStart"])
    assert argv == [
        "/usr/bin/python3", "-E", "-s", "/usr/local/lib/vllm-fleet/probe/probe.py",
        "--record", "/etc/ansible/facts.d/vllm_fleet.fact",
        "--state", "/var/lib/vllm-fleet-probe/state.json",
        "--lock", "/run/vllm-fleet/cutover.lock",
        "--marker", "/run/vllm-fleet/switching.json", "--marker-max-age", "7800",
        "--failures", "2", "--timeout", "10"]
    assert values["Type"] == "oneshot"
    assert values["TimeoutStartSec"] == "60"
    assert values["StateDirectory"] == "vllm-fleet-probe"  # the state file's folder
    assert values["SyslogIdentifier"] == "vllm-fleet-probe"
    assert (values["NoNewPrivileges"], values["CapabilityBoundingSet"],
            values["ProtectSystem"], values["MemoryDenyWriteExecute"]) == (
        "yes", "CAP_SYS_PTRACE", "strict", "yes")  # ptrace: who listens (listener.py)


def test_the_timer_runs_the_service_every_interval():
    text = render("vllm-fleet-probe.timer", vllm_service_probe_interval_s=10)
    assert text.startswith("#\n# Ansible managed\n#\n")
    assert [(k, v) for k, _eq, v in directives(text)] == [
        ("Description", "vLLM fleet: probe the active model every 10 s"),
        ("OnActiveSec", "10s"), ("OnUnitActiveSec", "10s"), ("AccuracySec", "1s"),
        ("WantedBy", "timers.target")]


def test_the_default_period_is_30_s_and_3_failures():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert (defaults["vllm_service_probe_interval_s"], defaults["vllm_service_probe_failures"],
            defaults["vllm_service_probe_timeout_s"]) == (30, 3, 30)
    assert "OnUnitActiveSec=30s" in render("vllm-fleet-probe.timer")
