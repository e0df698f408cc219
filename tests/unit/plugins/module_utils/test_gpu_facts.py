# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""gpu_facts parsers on the real 2x H200 capture and on hand-made edge cases."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils import gpu_facts as gf
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES

H200 = FIXTURES / "gpu" / "h200x2-nvlink"
SYNTH = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"
MIB = 1024 * 1024


def _read(path):
    return path.read_text()


# --- the real capture: values from tests/fixtures/gpu/h200x2-nvlink/SOURCE.md ---


def test_h200_query_gpu_real_capture_with_header_and_units():
    gpus = gf.parse_query_gpu(_read(H200 / "nvidia-smi-query-gpu.csv"))
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
    info = gf.parse_smi_xml(_read(H200 / "nvidia-smi-q.xml"))
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
    topo = gf.parse_topology(raw)
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


def test_h200_open_flavour_real_capture():
    flavour, version, source = gf.kernel_module_flavour(
        _read(H200 / "proc-driver-nvidia-version.txt")
    )
    assert (flavour, version, source) == ("open", "580.159.04", "proc")


def test_h200_collect_from_real_capture():
    facts = collect_from_fixture(str(H200))
    assert facts["present"] is True
    assert facts["gpu_count"] == 2
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_version"] == "13.0"
    assert facts["kernel_module"]["flavour"] == "open"
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert [g["compute_capability"] for g in facts["gpus"]] == ["9.0", "9.0"]
    assert [g["memory_total_bytes"] for g in facts["gpus"]] == [143771 * MIB] * 2
    assert all(g["persistence_mode"] is True for g in facts["gpus"])
    assert "driver_version" not in facts["gpus"][0]
    assert facts["topology"]["gpu_pairs"]["GPU0-GPU1"] == "NV18"
    assert facts["processes"] == []  # no compute-apps capture: falls back to the XML, empty
    assert facts["pci_gpu_count"] is None  # no lspci capture
    assert facts["problems"] == []


# --- the synthetic 8x PCIe fixture (hand-written, labelled as such) ---


def test_synthetic_pcie_topology_is_pcie_and_worst_is_sys():
    topo = gf.parse_topology(_read(SYNTH / "nvidia-smi-topo-m.txt"))
    assert len(topo["devices"]) == 8
    assert len(topo["gpu_pairs"]) == 28
    assert topo["interconnect"] == "pcie"
    assert topo["worst_link"] == "SYS"
    assert topo["gpu_pairs"]["GPU0-GPU3"] == "NODE"
    assert topo["cpu_affinity"]["GPU5"] == "32-63,96-127"
    assert topo["numa_affinity"]["GPU5"] == "1"


def test_synthetic_collect_processes_and_pci_count():
    facts = collect_from_fixture(str(SYNTH))
    assert facts["gpu_count"] == 8
    assert facts["pci_gpu_count"] == 8  # the 0403 audio function is not counted
    assert {g["compute_capability"] for g in facts["gpus"]} == {"12.0"}
    assert facts["cuda_version"] is None  # no XML in this fixture
    assert facts["driver_version"] == "580.95.05"  # from the query CSV
    assert facts["processes"] == [
        {
            "pid": 4242,
            "used_memory_bytes": 1024 * MIB,
            "gpu_uuid": "GPU-5e7a0e00-0000-4000-8000-000000000003",
            "gpu_index": 3,
        }
    ]


# --- edge cases ---


def test_topology_ranks_links():
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tPIX\t0-7\t0\n"
        "GPU1\tNV4\t X \tNV12\t0-7\t0\n"
        "GPU2\tPIX\tNV12\t X \t0-7\t0\n"
    )
    topo = gf.parse_topology(text)
    assert topo["interconnect"] == "pcie"
    assert topo["worst_link"] == "PIX"
    nv_only = gf.parse_topology(text.replace("PIX", "NV2"))
    assert nv_only["interconnect"] == "nvlink"
    assert nv_only["worst_link"] == "NV2"


def test_topology_single_gpu_has_no_interconnect():
    topo = gf.parse_topology(
        "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \t0-15\t0\t\tN/A\n"
    )
    assert topo["interconnect"] == "none"
    assert topo["worst_link"] is None
    assert topo["cpu_affinity"] == {"GPU0": "0-15"}


