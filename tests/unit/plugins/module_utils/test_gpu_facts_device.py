# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The real run on the lent H200 device (2026-11-29): what Ansible printed there
equals what the parsers make here of the raw outputs captured in the same run."""

import json

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_readers as rd
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES

DEV = FIXTURES / "gpu" / "h200-device-2026-11-29"
MIB = 1024 * 1024
UUID = "GPU-2cd8f179-6cc0-2723-126d-7380f2824cd5"


def _device_facts():
    result = json.loads((DEV / "ansible-gpu_facts.json").read_text())
    assert result["changed"] is False
    assert result["ansible_facts"]["gpu_facts"] == result["gpu_facts"]
    return result["gpu_facts"]


def test_device_run_values():
    facts = _device_facts()
    assert facts["present"] is True
    assert facts["gpu_count"] == 1
    assert facts["pci_gpu_count"] == 1
    assert facts["pci_gpu_slots"] == ["0000:00:06.0"]
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_version"] == "13.0"
    assert facts["kernel_module"] == {"flavour": "open", "version": "580.159.04", "source": "proc"}
    assert facts["nvidia_smi"] == "/usr/local/nvidia/bin/nvidia-smi"
    (gpu,) = facts["gpus"]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["uuid"] == UUID
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["compute_capability"] == "9.0"
    assert gpu["persistence_mode"] is True
    assert gpu["memory_total_bytes"] == 143771 * MIB
    assert gpu["memory_used_bytes"] == 1551 * MIB
    assert gpu["memory_free_bytes"] == 141606 * MIB
    assert facts["processes"] == [
        {"pid": 425, "used_memory_bytes": 1542 * MIB, "gpu_uuid": UUID, "gpu_index": 0}
    ]
    assert facts["topology"]["interconnect"] == "none"
    assert facts["topology"]["cpu_affinity"] == {"GPU0": "0-15"}
    assert facts["topology"]["numa_affinity"] == {"GPU0": "0"}


def test_parsers_here_reproduce_the_device_result():
    here = collect_from_fixture(str(DEV))
    there = _device_facts()
    for key in ("gpu_count", "driver_version", "cuda_version", "kernel_module", "topology"):
        assert here[key] == there[key], key
    # The device run predates minor_number (read from the XML since): the rest is equal.
    assert [g.pop("minor_number") for g in here["gpus"]] == [0]
    assert here["gpus"] == there["gpus"]
    assert here["processes"] == there["processes"]


def test_device_sysfs_capture_counts_one_nvidia_gpu(tmp_path):
    # Rebuild the captured /sys/bus/pci/devices listing and read it the way the module does.
    for line in (DEV / "sysfs-pci.txt").read_text().splitlines():
        slot, klass, ids = line.split()
        vendor, device = ids.split(":")
        d = tmp_path / slot
        d.mkdir()
        (d / "class").write_text(klass + "\n")
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
    assert len(list(tmp_path.iterdir())) == 7
    assert rd.parse_lspci_n(rd.read_sysfs_pci(str(tmp_path))) == ["0000:00:06.0"]


def test_device_sysfs_capture_is_a_pci_listing_the_parser_reads():
    # The capture's own layout (issue 10, case 5: it used to count as 0 GPUs silently).
    assert rd.parse_lspci_n((DEV / "sysfs-pci.txt").read_text()) == ["0000:00:06.0"]


def test_proc_file_alone_names_the_loaded_module(tmp_path):
    # Issue 10, case 1: a container before its userspace is installed has only the
    # host's /proc/driver/nvidia/version (this one is the device's, real).
    (tmp_path / "proc-driver-nvidia-version.txt").write_text(
        (DEV / "proc-driver-nvidia-version.txt").read_text()
    )
    facts = collect_from_fixture(str(tmp_path))
    assert facts["present"] is False
    assert facts["driver_loaded"] is True
    assert facts["kernel_module"] == {"flavour": "open", "version": "580.159.04", "source": "proc"}
    assert facts["problems"] == []
    assert facts["msg"] == (
        "nvidia-smi not found: no NVIDIA driver userspace installed (the kernel module open "
        "580.159.04 is loaded: install the userspace of exactly that version)"
    )


def test_compute_apps_after_the_holder_exited_is_empty():
    assert (
        smi.parse_compute_apps((DEV / "nvidia-smi-query-compute-apps-after.csv").read_text()) == []
    )


def test_verify_mode_run_on_the_device():
    log = (DEV / "device-run2-verify.log").read_text()
    assert (
        "Verified: 1 GPU(s) NVIDIA H200, driver 580.159.04 (open), CUDA 13.0, interconnect none."
        in log
    )
    assert "rc verify-pass 0" in log
    assert "Wanted 8 GPU(s) (nvidia_driver_expected_gpu_count), found 1." in log
    assert "rc verify-mismatch 2" in log
    assert "found [{'index': 0, 'compute_capability': '9.0'}]" in log
    assert "rc verify-cc 2" in log
