# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The deploy's warm switch decision on a host (warm_switch.decide, module warm_switch_plan):
the level the host's RAM allows, green's lowered share, cold and why - from the host's
deployment record, /proc/meminfo and nvidia-smi, as plan.yml decides it on a profile.

Figures: the catalog's MiniMax-M2.5 and Kimi-K2.5 INT4 sized by model_fit from their
shipped config.json on rtx_pro_6000_x8_pcie (as test_warm_switch.py); MemAvailable as
/proc/meminfo prints it (kB); vLLM's free-memory check request_memory() in
vllm/v1/worker/utils.py (vllm-project/vllm at 0027b02769fb).
"""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import warm_switch as ws
from ansible_collections.vllm_fleet.fleet.plugins.modules import warm_switch_plan
from repo_paths import ROOT

GIB = 1024**3
CONFIGS = ROOT / "roles" / "vllm_model" / "files" / "model_configs"
RTX = {"count": 8, "memory_total_bytes": 102641958912, "compute_capability": "12.0",
       "interconnect": "pcie"}
ENTRIES = {
    "minimax_m25": {
        "repo_id": "MiniMaxAI/MiniMax-M2.5", "gpus": list(range(8)),
        "size_bytes": 230000000000, "switch_mode": "warm", "revision": "a" * 40,
        "vllm": {"variant": "cuda", "version": "0.33.0"},
        "serve": {"tensor_parallel_size": 8, "enable_expert_parallel": True,
                  "max_model_len": 196608, "gpu_memory_utilization": 0.92}},
    "kimi_k25_int4": {
        "repo_id": "moonshotai/Kimi-K2.5", "gpus": list(range(8)), "size_bytes": 595000000000,
        "switch_mode": "warm", "revision": "b" * 40,
        "vllm": {"variant": "cuda", "version": "0.33.0"},
        "serve": {"tensor_parallel_size": 8, "max_model_len": 131072,
                  "gpu_memory_utilization": 0.92, "kv_cache_dtype": "fp8",
                  "decode_context_parallel_size": 8}},
}


def _fit_args(name):
    entry = ENTRIES[name]
    config = json.loads((CONFIGS / (entry["repo_id"].replace("/", "--") + ".config.json"))
                        .read_text())
    return {"config": config, "kwargs": {"serve": entry["serve"], "gpu": RTX,
                                         "weight_bytes": entry["size_bytes"],
                                         "vllm_version": "0.33.0", "repo_id": entry["repo_id"]}}


FIT_ARGS = {name: _fit_args(name) for name in ENTRIES}
FITS = {name: mf.size_model(a["config"], **a["kwargs"]) for name, a in FIT_ARGS.items()}


def _green(name, **changes):
    entry = dict(ENTRIES[name], **changes)
    return ws.green_model(name, entry, FITS[name], "cold", f"vllm-{name}.service")


def _recorded(name, share=0.92, **changes):
    """A record entry as vllm_cutover writes it once the model is active, with its sizing."""
    green = _green(name)
    entry = {"model": name, "unit": f"vllm-{name}.service", "gpus": list(range(8)),
             "repo_id": ENTRIES[name]["repo_id"], "revision": ENTRIES[name]["revision"],
             "sleep_mode": True, "sizing": ws.record_sizing(green, share),
             "vllm_version": "0.33.0-cuda"}  # vllm_install_version '-' vllm_install_variant
    entry.update(changes)
    return entry


class Meminfo:
    """/proc/meminfo as the kernel prints it (kB)."""

    def __init__(self, available_bytes):
        self.text = (f"MemTotal:       {2 * available_bytes // 1024} kB\n"
                     f"MemFree:        {available_bytes // 2048} kB\n"
                     f"MemAvailable:   {available_bytes // 1024} kB\n")

    def read(self, key):
        return self.text if key == "meminfo" else None


def _decide(green, record, mem=None, gpus=None, **settings):
    return ws.decide(green, record, gpus=gpus or ws.profile_gpus(RTX),
                     host=Meminfo(mem) if mem else None,
                     settings=dict({"switch_mode": "cold"}, **settings),
                     refit=ws.refit_with(FIT_ARGS[green["name"]]))


def test_minimax_to_kimi_on_a_host_with_512_gib_available_is_level_1_at_the_lowered_share():
    plan = _decide(_green("kimi_k25_int4"), {"active": _recorded("minimax_m25")},
                   mem=512 * GIB)
    assert (plan["mode"], plan["level"], plan["switch"]) == ("warm", 1, True)
    # MemAvailable already leaves out what sleepers pinned: nothing is subtracted twice
    assert plan["host"]["available_bytes"] == 480 * GIB
    assert plan["host"]["other_pinned_bytes"] == 0
    assert plan["share"] == 0.8712  # 0.92 less the TP8 sleeper's 4.63 GiB residual
    assert plan["fit"]["fits"]
    assert plan["sizing"] == {
        "weights_bytes_per_gpu": FITS["kimi_k25_int4"]["weights_bytes_per_gpu"],
        "gpus_needed": 8, "tensor_parallel_size": 8, "gpu_memory_utilization": 0.8712,
        "catalog_gpu_memory_utilization": 0.92, "mla": True,
        "architecture": FITS["kimi_k25_int4"]["architecture"], "speculative": None,
        "quantization": "compressed-tensors"}


def test_kimi_back_to_minimax_with_512_gib_stops_kimi_and_says_by_how_much():
    """Kimi's 568 GiB cannot be pinned; level 2 would wake an MLA model with reload_weights,
    which fails (ws.MLA_LEVEL_2): auto stops it; vllm_fleet_sleep_level 2 tries level 2."""
    record = {"active": _recorded("kimi_k25_int4", 0.9013)}
    plan = _decide(_green("minimax_m25"), record, mem=512 * GIB)
    pinned = FITS["kimi_k25_int4"]["weights_bytes_per_gpu"] * 8 * ws.PINNED_HOST_FACTOR
    assert record["active"]["sizing"]["mla"] is True
    assert (plan["mode"], plan["level"], plan["share"]) == ("cold", None, 0.92)
    assert plan["host"]["short_bytes"] == pinned - 480 * GIB
    assert plan["reasons"][0].startswith(
        f"kimi_k25_int4 is MLA and level 1 does not fit (host RAM short by "
        f"{(pinned - 480 * GIB) / GIB:,.2f} GiB for level 1")
    assert round((pinned - 480 * GIB) / GIB, 2) == 656.66
    two = _decide(_green("minimax_m25"), record, mem=512 * GIB, sleep_level="2")
    assert (two["mode"], two["level"]) == ("warm", 2)


def test_sleep_level_1_asked_and_short_is_cold_level_2_asked_is_level_2():
    record = {"active": _recorded("kimi_k25_int4", 0.9013)}
    one = _decide(_green("minimax_m25"), record, mem=512 * GIB, sleep_level="1")
    assert (one["mode"], one["level"]) == ("cold", None)
    assert one["reasons"][0].startswith("vllm_fleet_sleep_level is 1 and level 1 does not fit: "
                                        "host RAM short by 656.66 GiB")
    assert one["share"] == 0.92  # cold: blue stops, no sleeper beside green
    two = _decide(_green("minimax_m25"), record, mem=1024 * GIB, sleep_level=2)
    assert (two["mode"], two["level"]) == ("warm", 2)  # MLA: a GPU run woke it from level 2
    assert two["reasons"][-1].startswith("host RAM short by 144.66 GiB for level 1")
    with pytest.raises(ws.WarmSwitchError, match="must be auto, 1 or 2, got '3'"):
        _decide(_green("kimi_k25_int4"), record, sleep_level="3")


def test_the_active_model_keeps_the_share_it_started_with_so_a_rerun_changes_nothing():
    record = {"active": _recorded("kimi_k25_int4", 0.9013)}
    plan = _decide(_green("kimi_k25_int4"), record, mem=512 * GIB)
    assert (plan["switch"], plan["mode"], plan["share"]) == (False, "cold", 0.9013)
    assert plan["summary"] == ("kimi_k25_int4: no switch: kimi_k25_int4 is the active model: "
                               "no switch")
    # the catalog's share changed: the unit gets the new one (a restart the operator asked for)
    changed = ws.green_model(
        "kimi_k25_int4", dict(ENTRIES["kimi_k25_int4"], serve=dict(
            ENTRIES["kimi_k25_int4"]["serve"], gpu_memory_utilization=0.9)),
        ws.refit_with(FIT_ARGS["kimi_k25_int4"])(0.9), "cold", "vllm-kimi_k25_int4.service")
    assert _decide(changed, record)["share"] == 0.9
    # a revision update starts afresh beside the sleepers (none here): the catalog's share
    update = _decide(_green("kimi_k25_int4", revision="c" * 40), record)
    assert (update["switch"], update["share"]) == (False, 0.92)
    assert "revision update" in update["reasons"][0]


def test_a_sleeping_green_wakes_with_its_share_and_blue_pins_beside_it():
    record = {"active": _recorded("minimax_m25"),
              "sleeping": [dict(_recorded("kimi_k25_int4", 0.9013), level=1)]}
    plan = _decide(_green("kimi_k25_int4"), record, mem=1024 * GIB)
    assert plan["green_wakes"]
    assert (plan["mode"], plan["level"], plan["share"]) == ("warm", 1, 0.9013)
    assert plan["fit"] is None  # its process keeps its memory: no refit
    # the sleeper of another revision is restarted, not woken: a fresh share
    other = _decide(_green("kimi_k25_int4", revision="c" * 40), record, mem=1024 * GIB)
    assert not other["green_wakes"]
    assert other["share"] == 0.8712


def test_a_sleepers_measured_residual_and_the_services_memory_from_nvidia_smi():
    """nvidia-smi counts blue's and the sleeper's processes in memory.used; the plan takes
    them out (blue's sleep frees its memory; the sleeper is counted by its residual,
    measured from its own process)."""
    gpus_seen = [{"index": i, "uuid": f"GPU-{i}", "memory_total_bytes": RTX["memory_total_bytes"],
                  "memory_used_bytes": 90 * GIB + 3 * GIB} for i in range(8)]
    blue_procs = [{"pid": 100, "gpu_index": i, "used_memory_bytes": 90 * GIB} for i in range(8)]
    sleeper_procs = [{"pid": 200, "gpu_index": i, "used_memory_bytes": 3 * GIB}
                     for i in range(8)]
    facts = {"gpus": gpus_seen, "processes": blue_procs + sleeper_procs}
    pids = {"vllm-minimax_m25.service": {100}, "vllm-qwen.service": {200}}
    green = _green("kimi_k25_int4")
    gpus = ws.host_gpus(facts, RTX, pids, green)
    assert [g["memory_used_bytes"] for g in gpus] == [0] * 8
    sleeper = dict(_recorded("minimax_m25"), model="qwen", unit="vllm-qwen.service", level=2)
    record = {"active": _recorded("minimax_m25"), "sleeping": [sleeper]}
    plan = ws.decide(green, record, gpus=gpus, host=Meminfo(1024 * GIB), gpu_facts=facts,
                     exclude_pids=pids, settings={"standby_max": 2})
    torch_total = ws._gpu_list(gpus)[0]["torch_total_bytes"]
    tp_residual = ws.sleep_residual_bytes(8)[0]
    assert plan["gpu_checks"][0]["residual_bytes"] == tp_residual + 3 * GIB
    expected = ws._floor_share(0.92 - (tp_residual + 3 * GIB) / torch_total)
    assert plan["share"] == expected == 0.8396


def test_a_record_from_before_sizing_is_switched_cold_once():
    active = _recorded("minimax_m25")
    active.pop("sizing")
    plan = _decide(_green("kimi_k25_int4"), {"active": active}, mem=1024 * GIB)
    assert plan["mode"] == "cold"
    assert plan["reasons"] == ["minimax_m25 is not sized (no fit): its memory cannot be planned"]
    assert plan["share"] == 0.92


def test_no_meminfo_is_level_2_and_says_so():
    # Level 2 is refused to MiniMax-M2.5 under auto (its architecture's level-2 wake failed
    # on the GPU: ws.LEVEL_2_FAILS), so it stops; asked for level 2, it is refused.
    plan = _decide(_green("kimi_k25_int4"), {"active": _recorded("minimax_m25")})
    assert (plan["mode"], plan["level"]) == ("cold", None)
    assert plan["reasons"] == [
        "minimax_m25 is MiniMaxM2ForCausalLM and level 1 does not fit (host memory not known "
        "(no host_memory_bytes in the hardware profile, no /proc/meminfo read)); level 2: "
        + ws.LEVEL_2_FAILS["MiniMaxM2ForCausalLM"]
        + ". It stops instead (vllm_fleet_sleep_level: 2 is refused for it)"]
    two = _decide(_green("kimi_k25_int4"), {"active": _recorded("minimax_m25")},
                  sleep_level="2")
    assert (two["mode"], two["level"]) == ("refused", None)
    assert two["refused"] == ws.refuse_level_2(ws.recorded_model(_recorded("minimax_m25")))


def test_a_record_without_the_architecture_never_sleeps_at_level_2_under_auto():
    """A record written before the sizing kept the architecture: a MiniMax-M2 blue read from
    it would otherwise sleep at level 2, and its wake killed the engine on a GPU (issue 43)."""
    old = _recorded("minimax_m25")
    del old["sizing"]["architecture"]
    plan = _decide(_green("kimi_k25_int4"), {"active": old})
    assert (plan["mode"], plan["level"]) == ("cold", None)
    assert plan["reasons"][0].startswith(
        "minimax_m25 is of an architecture not recorded and level 1 does not fit")
    assert "level 2: its architecture is not in the deployment record" in plan["reasons"][0]
    two = _decide(_green("kimi_k25_int4"), {"active": old}, sleep_level="2")
    assert (two["mode"], two["level"]) == ("warm", 2)  # asked for: tried anyway


def test_a_model_on_no_gpu_vllm_on_cpu_is_warm_at_the_level_asked_and_keeps_its_unit():
    """The lab: vLLM on CPU frees nothing asleep; the level is the one asked (auto: 1) and
    the unit gets no share."""
    cpu = {"repo_id": "vllm-fleet/tiny-mla", "gpus": [], "switch_mode": "warm",
           "revision": "d" * 40, "serve": {}}
    green = ws.green_model("tiny_mla", cpu, {}, "cold", "vllm-tiny_mla.service")
    active = {"model": "tiny_gqa", "unit": "vllm-tiny_gqa.service", "gpus": [],
              "revision": "e" * 40, "sleep_mode": True}
    plan = ws.decide(green, {"active": active}, gpus=[], host=Meminfo(4 * GIB))
    assert (plan["mode"], plan["level"], plan["share"], plan["sizing"]) == ("warm", 1, None, {})
    assert plan["reasons"][-1] == ("no GPU: its sleep frees no GPU memory (vLLM on CPU "
                                   "ignores it); level 1 (vllm_fleet_sleep_level: auto)")
    two = ws.decide(green, {"active": active}, gpus=[], settings={"sleep_level": "2"})
    assert two["level"] == 2
    cold_blue = dict(active, sleep_mode=False)
    cold = ws.decide(green, {"active": cold_blue}, gpus=[])
    assert cold["mode"] == "cold"
    assert "tiny_gqa runs without sleep mode" in cold["reasons"][0]


def test_the_module_reads_the_record_and_meminfo_from_the_host(tmp_path):
    state = tmp_path / "vllm_fleet.fact"
    state.write_text(json.dumps({"active": _recorded("minimax_m25"), "previous": None,
                                 "history": []}))
    params = {"model": "kimi_k25_int4", "unit": "vllm-kimi_k25_int4.service",
              "entry": ENTRIES["kimi_k25_int4"], "fit": FITS["kimi_k25_int4"],
              "fit_args": FIT_ARGS["kimi_k25_int4"], "revision": None,
              "state_file": str(state), "gpu_facts": None, "gpu_profile": RTX,
              "switch_mode": "cold", "sleep_level": "auto", "warm_standby_max": 1,
              "strategy": "sequential",
              "sleep_residual_bytes": None,
              "host_reserve_bytes": ws.DEFAULT_HOST_RESERVE_BYTES}
    plan = warm_switch_plan.plan(params, None, Meminfo(512 * GIB))
    assert (plan["mode"], plan["level"], plan["share"]) == ("warm", 1, 0.8712)
    assert plan["host"]["available_bytes"] == 480 * GIB
    plan = warm_switch_plan.plan(params, None, Meminfo(200 * GIB))
    assert (plan["mode"], plan["level"]) == ("cold", None)  # MiniMax: no level 2 under auto
    plan = warm_switch_plan.plan(dict(params, sleep_level="2"), None, Meminfo(200 * GIB))
    assert (plan["mode"], plan["level"]) == ("refused", None)  # MiniMax: a GPU run failed
    assert plan["refused"].startswith("vllm_fleet_sleep_level is 2, but minimax_m25 must not "
                                      "sleep at level 2: its level-2 wake failed on the GPU")
    no_gpus = dict(params, gpu_profile=None)
    with pytest.raises(ws.WarmSwitchError, match=r"wanted GPU facts .* or a hardware profile"):
        warm_switch_plan.plan(no_gpus, None, Meminfo(200 * GIB))


def test_a_parallel_switch_on_disjoint_gpus_is_unchanged():
    """auto with disjoint GPU sets is parallel (vllm_cutover's rule): not warm, green at its
    catalog share, as the issue keeps parallel switches as they are."""
    green = _green("kimi_k25_int4", gpus=[4, 5, 6, 7])
    active = dict(_recorded("minimax_m25"), gpus=[0, 1, 2, 3])
    plan = _decide(green, {"active": active}, mem=1024 * GIB, strategy="auto")
    assert (plan["mode"], plan["share"]) == ("cold", 0.92)
    assert plan["reasons"][0].startswith("a parallel switch")
    shared = _decide(_green("kimi_k25_int4"), {"active": _recorded("minimax_m25")},
                     mem=1024 * GIB, strategy="auto")
    assert (shared["mode"], shared["level"]) == ("warm", 1)


# --- the level fits the model: speculative decoding (issue 44 item 4) --------------------------

def _spec_blue(speculative, architecture="Qwen3MoeForCausalLM"):
    """MiniMax-M2.5's record with another architecture (one no run showed failing at level 2)
    and the speculative decoding it serves with."""
    active = _recorded("minimax_m25")
    active["sizing"] = dict(active["sizing"], architecture=architecture, speculative=speculative)
    return {"active": active}


def _verified_blue(architecture="DeepseekV3ForCausalLM", vllm_version="0.26.0-cuda",
                   quantization="none", speculative=None):
    """MiniMax-M2.5's record as a model a GPU run showed waking from level 2 beside a sleeper:
    by default DeepSeek-V3 (MLA), unquantized, on vLLM 0.26.0 (ws.LEVEL_2_WORKS)."""
    blue = _spec_blue(speculative, architecture)
    blue["active"]["sizing"]["quantization"] = quantization
    blue["active"]["sizing"]["mla"] = architecture == "DeepseekV3ForCausalLM"
    blue["active"]["vllm_version"] = vllm_version
    return blue


@pytest.mark.parametrize(("entry", "method"), [
    ({"serve": {"speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}}, "mtp"),
    ({"serve": {"speculative_config": '{"method": "eagle3", "model": "x/y"}'}}, "eagle3"),
    ({"serve": {"speculative_config": {"model": "x/draft"}}}, "speculative decoding"),
    ({"extra_args": ["--speculative-config", '{"method":"mtp"}']}, "mtp"),
    ({"extra_args": ['--speculative_config={"method":"eagle3"}']}, "eagle3"),
    ({"extra_args": ["--speculative-config.method", "mtp"]}, "mtp"),
    ({"serve": {"max_model_len": 4096}, "extra_args": ["--enforce-eager"]}, None),
    ({"serve": {"speculative_config": None}}, None),
])
def test_the_speculative_decoding_an_entry_asks_for_is_read_in_every_spelling(entry, method):
    assert ws.speculative_method(entry) == method


def test_a_model_that_decodes_speculatively_never_sleeps_at_level_2_under_auto():
    """Level 1 does not fit (no MemAvailable): without speculative decoding this blue sleeps at
    level 2; with MTP it stops, the reason naming vllm#52479 and #55013."""
    green = _green("kimi_k25_int4")
    plain = _decide(green, _verified_blue())
    assert (plain["mode"], plain["level"]) == ("warm", 2)
    plan = _decide(green, _verified_blue(speculative="mtp"))
    assert (plan["mode"], plan["level"], plan["share"]) == ("cold", None, 0.92)
    assert plan["reasons"] == [(
        "minimax_m25 decodes speculatively (mtp) and level 1 does not fit (host memory not "
        "known (no host_memory_bytes in the hardware profile, no /proc/meminfo read)); level "
        "2: it decodes speculatively (mtp): its wake reloads the target model's weights only "
        "(vLLM's reload_weights): after a level-2 wake MTP drafts are all rejected "
        "(vllm-project/vllm#52479: decode ~0.5x) and EAGLE3 crashes (vllm-project/vllm#55013)"
        ". It stops instead (vllm_fleet_sleep_level: 2 is refused for it)")]
    # Level 1 fits: it sleeps at level 1 (its weights come back as they were).
    roomy = _decide(green, _spec_blue("mtp"), mem=512 * GIB)
    assert (roomy["mode"], roomy["level"]) == ("warm", 1)


def test_level_2_asked_for_a_model_that_decodes_speculatively_is_refused():
    plan = _decide(_green("kimi_k25_int4"), _spec_blue("eagle3"), mem=512 * GIB, sleep_level="2")
    assert (plan["mode"], plan["level"]) == ("refused", None)
    assert plan["refused"] == (
        "vllm_fleet_sleep_level is 2, but minimax_m25 must not sleep at level 2: it decodes "
        "speculatively (eagle3): " + ws.SPECULATIVE_LEVEL_2 + ". Set vllm_fleet_sleep_level: "
        "1 (level 1 keeps its weights in host RAM) or auto (level 1 where the host RAM holds "
        "it, else a cold switch), or vllm_fleet_switch_mode: cold")
    assert plan["lines"] == ["minimax_m25 -> kimi_k25_int4: REFUSED",
                             f"  why:   {plan['refused']}"]


def test_the_module_fails_a_refused_level_2_before_any_change(tmp_path, monkeypatch):
    state = tmp_path / "vllm_fleet.fact"
    state.write_text(json.dumps({"active": _recorded("minimax_m25"), "previous": None,
                                 "history": []}))
    params = {"model": "kimi_k25_int4", "unit": "vllm-kimi_k25_int4.service",
              "entry": ENTRIES["kimi_k25_int4"], "fit": FITS["kimi_k25_int4"],
              "fit_args": FIT_ARGS["kimi_k25_int4"], "revision": None,
              "state_file": str(state), "gpu_facts": None, "gpu_profile": RTX,
              "switch_mode": "cold", "sleep_level": "2", "warm_standby_max": 1,
              "strategy": "sequential", "sleep_residual_bytes": None,
              "host_reserve_bytes": ws.DEFAULT_HOST_RESERVE_BYTES}
    failed = {}

    class Module:
        def __init__(self, **_kwargs):
            self.params = params

        def fail_json(self, **kwargs):
            failed.update(kwargs)
            raise SystemExit(1)

        def exit_json(self, **kwargs):
            raise AssertionError(f"exit_json {kwargs}")

        def run_command(self, argv):
            return 1, "", "not here"

    monkeypatch.setattr(warm_switch_plan, "AnsibleModule", Module)
    monkeypatch.setattr(warm_switch_plan.gpu_host, "LiveHost",
                        lambda *_a: Meminfo(512 * GIB))
    with pytest.raises(SystemExit):
        warm_switch_plan.main()
    assert failed["msg"].startswith(
        "warm switch to kimi_k25_int4 refused before any change: vllm_fleet_sleep_level is 2, "
        "but minimax_m25 must not sleep at level 2: its level-2 wake failed on the GPU")
    assert failed["warm_plan"]["mode"] == "refused"


def test_the_record_keeps_the_speculative_decoding_and_an_old_record_is_not_trusted_at_level_2():
    green = _green("kimi_k25_int4", serve=dict(ENTRIES["kimi_k25_int4"]["serve"],
                                               speculative_config={"method": "eagle3"}))
    assert ws.record_sizing(green, 0.9)["speculative"] == "eagle3"
    old = _spec_blue(None)
    del old["active"]["sizing"]["speculative"]  # written before the record kept it
    plan = _decide(_green("kimi_k25_int4"), old)
    assert (plan["mode"], plan["level"]) == ("cold", None)
    assert "whether it decodes speculatively is not in the deployment record" in (
        plan["reasons"][0])
    # Not refused when asked: no run or report is known for it.
    assert _decide(_green("kimi_k25_int4"), old, sleep_level="2")["level"] == 2


def _measured(bytes_per_gpu, share=0.92, tp=8, vllm="0.33.0-cuda"):
    """record["residuals"] as a warm switch wrote it once MiniMax slept (cutover.py)."""
    return {"minimax_m25": {"bytes_per_gpu": bytes_per_gpu, "per_gpu": {},
                            "tensor_parallel_size": tp, "gpu_memory_utilization": share,
                            "measured_at": "2027-01-15T08:00:00+00:00", "vllm": vllm}}


def test_the_plan_uses_the_residual_this_host_measured_at_blues_last_sleep():
    """Issue 44 case 3: the residual a sleeper keeps is read at its sleep and recorded; the
    plan uses the recorded figure (here Kimi-K2.6 TP8's 7,121 MiB per GPU asleep, vllm
    #47654) in place of the default, and green's share is lowered by it."""
    active = _recorded("minimax_m25", vllm_version="0.33.0-cuda")
    default = _decide(_green("kimi_k25_int4"), {"active": active}, mem=512 * GIB)
    measured = _decide(_green("kimi_k25_int4"),
                       {"active": active, "residuals": _measured(7121 * 1024**2)}, mem=512 * GIB)
    assert measured["residual_bytes_per_gpu"] == 7121 * 1024**2
    assert measured["residual_source"] == (
        "6.95 GiB measured on this host at minimax_m25's sleep of 2027-01-15T08:00:00+00:00 "
        "(nvidia-smi, vLLM 0.33.0-cuda)")
    assert default["residual_bytes_per_gpu"] == ws.sleep_residual_bytes(8)[0]
    # with the real TP8 residual Kimi INT4 does not fit beside MiniMax asleep (the issue's
    # point): the plan says cold, by how much, instead of a warm switch that rolls back
    assert (default["mode"], measured["mode"]) == ("warm", "cold")
    assert measured["reasons"][0].startswith("GPU 0-7 short by 2.18 GiB each")
    smaller = _decide(_green("kimi_k25_int4"),
                      {"active": active, "residuals": _measured(2 * GIB)}, mem=512 * GIB)
    # 0.92 less 2 GiB of an RTX PRO 6000's 94.96 GiB torch-visible memory, floored
    assert (smaller["mode"], smaller["share"]) == ("warm", 0.8989)


@pytest.mark.parametrize("changes", [{"share": 0.9}, {"tp": 4}, {"vllm": "0.32.0-cuda"},
                                     {"bytes_per_gpu": "garbage"}])
def test_a_residual_measured_another_way_is_not_used(changes):
    """Measured at another share (KV cache), layout or vLLM: the default stands."""
    args = dict({"bytes_per_gpu": 7121 * 1024**2}, **changes)
    active = _recorded("minimax_m25", vllm_version="0.33.0-cuda")
    plan = _decide(_green("kimi_k25_int4"),
                   {"active": active, "residuals": _measured(**args)}, mem=512 * GIB)
    assert plan["residual_bytes_per_gpu"] == ws.sleep_residual_bytes(8)[0]


# --- the level fits the model: an allow-list of GPU runs (issue 44 case 4) ---------------------

def test_auto_sleeps_at_level_2_a_model_whose_level_2_wake_a_gpu_run_showed_working():
    """DeepSeek-V3 (MLA), unquantized, on vLLM 0.26.0: the H200 run of 05:21 woke it from level
    2 beside the MiniMax-M2 blue asleep at level 1, with identical greedy ids. Level 1 does not
    fit (no MemAvailable): it sleeps at level 2, and the plan names the run."""
    plan = _decide(_green("kimi_k25_int4"), _verified_blue())
    assert (plan["mode"], plan["level"]) == ("warm", 2)
    assert plan["reasons"][-1].endswith(
        "; a GPU run showed its level-2 wake working: DeepseekV3ForCausalLM on vLLM 0.26.0 "
        "(H200, unquantized weights: bench/output/gpu/gpu-h200-vllm-0.26.0-20261206T0521.json "
        "level2.deepseek_v3_mla)")


QWEN3_MOE_ALONE = (
    "the GPU run that shows a level-2 wake of Qwen3MoeForCausalLM working on vLLM 0.26.0 woke "
    "it alone on the GPU (H200: bench/output/gpu/gpu-h200-vllm-0.26.0-20261206T0526.json "
    "shapes.qwen3_moe_m2.level2); a warm switch wakes it beside a sleeper, and issue 43's "
    "H100 80GB run (vLLM 0.26.0, 2026-12-06) saw it fail there: after the level-2 wake the "
    "process kept +6.75 GiB of reload buffers, and beside a sleeper at share 0.9 the "
    "wake_up?tags=kv_cache step ran out of memory, the process left alive and never answering")


def test_auto_stops_a_model_whose_run_woke_it_from_level_2_alone():
    """Qwen3-MoE on vLLM 0.26.0: the H200 run of 05:26 woke it from level 2 alone on the GPU;
    beside a sleeper (as a warm switch wakes it) issue 43's H100 run saw the kv_cache wake run
    out of memory. Its row stays as evidence; auto stops it, naming the run and the OOM."""
    plan = _decide(_green("kimi_k25_int4"), _verified_blue("Qwen3MoeForCausalLM"))
    assert (plan["mode"], plan["level"], plan["share"]) == ("cold", None, 0.92)
    assert plan["reasons"] == [(
        "minimax_m25 is Qwen3MoeForCausalLM and level 1 does not fit (host memory not known (no "
        "host_memory_bytes in the hardware profile, no /proc/meminfo read)); level 2: "
        + QWEN3_MOE_ALONE + ". It stops instead (vllm_fleet_sleep_level: 2 tries level 2 "
        "anyway)")]
    # asked for level 2: as before, level 2 said unverified, the reason naming the OOM
    asked = _decide(_green("kimi_k25_int4"), _verified_blue("Qwen3MoeForCausalLM"),
                    sleep_level="2")
    assert (asked["mode"], asked["level"]) == ("warm", 2)
    assert asked["reasons"][-1].endswith(
        "; unverified: " + QWEN3_MOE_ALONE + " (vllm_fleet_sleep_level: 2 asks for it; a wake "
        "that fails stops minimax_m25)")


def test_auto_stops_an_architecture_no_run_shows_on_the_vllm_it_runs_and_names_the_runs():
    """LlamaForCausalLM on the product's vLLM 0.33.0: no GPU run shows its level-2 wake
    working (the H100 run's llama_gqa level 2 could not be judged), so under auto it stops
    instead; the reason names the runs there are."""
    plan = _decide(_green("kimi_k25_int4"), _verified_blue("LlamaForCausalLM", "0.33.0-cuda"))
    assert (plan["mode"], plan["level"], plan["share"]) == ("cold", None, 0.92)
    assert plan["reasons"] == [(
        "minimax_m25 is LlamaForCausalLM and level 1 does not fit (host memory not known (no "
        "host_memory_bytes in the hardware profile, no /proc/meminfo read)); level 2: no GPU "
        "run shows a level-2 wake of LlamaForCausalLM working on vLLM 0.33.0 (no run of it on "
        "any version; runs exist for DeepseekV3ForCausalLM on vLLM 0.26.0 (H200, unquantized "
        "weights: bench/output/gpu/gpu-h200-vllm-0.26.0-20261206T0521.json "
        "level2.deepseek_v3_mla); Qwen3MoeForCausalLM on vLLM 0.26.0 (H200, unquantized "
        "weights, woken alone on the GPU: bench/output/gpu/gpu-h200-vllm-0.26.0-20261206T0526.json "
        "shapes.qwen3_moe_m2.level2)). It stops instead (vllm_fleet_sleep_level: 2 tries "
        "level 2 anyway)")]


def test_a_run_on_another_vllm_or_with_other_weights_does_not_count():
    """The version is matched exactly and a row covers the weights its run had."""
    newer = _decide(_green("kimi_k25_int4"), _verified_blue(vllm_version="0.33.0-cuda"))
    assert (newer["mode"], newer["level"]) == ("cold", None)
    assert ("level 2: no GPU run shows a level-2 wake of DeepseekV3ForCausalLM working on vLLM "
            "0.33.0 (runs show it working on DeepseekV3ForCausalLM on vLLM 0.26.0 (H200, "
            "unquantized weights: bench/output/gpu/gpu-h200-vllm-0.26.0-20261206T0521.json "
            "level2.deepseek_v3_mla)); MLA weights") in newer["reasons"][0]
    fp8 = _decide(_green("kimi_k25_int4"), _verified_blue(quantization="fp8"))
    assert (fp8["mode"], fp8["level"]) == ("cold", None)
    assert ("working on vLLM 0.26.0 with fp8 quantization (runs show it working on "
            "DeepseekV3ForCausalLM on vLLM 0.26.0 (H200, unquantized") in fp8["reasons"][0]
    unknown = _verified_blue()
    del unknown["active"]["vllm_version"]  # a record that does not say
    plan = _decide(_green("kimi_k25_int4"), unknown)
    assert (plan["mode"], plan["level"]) == ("cold", None)
    assert "level 2: the vLLM version it runs is not known" in plan["reasons"][0]


def test_an_explicit_level_2_no_run_shows_is_allowed_and_said_unverified():
    """vllm_fleet_sleep_level: 2 for a model no run showed failing nor working: the operator
    asked, so it sleeps at level 2; the plan says it is unverified and which runs exist."""
    blue = _verified_blue("LlamaForCausalLM", "0.33.0-cuda")
    plan = _decide(_green("kimi_k25_int4"), blue, mem=1024 * GIB, sleep_level="2")
    assert (plan["mode"], plan["level"]) == ("warm", 2)
    assert plan["reasons"][-1].startswith("level 2, as vllm_fleet_sleep_level asks (the host "
                                          "RAM would hold level 1: host RAM for level 1")
    assert ("; unverified: no GPU run shows a level-2 wake of LlamaForCausalLM working on "
            "vLLM 0.33.0 (no run of it on any version;") in plan["reasons"][-1]
    assert plan["reasons"][-1].endswith("(vllm_fleet_sleep_level: 2 asks for it; a wake that "
                                        "fails stops minimax_m25)")
    assert any("unverified" in line for line in plan["lines"])
    verified = _decide(_green("kimi_k25_int4"), _verified_blue(), sleep_level="2")
    assert (verified["level"], "unverified" in verified["reasons"][-1]) == (2, False)


def test_the_vllm_version_comes_from_the_catalog_entry_and_the_record():
    """One owner: the catalog entry's vllm.version (vllm_model installs it as
    vllm_install_version); the record keeps it as vllm_version '<version>-<variant>'."""
    assert _green("minimax_m25")["vllm_version"] == "0.33.0"
    assert ws.recorded_model(_recorded("minimax_m25"))["vllm_version"] == "0.33.0"
    assert [ws.recorded_vllm_version(v) for v in ("0.26.0-cuda", "0.32.0-cpu", "0.33.0", None,
                                                  "0.33.0-dev1")] == [
        "0.26.0", "0.32.0", "0.33.0", None, "0.33.0-dev1"]
    assert ws.recorded_model(_recorded("minimax_m25"))["quantization"] == "fp8"
    assert ws.quantization_method({}) is None


@pytest.mark.parametrize("where", ["active", "sleeping"])
def test_a_record_whose_share_is_not_a_number_is_refused_by_name_not_a_traceback(tmp_path,
                                                                                 where):
    """A record edited by hand (or by another tool) with a share that is not a number: the
    plan fails naming the entry and the field, before any change (it raised ValueError
    from float() before)."""
    entry = _recorded("minimax_m25")
    entry["sizing"]["gpu_memory_utilization"] = "ninety"
    record = ({"active": entry} if where == "active"
              else {"active": _recorded("kimi_k25_int4"), "sleeping": [dict(entry, level=1)]})
    state = tmp_path / "vllm_fleet.fact"
    state.write_text(json.dumps(dict(record, previous=None, history=[])))
    params = {"model": "kimi_k25_int4" if where == "active" else "minimax_m25",
              "unit": "vllm-x.service", "entry": ENTRIES["kimi_k25_int4"],
              "fit": FITS["kimi_k25_int4"], "fit_args": FIT_ARGS["kimi_k25_int4"],
              "revision": None, "state_file": str(state), "gpu_facts": None,
              "gpu_profile": RTX, "switch_mode": "warm", "sleep_level": "auto",
              "warm_standby_max": 1, "strategy": "sequential", "sleep_residual_bytes": None,
              "host_reserve_bytes": ws.DEFAULT_HOST_RESERVE_BYTES}
    with pytest.raises(ws.WarmSwitchError) as raised:
        warm_switch_plan.plan(params, None, Meminfo(512 * GIB))
    assert str(raised.value).startswith(
        "the deployment record's entry for 'minimax_m25' has a sizing that is not numbers "
        "(gpu_memory_utilization must be a number in (0, 1], got 'ninety'): {")
