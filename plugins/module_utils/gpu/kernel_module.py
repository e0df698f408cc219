# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Which NVIDIA kernel module runs (open or proprietary), and which a GPU may run.

Reads the module's banner (/proc/driver/nvidia/version or the kernel log) or
`modinfo -F license nvidia`; chooses the flavour from a compute capability.
Runs on target hosts: standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    GpuFactsError,
    _first_line,
    parse_compute_capability,
)

# Open kernel modules exist for Turing (7.5) and newer; Blackwell (10.x, 12.x)
# works ONLY with them (the proprietary module leaves "No devices were found").
OPEN_MIN_CC = (7, 5)
OPEN_ONLY_MIN_CC = (10, 0)

# The kernel module's banner, as /proc/driver/nvidia/version prints it
# ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release
# Build ...") and as the kernel log does when it loads ("[    7.03] NVRM: loading
# NVIDIA UNIX x86_64 Kernel Module  550.54.14 ..."), with or without timestamps
# or a syslog prefix.
_NVRM_RE = re.compile(
    r"NVRM(?: version)?:\s+(?:loading\s+)?NVIDIA UNIX\s+(?P<open>Open\s+)?(?:\S+\s+)?"
    r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>\d+(?:\.\d+)+)"
)


def kernel_module_flavour(proc_version_text=None, modinfo_license=None):
    """Tell the open kernel module from the proprietary one, and its version.

    Reads the module's banner from /proc/driver/nvidia/version ("NVIDIA UNIX
    Open Kernel Module ..." vs "NVIDIA UNIX x86_64 Kernel Module ...") or from a
    kernel log line ("[   7.03] NVRM: loading NVIDIA UNIX ..."), with or
    without timestamps; `modinfo -F license nvidia` ("Dual MIT/GPL" vs
    "NVIDIA") is the fallback when there is no banner text at all.
    Returns (flavour, version, source) with flavour open|proprietary|unknown.
    Raises GpuFactsError for banner text in an unrecognised format.
    """
    text = proc_version_text or ""
    if text.strip():
        for line in text.splitlines():
            match = _NVRM_RE.search(line)
            if match:
                flavour = "open" if match.group("open") else "proprietary"
                return flavour, match.group("version"), "proc"
        raise GpuFactsError(
            "the NVIDIA kernel module version text is in an unrecognised format: wanted a line "
            "like 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  ...' "
            "(/proc/driver/nvidia/version) or '[ 7.03] NVRM: loading NVIDIA UNIX ... Kernel "
            f"Module  580.95.05 ...' (kernel log), found {_first_line(text)!r}"
        )
    lic = (modinfo_license or "").strip()
    if lic:
        if "MIT" in lic:
            return "open", None, "modinfo"
        if lic == "NVIDIA":
            return "proprietary", None, "modinfo"
    return "unknown", None, None


def default_flavour(compute_capability):
    """Default kernel module flavour for a GPU of this compute capability.

    Open for Turing (7.5) and newer, and the only choice from Blackwell (10.0)
    on; proprietary below 7.5, where the open modules do not run.
    """
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return "open"
    return "open" if cc >= OPEN_MIN_CC else "proprietary"


def allowed_flavours(compute_capability):
    """Kernel module flavours that can drive a GPU of this compute capability."""
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return ["open", "proprietary"]
    if cc >= OPEN_ONLY_MIN_CC:
        return ["open"]
    if cc >= OPEN_MIN_CC:
        return ["open", "proprietary"]
    return ["proprietary"]
