# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The vllm_service unit template: hostile catalog values, quoting per directive, sandbox.

Renders the real template with the real filters (tests/systemd_unit.py) and
reads the result back with a transcription of systemd's own parsers.
"""

import json
import re
import shutil
import subprocess
import sys

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.serve_args import (
    vllm_serve_argv,
)
from repo_paths import FIXTURES, ROOT
from systemd_unit import (
    VLLM,
    exec_argv,
    expand_specifiers,
    parsed,
    render_unit,
    tiny_gqa_entry,
    verify_unit,
    words,
)

GOLDEN = FIXTURES / "vllm_service" / "vllm-tiny_gqa.service"
MODEL_DIR = "/srv/models/vllm-fleet-lab/tiny-gqa"
SANDBOX = ["NoNewPrivileges", "CapabilityBoundingSet", "ProtectSystem", "ReadWritePaths",
           "ProtectHome", "PrivateTmp", "ProtectKernelTunables", "ProtectKernelModules",
           "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname",
           "ProtectProc", "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime",
           "RestrictSUIDSGID", "LockPersonality", "SystemCallArchitectures", "SystemCallFilter",
           "SystemCallErrorNumber", "UMask", "DevicePolicy", "IPAddressAllow", "IPAddressDeny"]


def service(unit, key):
    return parsed(unit).get(f"Service.{key}", [])


def test_tiny_gqa_unit_is_the_golden_file():
    # The lab's unit, byte for byte (regenerate by hand when the template changes).
    assert render_unit(tiny_gqa_entry()) == GOLDEN.read_text()


def test_the_golden_unit_has_exactly_its_header_directives():
    unit = GOLDEN.read_text()
    assert verify_unit.compare(unit) == []
    assert [key for key in parsed(unit) if key.startswith("Service.")][-len(SANDBOX):] == [
        f"Service.{key}" for key in SANDBOX]


# --- issue 13's hostile inputs: refused, naming field and model -------------

HOSTILE = [
    ({"extra_args": ["--disable-log-stats\n", "ExecStartPre=/bin/touch", "/tmp/x"]},
     "catalog entry tiny_gqa: extra_args[0] holds a control character (U+000A, line feed)"),
    ({"served_model_name": "tiny-gqa\nExecStartPre=/bin/touch /tmp/x"},
     "catalog entry tiny_gqa: served_model_name holds a control character"),
    ({"description": "Lab model\nExecStartPre=/bin/touch /tmp/x"},
     "catalog entry tiny_gqa: description holds a control character"),
    ({"gpus": [0, "1\nExecStartPre=/bin/touch /tmp/x"]},
     "catalog entry tiny_gqa: gpus[1] must be a CUDA device index"),
    # What `served_model_name: |` followed by the name gives in YAML.
    ({"served_model_name": "tiny-gqa\n"},
     ("catalog entry tiny_gqa: served_model_name holds a control character (U+000A, line feed)"
     " at offset 8")),
    ({"env": {"VLLM_CPU_KVCACHE_SPACE": "1\r\nExecStartPre=/bin/touch /tmp/x"}},
     "catalog entry tiny_gqa: env.VLLM_CPU_KVCACHE_SPACE holds a control character (U+000D"),
    ({"env": {"A\nExecStartPre": "/bin/touch"}},
     "catalog entry tiny_gqa: env.A\nExecStartPre: 'A\\nExecStartPre' is not an environment"),
    ({"serve": {"max_model_len": "512\x00ExecStartPre=/bin/touch /tmp/x"}},
     "catalog entry tiny_gqa: serve.max_model_len holds a control character (U+0000, NUL)"),
]


def _rendered_or_error(change, **overrides):
    try:
        return render_unit({**tiny_gqa_entry(), **change}, **overrides), None
    except (jinja2.TemplateError, AnsibleFilterError) as exc:
        return None, str(exc)


@pytest.mark.parametrize(("change", "message"), HOSTILE)
def test_hostile_catalog_values_are_refused(change, message):
    unit, error = _rendered_or_error(change)
    # Before issue 13 these rendered; show what came out when the test fails.
    assert error is not None, f"rendered a unit with {service(unit, 'ExecStartPre')!r}"
    assert message in error


def test_a_yaml_block_scalar_is_refused():
    entry = yaml.safe_load("served_model_name: |\n  tiny-gqa\nport: 8001\n")
    assert entry["served_model_name"] == "tiny-gqa\n"
    _unused, error = _rendered_or_error(entry)
    assert "catalog entry tiny_gqa: served_model_name holds a control character" in error


@pytest.mark.parametrize(("overrides", "message"), [
    ({"vllm_service_model": "tiny_gqa\n"}, "vllm_service_model must be a catalog name"),
    ({"vllm_service_home": "/var/lib/vllm\nExecStartPre=/bin/touch /tmp/x"},
     "vllm_service_home holds a control character"),
    ({"vllm_service_model_dir": "/srv/models/x\rUser=root"},
     "vllm_service_model_dir holds a control character"),
    ({"vllm_service_user": "vllm\nUser=root"}, "vllm_service_user holds a control character"),
    ({"vllm_service_vllm_bin": "-/opt/vllm/bin/vllm"},
     "vllm_service_vllm_bin must be an absolute path"),
    ({"vllm_service_read_write_paths": ["/srv/cache\n"]},
     "vllm_service_read_write_paths holds a control character"),
])
def test_hostile_role_values_are_refused(overrides, message):
    model = overrides.pop("vllm_service_model", "tiny_gqa")
    with pytest.raises((jinja2.TemplateError, AnsibleFilterError)) as caught:
        render_unit(tiny_gqa_entry(), model=model, **overrides)
    assert message in str(caught.value)


# --- quoting per directive ---------------------------------------------------

def test_dollar_and_percent_reach_the_service_literally():
    entry = {**tiny_gqa_entry(),
             "env": {"PROMPT": 'costs $5 (50%) "now"', "HOME_HINT": "${HOME}", "BS": "a\\b"},
             "served_model_name": "m 50% $x",
             "extra_args": ["--chat-template", "{{ $HOME }} 100% ;", ";", "$X", "${X}", "", "'"]}
    unit = render_unit(entry)
    assert verify_unit.compare(unit) == []
    environment = dict(word.split("=", 1) for value in service(unit, "Environment")
                       for word in words(value))
    # Environment= gives "$" no meaning (systemd.exec(5)): one "$", not "$$".
    assert environment["PROMPT"] == 'costs $5 (50%) "now"'
    assert environment["HOME_HINT"] == "${HOME}"
    assert environment["BS"] == "a\\b"
    argv = exec_argv(service(unit, "ExecStart")[0], environment)
    assert argv[argv.index("--served-model-name") + 1] == "m 50% $x"
    assert argv[-7:] == ["--chat-template", "{{ $HOME }} 100% ;", ";", "$X", "${X}", "", "'"]
    description = parsed(unit)["Unit.Description"][0]
    assert expand_specifiers(description) == "vLLM model server tiny_gqa (m 50% $x on port 8001)"


def test_exec_start_splits_back_to_the_catalog_argv():
    entry = tiny_gqa_entry()
    argv = exec_argv(service(render_unit(entry), "ExecStart")[0])
    assert argv == [VLLM, "serve", MODEL_DIR, "--host", "127.0.0.1", "--port", "8001",
                    "--served-model-name", "tiny-gqa", "--enable-server-load-tracking",
                    "--max-model-len", "512",
                    "--enforce-eager", "--dtype", "bfloat16", "--shutdown-timeout", "0"]


def test_the_alias_follows_the_models_own_name_in_exec_start():
    """vllm_service_model_alias: one more --served-model-name value, after the model's own
    (vLLM names responses and metrics by the first); the unit's directives are unchanged."""
    unit = render_unit(tiny_gqa_entry(), vllm_service_model_alias="default")
    assert verify_unit.compare(unit) == []
    argv = exec_argv(service(unit, "ExecStart")[0])
    assert argv[7:10] == ["--served-model-name", "tiny-gqa", "default"]
    assert argv[10:12] == ["--enable-server-load-tracking", "--max-model-len"]
    assert list(parsed(unit)) == list(parsed(render_unit(tiny_gqa_entry())))


