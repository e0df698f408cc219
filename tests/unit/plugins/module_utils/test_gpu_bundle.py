# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""gpu_facts on the support bundles people post (issue 34, item 5): `nvidia-smi -q`
as text, `lspci -vvv`, `dmesg` with timestamps, /proc/cmdline.

The bundle tests/fixtures/gpu/public-bundle/ is made from public captures, each
cited in its SOURCE.md: `nvidia-smi -q` of 2x H100 NVL (thamada/nvidia-smi,
nvsim/H100NVLx2_smi.py), bridge blocks of `lspci -vvv` from fastfetch-cli/fastfetch#1658
with the ACS lines of sebhildebrandt/systeminformation#819 and NVIDIA/nccl#606, the
kernel log of NVIDIA/open-gpu-kernel-modules#421. The captures come from different
hosts, so the kernel log's module (525.60.11) is not the -q userspace (550.54.14):
gpu_facts says so, as it must.
"""

import shutil

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_fabric as fab
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_readers as rd
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from ansible_collections.vllm_fleet.fleet.plugins.modules import gpu_facts
from repo_paths import FIXTURES

from unit.module_harness import run_module

GPU = FIXTURES / "gpu"
BUNDLE = GPU / "public-bundle"
PUBLIC = GPU / "public"
P2P = GPU / "h200x2-nvlink-p2p"
MIB = 1024 * 1024
OFF = dict.fromkeys(fab.ACS_BITS, False)


def _bundle(tmp_path, cmdline=None):
    for item in BUNDLE.iterdir():
        if item.name != "SOURCE.md":
            shutil.copy(item, tmp_path / item.name)
    if cmdline is not None:
        (tmp_path / "proc-cmdline.txt").write_text(cmdline)
    return collect_from_fixture(str(tmp_path))


def test_smi_text_reads_as_the_xml_does_on_the_same_host():
    """The real 2x H200 capture holds -q and -q -x of one moment: the text parser agrees."""
    text = smi.parse_smi_text((P2P / "nvidia-smi-q.txt").read_text())
    xml = smi.parse_smi_xml((P2P / "nvidia-smi-q.xml").read_text())
    for key in ("driver_version", "cuda_version", "attached_gpus"):
        assert text[key] == xml[key], key
    assert text["driver_version"] == "580.159.04"
    for from_text, from_xml in zip(text["gpus"], xml["gpus"], strict=True):
        for key in (
            "name",
            "architecture",
            "uuid",
            "pci_bus_id",
            "minor_number",
            "persistence_mode",
            "memory_total_bytes",
            "memory_used_bytes",
            "memory_free_bytes",
        ):
            assert from_text[key] == from_xml[key], key
    # -q text handed where -q -x was asked is read, not refused.
    assert smi.parse_smi_xml((P2P / "nvidia-smi-q.txt").read_text())["gpus"] == text["gpus"]
    with pytest.raises(smi.GpuFactsError, match="unrecognised format"):
        smi.parse_smi_text("Failed to initialize NVML: Driver/library version mismatch\n")


def test_public_bundle_gpus_driver_and_module():
    facts = collect_from_fixture(str(BUNDLE))
    assert facts["present"] is True
    assert facts["gpu_count"] == 2
    assert [g["pci_bus_id"] for g in facts["gpus"]] == ["00000000:AD:00.0", "00000000:AE:00.0"]
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H100 NVL"] * 2
    assert [g["uuid"] for g in facts["gpus"]] == [
        "GPU-806f8ea2-6428-1096-a076-bb687fb45fb0",
        "GPU-db6d02a2-1413-eccf-8a17-d99eac29d365",
    ]
    assert [g["memory_total_bytes"] for g in facts["gpus"]] == [95830 * MIB] * 2
    assert [g["memory_free_bytes"] for g in facts["gpus"]] == [95235 * MIB] * 2
    assert [g["persistence_mode"] for g in facts["gpus"]] == [True, True]
    assert [g["minor_number"] for g in facts["gpus"]] == [4, 5]
    assert [g["architecture"] for g in facts["gpus"]] == ["Hopper"] * 2
    assert facts["driver_version"] == "550.54.14"
    assert facts["cuda_version"] == "12.4"
    # lspci -vvv (names, not ids) counts the GPUs on the bus.
    assert facts["pci_gpu_count"] == 2
    assert facts["pci_gpu_slots"] == ["0000:ad:00.0", "0000:ae:00.0"]
    # The kernel log's banner: the open module, and where it was read.
    assert facts["kernel_module"] == {
        "flavour": "open",
        "version": "525.60.11",
        "source": "kernel_log",
    }
    assert facts["kernel_log"]["banner"].startswith("[    1.792940] NVRM: loading NVIDIA UNIX Open")
    assert facts["kernel_log"]["xids"] == []
    # Captures of two hosts: the module of one is not the userspace of the other.
    mismatch = (
        "nvidia-smi reports driver 550.54.14 but the loaded kernel module is 525.60.11: install "
        "the userspace of exactly 525.60.11"
    )
    assert facts["problems"] == [mismatch]


def test_public_bundle_topology_acs_at_tp2_and_iommu_off():
    facts = collect_from_fixture(str(BUNDLE))
    fabric = facts["fabric"]
    assert fabric["acs_source"] == "lspci"
    srcvalid = {**OFF, "SrcValid": True}
    # What the text gives of the hierarchy: the bridge above each GPU (bus ranges).
    assert [g["bridges"] for g in fabric["gpus"]] == [
        [{"bus_id": "0000:a9:03.0", "acs": srcvalid, "readable": True}],
        [{"bus_id": "0000:a9:04.0", "acs": srcvalid, "readable": True}],
    ]
    assert fabric["iommu"] == {
        "groups": None,
        "cmdline": {"intel_iommu": "off"},
        "mode": "off",
        "cmdline_mode": "off",
    }
    (warning,) = fab.fabric_warnings(facts, [0, 1], 2)
    assert warning.startswith(
        "tensor parallel 2 on GPUs 0,1: ACS is enabled at PCIe bridge(s) 0000:a9:03.0 "
        "(SrcValid+), 0000:a9:04.0 (SrcValid+) above the GPUs"
    )
    assert "`setpci -s <bridge> ECAP_ACS+0x6.w=0000`" in warning
    assert "in the firmware (BIOS" in warning
    assert fab.NCCL_ACS_GUIDE in warning
    assert "NCCL_P2P_DISABLE=1" in warning
    assert "it costs bandwidth" in warning
    # One GPU, or tensor parallel 1: no ACS warning (no peer-to-peer traffic).
    assert fab.fabric_warnings(facts, [0, 1], 1) == []
    assert fab.fabric_warnings(facts, [0], 1) == []


def test_iommu_state_from_the_kernel_command_line(tmp_path):
    cases = {
        "BOOT_IMAGE=/vmlinuz ro iommu=off": "off",
        "BOOT_IMAGE=/vmlinuz ro amd_iommu=off": "off",
        "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt": "passthrough",
        "BOOT_IMAGE=/vmlinuz ro intel_iommu=on": "on",
        "BOOT_IMAGE=/vmlinuz ro quiet": "unknown",
    }
    for line, mode in cases.items():
        assert fab.iommu_from_cmdline(fab.parse_cmdline(line)) == mode, line
    # Used where the IOMMU warning is made: on (no pass-through) warns at TP 2 ...
    facts = _bundle(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on\n")
    assert facts["fabric"]["iommu"]["mode"] == "translated"
    warnings = fab.fabric_warnings(facts, [0, 1], 2)
    assert len(warnings) == 2  # the ACS warning and the IOMMU one
    assert warnings[1].startswith(
        "tensor parallel 2 on GPUs 0,1: the kernel command line turns the IOMMU on "
        "(intel_iommu=on) without pass-through"
    )
    assert "iommu=pt" in warnings[1]
    # ... pass-through does not.
    facts = _bundle(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt\n")
    assert facts["fabric"]["iommu"]["mode"] == "passthrough"
    assert len(fab.fabric_warnings(facts, [0, 1], 2)) == 1


def test_lspci_vvv_counts_nvidia_gpus_by_name():
    # The bundle's listing: bridges and GPUs by name (no -n ids).
    assert rd.parse_lspci_n((BUNDLE / "lspci-vvv.txt").read_text()) == [
        "0000:ad:00.0",
        "0000:ae:00.0",
    ]
    # The verbatim AMD bridge blocks (systeminformation#819): bridges only, no GPU.
    assert rd.parse_lspci_n((PUBLIC / "lspci-vvv-amd-gpp-acs-redirect.txt").read_text()) == []
    # `lspci -nnk` head lines from club-3090#688 read by their ids, details skipped.
    nnk = (
        "01:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090] "
        "[10de:2204] (rev a1)\n"
        "\tSubsystem: Gigabyte Technology Co., Ltd Device [1458:4043]\n"
        "\tKernel driver in use: nvidia\n"
        "01:00.1 Audio device [0403]: NVIDIA Corporation GA102 High Definition Audio "
        "Controller [10de:1aef] (rev a1)\n"
    )
    assert rd.parse_lspci_n(nnk) == ["0000:01:00.0"]


def test_acs_srcvalid_only_warns_where_redirect_bits_alone_did_not(tmp_path):
    """NVIDIA/nccl#606: only SrcValid+ on the AMD switch ports, NCCL hung between two GPUs."""
    flags = fab.parse_acsctl_lines((PUBLIC / "acsctl-grep-nccl606.txt").read_text())
    assert flags[0] == {**OFF, "SrcValid": True}
    # The sysfs reader's form of the same bits (0x0001) on a bridge between the GPUs.
    _bundle(tmp_path)
    (tmp_path / "lspci-vvv.txt").unlink()
    (tmp_path / "lspci-n.txt").write_text(
        "0000:ad:00.0 0302: 10de:2321 (rev a1)\n0000:ae:00.0 0302: 10de:2321 (rev a1)\n"
    )
    (tmp_path / "sysfs-pci-acs.txt").write_text(
        "0000:a9:03.0 acsctl=0x0001\n0000:a9:04.0 acsctl=0x0000\n"
    )
    (tmp_path / "sysfs-pci-paths.txt").write_text(
        "0000:ad:00.0 /sys/devices/pci0000:a8/0000:a8:01.0/0000:a9:03.0/0000:ad:00.0\n"
        "0000:ae:00.0 /sys/devices/pci0000:a8/0000:a8:01.0/0000:a9:04.0/0000:ae:00.0\n"
    )
    facts = collect_from_fixture(str(tmp_path))
    warnings = fab.fabric_warnings(facts, [0, 1], 2)
    assert [w for w in warnings if "ACS is enabled" in w] == [
        w for w in warnings if "0000:a9:03.0 (SrcValid+) above the GPUs" in w
    ]
    assert len([w for w in warnings if "ACS is enabled" in w]) == 1
    assert not [w for w in warnings if "ACS redirect is on" in w]


