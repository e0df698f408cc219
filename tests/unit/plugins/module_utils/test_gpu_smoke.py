# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The GPU fabric smoke test's decisions and its reading of the all-reduce script's output.

The script itself runs for real in tests/integration/test_gpu_smoke_run.py (gloo on CPU
here; NCCL on the lent 2x H200, whose output is checked in test_gpu_device_run.py)."""

import json
import sys

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_smoke as sm

GIB = 1024**3


def _line(ranks, **extra):
    return (
        json.dumps(
            {
                "ok": True,
                "torch": "2.11.0",
                "torch_cuda": "13.0",
                "nccl": "2.28.3",
                "ranks": ranks,
                **extra,
            }
        )
        + "\n"
    )


def _rank(rank, seconds, peers, correct=True):
    return {
        "rank": rank,
        "correct": correct,
        "seconds": seconds,
        "peers": peers,
        "name": "NVIDIA H200",
        "bus_id": f"0000:00:0{6 + rank}.0",
    }


def test_bus_bandwidth_follows_nccl_tests():
    out = _line([_rank(0, 0.00048, {"1": True}), _rank(1, 0.0005, {"0": True})])
    result = sm.interpret([0, 1], 128 * 2**20, 0, out, "", False, 60)
    # The slowest rank counts: 134217728 B / 0.5 ms = 268.4 GB/s; busbw = algbw * 2(n-1)/n.
    assert result["time_per_all_reduce_s"] == 0.0005
    assert result["algorithm_bandwidth_bytes_per_s"] == pytest.approx(268435456000.0)
    assert result["bus_bandwidth_bytes_per_s"] == pytest.approx(268435456000.0)
    assert result["can_access_peer"] == {"0->1": True, "1->0": True}
    assert result["msg"] == (
        "NCCL all-reduce across GPUs 0,1: 128 MiB in 0.500 ms, bus bandwidth 268.4 GB/s, "
        "peer access on between all GPUs"
    )
    four = sm.interpret(
        [4, 5, 6, 7],
        2**20,
        0,
        _line([_rank(r, 0.001, {str(j): j != 3 for j in range(4) if j != r}) for r in range(4)]),
        "",
        False,
        60,
    )
    assert four["bus_bandwidth_bytes_per_s"] == pytest.approx(2**20 / 0.001 * 2 * 3 / 4)
    assert four["msg"].endswith("peer access OFF for 4->7, 5->7, 6->7")


def test_a_hang_is_the_failure_and_says_what_to_fix():
    with pytest.raises(sm.SmokeError) as caught:
        sm.interpret([0, 1, 2, 3], 2**25, sm.TIMED_OUT, "", "NCCL INFO Bootstrap", True, 120)
    assert str(caught.value).startswith(
        "NCCL all-reduce across GPUs 0,1,2,3 did not finish in 120 s and was killed: a hang at "
        "NCCL start is the sign of blocked PCIe peer-to-peer"
    )
    assert "NCCL_P2P_DISABLE=1" in str(caught.value)
    assert caught.value.fields["rc"] == sm.TIMED_OUT


def test_wrong_sum_error_and_slow_bus():
    with pytest.raises(sm.SmokeError, match=r"wrong sum on rank\(s\) \[1\]"):
        sm.interpret(
            [0, 1], 2**20, 0, _line([_rank(0, 1e-3, {}), _rank(1, 1e-3, {}, False)]), "", False, 60
        )
    with pytest.raises(sm.SmokeError, match="failed: CUDA sees 1 device"):
        sm.interpret(
            [0, 1],
            2**20,
            0,
            json.dumps({"ok": False, "error": "CUDA sees 1 device(s)"}),
            "",
            False,
            60,
        )
    with pytest.raises(sm.SmokeError, match=r"failed \(rc=1\): ModuleNotFoundError"):
        sm.interpret(
            [0, 1], 2**20, 1, "", "ModuleNotFoundError: No module named 'torch'", False, 60
        )
    with pytest.raises(sm.SmokeError, match=r"below the 10\.00 GB/s wanted") as caught:
        sm.interpret(
            [0, 1],
            2**20,
            0,
            _line([_rank(0, 1e-3, {}), _rank(1, 1e-3, {})]),
            "",
            False,
            60,
            min_bus_bandwidth=1e10,
        )
    assert caught.value.fields["result"]["bus_bandwidth_bytes_per_s"] == pytest.approx(2**20 / 1e-3)


def test_skip_reasons():
    py = sys.executable
    assert sm.skip_reason([0], py, None, GIB) == (
        "the model uses 1 GPU: no collective between GPUs to test"
    )
    assert sm.skip_reason([0, 1], "/opt/vllm/none/bin/python", None, GIB).startswith(
        "no Python at '/opt/vllm/none/bin/python' (the vLLM virtualenv is not installed yet"
    )
    free = {0: 80 * GIB, 1: int(1.5 * GIB)}
    assert sm.skip_reason([0, 1], py, free, 2 * GIB) == (
        "too little free GPU memory beside what is running (GPU 1: 1.5 GiB; the test needs "
        "2.0 GiB per GPU for a CUDA context and NCCL buffers)"
    )
    assert sm.skip_reason([0, 2], py, free, 2 * GIB).startswith(
        "too little free GPU memory beside what is running (GPU 2: unknown"
    )
    assert sm.skip_reason([0, 1], py, {0: 80 * GIB, 1: 80 * GIB}, 2 * GIB) is None


def test_environment_pins_exactly_the_models_gpus():
    env = sm.environment(
        {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}, [4, 5, 6, 7], {"NCCL_P2P_DISABLE": 1}
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["NCCL_P2P_DISABLE"] == "1"
    assert env["PATH"] == "/bin"


def test_gpus_listed_twice_are_refused():
    with pytest.raises(sm.SmokeError, match="lists a GPU twice"):
        sm.run_smoke(sys.executable, [0, 0])