def test_an_alias_with_a_line_break_is_refused_naming_the_variable():
    with pytest.raises(AnsibleFilterError,
                       match="vllm_service_model_alias holds a control character"):
        render_unit(tiny_gqa_entry(), vllm_service_model_alias="default\nExecStartPre=/bin/x")


# --- sandbox -----------------------------------------------------------------

def test_cpu_model_gets_no_device_at_all():
    unit = render_unit(tiny_gqa_entry())
    assert service(unit, "DevicePolicy") == ["closed"]
    assert service(unit, "DeviceAllow") == []
    assert not [value for value in service(unit, "Environment") if "CUDA" in value]


def test_gpu_model_gets_exactly_its_nvidia_nodes():
    unit = render_unit({**tiny_gqa_entry(), "gpus": [2, 5]},
                       vllm_service_device_allow_extra=["char-infiniband_verbs rw",
                                                        "/dev/infiniband/rdma_cm rw"])
    assert verify_unit.compare(unit) == []
    assert service(unit, "DeviceAllow") == [
        "/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "/dev/nvidia-uvm-tools rw",
        "/dev/nvidia2 rw", "/dev/nvidia5 rw",
        "char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"]
    assert "CUDA_VISIBLE_DEVICES=2,5" in service(unit, "Environment")
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in service(unit, "Environment")