def test_kernel_log_xids_and_banners():
    # journalctl -k lines (open-gpu-kernel-modules#1150): Xid 45 is a clean-up, no warning.
    log = rd.parse_kernel_log((PUBLIC / "kernel-log-xid45-ogkm1150.txt").read_text())
    assert log["banner"] is None
    assert [x["xid"] for x in log["xids"]] == [45] * 7
    assert log["xids"][0] == {
        "bus_id": "0000:dc:00.0",
        "xid": 45,
        "text": "pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        "time": None,
    }
    assert rd.xid_problems(log["xids"]) == []
    # NVIDIA/NVSentinel#155: the fallen-off message without an Xid, and an Xid 79 line.
    log = rd.parse_kernel_log((PUBLIC / "dmesg-fallen-off-nvsentinel155.txt").read_text())
    assert "Open Kernel Module for x86_64  570.158.01" in log["banner"]
    assert [(x["bus_id"], x["xid"], x["time"]) for x in log["xids"]] == [
        ("0000:b3:00.0", 79, 1843.308145),
        ("0000:44:00.0", 79, None),
    ]
    fix = "reset the GPU (`nvidia-smi -r -i <index>`) or reboot before serving on it"
    assert rd.xid_problems(log["xids"]) == [
        f"GPU 0000:44:00.0: the kernel log has Xid 79 (GPU has fallen off the bus): {fix}",
        f"GPU 0000:b3:00.0: the kernel log has Xid 79 (GPU has fallen off the bus): {fix}",
    ]


