# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""scripts/plan-read-checkout.sh: the collection test fails on the plan's output naming the
checkout, never on a warning on stderr (cryptography 51's DSA deprecation named the checkout's
.venv and failed `make collection-test` on a fresh machine, 2026-12-06)."""

import subprocess

from repo_paths import ROOT

SCRIPT = ROOT / "scripts" / "plan-read-checkout.sh"
CHECKOUT = "/tmp/x/vllm-fleet"
WARNING = (f"{CHECKOUT}/.venv/lib/python3.11/site-packages/ansible/_internal/_ssh/"
           "_ssh_agent.py:18: CryptographyDeprecationWarning: DSA is deprecated and support "
           "will be removed in a future release. Use a more modern signature algorithm.\n")


def _run(tmp_path, out, err):
    (tmp_path / "out").write_text(out)
    (tmp_path / "err").write_text(err)
    return subprocess.run(["bash", str(SCRIPT), CHECKOUT, tmp_path / "out", tmp_path / "err"],
                          capture_output=True, text=True, check=False)


def test_a_warning_naming_the_checkouts_venv_on_stderr_passes_and_is_shown(tmp_path):
    done = _run(tmp_path, "Plan on rtx_pro_6000_x8_pcie: ...\n", WARNING)
    assert done.returncode == 0
    assert "CryptographyDeprecationWarning" in done.stdout


def test_the_plans_own_output_naming_the_checkout_fails(tmp_path):
    done = _run(tmp_path, f"config.json read from {CHECKOUT}/roles/vllm_model/files/x\n", "")
    assert done.returncode == 1
    assert f"FAIL: the plan read the checkout:\nconfig.json read from {CHECKOUT}" in done.stderr
