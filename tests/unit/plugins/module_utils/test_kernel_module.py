# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""kernel_module: the module's banner on every path, and the flavour a GPU may run."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import kernel_module as kmod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from repo_paths import FIXTURES

GPU = FIXTURES / "gpu"
H200 = FIXTURES / "gpu" / "h200x2-nvlink"
SYNTH = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"
P2P = GPU / "h200x2-nvlink-p2p"
PUBLIC = GPU / "public"


def _read(path):
    return path.read_text()


def test_h200_open_flavour_real_capture():
    flavour, version, source = kmod.kernel_module_flavour(
        _read(H200 / "proc-driver-nvidia-version.txt")
    )
    assert (flavour, version, source) == ("open", "580.159.04", "proc")


def test_proprietary_flavour_from_proc_and_modinfo():
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    )
    assert kmod.kernel_module_flavour(text) == ("proprietary", "550.54.14", "proc")
    assert kmod.kernel_module_flavour(None, "Dual MIT/GPL\n") == ("open", None, "modinfo")
    assert kmod.kernel_module_flavour(None, "NVIDIA\n") == ("proprietary", None, "modinfo")
    assert kmod.kernel_module_flavour(None, None) == ("unknown", None, None)


@pytest.mark.parametrize(
    ("cc", "default", "allowed"),
    [
        ("12.0", "open", ["open"]),  # RTX PRO 6000 Blackwell
        ("10.0", "open", ["open"]),  # B200
        ("9.0", "open", ["open", "proprietary"]),  # H100/H200
        ("7.5", "open", ["open", "proprietary"]),  # Turing
        ("7.0", "proprietary", ["proprietary"]),  # Volta
    ],
)
def test_default_flavour_pins_open_for_blackwell(cc, default, allowed):
    assert kmod.default_flavour(cc) == default
    assert kmod.allowed_flavours(cc) == allowed


# --- case 1/5: the kernel module's banner, on every path, in every layout ---


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dmesg-open-ogkm421.txt", ("open", "525.60.11", "proc")),
        ("syslog-proprietary-bumblebee663.txt", ("proprietary", "346.47", "proc")),
        ("dmesg-proprietary-x86-openelec331.txt", ("proprietary", "280.13", "proc")),
    ],
)
def test_banner_from_kernel_log_lines_with_timestamps(name, expected):
    assert kmod.kernel_module_flavour(_read(PUBLIC / name)) == expected


def test_banner_from_the_real_proc_files():
    assert kmod.kernel_module_flavour(_read(P2P / "proc-driver-nvidia-version.txt")) == (
        "open",
        "580.159.04",
        "proc",
    )
    assert kmod.kernel_module_flavour(_read(SYNTH / "proc-driver-nvidia-version.txt")) == (
        "open",
        "580.95.05",
        "proc",
    )


def test_banner_in_an_unrecognised_format_is_an_error_that_says_so():
    with pytest.raises(smi.GpuFactsError, match=r"unrecognised format.*'NVIDIA driver ready'"):
        kmod.kernel_module_flavour("NVIDIA driver ready\n")
