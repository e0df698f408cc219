# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""GPU fabric smoke test: a short NCCL all-reduce across exactly a model's GPUs.

Run before a cutover stops the old model: a hang at NCCL start (ACS redirect,
IOMMU, a broken P2P path) is what it catches, so it runs under a hard timeout
and its whole process group is killed when that passes. It uses the vLLM
virtualenv's own Python and torch (the NCCL the model will use) and small
buffers, so it fits beside a model that is serving.

Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError

MIB = 1024 * 1024
TIMED_OUT = 124  # the exit status timeout(1) uses; ours for a killed run

# Spawns one process per visible GPU (torch.multiprocessing), all-reduces a
# buffer once to check the sum, then times `iterations` all-reduces.
SMOKE_SCRIPT = r"""
import json, os, shutil, sys, tempfile, time, traceback


def worker(rank, world, cfg, init_file, outdir):
    import torch
    import torch.distributed as dist
    cuda = cfg["backend"] == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    device = "cuda" if cuda else "cpu"
    dist.init_process_group(cfg["backend"], init_method="file://" + init_file, rank=rank,
                            world_size=world)
    n = max(1, cfg["size_bytes"] // 4)
    x = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(x)
    if cuda:
        torch.cuda.synchronize()
    correct = bool(torch.all(x == world * (world + 1) / 2).item())
    y = torch.ones(n, dtype=torch.float32, device=device)
    dist.all_reduce(y)
    dist.barrier()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(cfg["iterations"]):
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / cfg["iterations"]
    name, bus, peers = "cpu", None, {}
    if cuda:
        props = torch.cuda.get_device_properties(rank)
        name = torch.cuda.get_device_name(rank)
        bus = "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0),
                                     getattr(props, "pci_bus_id", 0),
                                     getattr(props, "pci_device_id", 0))
        peers = {str(j): bool(torch.cuda.can_device_access_peer(rank, j))
                 for j in range(world) if j != rank}
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as handle:
        json.dump({"rank": rank, "correct": correct, "seconds": seconds, "peers": peers,
                   "name": name, "bus_id": bus}, handle)
    dist.destroy_process_group()


def main():
    cfg = json.loads(sys.argv[1])
    import torch
    import torch.multiprocessing as mp
    world = cfg["world"]
    if cfg["backend"] == "nccl" and torch.cuda.device_count() != world:
        print(json.dumps({"ok": False, "error": "CUDA sees %d device(s) with "
                          "CUDA_VISIBLE_DEVICES=%s, wanted %d" % (torch.cuda.device_count(),
                                          os.environ.get("CUDA_VISIBLE_DEVICES"), world)}))
        return
    outdir = tempfile.mkdtemp(prefix="vllm-fleet-nccl-")
    try:
        try:
            mp.spawn(worker, args=(world, cfg, os.path.join(outdir, "init"), outdir),
                     nprocs=world, join=True)
        except Exception:
            print(json.dumps({"ok": False, "error": traceback.format_exc()[-1500:]}))
            return
        ranks = []
        for rank in range(world):
            with open(os.path.join(outdir, "rank%d.json" % rank)) as handle:
                ranks.append(json.load(handle))
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    nccl = None
    if cfg["backend"] == "nccl":
        version = torch.cuda.nccl.version()
        nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    print(json.dumps({"ok": True, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                      "nccl": nccl, "ranks": ranks}))


if __name__ == "__main__":
    main()
"""


class SmokeError(FieldsError):
    """The smoke test failed; `fields` carry rc/stdout/stderr for fail_json."""


def run_with_timeout(argv, env, timeout_s, popen=subprocess.Popen):
    """Run argv in its own process group; kill the whole group after timeout_s.

    Returns (rc, stdout, stderr, timed_out). A timed-out run has rc TIMED_OUT.
    """
    proc = popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return TIMED_OUT, out, err, True
    return proc.returncode, out, err, False


def skip_reason(gpus, python, free_bytes_by_index, min_free_bytes):
    """Why the smoke test should not run, or None.

    free_bytes_by_index: {gpu index: free bytes} (None: not known).
    """
    if len(gpus) < 2:  # noqa: PLR2004 - a collective needs two ranks
        return f"the model uses {len(gpus)} GPU: no collective between GPUs to test"
    if len(set(gpus)) != len(gpus):
        return None  # let run() refuse it with a clear message
    if not python or not os.access(python, os.X_OK):
        return (
            f"no Python at {python!r} (the vLLM virtualenv is not installed yet, e.g. on a first "
            "deploy): the fabric is not tested"
        )
    if free_bytes_by_index is not None:
        low = {
            i: free_bytes_by_index.get(i)
            for i in gpus
            if free_bytes_by_index.get(i) is None or free_bytes_by_index[i] < min_free_bytes
        }
        if low:
            shown = ", ".join(
                f"GPU {i}: {'unknown' if b is None else f'{b / 2**30:.1f} GiB'}"
                for i, b in sorted(low.items())
            )
            return (
                f"too little free GPU memory beside what is running ({shown}; the test needs "
                f"{min_free_bytes / 2**30:.1f} GiB per GPU for a CUDA context and NCCL buffers)"
            )
    return None


