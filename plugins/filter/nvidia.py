# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters for the NVIDIA driver and GPU fabric decisions (docs: plugins/filter/nvidia_*.yml)."""

from __future__ import annotations

import base64
import binascii
import re

from ansible.errors import AnsibleFilterError

# module_utils imported at a filter's first call (why: plugins/plugin_utils/filters.py).

EFI_VAR_HEADER = 4  # efivarfs files start with the variable's 4-byte attributes


def nvidia_default_flavour(capabilities):
    """['12.0', ...] -> 'open'; ['7.0'] -> 'proprietary'; [] -> 'open'."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.kernel_module import (
        default_flavour,
    )

    flavours = {default_flavour(cc) for cc in capabilities or []}
    return "proprietary" if flavours == {"proprietary"} else "open"


def nvidia_allowed_flavours(capabilities):
    """Flavours every GPU in the list can run: ['12.0', '9.0'] -> ['open']."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.kernel_module import (
        allowed_flavours,
    )

    allowed = {"open", "proprietary"}
    for cc in capabilities or []:
        allowed &= set(allowed_flavours(cc))
    return sorted(allowed)


def nvidia_fabric_warnings(gpu_facts, gpus, tensor_parallel_size=1):
    """Warnings (each with its fix) for a model on `gpus` at this tensor parallel size."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_fabric import (
        fabric_warnings,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
        GpuFactsError,
    )

    try:
        return fabric_warnings(gpu_facts, gpus, tensor_parallel_size)
    except (GpuFactsError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"nvidia_fabric_warnings: {exc}") from exc


def nvidia_unexplained_memory(gpu_facts, gpus, threshold_bytes):
    """GPUs among `gpus` holding more memory than their visible processes, above the threshold."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_memory import (
        unexplained_memory,
    )

    try:
        return unexplained_memory(gpu_facts, gpus, int(threshold_bytes))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"nvidia_unexplained_memory: {exc}") from exc


# What `mokutil --test-key <der>` prints (mokutil 0.6.0, Debian 12's, its strings): the
# key trusted - in MokList ("is already enrolled", a CA "CA of X is already enrolled"), in
# the firmware's db, or in the kernel's built-in keyring; waiting for a person to confirm
# it at the console on the next boot ("already in the enrollment request"); not trusted
# ("is not enrolled"): DKMS then signs with a key the kernel rejects (quo/ithc-linux#22,
# modprobe: "Key was rejected by service").
_MOK_ENROLLED = re.compile(r"\bis already (?:enrolled|in db|in the built-in trusted keyring)\b"
                           r"|\bCA of .* is already enrolled\b")
_MOK_PENDING = re.compile(r"\bis already in the enrollment request\b")
_MOK_REFUSED = re.compile(r"\bis not enrolled\b|\bis blocked\b|not a valid x509 certificate")


def nvidia_mok_key_state(mokutil_text):
    """'enrolled' | 'pending' | 'not enrolled' | 'unknown' from `mokutil --test-key`'s output.

    Anything mokutil did not say plainly (no EFI, mokutil missing) is 'unknown': a
    refusal for the role, never a pass.
    """
    text = mokutil_text or ""
    if _MOK_REFUSED.search(text):
        return "not enrolled"
    if _MOK_PENDING.search(text):
        return "pending"
    if _MOK_ENROLLED.search(text):
        return "enrolled"
    return "unknown"


