# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""warm_switch: which sleep level a warm switch takes, whether green fits beside the
sleeper, and why a switch stays cold (issue 35, item 2).

Sources of the figures: vLLM's start-up check request_memory() in
vllm-project/vllm:vllm/v1/worker/utils.py at 0027b02769fb (ceil(total x
gpu_memory_utilization) against the free memory, "Free memory on device ... is
less than desired GPU memory utilization"); the residual: 3.60 GiB, what level-1
sleepers kept on an H100 with vLLM 0.26.0 (the GPU suite, bench/output/gpu/), plus
the fit's non-torch term for tensor parallel (fit_overhead.py); the host RAM a
level-1 sleeper pins: up to 2x its weights (torch's power-of-two pinned buffers).
The models are the catalog's MiniMax-M2.5 (FP8, ~230 GB, TP8 + EP) and Kimi-K2.5
INT4 (~595 GB, TP8, DCP8, FP8 KV on SM120), sized by model_fit
from their shipped config.json on the rtx_pro_6000_x8_pcie profile.
"""

import json
import math
from decimal import ROUND_FLOOR, Decimal

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import fit_overhead as fo
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_host
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import warm_switch as ws
from repo_paths import ROOT

GIB = 1024**3
CONFIGS = ROOT / "roles" / "vllm_model" / "files" / "model_configs"
# rtx_pro_6000_x8_pcie (roles/vllm_model/defaults/main/hardware.yml)
RTX = {"count": 8, "memory_total_bytes": 102641958912, "compute_capability": "12.0",
       "interconnect": "pcie"}
MINIMAX = {
    "repo_id": "MiniMaxAI/MiniMax-M2.5", "gpus": list(range(8)), "size_bytes": 230000000000,
    "vllm": {"variant": "cuda", "version": "0.33.0"},
    "serve": {"tensor_parallel_size": 8, "enable_expert_parallel": True,
              "max_model_len": 196608, "gpu_memory_utilization": 0.92},
}
KIMI = {
    "repo_id": "moonshotai/Kimi-K2.5", "gpus": list(range(8)), "size_bytes": 595000000000,
    "vllm": {"variant": "cuda", "version": "0.33.0"},
    "serve": {"tensor_parallel_size": 8, "max_model_len": 131072,
              "gpu_memory_utilization": 0.92, "kv_cache_dtype": "fp8",
              "decode_context_parallel_size": 8},
}
ENTRIES = {"minimax_m25": MINIMAX, "kimi_k25_int4": KIMI}


def _args(entry):
    config = json.loads((CONFIGS / (entry["repo_id"].replace("/", "--") + ".config.json"))
                        .read_text())
    return {"config": config, "kwargs": {"serve": entry["serve"], "gpu": RTX,
                                         "weight_bytes": entry["size_bytes"],
                                         "vllm_version": "0.33.0",
                                         "repo_id": entry["repo_id"]}}


ARGS = {name: _args(entry) for name, entry in ENTRIES.items()}
FITS = {name: mf.size_model(a["config"], **a["kwargs"]) for name, a in ARGS.items()}


def _refit(name, share):
    kwargs = dict(ARGS[name]["kwargs"], serve=dict(ENTRIES[name]["serve"],
                                                   gpu_memory_utilization=share))
    return mf.size_model(ARGS[name]["config"], **kwargs)


def _kimi_refit(share):
    return _refit("kimi_k25_int4", share)


def _model(name, mode="warm", **changes):
    entry = dict(ENTRIES[name], **changes)
    return ws.served_model(name, entry, FITS[name], mode)


def _steps(host_bytes, **kwargs):
    return ws.plan_back_and_forth(_model("minimax_m25"), _model("kimi_k25_int4"),
                                  gpus=ws.profile_gpus(RTX), host_ram_bytes=host_bytes,
                                  refit=_refit, **kwargs)


TORCH_TOTAL = RTX["memory_total_bytes"] - fo.DEFAULT_DRIVER_RESERVE_MIB * 1024**2
TP_RESIDUAL = int(Decimal("3.6") * GIB) + int(Decimal("1.03") * GIB)
MINIMAX_WEIGHTS = FITS["minimax_m25"]["weights_bytes_per_gpu"] * 8
KIMI_WEIGHTS = FITS["kimi_k25_int4"]["weights_bytes_per_gpu"] * 8
MINIMAX_PINNED = 2 * MINIMAX_WEIGHTS
KIMI_PINNED = 2 * KIMI_WEIGHTS


def test_the_residual_is_the_measured_sleeper_and_non_torch_on_top_with_tp():
    assert ws.sleep_residual_bytes(8) == (
        TP_RESIDUAL, ("3.60 GiB measured at TP 1 + non-torch 1.03 GiB for TP8 (modelled: "
                      "tensor parallel not measured)"))
    assert round(TP_RESIDUAL / GIB, 2) == 4.63
    assert ws.sleep_residual_bytes(1) == (int(Decimal("3.6") * GIB),
                                          ws.MEASURED_SLEEPER_SOURCE)
    assert ws.sleep_residual_bytes(8, override=3 * GIB) == (
        3 * GIB, "vllm_fleet_sleep_residual_bytes_per_gpu")


def test_the_models_are_what_the_catalog_says():
    # MiniMax-M2.5 FP8: ~230 GB over TP8 (+ EP), the replicated weights once per GPU.
    assert FITS["minimax_m25"]["fits"]
    assert FITS["kimi_k25_int4"]["fits"]
    assert 230e9 <= MINIMAX_WEIGHTS < 231e9
    assert 595e9 <= KIMI_WEIGHTS < 615e9


def test_512_gib_level_1_for_minimax_level_2_for_kimi_with_the_shortfall():
    steps = _steps(512 * GIB)
    assert [(s["mode"], s["level"]) for s in steps] == [("warm", 1), ("cold", None),
                                                        ("warm", 1)]
    first, back, again = steps
    # first switch: MiniMax pins its weights, 512 GiB less the 32 GiB reserve free for it
    assert first["host"] == {"needed_bytes": MINIMAX_PINNED, "ram_bytes": 512 * GIB,
                             "reserve_bytes": 32 * GIB, "other_pinned_bytes": 0,
                             "available_bytes": 480 * GIB, "short_bytes": None}
    # green's share lowered by the sleeper's residual, floored to 4 decimals
    share = float((Decimal("0.92") - Decimal(TP_RESIDUAL) / Decimal(TORCH_TOTAL))
                  .quantize(Decimal("0.0001"), rounding=ROUND_FLOOR))
    assert first["share"] == share == 0.8712
    assert first["fit"]["fits"] is True
    assert first["fit"]["margin_bytes_per_gpu"] == _refit("kimi_k25_int4", share)[
        "margin_bytes_per_gpu"]
    assert first["fit"]["margin_bytes_per_gpu"] < FITS["kimi_k25_int4"]["margin_bytes_per_gpu"]
    check = first["gpu_checks"][0]
    assert check == {"index": 0, "residual_bytes": TP_RESIDUAL,
                     "free_bytes": TORCH_TOTAL - TP_RESIDUAL,
                     "requested_bytes": math.ceil(TORCH_TOTAL * share), "short_bytes": 0,
                     "torch_total_bytes": TORCH_TOTAL}
    # return: Kimi cannot pin 568 GiB beside MiniMax's 215 GiB in 480 GiB, and no GPU run
    # shows its level-2 wake working on vLLM 0.33.0 (the one DeepSeek-V3 run is a bf16 shape
    # on 0.26.0; MLA's reload failed in the lab): it stops (cold) and MiniMax wakes
    short = KIMI_PINNED - (480 * GIB - MINIMAX_PINNED)
    assert back["host"]["short_bytes"] == short
    why = ws.level_2_failure(_model("kimi_k25_int4"))
    assert why.startswith("no GPU run shows a level-2 wake of DeepseekV3ForCausalLM working on "
                          "vLLM 0.33.0 (runs show it working on DeepseekV3ForCausalLM on vLLM "
                          "0.26.0 (H200, unquantized weights: bench/output/gpu/gpu-h200-vllm-"
                          "0.26.0-20261206T0521.json level2.deepseek_v3_mla)); ")
    assert why.endswith(ws.MLA_LEVEL_2)
    assert back["reasons"] == [
        f"kimi_k25_int4 is MLA and level 1 does not fit (host RAM short by {short / GIB:,.2f} "
        f"GiB for level 1 (kimi_k25_int4's pinned weights {KIMI_PINNED / GIB:,.2f} GiB, "
        f"{(480 * GIB - MINIMAX_PINNED) / GIB:,.2f} GiB free beside "
        f"{MINIMAX_PINNED / GIB:,.2f} GiB already pinned)); level 2: " + why
        + ". It stops instead (vllm_fleet_sleep_level: 2 tries level 2 anyway)"]
    assert round(short / GIB, 2) == 1086.34
    assert back["green_wakes"]
    assert back["share"] == 0.92
    assert back["fit"] is None  # a waking model keeps its share: no refit
    # and back again: Kimi stopped, so it starts beside MiniMax asleep at level 1 again
    assert again["host"]["other_pinned_bytes"] == 0
    assert not again["green_wakes"]
    assert again["share"] == 0.8712


def test_one_tib_holds_minimax_at_level_1_not_kimi_whose_pinned_buffers_take_twice_its_weights():
    # Kimi-K2.5 INT4's 568 GiB of weights pin up to 1,137 GiB (torch rounds each pinned
    # buffer up to a power of two; 1.81x measured on the GPU): more than 992 GiB.
    steps = _steps(1024 * GIB)
    assert [(s["mode"], s["level"]) for s in steps] == [("warm", 1), ("cold", None),
                                                        ("warm", 1)]
    assert steps[0]["host"]["available_bytes"] == 992 * GIB
    assert steps[1]["host"]["short_bytes"] == KIMI_PINNED - (992 * GIB - MINIMAX_PINNED)
    assert steps[2]["host"]["available_bytes"] == 992 * GIB


def test_no_host_memory_known_is_level_2():
    steps = _steps(None)
    # MiniMax-M2.5 (MiniMaxM2ForCausalLM: its level-2 wake failed on the GPU) and Kimi (MLA)
    # stop rather than sleep at level 2
    assert [s["level"] for s in steps] == [None, None, None]
    assert "MiniMaxM2ForCausalLM and level 1 does not fit" in steps[0]["reasons"][0]
    assert "host memory not known" in steps[0]["reasons"][-1]
    assert ws.LEVEL_2_FAILS["MiniMaxM2ForCausalLM"] in steps[0]["reasons"][0]
    # Asked for level 2: refused for MiniMax-M2.5 (issue 44 item 4), Kimi (MLA) sleeps at 2.
    assert [(s["mode"], s["level"]) for s in _steps(None, sleep_level="2")] == [
        ("refused", None), ("warm", 2), ("refused", None)]


@pytest.mark.parametrize(("blue_changes", "green_changes", "kwargs", "why"), [
    ({}, {"switch_mode": "cold"}, {}, "switch mode of kimi_k25_int4 is cold"),
    ({"switch_mode": "cold"}, {}, {}, "minimax_m25 runs without sleep mode"),
    ({"nodes": 2}, {}, {}, "minimax_m25 is a multi-node replica (2 hosts)"),
    ({}, {}, {"standby_max": 0}, "vllm_fleet_warm_standby_max is 0"),
])
def test_cold_and_why(blue_changes, green_changes, kwargs, why):
    blue = _model("minimax_m25", mode=blue_changes.pop("switch_mode", "warm"), **blue_changes)
    green = _model("kimi_k25_int4", mode=green_changes.pop("switch_mode", "warm"))
    plan = ws.plan_switch(blue, green, gpus=ws.profile_gpus(RTX), host_ram_bytes=512 * GIB,
                          refit=_kimi_refit, **kwargs)
    assert plan["mode"] == "cold"
    assert plan["level"] is None
    assert why in plan["reasons"][0]
    assert plan["summary"].startswith("minimax_m25 -> kimi_k25_int4: COLD: ")


def test_a_revision_update_of_the_same_model_is_cold():
    plan = ws.plan_switch(_model("minimax_m25"), _model("minimax_m25"),
                          gpus=ws.profile_gpus(RTX), host_ram_bytes=512 * GIB)
    assert plan["mode"] == "cold"
    assert "revision update of the same model" in plan["reasons"][0]


def test_another_process_on_one_gpu_fails_vllms_free_memory_check_there():
    gpus = ws.profile_gpus(RTX)
    gpus[3]["memory_used_bytes"] = 8 * GIB  # something else holds 8 GiB on GPU 3
    plan = ws.plan_switch(_model("minimax_m25"), _model("kimi_k25_int4"), gpus=gpus,
                          host_ram_bytes=512 * GIB, refit=_kimi_refit)
    requested = math.ceil(TORCH_TOTAL * 0.8712)
    free = TORCH_TOTAL - 8 * GIB - TP_RESIDUAL
    assert plan["mode"] == "cold"
    assert [c["index"] for c in plan["gpu_checks"] if c["short_bytes"]] == [3]
    assert plan["gpu_checks"][3]["short_bytes"] == requested - free
    reason = (f"GPU 3 short by {(requested - free) / GIB:,.2f} GiB: vLLM's free-memory check "
              f"wants {requested / GIB:,.2f} GiB (kimi_k25_int4 at 0.8712), "
              f"{free / GIB:,.2f} GiB free beside {TP_RESIDUAL / GIB:,.2f} GiB of sleepers")
    assert plan["reasons"] == [reason]


def test_green_that_does_not_fit_at_the_lowered_share_is_cold_with_the_gib_short():
    # A residual of 10 GiB per GPU lowers Kimi's share to 0.8146: its KV cache no longer
    # holds one 131,072-token request.
    plan = ws.plan_switch(_model("minimax_m25"), _model("kimi_k25_int4"),
                          gpus=ws.profile_gpus(RTX), host_ram_bytes=512 * GIB,
                          residual_bytes_per_gpu=10 * GIB, refit=_kimi_refit)
    fit = _refit("kimi_k25_int4", plan["share"])
    assert plan["share"] == 0.8146
    assert not fit["fits"]
    assert plan["mode"] == "cold"
    assert plan["reasons"][0].startswith(
        f"GPU 0-7 short by {-fit['margin_bytes_per_gpu'] / GIB:,.2f} GiB each (the fit's "
        "margin: the KV cache for one max_model_len request included): kimi_k25_int4 "
        "does not fit at gpu_memory_utilization 0.8146")


def test_host_ram_from_proc_meminfo_less_the_reserve(tmp_path):
    (tmp_path / "proc-meminfo.txt").write_text(
        "MemTotal:       528012345 kB\nMemFree:        1234 kB\n"
        "MemAvailable:   500000000 kB\nBuffers:        1 kB\n")
    host = gpu_host.FixtureHost(str(tmp_path))
    assert ws.host_ram_for_sleepers(host, 32 * GIB) == {
        "mem_available_bytes": 500000000 * 1024, "reserve_bytes": 32 * GIB,
        "available_bytes": 500000000 * 1024 - 32 * GIB}
    (tmp_path / "proc-meminfo.txt").write_text("MemTotal:       528012345 kB\n")
    with pytest.raises(ws.WarmSwitchError, match=r"wanted a MemAvailable line .* \['MemTotal'\]"):
        ws.host_ram_for_sleepers(host)


def test_live_host_reads_proc_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   2048 kB\n")
    host = gpu_host.LiveHost(None, None, paths={"meminfo": str(meminfo)})
    assert ws.host_ram_for_sleepers(host, 1024)["available_bytes"] == 2048 * 1024 - 1024


def test_switch_mode_entry_over_fleet_and_refused_values():
    assert ws.switch_mode({}, "cold") == "cold"
    assert ws.switch_mode({"switch_mode": "warm"}, "cold") == "warm"
    with pytest.raises(ws.WarmSwitchError,
                       match=r"switch_mode must be one of cold, warm, got 'hot'"):
        ws.switch_mode({"switch_mode": "hot"})


def test_plan_pairs_shows_nothing_when_every_mode_is_cold_and_three_steps_when_warm():
    names = ["minimax_m25", "kimi_k25_int4"]
    settings = {"switch_mode": "cold", "host_memory_bytes": 512 * GIB}
    assert ws.plan_pairs(names, ENTRIES, FITS, ARGS, RTX, settings) == []
    lines = ws.plan_pairs(names, ENTRIES, FITS, ARGS, RTX, dict(settings, switch_mode="warm"))
    assert lines[0] == ("Warm switches minimax_m25 <-> kimi_k25_int4: host memory 512.00 GiB "
                        "less a reserve of 32.00 GiB; at most 1 sleeper(s) per host")
    assert [line for line in lines if not line.startswith(" ")][1:4] == [
        "first switch: minimax_m25 -> kimi_k25_int4: WARM, level 1",
        "return: kimi_k25_int4 -> minimax_m25: COLD",
        "return: minimax_m25 -> kimi_k25_int4: WARM, level 1"]


# gpu_facts as the gpu_facts module returns it (nvidia_smi.parse_compute_apps rows with the
# GPU's index added by gpu_facts._processes): blue (pids 100, 101) serves on GPUs 0-1, a
# sleeper (pid 200) keeps 1.5 GiB on GPU 1, something else (pid 300) 2 GiB on GPU 0.
FACTS = {
    "gpus": [{"index": 0, "memory_total_bytes": 150754820096, "memory_used_bytes": 132 * GIB},
             {"index": 1, "memory_total_bytes": 150754820096,
              "memory_used_bytes": 131 * GIB + GIB // 2}],
    "processes": [
        {"pid": 100, "used_memory_bytes": 130 * GIB, "gpu_uuid": "GPU-a", "gpu_index": 0},
        {"pid": 101, "used_memory_bytes": 130 * GIB, "gpu_uuid": "GPU-b", "gpu_index": 1},
        {"pid": 200, "used_memory_bytes": GIB + GIB // 2, "gpu_uuid": "GPU-b", "gpu_index": 1},
        {"pid": 300, "used_memory_bytes": 2 * GIB, "gpu_uuid": "GPU-a", "gpu_index": 0},
    ],
}


def test_gpus_from_facts_takes_blues_own_memory_out():
    assert ws.gpus_from_facts(FACTS, blue_pids=[100, 101]) == [
        {"index": 0, "memory_total_bytes": 150754820096, "memory_used_bytes": 2 * GIB},
        {"index": 1, "memory_total_bytes": 150754820096,
         "memory_used_bytes": GIB + GIB // 2}]
    with pytest.raises(ws.WarmSwitchError, match=r"gpu_facts lists no GPU"):
        ws.gpus_from_facts({"gpus": []})


def test_a_sleepers_residual_measured_per_process():
    assert ws.measured_residual(FACTS, [200]) == GIB + GIB // 2
    assert ws.measured_residual(FACTS, [999]) is None


def test_the_plan_applies_vllm_fleet_sleep_level_as_the_deploy_does():
    """A new user's trial: plan.yml ignored vllm_fleet_sleep_level while the deploy honoured
    it. 2: every warm switch at level 2; 1: the return that cannot pin Kimi is cold."""
    steps = _steps(512 * GIB, sleep_level="2")
    assert [(s["mode"], s["level"]) for s in steps] == [
        ("refused", None), ("warm", 2), ("refused", None)]
    assert steps[0]["lines"][0] == "minimax_m25 -> kimi_k25_int4: REFUSED"
    steps = _steps(512 * GIB, sleep_level=1)
    assert [(s["mode"], s["level"]) for s in steps] == [("warm", 1), ("cold", None),
                                                        ("warm", 1)]
    assert steps[1]["reasons"][0].startswith(
        "vllm_fleet_sleep_level is 1 and level 1 does not fit: host RAM short by 1,086.34 GiB")
    assert steps[1]["lines"][0] == "kimi_k25_int4 -> minimax_m25: COLD"


def test_gpus_short_alike_are_one_reason():
    """A new user's trial: the per-GPU rule printed 8 near-identical lines."""
    gpus = ws.profile_gpus(RTX)
    for gpu in gpus:
        gpu["memory_used_bytes"] = 8 * GIB
    plan = ws.plan_switch(_model("minimax_m25"), _model("kimi_k25_int4"), gpus=gpus,
                          host_ram_bytes=512 * GIB, refit=_kimi_refit)
    assert plan["mode"] == "cold"
    assert len(plan["reasons"]) == 1
    assert plan["reasons"][0].startswith("GPU 0-7 short by ")
    assert " GiB each: vLLM's free-memory check wants " in plan["reasons"][0]


# -- what green's unit takes from the plan (issue 47: one value, no text round trip) -----------

@pytest.mark.parametrize(("share", "catalog", "expected"), [
    (0.8712, 0.92, {"gpu_memory_utilization": 0.8712}),  # lowered beside a sleeper
    (0.92, 0.92, {}),  # the catalog's: the unit is as the catalog says
    (None, 0.92, {}),  # a model on no GPU
])
def test_the_unit_takes_the_plans_share_only_where_not_the_catalogs(share, catalog, expected):
    assert ws.unit_serve({"share": share, "catalog_share": catalog}) == expected


def test_the_share_of_a_model_not_sized_follows_vllms_default_once():
    """No fit report: the entry's share, else vLLM's default (vllm_engine.gpu_share); a fit
    report: its value, as the fit computed it."""
    assert ws.served_model("m", {"serve": {}}, None, "warm")["gpu_memory_utilization"] == 0.9
    assert ws.served_model("m", {"serve": {"gpu_memory_utilization": 0.8}}, None,
                           "warm")["gpu_memory_utilization"] == 0.8
    assert ws.served_model("m", {"serve": {"gpu_memory_utilization": 0.8}},
                           {"gpu_memory_utilization": 0.85, "sized": True},
                           "warm")["gpu_memory_utilization"] == 0.85
    assert ws.recorded_model({"sizing": {}})["gpu_memory_utilization"] == 0.9
