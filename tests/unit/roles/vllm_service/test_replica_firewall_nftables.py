# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 45 case 5: the replica's table survives the host's own nftables.service.

Debian's nftables.service runs `flush ruleset` (its /etc/nftables.conf starts with it) on
start and reload, and `nft flush ruleset` on stop: each deletes `inet vllm_fleet_replicas`
while vllm-fleet-replica-firewall.service stays active (RemainAfterExit=). The rendered
units are read as systemd reads them; the reload's shell is run with stand-ins for nft and
systemctl; `systemd-analyze verify` checks them beside this machine's nftables.service.
What real systemd does with them is Molecule multinode's to show (docs/multinode.md)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from systemd_unit import parsed, words
from test_unit_hardening import FIREWALL_UNIT, ROLES, SYSTEMD_ANALYZE, _render

DROPIN = "vllm-fleet-replicas.nftables-dropin.conf"
NFTABLES_UNIT = Path("/usr/lib/systemd/system/nftables.service")
RULESET = "/etc/vllm-fleet/replica.nft"


def firewall_unit():
    return parsed(_render("vllm_service", FIREWALL_UNIT))


def test_the_firewall_loads_after_nftables_and_follows_its_stop_restart_and_reload():
    unit = firewall_unit()
    after = [w for value in unit["Unit.After"] for w in words(value)]
    assert "nftables.service" in after  # at boot: loaded after the host's flush
    assert unit["Unit.PartOf"] == ["nftables.service"]  # its stop/restart stop/restart us
    assert unit["Unit.ReloadPropagatedFrom"] == ["nftables.service"]
    assert unit["Service.ExecStart"] == ["/usr/sbin/nft -f %s" % RULESET]
    # still the host's table alone is deleted on stop; ranks stop before it (their After=)
    assert unit["Service.ExecStop"] == ["-/usr/sbin/nft delete table inet vllm_fleet_replicas"]


def _reload_script(tmp_path, nft_rc):
    """The unit's ExecReload= as /bin/sh runs it, nft and systemctl replaced by stand-ins
    that record their arguments."""
    (value,) = firewall_unit()["Service.ExecReload"]
    argv = words(value)
    assert argv[:2] == ["/bin/sh", "-c"]
    log = tmp_path / "calls"
    for name, rc in (("nft", nft_rc), ("systemctl", 0)):
        stub = tmp_path / name
        stub.write_text('#!/bin/sh\necho "%s $*" >> %s\nexit %d\n' % (name, log, rc))
        stub.chmod(0o755)
    script = argv[2].replace("/usr/sbin/nft", str(tmp_path / "nft")).replace(
        "/usr/bin/systemctl", str(tmp_path / "systemctl"))
    run = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                         check=False, timeout=30)
    return run.returncode, log.read_text().splitlines()


def test_a_reload_that_loads_the_table_keeps_the_unit(tmp_path):
    rc, calls = _reload_script(tmp_path, nft_rc=0)
    assert (rc, calls) == (0, ["nft -f %s" % RULESET])


def test_a_reload_that_cannot_load_the_table_stops_the_unit_and_so_the_ranks(tmp_path):
    rc, calls = _reload_script(tmp_path, nft_rc=1)
    assert rc == 1
    assert calls == ["nft -f %s" % RULESET,
                     "systemctl stop --no-block %s" % FIREWALL_UNIT]


def test_the_nftables_dropin_reloads_the_table_after_each_start():
    dropin = parsed(_render("vllm_service", DROPIN))
    assert dropin == {"Service.ExecStartPost": [
        "-/usr/bin/systemctl try-reload-or-restart --no-block %s" % FIREWALL_UNIT]}


def test_the_role_writes_the_dropin_with_the_unit_and_removes_it_with_the_table():
    tasks = yaml.safe_load((ROLES / "vllm_service" / "tasks" / "firewall.yml").read_text())
    load, remove = tasks
    written = [t["ansible.builtin.template"] for t in load["block"]
               if "ansible.builtin.template" in t]
    assert {"src": DROPIN + ".j2", "dest": "{{ __vllm_service_nftables_dropin }}", "owner": "root",
            "group": "root", "mode": "0644"} in written
    (gone,) = [t for t in remove["block"] if "loop" in t]
    assert "{{ __vllm_service_nftables_dropin }}" in gone["loop"]
    values = yaml.safe_load((ROLES / "vllm_service" / "vars" / "main.yml").read_text())
    assert values["__vllm_service_nftables_dropin"] == (
        "{{ vllm_service_unit_dir }}/nftables.service.d/vllm-fleet-replicas.conf")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None or not NFTABLES_UNIT.exists(),
                    reason="needs systemd-analyze and Debian's nftables.service")
def test_the_verifier_accepts_the_firewall_beside_debians_nftables_unit(tmp_path):
    units = tmp_path / "system"
    (units / "nftables.service.d").mkdir(parents=True)
    (units / FIREWALL_UNIT).write_text(_render("vllm_service", FIREWALL_UNIT))
    (units / "nftables.service.d" / "vllm-fleet-replicas.conf").write_text(
        _render("vllm_service", DROPIN))
    env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"}
    run = subprocess.run([SYSTEMD_ANALYZE, "verify", str(units / FIREWALL_UNIT),
                          "nftables.service"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, check=False, timeout=60)
    assert (run.returncode, run.stderr) == (0, "")
