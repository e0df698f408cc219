# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Collect the GPU facts of one host, and judge what stops its GPUs from serving.

collect() asks nvidia-smi through a `run_command` and reads the kernel's own
lists (texts passed in: gpu_host.gather reads them from a live host or from
captures); runtime_problems() reads the device nodes and the CUDA check.
The parsers live in nvidia_smi.py, kernel_module.py and gpu_readers.py; the
cutover's memory checks in gpu_memory.py. Runs on target hosts: standard
library only.

Units: every memory figure returned is in BYTES (nvidia-smi reports MiB).
"""

from __future__ import annotations

import re

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_readers import (
    parse_lspci_n,
    parse_proc_gpus,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.kernel_module import (
    kernel_module_flavour,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    GpuFactsError,
    _smi_said,
    normalise_bus_id,
    parse_compute_apps,
    parse_query_gpu,
    parse_smi_xml,
    parse_topology,
    split_smi_errors,
)

_MISMATCH_RE = re.compile(r"Driver/library version mismatch", re.IGNORECASE)
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(\S+)")


def empty_facts(msg, nvidia_smi=None):
    """Facts for a host where nvidia-smi is absent or cannot talk to a driver."""
    return {
        "present": False,
        "nvidia_smi": nvidia_smi,
        "msg": msg,
        "gpu_count": 0,
        "gpus": [],
        "driver_version": None,
        "cuda_version": None,
        "kernel_module": {"flavour": "unknown", "version": None, "source": None},
        "driver_loaded": False,
        "topology": None,
        "processes": [],
        "pci_gpu_count": None,
        "pci_gpu_slots": [],
        "driver_gpu_slots": None,
        "expected_gpu_slots": [],
        "lost_gpus": [],
        "problems": [],
        "device_nodes": None,
        "cuda": {"checked": False},
        "container": None,
        "fabric": None,
    }


def _merge_gpus(query_gpus, xml_info, proc_gpus):
    by_uuid = {g["uuid"]: g for g in (xml_info or {}).get("gpus", []) if g.get("uuid")}
    merged = []
    for gpu in query_gpus:
        extra = by_uuid.get(gpu["uuid"], {})
        item = dict(gpu)
        item.pop("driver_version", None)
        for key in (
            "memory_total_bytes",
            "memory_used_bytes",
            "memory_free_bytes",
            "persistence_mode",
        ):
            if item.get(key) is None and extra.get(key) is not None:
                item[key] = extra[key]
        item["architecture"] = extra.get("architecture")
        minor = extra.get("minor_number")
        if minor is None and item.get("pci_bus_id"):
            minor = (proc_gpus or {}).get(normalise_bus_id(item["pci_bus_id"]), {}).get("minor")
        item["minor_number"] = minor
        merged.append(item)
    return merged


def _failure_problem(kmod_version, rc, out, err, lost, missing, listed_any):
    said = _smi_said(out, err)
    text = (
        f"the NVIDIA kernel module {kmod_version} is loaded but nvidia-smi failed (rc={rc}): {said}"
    )
    if _MISMATCH_RE.search(said):
        lib = _NVML_LIB_RE.search(said)
        text += (
            f". The userspace driver (NVML {lib.group(1) if lib else 'of another version'}) does "
            f"not match the kernel module {kmod_version}: install the userspace of exactly "
            f"{kmod_version} (in an LXC container: nvidia_driver_mode=container), or on a host "
            "reboot so the module of the installed driver loads"
        )
    if lost:
        text += ". GPUs nvidia-smi cannot open: " + ", ".join(
            f"{g['bus_id']} ({g['error']})" for g in lost
        )
    if missing and (lost or listed_any):
        text += ". NVIDIA GPUs on the PCI bus that nvidia-smi does not list: " + ", ".join(missing)
    elif missing:
        text += ". nvidia-smi reaches none of the NVIDIA GPUs on the PCI bus: " + ", ".join(missing)
    return text


def _lost_problem(listed, expected, lost, missing):
    parts = [
        (
            f"nvidia-smi lists {listed} GPU(s) but {len(expected)} NVIDIA GPU(s) are on the PCI "
            "bus and in the driver"
        )
    ]
    if lost:
        parts.append("it cannot open " + ", ".join(f"{g['bus_id']} ({g['error']})" for g in lost))
    if missing:
        parts.append("missing: " + ", ".join(missing))
    parts.append(
        "a GPU that fell off the bus (Xid 79 in the kernel log) needs a reset or a reboot; "
        "do not deploy on the GPUs that remain"
    )
    return "; ".join(parts)


def collect(
    run_command,
    nvidia_smi="nvidia-smi",
    proc_version_text=None,
    modinfo_license=None,
    lspci_text=None,
    proc_gpus_text=None,
    expected_bus_ids=None,
):
    """Gather GPU facts by calling nvidia-smi through `run_command`.

    run_command(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command.
    nvidia_smi is the path of the binary, or None when it is absent.
    proc_version_text: /proc/driver/nvidia/version (or None): the loaded kernel
    module's flavour and version are read from it on every path.
    modinfo_license: `modinfo -F license nvidia` output (fallback for the flavour).
    lspci_text: a PCI device listing (see parse_lspci_n).
    proc_gpus_text: /proc/driver/nvidia/gpus/*/information (the driver's own list).
    expected_bus_ids: the GPUs this machine must see (default: every NVIDIA GPU
    on the PCI bus and in the driver's list).

    Never raises for an absent or failing nvidia-smi: returns facts with
    `present: false` and a `msg` saying why. A driver that is loaded while
    nvidia-smi fails, or lists fewer GPUs than expected, is put in `problems`
    naming the bus ids (the caller fails on it; it is never a zero to fall
    back from). Raises GpuFactsError for text in an unrecognised format.
    """
    flavour, kmod_version, source = kernel_module_flavour(proc_version_text, modinfo_license)
    driver_loaded = source == "proc"
    pci_slots = parse_lspci_n(lspci_text) if lspci_text is not None else None
    proc_gpus = parse_proc_gpus(proc_gpus_text) if proc_gpus_text is not None else None
    if expected_bus_ids:
        expected = sorted({normalise_bus_id(b) for b in expected_bus_ids})
    else:
        expected = sorted(set(pci_slots or []) | set(proc_gpus or {}))

    if not nvidia_smi:
        msg = "nvidia-smi not found: no NVIDIA driver userspace installed"
        if driver_loaded:
            msg += (
                f" (the kernel module {flavour} {kmod_version} is loaded: install the userspace "
                "of exactly that version)"
            )
        facts = empty_facts(msg)
    else:
        facts = _ask_nvidia_smi(run_command, nvidia_smi, proc_gpus)
        _judge(facts, expected, driver_loaded, kmod_version)
    facts["kernel_module"] = {"flavour": flavour, "version": kmod_version, "source": source}
    facts["driver_loaded"] = driver_loaded
    facts["pci_gpu_slots"] = pci_slots or []
    facts["pci_gpu_count"] = None if pci_slots is None else len(pci_slots)
    facts["driver_gpu_slots"] = None if proc_gpus is None else sorted(proc_gpus)
    facts["expected_gpu_slots"] = expected
    return facts


def _processes(run_command, nvidia_smi, query_gpus, xml_info):
    uuid_index = {g["uuid"]: g["index"] for g in query_gpus}
    rc, out, _err = run_command(
        [
            nvidia_smi,
            "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
            "--format=csv,noheader,nounits",
        ]
    )
    if rc == 0:
        processes = parse_compute_apps(split_smi_errors(out)[0])
    else:
        processes = [
            {
                "pid": proc["pid"],
                "used_memory_bytes": proc["used_memory_bytes"],
                "gpu_uuid": gpu["uuid"],
            }
            for gpu in (xml_info or {}).get("gpus", [])
            for proc in gpu["processes"]
        ]
    for proc in processes:
        proc["gpu_index"] = uuid_index.get(proc["gpu_uuid"])
    return processes


def _ask_nvidia_smi(run_command, nvidia_smi, proc_gpus):
    """Facts from nvidia-smi's answers; on failure the facts say so (nvidia_smi_rc)."""
    query = [
        nvidia_smi,
        "--query-gpu=" + ",".join(QUERY_GPU_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    rc, out, err = run_command(query)
    table, lost = split_smi_errors(out)
    lost += split_smi_errors(err)[1]
    if rc != 0:
        facts = empty_facts(f"nvidia-smi failed (rc={rc}): {_smi_said(out, err)}", nvidia_smi)
        facts.update(nvidia_smi_rc=rc, nvidia_smi_said=(out, err), lost_gpus=lost)
        try:  # the GPUs it did list before failing, if any
            facts["gpus"] = parse_query_gpu(table)
        except GpuFactsError:
            facts["gpus"] = []
        return facts
    query_gpus = parse_query_gpu(table)
    rc, out, _err = run_command([nvidia_smi, "-q", "-x"])
    xml_info = parse_smi_xml(out) if rc == 0 and out.strip() else None
    rc, out, _err = run_command([nvidia_smi, "topo", "-m"])
    topology = parse_topology(out) if rc == 0 and out.strip() else None
    driver_version = (xml_info or {}).get("driver_version")
    if not driver_version and query_gpus:
        driver_version = query_gpus[0].get("driver_version")
    gpus = _merge_gpus(query_gpus, xml_info, proc_gpus)
    facts = empty_facts(f"{len(gpus)} NVIDIA GPU(s) found", nvidia_smi)
    facts.update(
        present=True,
        gpu_count=len(gpus),
        gpus=gpus,
        driver_version=driver_version,
        cuda_version=(xml_info or {}).get("cuda_version"),
        topology=topology,
        processes=_processes(run_command, nvidia_smi, query_gpus, xml_info),
        lost_gpus=lost,
    )
    return facts


def _judge(facts, expected, driver_loaded, kmod_version):
    """Put what stops the GPUs from serving into facts["problems"], naming bus ids."""
    listed = {normalise_bus_id(g["pci_bus_id"]) for g in facts["gpus"] if g.get("pci_bus_id")}
    lost = facts["lost_gpus"]
    lost_ids = {g["bus_id"] for g in lost}
    missing = [b for b in expected if b not in listed and b not in lost_ids]
    if not facts["present"]:
        # A failing nvidia-smi matters when the driver is loaded (else: not installed yet).
        facts["gpus"] = []
        if driver_loaded:
            out, err = facts.pop("nvidia_smi_said")
            facts["problems"].append(
                _failure_problem(
                    kmod_version, facts["nvidia_smi_rc"], out, err, lost, missing, bool(listed)
                )
            )
        else:
            facts.pop("nvidia_smi_said", None)
        return
    if lost or missing:
        facts["problems"].append(_lost_problem(len(facts["gpus"]), expected, lost, missing))
    version = facts["driver_version"]
    if driver_loaded and version and kmod_version and version != kmod_version:
        facts["problems"].append(
            f"nvidia-smi reports driver {version} but the loaded kernel module is "
            f"{kmod_version}: install the userspace of exactly {kmod_version}"
        )


def gpu_minors(facts):
    """{gpu index: device minor} for the GPUs nvidia-smi lists (index when unknown)."""
    return {
        g["index"]: g.get("minor_number") if g.get("minor_number") is not None else g["index"]
        for g in facts.get("gpus") or []
    }


LXC_FIX = (
    "in the LXC container's config on the host (e.g. /etc/pve/lxc/<id>.conf): "
    "`lxc.cgroup2.devices.allow: c 195:* rwm` and `lxc.cgroup2.devices.allow: c <major>:* rwm` "
    "for nvidia-uvm's major (`ls -l /dev/nvidia-uvm` on the host), and a "
    "`lxc.mount.entry: /dev/<node> dev/<node> none bind,optional,create=file` line for each of "
    "nvidiactl, nvidia0..N, nvidia-uvm and nvidia-uvm-tools; then restart the container"
)
UVM_FIX = (
    "on the host, load nvidia-uvm and create its nodes (`modprobe nvidia-uvm && "
    "nvidia-modprobe -u -c=0`, at every boot: e.g. a line `nvidia-uvm` in "
    "/etc/modules-load.d/nvidia.conf)"
)


def runtime_problems(facts):
    """What stops CUDA from running here, each with its host-side fix.

    Looks at the device nodes (/dev/nvidiactl, /dev/nvidiaN per GPU,
    /dev/nvidia-uvm, /dev/nvidia-uvm-tools) and the CUDA initialisation check,
    when they were read. Missing uvm nodes count only when CUDA failed to
    initialise or inside a container: on a host, the first CUDA program
    creates them through nvidia-modprobe.
    """
    problems = []
    nodes = facts.get("device_nodes")
    cuda = facts.get("cuda") or {}
    if not facts.get("driver_loaded") or nodes is None:
        return problems
    container = facts.get("container")
    wanted = ["/dev/nvidiactl"] + [f"/dev/nvidia{m}" for m in sorted(gpu_minors(facts).values())]
    missing = [n for n in wanted if n not in nodes]
    uvm_missing = [n for n in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if n not in nodes]
    if missing:
        where = LXC_FIX if container else "on the host: `nvidia-modprobe -c=<minor>` for each GPU"
        problems.append(f"device nodes missing: {', '.join(missing)}; fix {where}")
    cuda_failed = cuda.get("checked") and not cuda.get("initialised")
    if uvm_missing and (cuda_failed or container):
        fix = UVM_FIX + (f", and pass the nodes in: {LXC_FIX}" if container else "")
        problems.append(
            f"device nodes missing: {', '.join(uvm_missing)} (CUDA cannot initialise without "
            f"nvidia-uvm); fix {fix}"
        )
    if cuda_failed:
        text = f"CUDA cannot initialise: {cuda.get('error')}"
        if not cuda.get("library_loaded"):
            text += (
                "; install the userspace driver of exactly the kernel module's version "
                f"({(facts.get('kernel_module') or {}).get('version')})"
            )
        elif not uvm_missing and not missing:
            text += "; compare `dmesg | grep -i nvrm` on the host with the error"
        problems.append(text)
    elif cuda.get("checked") and cuda.get("device_count") != facts.get("gpu_count"):
        problems.append(
            f"CUDA sees {cuda.get('device_count')} device(s), nvidia-smi lists "
            f"{facts.get('gpu_count')}: CUDA_VISIBLE_DEVICES or the cgroup device rules hide some"
        )
    return problems


def not_answering(facts):
    """Why nvidia-smi does not answer, in counts: the NVIDIA GPUs on the PCI bus (vendor
    10de, class 03xx, from lspci or sysfs) against the GPUs nvidia-smi sees, and whether a
    kernel module is loaded. '' when nvidia-smi answers.

    After a reboot into a driver whose module does not load, nvidia-smi prints only that
    it "couldn't communicate with the NVIDIA driver": the counts say what is lost (every
    GPU the bus has) and the loaded module (none) says where to look.
    """
    if facts.get("present"):
        return ""
    pci = facts.get("pci_gpu_count")
    seen = len(facts.get("gpus") or [])
    bus = (
        "the PCI bus was not read"
        if pci is None
        else f"{pci} NVIDIA GPU(s) on the PCI bus (vendor 10de, class 03xx)"
    )
    kmod = facts.get("kernel_module") or {}
    if not facts.get("nvidia_smi"):
        where = "no nvidia-smi is installed"
    elif facts.get("driver_loaded"):
        where = f"the kernel module {kmod.get('version')} is loaded"
    else:
        where = (
            "no NVIDIA kernel module is loaded (no /proc/driver/nvidia/version): after a reboot "
            "the module did not load - see `dmesg | grep -iE 'nvrm|nvidia'` and `dkms status` "
            "(a module not built for the running kernel, or refused under Secure Boot)"
        )
    return f"nvidia-smi sees {seen} GPU(s), {bus}; {where}"