def nvidia_secure_boot_state(efi_present, efivar_b64=None, mokutil_text=None):
    """'enabled' | 'disabled' | 'unknown' from the firmware's own authorities.

    efi_present: whether /sys/firmware/efi exists (False: a legacy BIOS boot,
    where Secure Boot cannot be on; None: not looked at). efivar_b64: the
    base64 content of /sys/firmware/efi/efivars/SecureBoot-8be4df61-...
    (4 attribute bytes, then 1 = enabled, 0 = disabled). mokutil_text: what
    `mokutil --sb-state` printed. Anything else is 'unknown' (a refusal).
    """
    if efi_present is False:
        return "disabled"
    if efivar_b64:
        try:
            data = base64.b64decode(efivar_b64, validate=True)
        except (binascii.Error, ValueError):
            data = b""
        if len(data) == EFI_VAR_HEADER + 1 and data[EFI_VAR_HEADER] in (0, 1):
            return "enabled" if data[EFI_VAR_HEADER] == 1 else "disabled"
    text = mokutil_text or ""
    if re.search(r"^SecureBoot enabled\s*$", text, re.MULTILINE):
        return "enabled"
    if re.search(r"^SecureBoot disabled\s*$", text, re.MULTILINE) or re.search(
        r"doesn't support Secure Boot", text
    ):
        return "disabled"
    return "unknown"


def _major_minor(version, what):
    match = re.match(r"^\s*(\d+)\.(\d+)", str(version or ""))
    if not match:
        raise AnsibleFilterError(f"nvidia_cuda_mismatch: {what} {version!r} is not like '12.8'")
    return int(match.group(1)), int(match.group(2))


def nvidia_cuda_mismatch(driver_cuda_version, wheel_cuda_version):
    """'' when a driver supporting CUDA driver_cuda_version runs a build for wheel_cuda_version.

    Otherwise a sentence saying why not: a driver of an older CUDA major
    cannot initialise a build of a newer major (CUDA 13 wheels on a 570-branch
    driver); within one major, minor-version compatibility runs it.
    """
    driver = _major_minor(driver_cuda_version, "the driver's CUDA version")
    wheel = _major_minor(wheel_cuda_version, "the build's CUDA version")
    if driver[0] < wheel[0]:
        return (
            f"the driver supports CUDA {driver[0]}.{driver[1]}, the build needs CUDA "
            f"{wheel[0]}.{wheel[1]}: CUDA cannot initialise; install a driver of a CUDA "
            f"{wheel[0]}.x branch or a build for CUDA {driver[0]}.x"
        )
    return ""


def nvidia_driver_choice(installed, wanted, branch, madison_text=None, package=""):
    """The driver version the host keeps (module_utils/driver_version.choose).

    installed: the installed kernel module package's version ('' for none); madison_text:
    `apt-cache madison PACKAGE` output (None: not read).
    """
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import driver_version

    try:
        offered = (
            None if madison_text is None else driver_version.madison_versions(madison_text, package)
        )
        return driver_version.choose(wanted or "", installed or "", branch, offered)
    except ValueError as exc:
        raise AnsibleFilterError(f"nvidia_driver_choice: {exc}") from exc


def nvidia_deb_version_cmp(a, b):
    """-1, 0 or 1 as Debian version a sorts before, equal to or after b (dpkg's order)."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import driver_version

    try:
        return driver_version.compare(a, b)
    except ValueError as exc:
        raise AnsibleFilterError(f"nvidia_deb_version_cmp: {exc}") from exc


def nvidia_not_answering(gpu_facts):
    """Why nvidia-smi does not answer, in GPU counts ('' when it answers)."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_facts import (
        not_answering,
    )

    return not_answering(gpu_facts or {})


class FilterModule:
    def filters(self):
        return {
            "nvidia_default_flavour": nvidia_default_flavour,
            "nvidia_allowed_flavours": nvidia_allowed_flavours,
            "nvidia_fabric_warnings": nvidia_fabric_warnings,
            "nvidia_unexplained_memory": nvidia_unexplained_memory,
            "nvidia_secure_boot_state": nvidia_secure_boot_state,
            "nvidia_mok_key_state": nvidia_mok_key_state,
            "nvidia_cuda_mismatch": nvidia_cuda_mismatch,
            "nvidia_driver_choice": nvidia_driver_choice,
            "nvidia_deb_version_cmp": nvidia_deb_version_cmp,
            "nvidia_not_answering": nvidia_not_answering,
        }
