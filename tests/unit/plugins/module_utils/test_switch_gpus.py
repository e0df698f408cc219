"""module_utils/switch/switch_gpus.py: what a switch reads of the GPUs, on nvidia-smi
snapshots in gpu_facts' shape (the cutover's tests drive the same object through whole
switches on the fake host)."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import Settings
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.switch_gpus import (
    GpuCheckError,
    SwitchGpus,
    sleeper_bytes,
)

GIB = 1024**3
GREEN = {"model": "green", "unit": "vllm-green.service", "gpus": [0]}


def snap(used, procs):
    return {"gpus": [{"index": 0, "memory_total_bytes": 80 * GIB, "memory_used_bytes": used}],
            "processes": procs}


def gpus(snapshot):
    return SwitchGpus(host=None, green=GREEN, settings=Settings(), gpu_processes=snapshot,
                      confirm_s=0.0, poll_s=0.0)


def test_a_sleepers_bytes_are_its_listed_processes_else_what_no_listed_process_holds():
    listed = snap(10 * GIB, [{"pid": 7, "gpu_index": 0, "used_memory_bytes": 2 * GIB}])
    assert sleeper_bytes(listed, 0, {7}) == 2 * GIB
    # inside a container its processes are not listed: the card's used memory less the others'
    assert sleeper_bytes(listed, 0, {8}) == 8 * GIB


def test_blues_stopping_processes_still_hold_greens_gpu():
    held = gpus(snap(3 * GIB, [{"pid": 7, "gpu_index": 0, "used_memory_bytes": 3 * GIB}]))
    assert held.held_by({7}) is True
    free = gpus(snap(0, []))
    assert free.held_by({7}) is False
    assert gpus(None).held_by({7}) is False  # nvidia-smi not read: nothing to wait for


def test_memory_no_process_explains_refuses_green_by_name():
    with pytest.raises(GpuCheckError, match=r"^green green cannot start: "):
        gpus(snap(40 * GIB, [])).check_free()


def test_an_unreadable_nvidia_smi_is_a_refusal_that_says_so():
    def broken():
        raise GpuFactsError("nvidia-smi: command not found")
    with pytest.raises(GpuCheckError, match="nvidia-smi could not be read before the switch: "
                                            "nvidia-smi: command not found"):
        gpus(broken).snapshot()
