# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The GPU suite: real `vllm serve` processes, the product's warm switch driving them.

Runs on any CUDA host with vLLM installed (no systemd, no network; `make bench-gpu`):

  python3 bench/gpu/suite.py --out bench/output/gpu [--models /tmp/gpu-models]
      [--phases switch,shapes] [--budget-s 3000]

It uses the first GPU nvidia-smi lists (GPU 0), at tensor parallel 1: keep it idle, and do
not narrow CUDA_VISIBLE_DEVICES (nvidia-smi's figures are GPU 0's). A run that could not
measure (no CUDA, a phase that failed) exits 1; its JSON is still written, as a finding.

Phases, most important first (each writes the JSON again, so a run cut short keeps what
it measured):

- switch: blue (the MiniMax-M2 shape) starts through the product's health gate
  (units.UnitGate over bench/gpu/procs.py's ProcessHost); the product's
  warm_switch.decide plans green (the DeepSeek-V3 MLA shape) from nvidia-smi and
  /proc/meminfo; blue sleeps through the product's Cutover._sleep_blue (its post-sleep
  check included); green starts at the share decide() gave; the warm return (green sleeps,
  blue wakes through Cutover._wake, its gate) is timed; more level-1 cycles of blue; greedy
  token ids and logprobs before and after every wake;
  the product's level-2 wake sequence (vllm_engine.wake_steps(2)) runs in it too, on the MLA and
  the MiniMax-M2 shapes;