def test_topology_without_header_raises():
    with pytest.raises(gf.GpuFactsError, match="no header"):
        gf.parse_topology("garbage\n")


def test_proprietary_flavour_from_proc_and_modinfo():
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    )
    assert gf.kernel_module_flavour(text) == ("proprietary", "550.54.14", "proc")
    assert gf.kernel_module_flavour(None, "Dual MIT/GPL\n") == ("open", None, "modinfo")
    assert gf.kernel_module_flavour(None, "NVIDIA\n") == ("proprietary", None, "modinfo")
    assert gf.kernel_module_flavour(None, None) == ("unknown", None, None)


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
    assert gf.default_flavour(cc) == default
    assert gf.allowed_flavours(cc) == allowed


def test_mib_parsing_rejects_other_units():
    assert gf.mib_to_bytes("[N/A]") is None
    assert gf.mib_to_bytes("2 MiB") == 2 * MIB
    with pytest.raises(gf.GpuFactsError, match="MiB"):
        gf.mib_to_bytes("2 GiB")


def test_query_gpu_wrong_field_count_raises():
    with pytest.raises(gf.GpuFactsError, match=r"unrecognised line .* expected 10"):
        gf.parse_query_gpu("0, NVIDIA H200\n")


def test_collect_without_nvidia_smi_returns_zero_gpus():
    def must_not_run(argv):
        raise AssertionError(argv)

    facts = gf.collect(must_not_run, nvidia_smi=None, lspci_text="01:00.0 0302: 10de:2bb5\n")
    assert facts["present"] is False
    assert facts["gpu_count"] == 0
    assert "nvidia-smi not found" in facts["msg"]
    assert facts["pci_gpu_count"] == 1


def test_collect_when_nvidia_smi_finds_no_devices():
    calls = []

    def run(argv):
        calls.append(argv)
        return 6, "No devices were found\n", ""

    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n"
    facts = gf.collect(run, nvidia_smi="/usr/bin/nvidia-smi", proc_version_text=proc)
    assert len(calls) == 1
    assert facts["gpu_count"] == 0
    assert facts["nvidia_smi_rc"] == 6
    assert facts["msg"] == "nvidia-smi failed (rc=6): No devices were found"
    assert facts["kernel_module"]["flavour"] == "proprietary"


def test_collect_calls_documented_commands():
    calls = []

    def run(argv):
        calls.append(argv)
        return 1, "", "unsupported"

    # query-gpu answers, everything else fails: facts still come back.
    def run_first_ok(argv):
        if argv[1].startswith("--query-gpu="):
            calls.append(argv)
            return (
                0,
                "0, NVIDIA H200, GPU-a, 00000000:00:06.0, 10, 1, 9, 9.0, Disabled, 580.1\n",
                "",
            )
        return run(argv)

    facts = gf.collect(run_first_ok, nvidia_smi="nvidia-smi")
    assert calls[0] == [
        "nvidia-smi",
        (
            "--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,"
            "compute_cap,persistence_mode,driver_version"
        ),
        "--format=csv,noheader,nounits",
    ]
    assert ["nvidia-smi", "-q", "-x"] in calls
    assert ["nvidia-smi", "topo", "-m"] in calls
    assert facts["gpus"][0]["persistence_mode"] is False
    assert facts["gpus"][0]["memory_total_bytes"] == 10 * MIB
    assert facts["topology"] is None
    assert facts["driver_version"] == "580.1"


def test_sysfs_pci_rendering(tmp_path):
    for slot, vendor, klass, device in [
        ("0000:00:06.0", "0x10de", "0x030200", "0x2335"),
        ("0000:00:01.0", "0x8086", "0x030000", "0x1234"),
        ("0000:00:07.0", "0x10de", "0x040300", "0x22e8"),
    ]:
        d = tmp_path / slot
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "device").write_text(device + "\n")
    text = gf.read_sysfs_pci(str(tmp_path))
    assert text.splitlines()[1] == "0000:00:06.0 0x030200 0x10de:0x2335"
    assert gf.parse_lspci_n(text) == ["0000:00:06.0"]
    assert gf.read_sysfs_pci(str(tmp_path / "missing")) is None
