# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""playbooks/plan.yml's warm switch plan (issue 35, item 2), run for real with
ansible-playbook on the rtx_pro_6000_x8_pcie profile: nothing new in the default
(cold) plan, so docs/plan-example.txt holds; with warm, MiniMax-M2.5 <-> Kimi-K2.5 INT4
at 512 GiB (the profile's host_memory_bytes) is level 1, 2, 1 and at 1 TiB level 1
throughout (the numbers: tests/unit/plugins/module_utils/test_warm_switch.py); the
catalog's new fields refused through the role's typed spec. No network: both models'
config.json ship in roles/vllm_model/files/model_configs/."""

import json
import os
import subprocess
import sys
from pathlib import Path

from repo_paths import ROOT

MODELS = "minimax_m25,kimi_k25_int4"


def plan(tmp_path, extra=None, models=MODELS):
    tmp_path.mkdir(parents=True, exist_ok=True)
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps(extra or {}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               HF_HOME=str(tmp_path / "controller-hf"), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-e",
         f"ansible_python_interpreter={sys.executable}", "-e", f"@{variables}",
         "-e", f"models={models}", "-e", "hardware=rtx_pro_6000_x8_pcie",
         str(ROOT / "playbooks" / "plan.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_the_default_plan_shows_no_warm_switch(tmp_path):
    rc, out = plan(tmp_path)
    assert rc == 0, out[-4000:]
    assert "Plan on rtx_pro_6000_x8_pcie" in out
    assert "Show the warm switch plan" in out  # the task ran, and was skipped
    assert "Warm switches" not in out


def test_warm_at_512_gib_and_at_1_tib(tmp_path):
    rc, out = plan(tmp_path / "512", {"vllm_fleet_switch_mode": "warm"})
    assert rc == 0, out[-4000:]
    assert ("Warm switches minimax_m25 <-> kimi_k25_int4: host memory 512.00 GiB less a reserve "
            "of 32.00 GiB; at most 1 sleeper(s) per host") in out
    assert "first switch: minimax_m25 -> kimi_k25_int4: WARM, level 1" in out
    assert "return: kimi_k25_int4 -> minimax_m25: COLD" in out
    # Issue 43's GPU figures: a level-1 sleeper pins up to 2x its weights (torch's pinned
    # allocator), and keeps 3.60 GiB at TP 1 plus the modelled TP8 buffers (4.63 GiB).
    assert "kimi_k25_int4 is MLA and level 1 does not fit (host RAM short by 1,086.34 GiB" in out
    assert "minimax_m25's pinned weights 429.68 GiB (2x: torch's pinned buffers)" in out
    assert "kimi_k25_int4 starts at gpu_memory_utilization 0.8712 (catalog 0.92" in out
    assert "beside 4.63 GiB of sleepers' residual (3.60 GiB measured at TP 1" in out
    rc, out = plan(tmp_path / "1t", {"vllm_fleet_switch_mode": "warm",
                                     "host_memory_bytes": 1024**4})
    assert rc == 0, out[-4000:]
    # With 1 TiB Kimi pinned at twice its 568.33 GiB still does not fit beside MiniMax.
    assert "return: kimi_k25_int4 -> minimax_m25: COLD" in out
    assert ("host RAM short by 574.34 GiB for level 1 (kimi_k25_int4's pinned weights "
            "1,136.66 GiB, 562.32 GiB free beside 429.68 GiB already pinned)") in out
    assert "return: minimax_m25 -> kimi_k25_int4: WARM, level 1" in out


def test_level_2_asked_is_refused_for_minimax_and_allowed_for_mla(tmp_path):
    """Issue 44 item 4: vllm_fleet_sleep_level 2 is refused where a GPU run showed the
    architecture's level-2 wake failing (MiniMax-M2), and stays allowed for MLA (Kimi), the
    plan saying no GPU run shows it working on the catalog's vLLM 0.33.0 (case 4)."""
    rc, out = plan(tmp_path, {"vllm_fleet_switch_mode": "warm", "vllm_fleet_sleep_level": "2"})
    assert rc == 0, out[-4000:]
    assert ("first switch: minimax_m25 -> kimi_k25_int4: REFUSED why: vllm_fleet_sleep_level "
            "is 2, but minimax_m25 must not sleep at level 2: its level-2 wake failed on the "
            "GPU (H100 80GB and H200, vLLM 0.26.0") in out
    assert "Set vllm_fleet_sleep_level: 1 (level 1 keeps its weights in host RAM)" in out
    assert "return: kimi_k25_int4 -> minimax_m25: WARM, level 2" in out
    assert ("unverified: no GPU run shows a level-2 wake of DeepseekV3ForCausalLM working on "
            "vLLM 0.33.0 (runs show it working on DeepseekV3ForCausalLM on vLLM 0.26.0") in out
    assert "return: minimax_m25 -> kimi_k25_int4: REFUSED" in out


def test_an_entrys_switch_mode_over_the_fleets(tmp_path):
    rc, out = plan(tmp_path, {"vllm_fleet_catalog_local": {
        "kimi_k25_int4": {"switch_mode": "warm"}}})
    assert rc == 0, out[-4000:]
    # Kimi is warm, MiniMax is cold: MiniMax cannot sleep (it ran without sleep mode),
    # and a switch to MiniMax is cold by its own mode.
    assert ("first switch: minimax_m25 -> kimi_k25_int4: COLD why: minimax_m25 runs without "
            "sleep mode") in out
    assert "return: kimi_k25_int4 -> minimax_m25: COLD why: switch mode of minimax_m25 is cold" \
        in out


def test_the_new_entry_fields_are_refused_through_the_typed_spec(tmp_path):
    rc, out = plan(tmp_path / "mode", {"vllm_fleet_catalog_local": {
        "minimax_m25": {"switch_mode": "hot"}}}, models="minimax_m25")
    assert rc == 2, out[-4000:]
    assert "value of switch_mode must be one of: cold, warm, got: hot" in out
    rc, out = plan(tmp_path / "load", {"vllm_fleet_catalog_local": {
        "minimax_m25": {"load_format": "dummy"}}}, models="minimax_m25")
    assert rc == 2, out[-4000:]
    assert ("value of load_format must be one of: auto, bitsandbytes, fastsafetensors, gguf, "
            "instanttensor, mistral, npcache, pt, runai_streamer, runai_streamer_sharded, "
            "safetensors, sharded_state, tensorizer, got: dummy") in out
    assert "Show the candidates side by side" not in out