def test_text_q_in_a_capture_is_no_longer_an_error(tmp_path):
    """The real 2x H200 capture with its -q -x and --query-gpu taken away: -q text alone."""
    for item in P2P.iterdir():
        if item.name not in ("nvidia-smi-q.xml", "nvidia-smi-query-gpu.csv", "SOURCE.md"):
            shutil.copy(item, tmp_path / item.name)
    bundle = collect_from_fixture(str(tmp_path))
    full = collect_from_fixture(str(P2P))
    assert bundle["gpu_count"] == full["gpu_count"] == 2
    for key in ("driver_version", "cuda_version", "kernel_module", "topology"):
        assert bundle[key] == full[key], key
    for text_gpu, full_gpu in zip(bundle["gpus"], full["gpus"], strict=True):
        for key in ("index", "name", "uuid", "memory_total_bytes", "minor_number"):
            assert text_gpu[key] == full_gpu[key], key
        # Not in -q; NVIDIA's table for the name gives what the real CSV says (issue 46
        # case 6: a bundle without it matched no sm profile).
        assert text_gpu["compute_capability"] == full_gpu["compute_capability"] == "9.0"
    # The same text in the -q -x file reads too (a bundle named after its command).
    shutil.copy(P2P / "nvidia-smi-q.txt", tmp_path / "nvidia-smi-q.xml")
    assert collect_from_fixture(str(tmp_path))["gpu_count"] == 2


