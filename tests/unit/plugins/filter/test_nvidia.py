# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The filters the nvidia_driver role and the deploy decide with."""

import base64

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.nvidia import (
    FilterModule,
    nvidia_allowed_flavours,
    nvidia_cuda_mismatch,
    nvidia_default_flavour,
    nvidia_fabric_warnings,
    nvidia_secure_boot_state,
    nvidia_unexplained_memory,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES, ROOT


@pytest.mark.parametrize(
    ("ccs", "flavour"),
    [
        (["12.0"] * 8, "open"),  # 8x RTX PRO 6000 Blackwell: open is the default
        (["10.0"], "open"),
        (["9.0", "9.0"], "open"),
        (["7.0"], "proprietary"),
        ([], "open"),
    ],
)
def test_default_flavour(ccs, flavour):
    assert nvidia_default_flavour(ccs) == flavour


def test_allowed_flavours_blackwell_excludes_proprietary():
    assert nvidia_allowed_flavours(["12.0", "12.0"]) == ["open"]
    assert nvidia_allowed_flavours(["9.0"]) == ["open", "proprietary"]
    assert nvidia_allowed_flavours(["7.0", "12.0"]) == []


def test_filters_are_registered_and_documented():
    names = set(FilterModule().filters())
    assert names == {
        "nvidia_default_flavour",
        "nvidia_allowed_flavours",
        "nvidia_fabric_warnings",
        "nvidia_unexplained_memory",
        "nvidia_secure_boot_state",
        "nvidia_mok_key_state",
        "nvidia_cuda_mismatch",
        "nvidia_driver_choice",
        "nvidia_deb_version_cmp",
        "nvidia_not_answering",
    }
    for name in names:
        assert (ROOT / "plugins" / "filter" / f"{name}.yml").is_file(), name


def _efivar(value):
    # efivarfs: 4 attribute bytes (NV|BS|RT = 0x06), then the variable's 1 byte.
    return base64.b64encode(bytes([0x06, 0, 0, 0, value])).decode()


@pytest.mark.parametrize(
    ("args", "state"),
    [
        ((False,), "disabled"),  # no /sys/firmware/efi: a legacy BIOS boot
        ((True, _efivar(1)), "enabled"),
        ((True, _efivar(0)), "disabled"),
        ((True, "", "SecureBoot enabled\n"), "enabled"),
        ((True, "", "SecureBoot disabled\n"), "disabled"),
        ((True, "", "This system doesn't support Secure Boot\n"), "disabled"),
        # Cannot tell: a refusal for the role, never a pass.
        ((True, "", ""), "unknown"),
        ((True, "", "EFI variables are not supported on this system\n"), "unknown"),
        ((True, "", "/bin/sh: 1: mokutil: not found"), "unknown"),
        ((True, _efivar(7)), "unknown"),
        ((True, "bm90IGJhc2U2NA=="), "unknown"),
        ((None, "", "SecureBoot disabled"), "disabled"),
    ],
)
def test_secure_boot_state(args, state):
    assert nvidia_secure_boot_state(*args) == state


@pytest.mark.parametrize(("text", "state"), [
    # mokutil 0.6.0's own words (Debian 12's binary), for a DER certificate.
    ("/var/lib/dkms/mok.pub is already enrolled\n", "enrolled"),
    ("CA of /var/lib/dkms/mok.pub is already enrolled\n", "enrolled"),
    ("/var/lib/dkms/mok.pub is already in db\n", "enrolled"),
    ("/var/lib/dkms/mok.pub is already in the built-in trusted keyring\n", "enrolled"),
    ("/var/lib/dkms/mok.pub is already in the enrollment request\n", "pending"),
    # quo/ithc-linux#22's case: a key made and never enrolled.
    ("/var/lib/dkms/mok.pub is not enrolled\n", "not enrolled"),
    ("/var/lib/dkms/mok.pub is blocked in dbx\n", "not enrolled"),
    ("Abort!!! /root/mok.key is not a valid x509 certificate in DER format\n", "not enrolled"),
    ("EFI variables are not supported on this system\n", "unknown"),
    ("", "unknown"), (None, "unknown"),
])
def test_mok_key_state(text, state):
    assert FilterModule().filters()["nvidia_mok_key_state"](text) == state


def test_cuda_mismatch():
    # Issue 10, case 8: CUDA 13 wheels on a 570-branch driver (CUDA 12.8).
    assert nvidia_cuda_mismatch("12.8", "13.0") == (
        "the driver supports CUDA 12.8, the build needs CUDA 13.0: CUDA cannot initialise; "
        "install a driver of a CUDA 13.x branch or a build for CUDA 12.x"
    )
    assert nvidia_cuda_mismatch("13.0", "12.8") == ""
    assert nvidia_cuda_mismatch("12.4", "12.8") == ""  # minor-version compatibility
    with pytest.raises(AnsibleFilterError, match=r"is not like '12\.8'"):
        nvidia_cuda_mismatch(None, "12.8")


def test_fabric_and_memory_filters_on_the_synthetic_host():
    facts = collect_from_fixture(str(FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"))
    assert nvidia_fabric_warnings(facts, [0, 1, 2, 3], 4) == []
    assert nvidia_unexplained_memory(facts, [3], "0") == []
    with pytest.raises(AnsibleFilterError, match="nvidia_unexplained_memory"):
        nvidia_unexplained_memory(facts, [3], "a lot")


def test_driver_choice_keeps_the_installed_release_and_moves_only_when_asked():
    """The role's tasks/choose.yml call: installed package version, nvidia_driver_version,
    branch, `apt-cache madison` output (its real layout), package name."""
    from ansible_collections.vllm_fleet.fleet.plugins.filter.nvidia import (
        nvidia_deb_version_cmp,
        nvidia_driver_choice,
    )

    madison = (
        "nvidia-kernel-open-dkms | 580.105.08-1 | file:/srv/fake-cuda/debian12/x86_64  Packages\n"
        "nvidia-kernel-open-dkms | 580.95.05-1 | file:/srv/fake-cuda/debian12/x86_64  Packages\n"
    )
    kept = nvidia_driver_choice("580.95.05-1", "", 580, madison, "nvidia-kernel-open-dkms")
    assert (kept["version"], kept["change"]) == ("580.95.05", False)
    moved = nvidia_driver_choice(
        "580.95.05-1", "580.105.08", 580, madison, "nvidia-kernel-open-dkms"
    )
    assert (moved["version"], moved["change"], moved["refusal"]) == ("580.105.08", True, "")
    assert nvidia_deb_version_cmp("1.2-1", "1.1-1") == 1
    with pytest.raises(AnsibleFilterError, match="nvidia_deb_version_cmp: not a Debian version"):
        nvidia_deb_version_cmp("", "1.1-1")
