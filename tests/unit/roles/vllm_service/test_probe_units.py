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
    env.filters.update(CoreFilters().filters())  # comment, dirname, unique ... as Ansible's
    env.filters["vllm_fleet.fleet.host_path"] = host_path
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    variables.update(ansible_managed="Ansible managed", **overrides)
    # As Ansible templates a variable when it is used: the ones these templates read.
    for key in ("vllm_service_switch_lock",):
        variables[key] = env.from_string(variables[key]).render(variables)
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
    assert values["TimeoutStartSec"] == "75"
    assert values["StateDirectory"] == "vllm-fleet-probe"  # the state file's folder
    assert values["SyslogIdentifier"] == "vllm-fleet-probe"
    assert (values["NoNewPrivileges"], values["CapabilityBoundingSet"],
            values["ProtectSystem"], values["MemoryDenyWriteExecute"]) == (
        "yes", "CAP_DAC_READ_SEARCH CAP_SYS_PTRACE", "strict", "yes")  # who listens (listener.py)


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


FRONTDOOR = {"upstream_file": "/etc/nginx/vllm-fleet/upstream.conf",
             "hold_file": "/run/vllm-fleet/switching",
             "warm_file": "/run/vllm-fleet/switching-warm", "url": "http://127.0.0.1:8000",
             "key_file": "/etc/nginx/vllm-fleet/own.key", "record_file": "/x", "pid_file": "/y"}


def test_the_probe_mends_the_record_and_the_front_door_it_is_given():
    """Issue 46: the front door's paths on its command line; what it mends writable in its
    sandbox (the record's folder, /run/vllm-fleet made 0755 first, the upstream's, nginx's
    logs for nginx -t); without a front door only the record's and the lock's folders."""
    text = render("vllm-fleet-probe.service", vllm_service_probe_frontdoor=FRONTDOOR)
    values = {}
    for key, _eq, value in directives(text):
        values.setdefault(key, []).append(value)
    assert exec_argv(values["ExecStart"][0])[-10:] == [
        "--upstream", "/etc/nginx/vllm-fleet/upstream.conf",
        "--hold-file", "/run/vllm-fleet/switching",
        "--warm-file", "/run/vllm-fleet/switching-warm",
        "--frontdoor-url", "http://127.0.0.1:8000",
        "--frontdoor-key", "/etc/nginx/vllm-fleet/own.key"]
    assert values["ExecStartPre"] == ["+/bin/mkdir -p -m 0755 /run/vllm-fleet"]
    assert values["ReadWritePaths"] == [
        "/etc/ansible/facts.d /run/vllm-fleet /etc/nginx/vllm-fleet", "-/var/log/nginx"]
    bare = {key: value for key, _eq, value in directives(render("vllm-fleet-probe.service"))}
    assert "--upstream" not in bare["ExecStart"]
    assert bare["ReadWritePaths"] == "/etc/ansible/facts.d /run/vllm-fleet"


def test_vllm_model_hands_the_probe_the_front_door_the_cutover_switches():
    """One dict, two readers: the cutover's `frontdoor` and the probe's."""
    variables = yaml.safe_load((ROOT / "roles/vllm_model/vars/main.yml").read_text())
    assert variables["vllm_service_probe_frontdoor"] == "{{ __vllm_model_frontdoor }}"
    assert variables["__vllm_model_cutover_params"]["frontdoor"] == "{{ __vllm_model_frontdoor }}"
