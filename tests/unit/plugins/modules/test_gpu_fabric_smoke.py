# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The gpu_fabric_smoke module end to end: real AnsibleModule; the "python" is a stand-in
that prints what the all-reduce script printed on the lent 2x H200 (device run fixture),
or hangs."""

import os

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.modules import gpu_fabric_smoke
from repo_paths import FIXTURES

from unit.module_harness import run_module

GIB = 1024**3
RUN = FIXTURES / "gpu" / "h200x2-device-2026-11-30"


def _stand_in(tmp_path, body):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n" + body)
    python.chmod(0o755)
    return str(python)


FACTS = {
    "gpus": [
        {"index": 0, "memory_free_bytes": 140 * GIB},
        {"index": 1, "memory_free_bytes": 140 * GIB},
    ]
}


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_reports_the_device_runs_measurement(tmp_path, check_mode):
    line = (RUN / "smoke-script-output.json").read_text().strip()
    python = _stand_in(tmp_path, f"cat <<'JSON'\n{line}\nJSON\n")
    result = run_module(
        gpu_fabric_smoke.main,
        {"python": python, "gpus": [0, 1], "gpu_facts": FACTS},
        check_mode=check_mode,
    )
    assert result["failed"] is False
    assert result["changed"] is False
    # The slowest rank of that run: 0.14393 ms for 32 MiB.
    assert result["time_per_all_reduce_s"] == pytest.approx(0.00014393455000032417)
    assert result["bus_bandwidth_bytes_per_s"] == pytest.approx(233.12e9, rel=1e-3)
    assert result["can_access_peer"] == {"0->1": True, "1->0": True}
    assert result["nccl_version"] == "2.28.9"
    assert result["msg"] == (
        "NCCL all-reduce across GPUs 0,1: 32 MiB in 0.144 ms, bus bandwidth 233.1 GB/s, "
        "peer access on between all GPUs"
    )


def test_module_skips_one_gpu_and_says_why(tmp_path):
    result = run_module(gpu_fabric_smoke.main, {"python": "/nonexistent/python", "gpus": [3]})
    assert result["skipped"] is True
    assert result["msg"] == (
        "GPU fabric smoke test skipped: the model uses 1 GPU: no collective between GPUs to test"
    )


def test_module_skips_without_room_beside_a_serving_model(tmp_path):
    python = _stand_in(tmp_path, "exit 1\n")
    facts = {
        "gpus": [
            {"index": 0, "memory_free_bytes": 7 * GIB},
            {"index": 1, "memory_free_bytes": GIB // 2},
        ]
    }
    result = run_module(
        gpu_fabric_smoke.main, {"python": python, "gpus": [0, 1], "gpu_facts": facts}
    )
    assert result["skipped"] is True
    assert "GPU 1: 0.5 GiB" in result["msg"]


def test_module_fails_on_a_hang_and_kills_it(tmp_path):
    python = _stand_in(tmp_path, "echo 'NCCL INFO Bootstrap'; exec sleep 300\n")
    result = run_module(
        gpu_fabric_smoke.main, {"python": python, "gpus": [0, 1], "gpu_facts": FACTS, "timeout": 2}
    )
    assert result["failed"] is True
    assert result["rc"] == 124
    assert result["msg"].startswith(
        "NCCL all-reduce across GPUs 0,1 did not finish in 2 s and was killed"
    )
    assert result["stdout"] == "NCCL INFO Bootstrap\n"
    assert not os.path.exists(tmp_path / "nccl_all_reduce.py")