def test_a_cut_paste_of_nvidia_smi_q_is_a_problem_not_a_smaller_host(tmp_path):
    """microsoft/WSL#7852: `nvidia-smi -q` of 4 GPUs, as far as the thread's excerpt goes."""
    shutil.copy(PUBLIC / "nvidia-smi-q-4gpu-first-block-wsl7852.txt", tmp_path / "nvidia-smi-q.txt")
    facts = collect_from_fixture(str(tmp_path))
    assert facts["gpu_count"] == 1
    assert facts["driver_version"] == "510.06"
    assert facts["gpus"][0]["name"] == "NVIDIA TITAN RTX"
    assert facts["gpus"][0]["minor_number"] is None  # N/A under WDDM
    cut = (
        "nvidia-smi-q.txt says 4 attached GPUs but holds the blocks of 1: the capture is cut "
        "(paste all of `nvidia-smi -q`); the GPU count read from it is short"
    )
    assert facts["problems"] == [cut]
    # The whole capture has no such problem.
    assert "attached GPUs" not in " ".join(collect_from_fixture(str(P2P))["problems"])


def test_module_returns_the_bundle_facts():
    result = run_module(gpu_facts.main, {"fixture_dir": str(BUNDLE), "fail_on_problems": False})
    assert result["failed"] is False
    facts = result["gpu_facts"]
    assert facts["gpu_count"] == 2
    assert facts["kernel_module"]["source"] == "kernel_log"
    assert facts["kernel_log"]["warnings"] == []
    assert facts["fabric"]["iommu"]["cmdline_mode"] == "off"
    # With problems (the hosts' versions differ) the module fails by default, naming them.
    failed = run_module(gpu_facts.main, {"fixture_dir": str(BUNDLE)})
    assert failed["failed"] is True
    assert "550.54.14" in failed["msg"]
    assert "525.60.11" in failed["msg"]


@pytest.mark.parametrize(("name", "capability"), [
    # The names nvidia-smi prints (captures in tests/fixtures/gpu and shared/fixtures/gpu,
    # vllm-project/recipes' hardware names), NVIDIA's table for each.
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"),
    ("NVIDIA GeForce RTX 5090", "12.0"),
    ("NVIDIA B200", "10.0"), ("NVIDIA GB200", "10.0"), ("NVIDIA B300 SXM6 AC", "10.3"),
    ("NVIDIA H100 NVL", "9.0"), ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H200", "9.0"),
    ("NVIDIA GH200 480GB", "9.0"), ("NVIDIA L40S", "8.9"), ("NVIDIA L4", "8.9"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA A10G", "8.6"),
    ("NVIDIA TITAN RTX", None), ("Tesla V100-SXM2-16GB", None), ("", None), (None, None),
])
def test_the_compute_capability_of_a_gpus_name(name, capability):
    assert smi.compute_capability_from_name(name) == capability