- shapes: the Qwen3-MoE shape of MiniMax-M2 and a Llama GQA shape: cold start (and a
  second start with torch.compile's cache kept), level-1 and level-2 sleep and wake.

Every figure comes with the card, driver, CUDA, torch and vLLM versions. Output:
OUT/gpu-<card>-vllm-<version>-<start>.json, the servers' logs beside it, and a printed
table (bench/gpu/table.py).
"""

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "collections"))

import procs  # noqa: E402
import shapes  # noqa: E402
import table  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import (  # noqa: E402
    serve_args,
    vllm_engine,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (  # noqa: E402
    urllib_request,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import (  # noqa: E402
    cutover,
    listener,
    warm_switch,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import (  # noqa: E402
    fingerprint as prints,
)

GIB = 1024**3


class SessionProc(listener.ProcFs):
    """This host's /proc, where a unit's processes (its session, procs.ProcessHost: no
    systemd here) live in its stand-in cgroup, so the gate's listener check finds them."""

    def __init__(self, host):
        super().__init__()
        self.host = host

    def read(self, path):
        pid, _sep, name = path.partition("/")
        if name == "cgroup" and pid.isdigit():
            for unit in list(self.host.units):
                if int(pid) in self.host.pids(unit):
                    return f"0::{self.host.group(unit)}\n"
        return super().read(path)


# Environment for every process started here: no NVLink multicast (the lent machines'
# rule), no FlashInfer sampler (not installed: gpu-notes), vLLM's dev routes (sleep/wake).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0",
            "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            **dict([serve_args.DEV_MODE_ENV])}
PROMPT = "The quick brown fox jumps over the lazy dog. Tensor parallel splits"
FINGERPRINT_TOKENS = 24
# The share a catalog entry serves at when it names none: vLLM's default, as the product has it.
CATALOG_SHARE = vllm_engine.DEFAULT_GPU_MEMORY_UTILIZATION
MAX_MODEL_LEN = 4096
# vLLM's routes, as the product spells them (engine/vllm_engine.py).
SLEEP_1 = vllm_engine.sleep_path(1, vllm_engine.SLEEP_MODE_WAIT)
SLEEP_2 = vllm_engine.sleep_path(2, vllm_engine.SLEEP_MODE_WAIT)
WAKE_1 = vllm_engine.wake_steps(1)[0][1]  # level 1: one POST
STARTUP_TIMEOUT_S = 400
LEVEL2_RELOAD_TIMEOUT_S = 120
# The product's post-sleep check polls for SLEEP_CONFIRM_S (30 s) before it fails; here
# 8 s: a sleeper's memory settles in well under a second once /sleep answered.
POST_SLEEP_CONFIRM_S = 8.0
LAYERS = {"minimax_m2": 2, "deepseek_v3_mla": 2, "qwen3_moe_m2": 2, "llama_gqa": 16}


class Suite:
    def __init__(self, args):
        self.args = args
        self.deadline = time.monotonic() + args.budget_s
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.models_dir = Path(args.models)
        self.work = Path(tempfile.mkdtemp(prefix="gpu-suite-"))
        self.host = procs.ProcessHost(self.work / "cgroup")
        self.chost = cutover.Host(self.host.run_command, cgroup_root=self.host.cgroup_root,
                                  proc=SessionProc(self.host))
        self.made = {}
        self.layers = dict(LAYERS, **layer_counts(args.layers))
        self.port = args.port
        self.result = {"suite": "bench/gpu/suite.py", "started": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "env": env_facts(), "models": {},
            "servers": {}, "switch": {}, "level2": {}, "shapes": {}, "skipped": [],
            "errors": []}
        cutover.SLEEP_CONFIRM_S = POST_SLEEP_CONFIRM_S

    # -- bookkeeping ------------------------------------------------------------------
    def left(self):
        return self.deadline - time.monotonic()

    def save(self):
        env = self.result["env"]
        # one file per run (a later run on the same card must not overwrite an earlier one)
        stamp = self.result["started"].replace("-", "").replace(":", "")[:13]
        name = f"gpu-{env.get('card_slug', 'gpu')}-vllm-{env.get('vllm', 'unknown')}-{stamp}.json"
        path = self.out / name
        path.write_text(json.dumps(self.result, indent=1, sort_keys=True) + "\n",
                        encoding="utf-8")
        return path

    def note_error(self, where, exc):
        self.result["errors"].append({"where": where, "error": f"{type(exc).__name__}: {exc}"})
        print(f"[suite] {where}: {type(exc).__name__}: {exc}", flush=True)

    # -- models and servers -----------------------------------------------------------
    def model(self, shape):
        layers = self.layers.get(shape)
        if shape not in self.made and self.args.shrink == 1:
            earlier = shapes.made(self.models_dir, shape, layers)
            if earlier:
                self.made[shape] = self.result["models"][shape] = dict(earlier, reused=True)
        if shape not in self.made:
            start = time.monotonic()
            info = shapes.make(self.models_dir, shape, layers=layers, seed=0,
                               device=self.args.device, shrink=self.args.shrink)
            info["make_s"] = round(time.monotonic() - start, 1)
            self.made[shape] = info
            self.result["models"][shape] = info
            self.save()
        return self.made[shape]

    def svc(self, shape, share):
        info = self.model(shape)
        self.port += 1
        unit = f"vllm-bench-{shape}"
        argv = [*(shlex.split(self.args.server) if self.args.server else
                  [sys.executable, "-m", "vllm.entrypoints.cli.main"]), "serve", info["path"],
                "--served-model-name", shape, "--port", str(self.port),
                "--gpu-memory-utilization", str(share), serve_args.SLEEP_MODE,
                "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "64",
                "--tensor-parallel-size", "1", "--dtype", "bfloat16"]
        env = dict(os.environ, **SAFE_ENV)
        self.host.add(procs.Unit(unit, argv, env, self.work / f"{unit}.log"))
        return {"model": shape, "unit": unit, "url": f"http://127.0.0.1:{self.port}",
                "port": self.port, "served_model_name": shape, "gpus": [0],
                "startup_timeout_s": STARTUP_TIMEOUT_S, "startup_stall_s": 0,
                "share": share, "weights_bytes": info["safetensors_bytes"],
                # what the record keeps of a model (its plan's share): the product's
                # post-sleep check compares what this model needs at it with what is free
                "sizing": {"gpu_memory_utilization": share, "tensor_parallel_size": 1}}

    def cut(self, green, level=1):
        settings = cutover.Settings(switch_mode="warm", sleep_level=level)
        return cutover.Cutover(self.chost, green, str(self.work / "state.json"),
                               settings=settings, gpu_processes=procs.smi_snapshot)

    def start(self, svc, label):
        """Start through the product's health gate; the cold start and its split."""
        before = meminfo()
        gate = self.cut(svc).gate.start(svc, role="green")
        lines = self.host.log_lines(svc["unit"])
        figures, source = procs.log_figures(lines)
        entry = {"shape": svc["model"], "share": svc["share"], "gate": gate,
                 "time_to_healthy_s": gate.get("seconds"), "log_figures": figures,
                 "log_lines": source, "mem_available_before": before,
                 "error": None if gate.get("ok") else procs.first_error(lines)}
        if gate.get("ok"):
            entry.update(self.memory(svc))
        self.result["servers"][label] = entry
        self.save()
        return entry

    def memory(self, svc):
        snap = procs.smi_snapshot()
        pids = self.host.pids(svc["unit"])
        gpu = snap["gpus"][0]
        return {"gpu_bytes": procs.pids_bytes(snap, pids),
                "gpu_used_bytes": gpu["memory_used_bytes"],
                "gpu_total_bytes": gpu["memory_total_bytes"],
                "mem_available": meminfo(), **procs.proc_memory(pids)}

    def complete(self, svc, tokens=FINGERPRINT_TOKENS):
        """Greedy ids and logprobs (the fingerprint), with the seconds the request took."""
        payload = {"model": svc["served_model_name"], "prompt": PROMPT, "max_tokens": tokens,
                   "temperature": 0, "logprobs": 1, "ignore_eos": True,
                   "return_tokens_as_token_ids": True}
        start = time.monotonic()
        got = urllib_request("POST", svc["url"] + "/v1/completions", payload, 120.0)
        took = round(time.monotonic() - start, 3)
        if got.status != cutover.HTTP_OK:
            return {"ok": False, "s": took, "error": f"{got.status or got.error} {got.body[:200]}"}
        choice = json.loads(got.body)["choices"][0]
        logprobs = choice.get("logprobs") or {}
        ids = [int(str(t).split(":", 1)[1]) for t in logprobs.get("tokens") or []]
        lps = [round(float(v), 4) for v in logprobs.get("token_logprobs") or []]
        return {"ok": True, "s": took, "ids": ids, "logprobs": lps, "distinct": len(set(ids))}

    def post(self, svc, path, payload=None, timeout=600.0):
        start = time.monotonic()
        got = urllib_request("POST", svc["url"] + path, payload, timeout)
        return {"path": path, "status": got.status, "error": got.error,
                "body": (got.body or "")[:300], "s": round(time.monotonic() - start, 3)}

    # -- the product's decision --------------------------------------------------------
    def decide(self, blue, green, host_text=None):
        """warm_switch.decide for green with blue active, on what the host has now."""
        snap = procs.smi_snapshot()
        fit = {"weights_bytes_per_gpu": green["weights_bytes"], "gpus_needed": 1,
               "tensor_parallel_size": 1, "gpu_memory_utilization": CATALOG_SHARE,
               "sized": True, "kv_layout_specs": [{"type": "mla"}]
               if green["model"] in shapes.MLA_SHAPES else [],
               "quantization": {"method": None}}  # the shapes are bf16, unquantized
        entry = {"gpus": [0], "switch_mode": "warm",
                 "serve": {"gpu_memory_utilization": CATALOG_SHARE}}
        gmodel = warm_switch.green_model(green["model"], entry, fit, "warm", green["unit"])
        bfit = dict(fit, weights_bytes_per_gpu=blue["weights_bytes"],
                    kv_layout_specs=[{"type": "mla"}] if blue["model"] in shapes.MLA_SHAPES
                    else [],
                    architecture=((self.result["models"].get(blue["model"]) or {}).get(
                        "architectures") or [None])[0])
        bmodel = warm_switch.green_model(blue["model"], entry, bfit, "warm", blue["unit"])
        # as vllm_model records it: the vLLM this host runs, '-' its variant (the level-2
        # allow-list is matched on it)
        record = {"active": {"model": blue["model"], "unit": blue["unit"], "sleep_mode": True,
                             "gpus": [0], "vllm_version": f"{self.result['env']['vllm']}-cuda",
                             "sizing": warm_switch.record_sizing(bmodel, blue["share"])},
                  "sleeping": []}
        pids = {blue["unit"]: self.host.pids(blue["unit"])}
        gpus = warm_switch.host_gpus(snap, None, pids, gmodel)
        host = TextHost(host_text if host_text is not None else Path(
            "/proc/meminfo").read_text(encoding="utf-8"))
        plan = warm_switch.decide(gmodel, record, gpus=gpus, host=host,
                                  settings={"sleep_level": "auto"}, gpu_facts=snap,
                                  exclude_pids=pids)
        keep = ("mode", "level", "share", "catalog_share", "residual_bytes_per_gpu",
                "residual_source", "reasons", "summary", "host", "gpu_checks")
        out = {k: plan.get(k) for k in keep}
        # what it decided on, so a later product can decide again on the same figures
        out["inputs"] = {"gpus": gpus, "mem_available_bytes": procs.parse_kib_fields(
            host.text).get("MemAvailable"), "blue_weights_bytes": blue["weights_bytes"],
            "green_weights_bytes": green["weights_bytes"]}
        return out

    # -- phases -------------------------------------------------------------------------
    def phase_switch(self):  # noqa: PLR0915 - one scenario, told in order
        sw = self.result["switch"]
        blue = self.svc("minimax_m2", CATALOG_SHARE)
        green_info = self.model("deepseek_v3_mla")
        started = self.start(blue, "minimax_m2 (blue)")
        if not started["gate"].get("ok"):
            sw["error"] = "blue did not start"
            return
        sw["blue_fingerprint"] = f0 = self.complete(blue)
        green = self.svc("deepseek_v3_mla", CATALOG_SHARE)
        green["weights_bytes"] = green_info["safetensors_bytes"]
        sw["decide"] = plan = self.decide(blue, green)
        # What `auto` picks where the host's RAM cannot hold level 1 (MemAvailable: the
        # reserve plus half the weights), for each shape as blue: the level-2 rule per shape.
        short = warm_switch.DEFAULT_HOST_RESERVE_BYTES + blue["weights_bytes"] // 2
        sw["decide_host_short"] = {
            "mem_available_bytes": short,
            "minimax_m2": self.decide(blue, green, f"MemAvailable: {short // 1024} kB\n"),
            "deepseek_v3_mla": self.decide(dict(green, unit=blue["unit"]),
                                           dict(blue, unit=green["unit"]),
                                           f"MemAvailable: {short // 1024} kB\n")}
        self.save()
        # blue sleeps through the product: its /sleep, /is_sleeping, post-sleep check
        level = plan.get("level") or 1
        green["sizing"] = dict(green["sizing"], gpu_memory_utilization=plan.get("share")
                               or CATALOG_SHARE)
        pids = self.host.pids(blue["unit"])
        before = meminfo()
        cut = self.cut(green, level)
        # the product's fingerprint of drained blue, taken before it sleeps (issue 44)
        sw["blue_cold_because"] = cut._cold_because(blue, {})  # noqa: SLF001 - product's step
        start = time.monotonic()
        try:
            product_s = cut._sleep_blue(blue)  # noqa: SLF001 - the product's own step
            verdict, why = "passed", None
        except cutover.CutoverError as exc:
            verdict, why = "failed", exc.msg
        sleep_wall = round(time.monotonic() - start, 2)
        time.sleep(1.0)
        asleep = self.memory(blue)
        residual = asleep["gpu_bytes"]
        bound = warm_switch.sleep_residual_bytes(1)[0]
        room = warm_switch.green_room({"memory_total_bytes": asleep["gpu_total_bytes"],
                                       "memory_used_bytes": asleep["gpu_used_bytes"]},
                                      green["sizing"]["gpu_memory_utilization"])
        sw["blue_sleep"] = {
            "level": level, "first_sleep_s": sleep_wall,
            "product_sleep_s": product_s if verdict == "passed" else None,
            "post_sleep_check": verdict, "post_sleep_check_error": why,
            "product_residual_bound_bytes": bound, "residual_bytes": residual,
            "residual_within_default": residual <= bound,
            # the check compares green's need at its share with what is free (issue 44)
            "green_share_checked": green["sizing"]["gpu_memory_utilization"],
            "green_room": room, "product_residual_per_gpu": cut.blue_residual,
            "check_agrees_with_gpu": (verdict == "passed") == (room["short_bytes"] == 0),
            "mem_available_before": before, "asleep": asleep,
            "host_ram_drop_bytes": before - asleep["mem_available"],
            "host_ram_factor": round((before - asleep["mem_available"]) / blue["weights_bytes"], 3),
            "pids": sorted(pids)}
        self.save()
        # green starts at the share the product gave
        green["share"] = plan.get("share") or CATALOG_SHARE
        self.host.units.pop(green["unit"], None)
        green = self.svc_at(green, green["share"])
        gstart = self.start(green, "deepseek_v3_mla (green, beside blue asleep)")
        ok = bool(gstart["gate"].get("ok"))
        total = gstart.get("gpu_used_bytes")
        sw["green_start"] = {"share": green["share"], "vllm_accepted": ok,
                             "error": gstart.get("error"),
                             "gpu_used_fraction": round(total / gstart["gpu_total_bytes"], 4)
                             if ok else None,
                             "plan_used_fraction": CATALOG_SHARE}
        if not ok:
            self.save()
            return
        sw["green_fingerprint"] = g0 = self.complete(green)
        self.save()
        # the warm return through the product: green sleeps, blue wakes, blue's gate
        back = self.cut(blue, 1)
        back.green_asleep = {"level": level}  # blue wakes into what it does not hold yet
        sw["green_cold_because"] = back._cold_because(green, {})  # noqa: SLF001
        start = time.monotonic()
        try:
            back._sleep_blue(green)  # noqa: SLF001 - green is "blue" of the return
            g_verdict, g_why = "passed", None
        except cutover.CutoverError as exc:
            g_verdict, g_why = "failed", exc.msg
        green_sleep_s = round(time.monotonic() - start, 2)
        wake_start = time.monotonic()
        try:
            gate, woke_s = back._wake(blue, level, "blue",  # noqa: SLF001 - the product's wake
                                      fingerprint=cut.blue_fingerprint)
        except cutover.CutoverError as exc:
            gate, woke_s = {"ok": False, "stage": "wake", "detail": exc.msg}, None
        gate_s = round(time.monotonic() - wake_start, 2)
        if not gate.get("ok"):
            sw["return"] = {"gate": gate, "level": level, "process_alive":
                            self.host.units[blue["unit"]].running()}
            self.save()
            return
        f1 = self.complete(blue)
        sw["return"] = {"green_sleep_s": green_sleep_s, "green_post_sleep_check": g_verdict,
                        "green_post_sleep_check_error": g_why,
                        "green_residual_bytes": max(back.blue_residual.values())
                        if back.blue_residual else None,
                        "blue_wake_s": woke_s, "blue_wake_and_gate_s": gate_s,
                        "gate": gate, "outage_s": round(green_sleep_s + gate_s, 2),
                        "fingerprint": f1, "ids_identical": f1.get("ids") == f0.get("ids"),
                        "awake": self.memory(blue)}
        self.save()
        # later level-1 cycles of blue (green asleep beside it)
        cycles = []
        for _cycle in range(2):
            sleep = self.post(blue, SLEEP_1)
            time.sleep(0.5)
            mem = self.memory(blue)
            wake = self.post(blue, WAKE_1)
            first = self.complete(blue)
            cycles.append({"sleep_s": sleep["s"], "sleep_status": sleep["status"],
                           "residual_bytes": mem["gpu_bytes"], "locked_bytes":
                           mem["locked_bytes"], "rss_bytes": mem["rss_bytes"],
                           "wake_s": wake["s"], "wake_status": wake["status"],
                           "wake_to_first_completion_s": round(wake["s"] + first["s"], 3),
                           "ids_identical": first.get("ids") == f0.get("ids"),
                           "max_logprob_diff": max_diff(first.get("logprobs"),
                                                        f0.get("logprobs"))})
        sw["blue_cycles"] = cycles
        sw["blue_awake_after_cycles"] = self.memory(blue)
        sw["wake_rate_bytes_s"] = round(blue["weights_bytes"] / min(c["wake_s"] for c in cycles))
        self.save()
        self.level2_pair(blue, green, g0, f0)

    def svc_at(self, svc, share):
        """svc started afresh at another share (same shape, a new unit entry)."""
        new = self.svc(svc["model"], share)
        new["weights_bytes"] = svc["weights_bytes"]
        return new

    def level2_pair(self, blue, green, g0, f0):
        """Level 2 with the product's wake sequence: the MLA green, then the MiniMax blue."""
        l2 = self.result["level2"]
        self.post(blue, SLEEP_1)
        l2["deepseek_v3_mla"] = self.level2(green, g0, wake_first=True)
        self.host.stop(green["unit"])
        self.post(blue, WAKE_1)
        l2["minimax_m2"] = self.level2(blue, f0)
        self.host.stop(blue["unit"])
        self.save()

    def level2(self, svc, f0, wake_first=False):
        """Sleep at level 2, wake through the product's Cutover._wake (wake_steps(2))."""
        out = {}
        # reload_weights gets the unit's startup timeout in the product; a reload of these
        # weights from the page cache takes seconds, and a hung one must not eat the run.
        svc = dict(svc, startup_timeout_s=LEVEL2_RELOAD_TIMEOUT_S)
        if wake_first:
            out["wake_level1"] = self.post(svc, WAKE_1)
        # the product's fingerprint before the sleep, which its wake checks (issue 44)
        try:
            before = prints.take(svc["url"], svc["served_model_name"], self.chost.request)
        except prints.FingerprintError as exc:
            before = None
            out["fingerprint_error"] = exc.msg
        sleep = self.post(svc, SLEEP_2)
        time.sleep(0.5)
        out.update(sleep_s=sleep["s"], sleep_status=sleep["status"],
                   asleep=self.memory(svc), steps=[list(s[:2]) for s in vllm_engine.wake_steps(2)])
        start = time.monotonic()
        try:
            gate, woke_s = self.cut(svc, 2)._wake(svc, 2, "green",  # noqa: SLF001
                                                  fingerprint=before)
            out.update(wake_s=woke_s, gate=gate, ok=bool(gate.get("ok")))
        except cutover.CutoverError as exc:
            out.update(ok=False, error=exc.msg)
        out["wake_and_gate_s"] = round(time.monotonic() - start, 2)
        alive = self.host.units[svc["unit"]].running()
        out["process_alive"] = alive
        if out["ok"]:
            first = self.complete(svc)
            out.update(fingerprint=first, ids_identical=first.get("ids") == f0.get("ids"),
                       awake=self.memory(svc))
        else:
            health = urllib_request("GET", svc["url"] + "/health", None, 5.0)
            out["health_after"] = health.status or health.error
            out["log_error"] = procs.first_error(self.host.log_lines(svc["unit"])[-400:])
        return out

    def phase_shapes(self):
        for done in ("minimax_m2", "deepseek_v3_mla"):  # room on the disk for the next
            if done in self.made:
                shutil.rmtree(self.made[done]["path"], ignore_errors=True)
        for shape in ("qwen3_moe_m2", "llama_gqa"):
            if self.left() < 200:
                self.result["skipped"].append(f"shapes:{shape} (time)")
                continue
            svc = self.svc(shape, CATALOG_SHARE)
            entry = self.start(svc, f"{shape} (cold)")
            out = self.result["shapes"][shape] = {"cold": entry["gate"]}
            if not entry["gate"].get("ok"):
                continue
            f0 = self.complete(svc)
            before = meminfo()
            first = self.post(svc, SLEEP_1)
            time.sleep(0.5)
            mem = self.memory(svc)
            wake = self.post(svc, WAKE_1)
            f1 = self.complete(svc)
            out["level1"] = {"first_sleep_s": first["s"], "residual_bytes": mem["gpu_bytes"],
                             "host_ram_drop_bytes": before - mem["mem_available"],
                             "host_ram_factor": round((before - mem["mem_available"])
                                                      / svc["weights_bytes"], 3),
                             "locked_bytes": mem["locked_bytes"], "wake_s": wake["s"],
                             "ids_identical": f1.get("ids") == f0.get("ids"),
                             "fingerprint": f0}
            out["level2"] = self.level2(svc, f0)
            self.host.stop(svc["unit"])
            if self.left() > 150:
                again = self.svc(shape, CATALOG_SHARE)
                warm = self.start(again, f"{shape} (cache kept)")
                out["cache_kept"] = warm["gate"]
                self.host.stop(again["unit"])
            self.save()

    def run(self):
        phases = self.args.phases.split(",")
        try:
            for name in phases:
                if self.left() < 60:
                    self.result["skipped"].append(f"{name} (time)")
                    continue
                try:
                    getattr(self, f"phase_{name}")()
                except Exception as exc:  # noqa: BLE001 - a phase's failure is a finding
                    self.note_error(name, exc)
                finally:
                    self.host.stop_all()
                    self.save()
        finally:
            self.host.stop_all()
            self.result["product_calls"] = sorted(set(self.host.calls))
            self.result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            path = self.save()  # the servers' logs beside it, under the run's name
            for line in table.render(self.result):
                print(line)
            print(f"[suite] wrote {path}")
            for unit in self.host.units.values():
                with contextlib.suppress(OSError):
                    # progress bars' carriage returns as new lines (one ending per line)
                    (self.out / f"{path.stem}.{unit.name}.log").write_bytes(
                        unit.log_path.read_bytes()[-400_000:].replace(b"\r\n", b"\n")
                        .replace(b"\r", b"\n"))


PHASES = ("switch", "shapes")


def layer_counts(text):
    """'minimax_m2=4,deepseek_v3_mla=4' -> {shape: layers}; refuses an unknown shape."""
    counts = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        shape, _sep, value = item.partition("=")
        if shape not in shapes.SHAPES or not value.isdigit() or int(value) < 1:
            raise SystemExit(f"--layers: {item!r} is not SHAPE=N (shapes: "
                             f"{', '.join(shapes.SHAPES)})")
        counts[shape] = int(value)
    return counts


class TextHost:
    """warm_switch's host: read('meminfo') -> /proc/meminfo's text."""

    def __init__(self, meminfo_text):
        self.text = meminfo_text

    def read(self, key):
        return self.text if key == "meminfo" else None


def meminfo():
    return procs.parse_kib_fields(Path("/proc/meminfo").read_text(encoding="utf-8"))[
        "MemAvailable"]


def max_diff(one, two):
    if not one or not two:
        return None
    return round(max(abs(a - b) for a, b in zip(one, two, strict=False)), 4)


def version_of(name):
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def env_facts():
    facts = {"python": platform.python_version(), "vllm": version_of("vllm"),
             "transformers": version_of("transformers")}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, check=True).stdout.splitlines()[0]
        name, driver, total = (c.strip() for c in out.split(","))
        facts.update(card=name, driver=driver, gpu_memory_mib=int(total),
                     card_slug=name.lower().replace("nvidia ", "").replace(" ", "-"))
    except (OSError, subprocess.CalledProcessError, IndexError, ValueError) as exc:
        facts["card_error"] = str(exc)
    try:
        import torch

        facts.update(torch=torch.__version__, cuda=torch.version.cuda)
    except ImportError:
        facts["torch"] = None
    with contextlib.suppress(OSError, KeyError):
        facts["mem_total_bytes"] = procs.parse_kib_fields(
            Path("/proc/meminfo").read_text(encoding="utf-8"))["MemTotal"]
    return facts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "output" / "gpu"),
                        help="where the run's JSON and its servers' logs go")
    parser.add_argument("--models", default=str(Path(tempfile.gettempdir()) / "gpu-models"),
                        help="where the random-weight models are made (and reused; the "
                             "default layers take about 45 GiB)")
    parser.add_argument("--phases", default="switch,shapes",
                        help="comma-separated, in order: " + ", ".join(PHASES))
    parser.add_argument("--budget-s", type=float, default=3000.0,
                        help="seconds for the whole run; a phase with less than 60 s left is "
                             "skipped (and named)")
    parser.add_argument("--port", type=int, default=8100, help="the servers' port (loopback)")
    parser.add_argument("--server", default="",
                        help="the command before `serve` (default: python3 -m "
                             "vllm.entrypoints.cli.main; the suite's test: a stand-in)")
    parser.add_argument("--device", default="cuda", help="where the weights are made")
    parser.add_argument("--layers", default="",
                        help="layers per shape, e.g. minimax_m2=4 (27.35 GiB: MiniMax-M2.5's "
                             "per-GPU share at TP 8); default: " + ", ".join(
                                 f"{k}={v}" for k, v in LAYERS.items()))
    parser.add_argument("--shrink", type=int, default=1,
                        help="divide the shapes' widths (the suite's test on a CPU)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.phases.split(",") if name not in PHASES]
    if unknown:
        parser.error(f"--phases: no phase {', '.join(map(repr, unknown))} (phases: "
                     f"{', '.join(PHASES)})")
    if args.device == "cuda":
        cuda_or_exit()
    suite = Suite(args)
    suite.run()
    return 1 if suite.result["errors"] else 0


def cuda_or_exit():
    """Refuse at once, before a model is made, where this Python cannot use a GPU."""
    try:
        import torch  # only the suite's real run needs it
    except ImportError as exc:
        raise SystemExit(f"bench/gpu/suite.py: {sys.executable} cannot import torch ({exc}): "
                         "run it with the Python that has vLLM and torch (make bench-gpu "
                         "GPU_PYTHON=...; docs/gpu-suite.md)") from None
    if not torch.cuda.is_available():
        raise SystemExit(f"bench/gpu/suite.py: torch {torch.__version__} in {sys.executable} "
                         f"sees no CUDA GPU (built for CUDA {torch.version.cuda}): nothing "
                         "measured")


if __name__ == "__main__":
    sys.exit(main())
