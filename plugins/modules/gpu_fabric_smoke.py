#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_fabric_smoke
short_description: Short NCCL all-reduce across exactly a model's GPUs, under a hard timeout
version_added: "0.1.0"
description:
  - Runs one process per GPU with the given Python (the vLLM virtualenv's, so its own torch and
    NCCL), all-reduces a small buffer once to check the sum, then times O(iterations)
    all-reduces and reports the bus bandwidth (nccl-tests' convention,
    algbw x 2(n-1)/n) and whether each GPU can access its peers.
  - The whole run is killed after O(timeout) seconds; a hang at NCCL start (ACS redirect on the
    PCIe bridges, an IOMMU translating peer-to-peer DMA) is the failure it exists to catch,
    before a cutover stops the model that is serving.
  - Small buffers (O(size_bytes)) so it fits beside a serving model; it is skipped, saying why,
    when the model uses one GPU, the Python is not there yet (first deploy), or a GPU has less
    than O(min_free_bytes) free.
  - Uses C(CUDA_DEVICE_ORDER=PCI_BUS_ID) and C(CUDA_VISIBLE_DEVICES) set to O(gpus), so the
    indices are nvidia-smi's.
options:
  python:
    description: Python of the vLLM virtualenv (holds torch with NCCL).
    type: path
    required: true
  gpus:
    description: The model's GPU indices (nvidia-smi's), exactly those the model will use.
    type: list
    elements: int
    required: true
  size_bytes:
    description: Bytes all-reduced per call (float32 elements x 4).
    type: int
    default: 33554432
  iterations:
    description: Timed all-reduce calls.
    type: int
    default: 20
  timeout:
    description: Seconds before the whole run is killed and the task fails as a hang.
    type: int
    default: 120
  min_free_bytes:
    description: Free memory each GPU needs for the test (CUDA context, NCCL buffers, the buffer).
    type: int
    default: 2147483648
  min_bus_bandwidth:
    description: Fail when the bus bandwidth is below this many bytes per second (0 for no floor).
    type: float
    default: 0
  environment:
    description: Extra environment, e.g. the model's C(NCCL_*) settings, so the test runs as the model will.
    type: dict
    default: {}
  gpu_facts:
    description: >-
      Facts from M(vllm_fleet.fleet.gpu_facts) for the free-memory check; when omitted,
      C(nvidia-smi) is asked.
    type: dict
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  check_mode:
    support: full
    description: A measurement that changes no state; it runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
"""

EXAMPLES = r"""
- name: Test the GPU fabric of the model's GPUs before the cutover stops blue
  vllm_fleet.fleet.gpu_fabric_smoke:
    python: /opt/vllm/0.11.0-cuda/bin/python
    gpus: [0, 1, 2, 3]
    environment: "{{ entry.environment | default({}) }}"
    gpu_facts: "{{ gpu_facts }}"
  register: fabric_smoke
"""

RETURN = r"""
msg:
  description: What was measured, or why the test was skipped.
  returned: always
  type: str
  sample: "NCCL all-reduce across GPUs 0,1: 32 MiB in 0.201 ms, bus bandwidth 167.0 GB/s, peer access on between all GPUs"
skipped:
  description: True when the test did not run (see msg).
  returned: when skipped
  type: bool
time_per_all_reduce_s:
  description: Seconds per all-reduce (slowest rank).
  returned: when run
  type: float
bus_bandwidth_bytes_per_s:
  description: Bus bandwidth, bytes per second.
  returned: when run
  type: float
algorithm_bandwidth_bytes_per_s:
  description: Algorithm bandwidth (size / time), bytes per second.
  returned: when run
  type: float
size_bytes:
  description: Bytes per all-reduce.
  returned: when run
  type: int
can_access_peer:
  description: torch.cuda.can_device_access_peer for each ordered pair, keyed C(0->1).
  returned: when run
  type: dict
devices:
  description: Each rank's GPU index, name and bus id.
  returned: when run
  type: list
  elements: dict
nccl_version:
  description: NCCL version of the virtualenv's torch.
  returned: when run
  type: str
torch_version:
  description: torch version of the virtualenv.
  returned: when run
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_memory import memory_snapshot
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_smoke import (
    SmokeError,
    run_smoke,
    skip_reason,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError


def _free_memory(module, facts):
    if facts:
        return {g["index"]: g.get("memory_free_bytes") for g in facts.get("gpus") or []}
    smi = module.get_bin_path("nvidia-smi")
    if not smi:
        return None
    try:
        snapshot = memory_snapshot(module.run_command, smi)
    except GpuFactsError:
        return None
    return {g["index"]: g.get("memory_free_bytes") for g in snapshot["gpus"]}


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "gpus": {"type": "list", "elements": "int", "required": True},
            "size_bytes": {"type": "int", "default": 33554432},
            "iterations": {"type": "int", "default": 20},
            "timeout": {"type": "int", "default": 120},
            "min_free_bytes": {"type": "int", "default": 2147483648},
            "min_bus_bandwidth": {"type": "float", "default": 0},
            "environment": {"type": "dict", "default": {}},
            "gpu_facts": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    p = module.params
    reason = skip_reason(
        p["gpus"], p["python"], _free_memory(module, p["gpu_facts"]), p["min_free_bytes"]
    )
    if reason:
        module.exit_json(
            changed=False, skipped=True, msg=f"GPU fabric smoke test skipped: {reason}"
        )
    try:
        result = run_smoke(
            p["python"],
            p["gpus"],
            size_bytes=p["size_bytes"],
            iterations=p["iterations"],
            timeout_s=p["timeout"],
            extra_env=p["environment"],
            min_bus_bandwidth=p["min_bus_bandwidth"],
        )
    except SmokeError as exc:
        module.fail_json(msg=str(exc), **exc.fields)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
