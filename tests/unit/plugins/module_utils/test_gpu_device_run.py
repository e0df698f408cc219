# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The device run on the lent 2x H200 (2026-11-30, h200x2-device-2026-11-30/SOURCE.md):
what the module printed there is what the parsers make here of the captures of the
same run; the role's verify mode and the fabric smoke test said what they should."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_fabric as fab
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_smoke as sm
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES

RUN = FIXTURES / "gpu" / "h200x2-device-2026-11-30"


def _live():
    result = json.loads((RUN / "ansible-gpu_facts.json").read_text())
    assert result["changed"] is False
    assert result["ansible_facts"]["gpu_facts"] == result["gpu_facts"]
    return result["gpu_facts"]


def test_live_facts_with_the_fabric():
    facts = _live()
    assert facts["problems"] == []
    assert facts["gpu_count"] == 2
    assert facts["driver_loaded"] is True
    assert facts["kernel_module"] == {"flavour": "open", "version": "580.159.04", "source": "proc"}
    assert facts["expected_gpu_slots"] == ["0000:00:06.0", "0000:00:07.0"]
    assert facts["cuda"] == {
        "checked": True,
        "library_loaded": True,
        "initialised": True,
        "device_count": 2,
        "driver_cuda_version": "13.0",
        "error": None,
    }
    assert facts["device_nodes"]["/dev/nvidia-uvm"] == "238:0"
    fabric = facts["fabric"]
    assert [g["pcie"]["status"] for g in fabric["gpus"]] == ["ok", "ok"]
    assert fabric["gpus"][1]["pcie"]["gen_current"] == 5
    assert fabric["gpus"][1]["pcie"]["width_max"] == 16
    assert [g["ecc_uncorrected_volatile"] for g in fabric["gpus"]] == [0, 0]
    assert [g["bridges"] for g in fabric["gpus"]] == [[], []]  # a VM: GPUs on the root bus
    assert fabric["iommu"]["mode"] == "off"
    assert fabric["p2p_read"]["not_ok"] == []
    assert fab.fabric_warnings(facts, [0, 1], 2) == []  # NVLink pair


def test_parsers_here_reproduce_the_live_result():
    here = collect_from_fixture(str(RUN))
    there = _live()
    for key in (
        "gpu_count",
        "gpus",
        "driver_version",
        "cuda_version",
        "kernel_module",
        "topology",
        "processes",
        "problems",
        "cuda",
        "device_nodes",
        "container",
        "expected_gpu_slots",
        "driver_gpu_slots",
        "pci_gpu_slots",
    ):
        assert here[key] == there[key], key
    # The live result predates iommu.cmdline_mode (issue 34): compared without it.
    assert here["fabric"]["iommu"].pop("cmdline_mode") == "unknown"  # pci=realloc=off only
    assert here["fabric"] == there["fabric"]


def test_check_mode_printed_the_same_facts():
    line = (RUN / "gpu_facts-check.txt").read_text()
    assert line.startswith("localhost | SUCCESS => ")
    checked = json.loads(line.split("=> ", 1)[1])
    assert checked["changed"] is False
    assert checked["gpu_facts"]["fabric"] == _live()["fabric"]


def test_role_verify_mode_on_the_device():
    log = (RUN / "device-run.log").read_text()
    assert (
        "Verified: 2 GPU(s) NVIDIA H200, driver 580.159.04 (open), CUDA 13.0, interconnect "
        "nvlink, CUDA initialised on 2 device(s)." in log
    )
    assert "rc verify-pass 0" in log
    assert "rc verify-given 0" in log
    given = log.split("== role verify with the caller's facts")[1].split("rc verify-given")[0]
    assert "Read GPU facts before any change] *******\nskipping" in given
    assert "Read GPU facts for verification] ********\nskipping" in given
    assert "Wanted 8 GPU(s) (nvidia_driver_expected_gpu_count), found 2." in log
    assert "rc verify-mismatch 2" in log


def test_smoke_test_on_the_device():
    result = json.loads((RUN / "smoke-module-result.json").read_text())
    assert result["changed"] is False
    assert result["size_bytes"] == 32 * 2**20
    assert result["can_access_peer"] == {"0->1": True, "1->0": True}
    assert result["nccl_version"] == "2.28.9"
    assert result["bus_bandwidth_bytes_per_s"] == pytest.approx(233.43e9, rel=1e-3)
    log = (RUN / "device-run.log").read_text()
    assert (
        '"msg": "NCCL all-reduce across GPUs 0,1: 128 MiB in 0.480 ms, bus bandwidth 279.4 GB/s, '
        'peer access on between all GPUs"' in log
    )
    assert "localhost | SKIPPED\nrc smoke1 0" in log


def test_the_scripts_own_output_reads_back():
    out = (RUN / "smoke-script-output.json").read_text()
    result = sm.interpret([0, 1], 32 * 2**20, 0, out, "", False, 120)
    assert result["time_per_all_reduce_s"] == pytest.approx(0.00014393455000032417)
    assert result["bus_bandwidth_bytes_per_s"] == pytest.approx(32 * 2**20 / 0.00014393455000032417)
    assert [d["bus_id"] for d in result["devices"]] == ["0000:00:06.0", "0000:00:07.0"]