def test_sandbox_values():
    unit = render_unit(tiny_gqa_entry(), vllm_service_read_write_paths=["/srv/cache dir"])
    assert {key: service(unit, key) for key in SANDBOX} == {
        "NoNewPrivileges": ["yes"], "CapabilityBoundingSet": [""],
        "ProtectSystem": ["strict"], "ReadWritePaths": ['/var/lib/vllm "/srv/cache dir"'],
        "ProtectHome": ["yes"], "PrivateTmp": ["yes"], "ProtectKernelTunables": ["yes"],
        "ProtectKernelModules": ["yes"], "ProtectKernelLogs": ["yes"],
        "ProtectControlGroups": ["yes"], "ProtectClock": ["yes"], "ProtectHostname": ["yes"],
        "ProtectProc": ["invisible"],
        "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"],
        "RestrictNamespaces": ["yes"], "RestrictRealtime": ["yes"], "RestrictSUIDSGID": ["yes"],
        "LockPersonality": ["yes"], "SystemCallArchitectures": ["native"],
        "SystemCallFilter": [
            "~@clock @cpu-emulation @module @mount @obsolete @raw-io @reboot @swap"],
        "SystemCallErrorNumber": ["EPERM"], "UMask": ["0077"], "DevicePolicy": ["closed"],
        "IPAddressAllow": ["localhost"], "IPAddressDeny": ["any"]}
    assert words(service(unit, "ReadWritePaths")[0]) == ["/var/lib/vllm", "/srv/cache dir"]
    assert service(unit, "MemoryDenyWriteExecute") == []  # vLLM compiles code at run time


