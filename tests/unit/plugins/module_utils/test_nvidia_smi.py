# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""nvidia_smi parsers on the real 2x H200 capture and on hand-made edge cases."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from repo_paths import FIXTURES

GPU = FIXTURES / "gpu"
H200 = FIXTURES / "gpu" / "h200x2-nvlink"
SYNTH = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"
MIB = 1024 * 1024


def _read(path):
    return path.read_text()


# --- the real capture: values from tests/fixtures/gpu/h200x2-nvlink/SOURCE.md ---


def test_h200_query_gpu_real_capture_with_header_and_units():
    gpus = smi.parse_query_gpu(_read(H200 / "nvidia-smi-query-gpu.csv"))
    assert [g["index"] for g in gpus] == [0, 1]
    assert {g["name"] for g in gpus} == {"NVIDIA H200"}
    assert [g["compute_capability"] for g in gpus] == ["9.0", "9.0"]
    assert [g["memory_total_bytes"] for g in gpus] == [143771 * MIB] * 2
    assert gpus[0]["memory_total_bytes"] == 150_754_820_096
    assert [g["memory_used_bytes"] for g in gpus] == [0, 0]
    assert [g["memory_free_bytes"] for g in gpus] == [143156 * MIB] * 2
    assert [g["persistence_mode"] for g in gpus] == [True, True]
    assert gpus[0]["uuid"] == "GPU-17961e65-03af-3399-b5c7-6cc8d4f5b686"
    assert gpus[1]["pci_bus_id"] == "00000000:00:07.0"
    assert gpus[0]["driver_version"] == "580.159.04"


def test_h200_xml_real_capture():
    info = smi.parse_smi_xml(_read(H200 / "nvidia-smi-q.xml"))
    assert info["driver_version"] == "580.159.04"
    assert info["cuda_version"] == "13.0"
    assert info["attached_gpus"] == 2
    assert [g["uuid"] for g in info["gpus"]] == [
        "GPU-17961e65-03af-3399-b5c7-6cc8d4f5b686",
        "GPU-ca50324a-5ca6-2bb6-d7c0-c07ed1317bd0",
    ]
    assert [g["architecture"] for g in info["gpus"]] == ["Hopper", "Hopper"]
    assert [g["memory_total_bytes"] for g in info["gpus"]] == [143771 * MIB] * 2
    assert [g["processes"] for g in info["gpus"]] == [[], []]


def test_h200_topology_real_capture_with_ansi_escapes():
    raw = _read(H200 / "nvidia-smi-topo-m.txt")
    assert "\x1b[" in raw  # the capture really carries escapes
    topo = smi.parse_topology(raw)
    assert topo["devices"] == ["GPU0", "GPU1"]
    assert topo["matrix"]["GPU0"] == {"GPU0": "X", "GPU1": "NV18"}
    assert topo["matrix"]["GPU1"]["GPU0"] == "NV18"
    assert topo["gpu_pairs"] == {"GPU0-GPU1": "NV18"}
    assert topo["cpu_affinity"] == {"GPU0": "0-31", "GPU1": "0-31"}
    assert topo["numa_affinity"] == {"GPU0": "0", "GPU1": "0"}
    assert topo["gpu_numa_id"] == {"GPU0": "N/A", "GPU1": "N/A"}
    assert topo["interconnect"] == "nvlink"
    assert topo["worst_link"] == "NV18"
    assert topo["worst_link_class"] == "nvlink"


# --- the synthetic 8x PCIe fixture (hand-written, labelled as such) ---


def test_synthetic_pcie_topology_is_pcie_and_worst_is_sys():
    topo = smi.parse_topology(_read(SYNTH / "nvidia-smi-topo-m.txt"))
    assert len(topo["devices"]) == 8
    assert len(topo["gpu_pairs"]) == 28
    assert topo["interconnect"] == "pcie"
    assert topo["worst_link"] == "SYS"
    assert topo["gpu_pairs"]["GPU0-GPU3"] == "NODE"
    assert topo["cpu_affinity"]["GPU5"] == "32-63,96-127"
    assert topo["numa_affinity"]["GPU5"] == "1"


# --- edge cases ---


def test_topology_ranks_links():
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tPIX\t0-7\t0\n"
        "GPU1\tNV4\t X \tNV12\t0-7\t0\n"
        "GPU2\tPIX\tNV12\t X \t0-7\t0\n"
    )
    topo = smi.parse_topology(text)
    assert topo["interconnect"] == "pcie"
    assert topo["worst_link"] == "PIX"
    nv_only = smi.parse_topology(text.replace("PIX", "NV2"))
    assert nv_only["interconnect"] == "nvlink"
    assert nv_only["worst_link"] == "NV2"


def test_topology_single_gpu_has_no_interconnect():
    topo = smi.parse_topology(
        "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \t0-15\t0\t\tN/A\n"
    )
    assert topo["interconnect"] == "none"
    assert topo["worst_link"] is None
    assert topo["cpu_affinity"] == {"GPU0": "0-15"}


def test_topology_without_header_raises():
    with pytest.raises(smi.GpuFactsError, match="no header"):
        smi.parse_topology("garbage\n")


def test_mib_parsing_rejects_other_units():
    assert smi.mib_to_bytes("[N/A]") is None
    assert smi.mib_to_bytes("2 MiB") == 2 * MIB
    with pytest.raises(smi.GpuFactsError, match="MiB"):
        smi.mib_to_bytes("2 GiB")


def test_query_gpu_wrong_field_count_raises():
    with pytest.raises(smi.GpuFactsError, match=r"unrecognised line .* expected 10"):
        smi.parse_query_gpu("0, NVIDIA H200\n")
