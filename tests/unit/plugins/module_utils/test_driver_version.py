# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""driver_version: Debian version order (checked against the real `dpkg --compare-versions`),
`apt-cache madison` parsing (its real layout, as this Debian 12 machine prints it), and the
version a host keeps (issue 33, item 5: the driver moves only when asked)."""

import shutil
import subprocess

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import driver_version as dv

PAIRS = [
    ("580.95.05-1", "580.105.08-1"),  # 95 < 105: numeric, not text, order
    ("1.1-1", "1.1-2"),
    ("1.1-1", "1.2-1"),
    ("1.0~rc1-1", "1.0-1"),  # '~' sorts before the end
    ("1:1.0-1", "2.0-1"),  # the epoch wins
    ("1.0a-1", "1.0-1"),
    ("1.0+b1", "1.0"),
    ("2.36-9+deb12u7", "2.36-9+deb12u14"),
    ("580.95.05-1", "580.95.05-1"),
]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is the reference")
@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_compare_agrees_with_dpkg(a, b):
    for x, y in ((a, b), (b, a)):
        expected = [
            op
            for op in ("lt", "eq", "gt")
            if subprocess.run(["dpkg", "--compare-versions", x, op, y], check=False).returncode == 0
        ]
        got = {-1: "lt", 0: "eq", 1: "gt"}[dv.compare(x, y)]
        assert [got] == expected, (x, y)


def test_compare_refuses_what_is_not_a_version():
    with pytest.raises(ValueError, match="not a Debian version: ''"):
        dv.compare("", "1.0")


# `apt-cache madison` layout: name | version | source, one line per version and source.
REPO = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages"
MADISON = "".join(
    f"{name} | {version} | {source}\n"
    for name, version, source in [
        ("nvidia-kernel-open-dkms", "590.44.01-1", REPO),
        ("nvidia-kernel-open-dkms", "580.95.05-1", REPO),
        ("nvidia-kernel-open-dkms", "580.105.08-1", REPO),
        ("nvidia-kernel-open-dkms", "575.57.08-1", REPO),
        ("nvidia-kernel-open-dkms", "580.95.05-1", "/var/lib/dpkg/status"),
        ("  nvidia-open", "580.95.05-1", REPO),
    ]
)


def test_madison_versions_newest_first_each_once_of_the_package():
    assert dv.madison_versions(MADISON, "nvidia-kernel-open-dkms") == [
        "590.44.01-1",
        "580.105.08-1",
        "580.95.05-1",
        "575.57.08-1",
    ]
    assert dv.madison_versions(MADISON, "nvidia-open") == ["580.95.05-1"]


def _offered(text=MADISON):
    return dv.madison_versions(text, "nvidia-kernel-open-dkms")


def test_first_install_chooses_the_newest_of_the_branch():
    got = dv.choose("", "", 580, _offered())
    assert got["version"] == "580.105.08"
    assert got["change"] is True
    assert got["refusal"] == ""
    assert "the newest of the branch, 580.105.08, is chosen and then kept" in got["why"]


def test_installed_version_is_kept_when_a_newer_one_of_the_branch_appears():
    got = dv.choose("", "580.95.05-1", 580, _offered())
    assert (got["version"], got["installed"], got["change"]) == ("580.95.05", "580.95.05", False)
    assert "the installed 580.95.05 is kept" in got["why"]


def test_a_set_version_moves_the_driver():
    got = dv.choose("580.105.08", "580.95.05-1", "580", _offered())
    assert (got["version"], got["change"], got["refusal"]) == ("580.105.08", True, "")


def test_a_version_of_another_branch_or_not_offered_is_refused():
    got = dv.choose("590.44.01", "580.95.05-1", 580, _offered())
    assert got["refusal"] == (
        "nvidia_driver_version 590.44.01 is not of nvidia_driver_branch 580: "
        "set nvidia_driver_branch to 590 as well"
    )
    got = dv.choose("580.82.07", "580.95.05-1", 580, _offered())
    assert got["refusal"] == (
        "nvidia_driver_version 580.82.07 is not in the repository, which offers "
        "590.44.01, 580.105.08, 580.95.05, 575.57.08 of the kernel module package"
    )


def test_a_new_branch_moves_to_its_newest():
    got = dv.choose("", "580.95.05-1", 590, _offered())
    assert (got["version"], got["change"]) == ("590.44.01", True)


def test_no_release_of_the_branch_is_refused():
    got = dv.choose("", "", 570, _offered())
    assert got["refusal"].startswith(
        "no driver of branch 570 in the repository (it offers 590.44.01"
    )


def test_check_mode_before_the_repository_exists():
    got = dv.choose("", "", 580, None)
    assert (got["version"], got["change"], got["refusal"]) == ("", True, "")