@pytest.mark.parametrize(("off", "gone"), [
    (["ProtectProc"], ["ProtectProc"]),
    (["ProtectSystem"], ["ProtectSystem", "ReadWritePaths"]),
    (["SystemCallFilter"], ["SystemCallFilter", "SystemCallErrorNumber"]),
    (["DevicePolicy"], ["DevicePolicy", "DeviceAllow"]),
    (["ProtectClock", "ProtectHostname"], ["ProtectClock", "ProtectHostname"]),
    (["IPAddressDeny"], ["IPAddressAllow", "IPAddressDeny"]),
])
def test_hardening_off_drops_exactly_the_named_directives(off, gone):
    entry = {**tiny_gqa_entry(), "gpus": [0]}
    full = parsed(render_unit(entry))
    unit = render_unit(entry, vllm_service_hardening_off=off)
    assert verify_unit.compare(unit) == []
    assert {key for key in full if key not in parsed(unit)} == {f"Service.{key}" for key in gone}


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def exposure(unit, tmp_path):
    path = tmp_path / "vllm-tiny_gqa.service"
    path.write_text(unit)
    result = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=true", str(path)],
                            capture_output=True, text=True, check=False)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found.group(1))


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze (252+ for --offline)")
@pytest.mark.parametrize("gpus", [[], [0, 1, 2, 3, 4, 5, 6, 7]])
def test_exposure_is_at_most_5(gpus, tmp_path):
    # Before issue 13: 9.2 UNSAFE. Measured with systemd 252: 2.1 (CPU and GPU).
    assert exposure(render_unit({**tiny_gqa_entry(), "gpus": gpus}), tmp_path) <= 5.0


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze (252+ for --offline)")
def test_exposure_with_the_lab_switches_off_stays_at_most_5(tmp_path):
    off = ["ProtectProc", "ProtectClock", "ProtectHostname", "ProtectKernelLogs"]
    assert exposure(render_unit(tiny_gqa_entry(), vllm_service_hardening_off=off),
                    tmp_path) <= 5.0


# --- Ansible renders it the same way -----------------------------------------

