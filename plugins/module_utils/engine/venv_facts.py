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

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.python_lock import (
    canonical,
    digest,
    drift,
)

_NAME_RE = re.compile(r"^Name:\s*(.+?)\s*$", re.MULTILINE)
_VERSION_RE = re.compile(r"^Version:\s*(.+?)\s*$", re.MULTILINE)
# torch/version.py, written by torch's build: cuda = '12.8' (or None for CPU builds)
_TORCH_CUDA_RE = re.compile(
    r"^cuda\s*(?::\s*\w+(?:\[\w+\])?\s*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.MULTILINE
)


# The lock a virtualenv was installed from, copied into it once the install
# succeeded (roles/vllm_install, roles/model_download): its digest is the
# virtualenv's identity in the facts, the deployment record and the plan.
LOCK_FILE = "vllm-fleet-lock.txt"


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


def installed_lock_digest(venv):
    """Digest of the lock the virtualenv says it was installed from; None without one."""
    try:
        with open(os.path.join(venv, LOCK_FILE), encoding="utf-8") as handle:
            return digest(handle.read())
    except (OSError, UnicodeDecodeError):
        return None


def venv_facts(venv, lock_pins=None, lock_ignore=()):
    """Facts of the virtualenv at `venv` (see the module's RETURN).

    With `lock_pins` ({name: version}, python_lock.pins of the wanted lock) the
    facts say how the virtualenv differs from it (`lock_drift`); `lock_ignore`
    names distributions the role writes itself, not installed from the lock.
    """
    python = os.path.join(venv, "bin", "python")
    site = purelib(venv)
    if not (os.path.exists(python) and site):
        rows = drift(lock_pins, {}, lock_ignore) if lock_pins else []
        return {"exists": False, "path": venv, "python": None, "purelib": None,
                "packages": {}, "torch_cuda": None, "lock_digest": None, "lock_drift": rows}
    packages = distributions(site)
    return {"exists": True, "path": venv, "python": python, "purelib": site,
            "packages": packages, "torch_cuda": torch_cuda(site),
            "lock_digest": installed_lock_digest(venv),
            "lock_drift": drift(lock_pins, packages, lock_ignore) if lock_pins else []}
