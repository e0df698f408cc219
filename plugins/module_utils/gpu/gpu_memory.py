# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The cutover's GPU memory checks: is memory held that no visible process explains?

memory_snapshot() reads per-GPU used memory and processes afresh through a
`run_command` (after blue stopped, right before green starts);
unexplained_memory() compares them. Runs on target hosts: standard library
only. Units: bytes.
"""

from __future__ import annotations

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    GpuFactsError,
    _smi_said,
    parse_compute_apps,
    parse_query_gpu,
    split_smi_errors,
)


def unexplained_memory(facts, gpu_indices, threshold_bytes):
    """GPUs among gpu_indices with more memory in use than visible processes hold.

    Inside an LXC container nvidia-smi lists no process of another namespace,
    yet shows its memory as used. Returns one finding per GPU whose used memory
    exceeds the listed processes' sum by more than threshold_bytes:
    {"gpu_index", "pci_bus_id", "used_bytes", "explained_bytes",
    "unexplained_bytes", "msg"}. A GPU index the facts do not list is a finding
    too (its memory cannot be checked).
    """
    by_index = {g["index"]: g for g in facts.get("gpus") or []}
    findings = []
    for index in gpu_indices or []:
        gpu = by_index.get(int(index))
        if gpu is None:
            findings.append(
                {
                    "gpu_index": int(index),
                    "pci_bus_id": None,
                    "used_bytes": None,
                    "explained_bytes": None,
                    "unexplained_bytes": None,
                    "msg": f"GPU {index} is not listed by nvidia-smi: its memory cannot be checked",
                }
            )
            continue
        used = gpu.get("memory_used_bytes") or 0
        explained = sum(
            p.get("used_memory_bytes") or 0
            for p in facts.get("processes") or []
            if p.get("gpu_index") == gpu["index"]
        )
        unexplained = used - explained
        if unexplained > threshold_bytes:
            findings.append(
                {
                    "gpu_index": gpu["index"],
                    "pci_bus_id": gpu.get("pci_bus_id"),
                    "used_bytes": used,
                    "explained_bytes": explained,
                    "unexplained_bytes": unexplained,
                    "msg": (
                        f"GPU {gpu['index']} ({gpu.get('pci_bus_id')}) has {unexplained} bytes "
                        f"({unexplained / 2**30:.1f} GiB) in use that no visible process holds "
                        f"(used {used}, listed processes {explained}, threshold "
                        f"{threshold_bytes}): "
                        "a process outside this container (another LXC container or the host) "
                        "holds it"
                    ),
                }
            )
    return findings


def memory_snapshot(run_command, nvidia_smi="nvidia-smi"):
    """Fresh per-GPU used memory and processes (what unexplained_memory reads).

    For the cutover: read again after blue stopped, right before green starts.
    Raises GpuFactsError when nvidia-smi fails.
    """
    rc, out, err = run_command(
        [nvidia_smi, "--query-gpu=" + ",".join(QUERY_GPU_FIELDS), "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        raise GpuFactsError(f"nvidia-smi failed (rc={rc}): {_smi_said(out, err)}")
    gpus = parse_query_gpu(split_smi_errors(out)[0])
    rc, out, err = run_command(
        [
            nvidia_smi,
            "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
            "--format=csv,noheader,nounits",
        ]
    )
    if rc != 0:
        raise GpuFactsError(
            f"nvidia-smi --query-compute-apps failed (rc={rc}): {_smi_said(out, err)}"
        )
    uuid_index = {g["uuid"]: g["index"] for g in gpus}
    processes = parse_compute_apps(split_smi_errors(out)[0])
    for proc in processes:
        proc["gpu_index"] = uuid_index.get(proc["gpu_uuid"])
    return {"gpus": gpus, "processes": processes}