def test_ansible_template_module_writes_the_same_unit(tmp_path):
    # The harness above mimics Ansible's template module; prove it on one
    # entry with every kind of awkward character.
    entry = {**tiny_gqa_entry(), "gpus": [0, 3], "env": {"P": 'a "b" $c 5%'},
             "extra_args": ["--x", "a b", "\\", "50%", "$HOME", ";"]}
    variables = {"vllm_service_model": "tiny_gqa", "vllm_service_entry": entry,
                 "vllm_service_vllm_bin": VLLM, "vllm_service_model_dir": MODEL_DIR,
                 "ansible_python_interpreter": sys.executable}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "play.yml").write_text(
        "- name: Render the unit\n  hosts: localhost\n  gather_facts: false\n"
        f"  vars_files: [{ROOT}/roles/vllm_service/defaults/main.yml, {tmp_path}/vars.json]\n"
        "  tasks:\n    - name: Write the unit\n      ansible.builtin.template:\n"
        f"        src: {ROOT}/roles/vllm_service/templates/vllm.service.j2\n"
        f'        dest: {tmp_path}/out.service\n        mode: "0644"\n')
    env = {"ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "PATH": "/usr/bin:/bin",
           "ANSIBLE_LOCALHOST_WARNING": "false", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "ansible", "playbook", "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "out.service").read_text() == render_unit(entry)


def test_intended_argv_is_what_the_filter_computes():
    # The property test below compares against vllm_serve_argv(); pin it once.
    assert vllm_serve_argv(VLLM, MODEL_DIR, "m", 1, {"x": True}, ["x y"])[-2:] == ["--x", "x y"]


def test_every_switch_in_the_argument_spec_turns_its_directives_off():
    specs = yaml.safe_load((ROOT / "roles/vllm_service/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROOT / "roles/vllm_service/defaults/main.yml").read_text())
    for name in ("vllm_service_read_write_paths", "vllm_service_address_families",
                 "vllm_service_device_allow_extra", "vllm_service_hardening_off"):
        assert options[name]["default"] == defaults[name], name
    switches = options["vllm_service_hardening_off"]["choices"]
    unit = render_unit({**tiny_gqa_entry(), "gpus": [0]}, vllm_service_hardening_off=switches)
    assert verify_unit.compare(unit) == []
    assert [key for key in [*SANDBOX, "DeviceAllow"] if service(unit, key)] == []


# --- warm switch mode (issue 35 item 1) ---------------------------------------

def test_a_warm_cpu_model_gets_dev_mode_but_not_the_sleep_flag():
    """Warm: VLLM_SERVER_DEV_MODE=1 (vLLM's /sleep, /wake_up ...: vllm/envs.py), product-owned.
    The cpu variant leaves --enable-sleep-mode out: vLLM 0.32's ModelConfig refuses it there
    ("Sleep mode is not supported on current platform.", vllm/config/model.py)."""
    cold = render_unit(tiny_gqa_entry())
    unit = render_unit(tiny_gqa_entry(), vllm_service_switch_mode="warm")
    assert verify_unit.compare(unit) == []
    assert "VLLM_SERVER_DEV_MODE=1" in service(unit, "Environment")
    assert "VLLM_SERVER_DEV_MODE=1" not in service(cold, "Environment")
    assert "--enable-sleep-mode" not in exec_argv(service(unit, "ExecStart")[0])
    assert service(unit, "ExecStart") == service(cold, "ExecStart")


def test_a_warm_cuda_model_gets_dev_mode_and_the_sleep_flag_after_load_tracking():
    entry = {**tiny_gqa_entry(), "gpus": [0, 1], "vllm": {"variant": "cuda", "version": "0.33.0"}}
    unit = render_unit(entry, vllm_service_switch_mode="warm")
    assert verify_unit.compare(unit) == []
    assert "VLLM_SERVER_DEV_MODE=1" in service(unit, "Environment")
    argv = exec_argv(service(unit, "ExecStart")[0])
    assert argv[8:11] == ["tiny-gqa", "--enable-server-load-tracking", "--enable-sleep-mode"]
    assert argv.count("--enable-sleep-mode") == 1


@pytest.mark.parametrize(("entry_mode", "fleet_mode", "warm"),
                         [("warm", "cold", True), ("cold", "warm", False), (None, "warm", True),
                          (None, "cold", False)])
def test_the_entrys_switch_mode_overrides_the_fleets(entry_mode, fleet_mode, warm):
    entry = {**tiny_gqa_entry(), "vllm": {"variant": "cuda", "version": "0.33.0"}}
    if entry_mode:
        entry["switch_mode"] = entry_mode
    unit = render_unit(entry, vllm_service_switch_mode=fleet_mode)
    assert ("VLLM_SERVER_DEV_MODE=1" in service(unit, "Environment")) is warm
    assert ("--enable-sleep-mode" in exec_argv(service(unit, "ExecStart")[0])) is warm


def test_a_cold_unit_is_the_golden_file_whatever_the_fleet_default_was_before():
    # Cold is the default and writes nothing new: the lab's unit, byte for byte.
    assert render_unit(tiny_gqa_entry(), vllm_service_switch_mode="cold") == GOLDEN.read_text()


def test_a_catalog_env_setting_dev_mode_stays_refused_in_warm_mode():
    entry = {**tiny_gqa_entry(), "env": {**tiny_gqa_entry()["env"], "VLLM_SERVER_DEV_MODE": "1"}}
    with pytest.raises(AnsibleFilterError, match=r"env\.VLLM_SERVER_DEV_MODE is set"):
        render_unit(entry, vllm_service_switch_mode="warm")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_verify_unit_with_the_real_systemd_analyze_accepts_a_warm_unit(tmp_path):
    """The role's validate: step (files/verify-unit) on a warm CUDA unit: accepted."""
    entry = {**tiny_gqa_entry(), "gpus": [0], "vllm": {"variant": "cuda", "version": "0.33.0"}}
    unit = render_unit(entry, vllm_service_switch_mode="warm",
                       vllm_service_vllm_bin=shutil.which("true"))
    path = tmp_path / "vllm-tiny_gqa.service"
    path.write_text(unit)
    result = subprocess.run([sys.executable, str(ROOT / "roles" / "vllm_service" / "files"
                                                 / "verify-unit"), str(path),
                             "vllm-tiny_gqa.service"],
                            capture_output=True, text=True, check=False)
    assert (result.returncode, result.stderr) == (0, "")
