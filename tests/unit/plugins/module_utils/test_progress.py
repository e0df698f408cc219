# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The progress lines async_follow prints while a download or a model start runs."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.progress import (
    download_line,
    progress_line,
)
from repo_paths import ROOT


def test_download_line_from_a_real_progress_snapshot():
    """The keys hf_download's Progress.snapshot() writes (a 540 GB download, 2.3 % in)."""
    data = {"repo_id": "nvidia/Kimi-K2.5-NVFP4", "revision": "c0285e64" * 5, "pid": 1,
            "state": "downloading", "bytes_done": 12_400_000_000, "bytes_total": 540_000_000_000,
            "files_done": 3, "files_total": 119, "rate_bytes_per_s": 410_200_000,
            "eta_seconds": 1286, "elapsed_seconds": 30.2, "updated": 0.0,
            "retries": {"model-00007-of-00119.safetensors": 2}}
    assert progress_line("download", data) == (
        "11.55 GiB of 502.91 GiB (2.3 %), 3 of 119 files, 410.2 MB/s, about 21 min left, "
        "retries: model-00007-of-00119.safetensors x2")


def test_download_line_when_done_and_before_any_rate():
    done = {"bytes_done": 1024**3, "bytes_total": 1024**3, "files_done": 2, "files_total": 2,
            "rate_bytes_per_s": 0, "eta_seconds": None, "state": "done"}
    assert progress_line("download", done) == "1.00 GiB of 1.00 GiB (100.0 %), 2 of 2 files, done"
    assert progress_line("download", {}) is None
    assert progress_line("download", None) is None


@pytest.mark.parametrize(("elapsed", "limit", "said"), [
    (35.2, 600, "35 s of 10 min"),
    (2165, 3600, "36 min of 60 min"),
    (5500, 7200, "1 h 32 min of 2 h 00 min"),
])
def test_start_line(elapsed, limit, said):
    data = {"phase": "starting", "model": "kimi_k25_int4", "role": "green",
            "elapsed_s": elapsed, "limit_s": limit,
            "last_line": "INFO 11-30 17:02:11 [default_loader.py:291] Loading weights took 31.07 "
                         "seconds"}
    assert progress_line("start", data) == (
        f"starting kimi_k25_int4 (green): {said}; last log line: INFO 11-30 17:02:11 "
        "[default_loader.py:291] Loading weights took 31.07 seconds")


@pytest.mark.parametrize(("silent", "said"), [
    (29.9, ""),
    (30, ", silent for 30 s"),
    (1500, ", silent for 25 min"),
])
def test_start_line_says_how_long_the_log_has_been_silent(silent, said):
    data = {"phase": "starting", "model": "kimi_k25_int4", "role": "green", "elapsed_s": 2165,
            "limit_s": 3600, "silent_s": silent, "last_line": "Loading safetensors shards"}
    assert progress_line("start", data) == (
        f"starting kimi_k25_int4 (green): 36 min of 60 min{said}; last log line: "
        "Loading safetensors shards")


def test_start_line_without_a_log_line_yet():
    data = {"phase": "starting", "model": "tiny_gqa", "role": "blue", "elapsed_s": 1,
            "limit_s": 600, "last_line": ""}
    assert progress_line("start", data) == "starting tiny_gqa (blue): 1 s of 10 min"


def test_the_module_docs_name_the_kinds_the_action_accepts():
    doc = (ROOT / "plugins" / "modules" / "async_follow.py").read_text()
    assert "choices: [download, start]" in doc
    json.dumps(progress_line("start", {"model": "m"}))  # a plain string


def test_download_line_while_rate_limited_and_after():
    """Progress.snapshot()'s rate_limited (a wait going on) and rate_limit_waited_seconds."""
    base = {"bytes_done": 1024**3, "bytes_total": 4 * 1024**3, "files_done": 1, "files_total": 4,
            "rate_bytes_per_s": 0, "eta_seconds": None, "state": "downloading"}
    waiting = {**base, "rate_limit_waited_seconds": 56.0,
               "rate_limited": {"file": "model-00002-of-00004.safetensors", "wait_seconds": 56.0,
                                "left_seconds": 42, "header": 'RateLimit: "resolvers";r=0;t=55'}}
    assert progress_line("download", waiting) == (
        "1.00 GiB of 4.00 GiB (25.0 %), 1 of 4 files, rate-limited by the Hub, waiting 42 s "
        '(RateLimit: "resolvers";r=0;t=55)')
    after = {**base, "rate_limit_waited_seconds": 301.0}
    assert progress_line("download", after) == (
        "1.00 GiB of 4.00 GiB (25.0 %), 1 of 4 files, waited 5 min for the Hub's rate limit")
    assert progress_line("download", {**base, "rate_limit_waited_seconds": 0.0}) == (
        "1.00 GiB of 4.00 GiB (25.0 %), 1 of 4 files")


def test_download_line_while_another_host_holds_the_lease():
    """What hf_download writes while it waits for a shared volume's lease (_note_lease_wait)."""
    line = download_line({
        "repo_id": "MiniMaxAI/MiniMax-M2.5", "state": "waiting",
        "waiting_for": {"host": "gpu1", "pid": 4242, "since": 1796453530.0},
        "waited_s": 12.4, "lease_s": 60.0, "bytes_done": 0, "bytes_total": 0})
    assert line == ("waiting for the lease on the shared models volume: gpu1 (pid 4242), held "
                    "since 06:52:10 UTC stages this repo; waited 12 s; a lease left unrenewed "
                    "for 60 s is taken over")
