# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""gpu_memory: memory in use that no visible process explains (the LXC case), read afresh."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_facts as gf
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_memory as mem
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES

GPU = FIXTURES / "gpu"
SYNTH = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"
MIB = 1024 * 1024
PUBLIC = GPU / "public"
GIB = 1024**3


def _read(path):
    return path.read_text()


# --- case 3: memory in use that no visible process explains (the LXC case) ---


def _lxc_facts(used_mib_gpu3):
    # Synthetic 8x facts as an LXC container sees them: no process listed at all.
    text = _read(SYNTH / "nvidia-smi-query-gpu.csv").replace(
        "5d:00.0, 97887, 1024, 96268", f"5d:00.0, 97887, {used_mib_gpu3}, {97887 - used_mib_gpu3}"
    )

    def run(argv):
        if argv[1].startswith("--query-gpu="):
            return 0, text, ""
        if argv[1].startswith("--query-compute-apps="):
            return 0, "", ""
        return 1, "", ""

    return gf.collect(run, nvidia_smi="nvidia-smi")


def test_forty_gib_held_on_gpu3_by_nobody_visible_is_found():
    facts = _lxc_facts(40960)
    assert facts["processes"] == []
    (finding,) = mem.unexplained_memory(facts, list(range(8)), GIB)
    assert finding["gpu_index"] == 3
    assert finding["unexplained_bytes"] == 40 * GIB
    assert finding["msg"].startswith(
        "GPU 3 (00000000:5d:00.0) has 42949672960 bytes (40.0 GiB) in use that no visible process "
        "holds"
    )
    assert mem.unexplained_memory(facts, [4, 5, 6, 7], GIB) == []  # not green's GPUs
    assert mem.unexplained_memory(facts, [3], 41 * GIB) == []  # under the threshold


def test_memory_held_by_a_listed_process_is_explained():
    # The real synthetic fixture: pid 4242 holds all 1024 MiB used on GPU 3.
    facts = collect_from_fixture(str(SYNTH))
    assert mem.unexplained_memory(facts, list(range(8)), 0) == []
    # The real device capture: 1551 MiB used, pid 425 holds 1542 MiB -> 9 MiB of context.
    device = collect_from_fixture(str(GPU / "h200-device-2026-11-29"))
    assert mem.unexplained_memory(device, [0], 64 * MIB) == []
    (finding,) = mem.unexplained_memory(device, [0], 0)
    assert finding["unexplained_bytes"] == 9 * MIB


def test_unknown_gpu_index_is_a_finding():
    (finding,) = mem.unexplained_memory(_lxc_facts(0), [9], GIB)
    assert finding["msg"] == "GPU 9 is not listed by nvidia-smi: its memory cannot be checked"


def test_memory_snapshot_reads_fresh_figures():
    calls = []
    csv = _read(SYNTH / "nvidia-smi-query-gpu.csv")
    apps = _read(SYNTH / "nvidia-smi-query-compute-apps.csv")

    def run(argv):
        calls.append(argv[1].split("=")[0])
        return 0, (csv if argv[1].startswith("--query-gpu=") else apps), ""

    snap = mem.memory_snapshot(run, "/usr/bin/nvidia-smi")
    assert calls == ["--query-gpu", "--query-compute-apps"]
    assert [g["memory_used_bytes"] for g in snap["gpus"]][3] == 1024 * MIB
    assert snap["processes"] == [
        {
            "pid": 4242,
            "used_memory_bytes": 1024 * MIB,
            "gpu_uuid": "GPU-5e7a0e00-0000-4000-8000-000000000003",
            "gpu_index": 3,
        }
    ]

    def failing(argv):
        return 18, _read(PUBLIC / "nvidia-smi-mismatch-tinygrad47.txt"), ""

    with pytest.raises(smi.GpuFactsError, match=r"rc=18.*version mismatch"):
        mem.memory_snapshot(failing)