def environment(base_env, gpus, extra=None):
    """The test's environment: the caller's, the model's NCCL settings, exactly its GPUs."""
    env = dict(base_env)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # nvidia-smi's index order
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def interpret(
    gpus, size_bytes, rc, out, err, timed_out, timeout_s, min_bus_bandwidth=0.0, backend="nccl"
):
    """Turn the script's run into a result dict, or raise SmokeError saying why."""
    where = f"{backend.upper()} all-reduce across GPUs {','.join(str(g) for g in gpus)}"
    if timed_out:
        raise SmokeError(
            f"{where} did not finish in {timeout_s} s and was killed: a hang at NCCL start is the "
            "sign of blocked PCIe peer-to-peer (ACS redirect on the bridges, an IOMMU translating "
            "DMA; see gpu_facts' fabric warnings); fix the fabric, or set NCCL_P2P_DISABLE=1 in "
            "the model's environment. Nothing was stopped.",
            rc=rc,
            stdout=out,
            stderr=err,
        )
    lines = [ln for ln in (out or "").splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        raise SmokeError(
            f"{where} failed (rc={rc}): {(err or out or '').strip()[-800:]}",
            rc=rc,
            stdout=out,
            stderr=err,
        )
    raw = json.loads(lines[-1])
    if not raw.get("ok"):
        raise SmokeError(f"{where} failed: {raw.get('error')}", rc=rc, stdout=out, stderr=err)
    ranks = raw["ranks"]
    wrong = [r["rank"] for r in ranks if not r["correct"]]
    if wrong:
        raise SmokeError(
            f"{where} returned a wrong sum on rank(s) {wrong}: data corruption on the path "
            "between the GPUs (check dmesg for AER/Xid errors)",
            rc=rc,
            stdout=out,
            stderr=err,
        )
    world = len(ranks)
    seconds = max(r["seconds"] for r in ranks)
    algbw = size_bytes / seconds if seconds > 0 else 0.0
    busbw = algbw * 2 * (world - 1) / world
    peers = {
        f"{gpus[r['rank']]}->{gpus[int(j)]}": ok for r in ranks for j, ok in r["peers"].items()
    }
    if not peers:
        peer_text = "peer access not checked (no CUDA)"
    elif all(peers.values()):
        peer_text = "peer access on between all GPUs"
    else:
        peer_text = "peer access OFF for " + ", ".join(k for k, v in sorted(peers.items()) if not v)
    result = {
        "gpus": list(gpus),
        "size_bytes": size_bytes,
        "time_per_all_reduce_s": seconds,
        "algorithm_bandwidth_bytes_per_s": algbw,
        "bus_bandwidth_bytes_per_s": busbw,
        "can_access_peer": peers,
        "devices": [
            {"gpu": gpus[r["rank"]], "name": r["name"], "bus_id": r["bus_id"]} for r in ranks
        ],
        "torch_version": raw.get("torch"),
        "torch_cuda_version": raw.get("torch_cuda"),
        "nccl_version": raw.get("nccl"),
        "msg": (
            f"{where}: {size_bytes // MIB} MiB in {seconds * 1e3:.3f} ms, bus bandwidth "
            f"{busbw / 1e9:.1f} GB/s, {peer_text}"
        ),
    }
    if min_bus_bandwidth and busbw < min_bus_bandwidth:
        raise SmokeError(
            f"{where}: bus bandwidth {busbw / 1e9:.2f} GB/s is below the "
            f"{min_bus_bandwidth / 1e9:.2f} GB/s wanted (min_bus_bandwidth): the GPUs talk "
            "through host memory or a degraded link",
            rc=rc,
            stdout=out,
            stderr=err,
            result=result,
        )
    return result


def run_smoke(
    python,
    gpus,
    *,
    size_bytes=32 * MIB,
    iterations=20,
    timeout_s=120,
    extra_env=None,
    base_env=None,
    runner=run_with_timeout,
    min_bus_bandwidth=0.0,
    backend="nccl",
):
    """Run the all-reduce; returns interpret()'s result or raises SmokeError.

    backend "gloo" runs the same script on CPU processes (tests without a GPU).

    The script goes to a private temporary file (torch's spawned workers import
    their function from the main script, which `python -c` would not give them).
    """
    if len(set(gpus)) != len(gpus):
        raise SmokeError(f"gpus lists a GPU twice: {list(gpus)}")
    cfg = json.dumps(
        {
            "world": len(gpus),
            "size_bytes": int(size_bytes),
            "iterations": int(iterations),
            "backend": backend,
        }
    )
    env = environment(os.environ if base_env is None else base_env, gpus, extra_env)
    workdir = tempfile.mkdtemp(prefix="vllm-fleet-smoke-")
    script = os.path.join(workdir, "nccl_all_reduce.py")
    try:
        with open(script, "w") as handle:
            handle.write(SMOKE_SCRIPT)
        rc, out, err, timed_out = runner([python, script, cfg], env, timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return interpret(
        gpus, int(size_bytes), rc, out, err, timed_out, timeout_s, min_bus_bandwidth, backend
    )
