# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The gpu_facts module end to end: real AnsibleModule, fed through its fixture_dir seam."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.modules import gpu_facts
from repo_paths import FIXTURES

from unit.module_harness import run_module

H200 = FIXTURES / "gpu" / "h200x2-nvlink"
P2P = FIXTURES / "gpu" / "h200x2-nvlink-p2p"
SYNTH = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_reads_real_h200_capture(check_mode):
    result = run_module(gpu_facts.main, {"fixture_dir": str(H200)}, check_mode=check_mode)
    assert result["failed"] is False
    assert result["changed"] is False
    facts = result["gpu_facts"]
    assert result["ansible_facts"]["gpu_facts"] == facts
    assert facts["gpu_count"] == 2
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200"] * 2
    assert [g["compute_capability"] for g in facts["gpus"]] == ["9.0"] * 2
    assert [g["memory_total_bytes"] for g in facts["gpus"]] == [143771 * 1024 * 1024] * 2
    assert [g["persistence_mode"] for g in facts["gpus"]] == [True, True]
    assert facts["topology"]["gpu_pairs"] == {"GPU0-GPU1": "NV18"}
    assert facts["topology"]["interconnect"] == "nvlink"
    assert facts["kernel_module"] == {"flavour": "open", "version": "580.159.04", "source": "proc"}


def test_module_reads_synthetic_pcie_fixture():
    facts = run_module(gpu_facts.main, {"fixture_dir": str(SYNTH)})["gpu_facts"]
    assert facts["gpu_count"] == 8
    assert facts["pci_gpu_count"] == 8
    assert facts["topology"]["interconnect"] == "pcie"
    assert facts["topology"]["worst_link"] == "SYS"


def test_module_without_nvidia_smi_reports_zero_gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_module(
        gpu_facts.main,
        {
            "nvidia_smi_path": str(tmp_path / "nvidia-smi"),
            "proc_version_path": str(tmp_path / "version"),
            "sysfs_pci_path": str(tmp_path / "pci"),
        },
    )
    assert result["failed"] is False
    assert result["changed"] is False
    facts = result["gpu_facts"]
    assert facts["gpu_count"] == 0
    assert facts["present"] is False
    assert facts["msg"] == "nvidia-smi not found: no NVIDIA driver userspace installed"
    assert facts["pci_gpu_count"] is None


def test_module_fixture_dir_missing_fails_naming_it(tmp_path):
    result = run_module(gpu_facts.main, {"fixture_dir": str(tmp_path / "nope")})
    assert result["failed"] is True
    assert result["msg"] == (
        f"fixture_dir: wanted a directory of captures, found none at {tmp_path / 'nope'}"
    )


def test_module_empty_fixture_dir_means_nvidia_smi_absent(tmp_path):
    facts = run_module(gpu_facts.main, {"fixture_dir": str(tmp_path)})["gpu_facts"]
    assert facts["gpu_count"] == 0
    assert facts["present"] is False


def test_module_reads_the_fabric_of_the_real_capture():
    facts = run_module(gpu_facts.main, {"fixture_dir": str(P2P)})["gpu_facts"]
    assert facts["problems"] == []
    assert [g["pcie"]["status"] for g in facts["fabric"]["gpus"]] == ["ok", "ok"]
    assert facts["fabric"]["p2p_read"]["not_ok"] == []
    assert facts["device_nodes"]["/dev/nvidia-uvm"] == "238:0"
    assert [g["minor_number"] for g in facts["gpus"]] == [0, 1]


def _lost_gpu_dir(tmp_path):
    for item in SYNTH.iterdir():
        (tmp_path / item.name).write_text(item.read_text())
    rows = [
        ln
        for ln in (SYNTH / "nvidia-smi-query-gpu.csv").read_text().splitlines()
        if "5d:00.0" not in ln
    ]
    rows.append("Unable to determine the device handle for GPU 0000:5D:00.0: Unknown Error")
    (tmp_path / "nvidia-smi-query-gpu.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_fails_naming_a_lost_gpu(tmp_path, check_mode):
    result = run_module(
        gpu_facts.main, {"fixture_dir": str(_lost_gpu_dir(tmp_path))}, check_mode=check_mode
    )
    assert result["failed"] is True
    assert result["msg"].startswith(
        "GPU problems: nvidia-smi lists 7 GPU(s) but 8 NVIDIA GPU(s) are on the PCI bus and in "
        "the driver; it cannot open 0000:5d:00.0 (Unknown Error)"
    )
    assert result["gpu_facts"]["gpu_count"] == 7


def test_module_reports_problems_when_asked_not_to_fail(tmp_path):
    result = run_module(
        gpu_facts.main, {"fixture_dir": str(_lost_gpu_dir(tmp_path)), "fail_on_problems": False}
    )
    assert result["failed"] is False
    assert result["changed"] is False
    assert result["gpu_facts"]["lost_gpus"] == [
        {"bus_id": "0000:5d:00.0", "error": "Unknown Error"}
    ]


def test_module_fails_on_text_it_cannot_read(tmp_path):
    (tmp_path / "proc-driver-nvidia-version.txt").write_text("nvidia: module loaded\n")
    result = run_module(gpu_facts.main, {"fixture_dir": str(tmp_path)})
    assert result["failed"] is True
    assert result["msg"].startswith(
        "Could not read GPU facts: the NVIDIA kernel module version text is in an unrecognised "
        "format"
    )


def test_module_live_reads_the_proc_file_without_nvidia_smi(monkeypatch, tmp_path):
    # Issue 10, case 1, live path: no nvidia-smi, the host's proc file present.
    monkeypatch.setenv("PATH", str(tmp_path))
    version = tmp_path / "version"
    version.write_text(
        (FIXTURES / "gpu" / "h200-device-2026-11-29" / "proc-driver-nvidia-version.txt").read_text()
    )
    result = run_module(
        gpu_facts.main,
        {
            "nvidia_smi_path": str(tmp_path / "nvidia-smi"),
            "proc_version_path": str(version),
            "sysfs_pci_path": str(tmp_path / "pci"),
            "device_nodes": False,
        },
    )
    assert result["failed"] is False
    assert result["gpu_facts"]["kernel_module"] == {
        "flavour": "open",
        "version": "580.159.04",
        "source": "proc",
    }
    assert result["gpu_facts"]["driver_loaded"] is True
