#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather facts about NVIDIA GPUs, their driver, device nodes and PCIe fabric
version_added: "0.1.0"
description:
  - Reads what C(nvidia-smi) reports (C(--query-gpu), C(-q -x), C(topo -m), C(topo -p2p r),
    C(--query-compute-apps), the PCIe/ECC query), the loaded kernel module
    (C(/proc/driver/nvidia/version) and C(/proc/driver/nvidia/gpus)), the PCI bus, the device
    nodes, ACS on the PCIe bridges above each GPU (C(lspci -vvv) as root, else PCI config space
    in sysfs), the IOMMU state (C(/proc/cmdline), C(/sys/kernel/iommu_groups)) and, when asked,
    whether CUDA initialises (C(cuInit) and C(cuDeviceGetCount) through C(libcuda.so.1)).
  - The loaded kernel module's flavour and version are read from its proc file on every path,
    also where C(nvidia-smi) is absent (an LXC container before its userspace is installed).
  - Where the driver is not loaded, or C(nvidia-smi) is absent, returns facts with
    C(present=false) and a C(msg) saying why.
  - A driver that is loaded while C(nvidia-smi) fails, or lists fewer GPUs than the PCI bus and
    the driver hold, is a problem naming the missing bus ids; so are missing device nodes and a
    failed CUDA initialisation. The module fails on problems unless O(fail_on_problems=false).
  - Text in an unrecognised format always fails, saying which text and what was wanted.
  - Through O(fixture_dir) it also reads the support bundles people post in issues -
    C(nvidia-smi -q) as text (in place of C(-q -x) and C(--query-gpu)), C(lspci -vvv) (GPUs by
    class and vendor name, the bridges above each GPU from their bus ranges, their ACS control
    bits), the kernel log (C(dmesg), with or without timestamps; the driver's banner and Xid
    errors) and C(/proc/cmdline) (the IOMMU state).
options:
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). Looked up on C(PATH) when not given.
    type: path
  proc_version_path:
    description:
      - File that names the loaded kernel module (open or proprietary) and its version.
    type: path
    default: /proc/driver/nvidia/version
  sysfs_pci_path:
    description:
      - Directory of PCI devices, read to list NVIDIA VGA (class 0300) and 3D (class 0302)
        controllers, the bridges above each GPU and their ACS control (config space).
    type: path
    default: /sys/bus/pci/devices
  dev_path:
    description:
      - Directory holding the C(nvidia*) device nodes.
    type: path
    default: /dev
  gpu_bus_ids:
    description:
      - PCI bus ids of the GPUs this machine must see. Empty means every NVIDIA GPU on the PCI
        bus and in C(/proc/driver/nvidia/gpus). Set it in an LXC container given a subset of
        the host's GPUs.
    type: list
    elements: str
    default: []
  cuda_init:
    description:
      - Also check that CUDA initialises (C(cuInit) and C(cuDeviceGetCount) through
        C(libcuda.so.1), in a child Python under a 120 s timeout).
    type: bool
    default: false
  fabric:
    description:
      - Also read the PCIe fabric (links, ECC, ACS, IOMMU, P2P matrix) when C(nvidia-smi) answers.
    type: bool
    default: true
  device_nodes:
    description:
      - Read the NVIDIA device nodes and count missing ones as problems (with the host-side fix).
        Off in labs without a GPU.
    type: bool
    default: true
  fail_on_problems:
    description:
      - Fail when RV(gpu_facts.problems) is not empty. Callers that mean to repair the driver
        (the nvidia_driver role before installing) set it false and read the problems.
    type: bool
    default: true
  fixture_dir:
    description:
      - B(Test seam.) A directory of captured outputs, one file per command or input, in the
        layout of tests/fixtures/gpu/README.md (C(nvidia-smi-query-gpu.csv), C(nvidia-smi-q.xml)
        or C(nvidia-smi-q.txt), C(dmesg.txt),
        C(nvidia-smi-topo-m.txt), C(nvidia-smi-topo-p2p-r.txt), C(nvidia-smi-query-fabric.csv),
        C(nvidia-smi-query-compute-apps.csv), C(proc-driver-nvidia-version.txt),
        C(proc-driver-nvidia-gpus.txt), C(lspci-n.txt), C(lspci-vvv.txt), C(sysfs-pci-paths.txt),
        C(proc-cmdline.txt), C(sysfs-iommu.txt), C(dev-nvidia.txt), C(cuda-init.json), ...;
        a C(<file>.rc) beside an nvidia-smi capture holds its exit status). When set, nothing is
        run or read on the host; the same parsers read these files instead. A missing
        C(nvidia-smi-query-gpu.csv) (and no C(nvidia-smi-q.txt)) means C(nvidia-smi) is absent.
      - Meant for labs and CI without a GPU; never set it in production.
    type: path
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
  facts:
    support: full
    description: Returns the facts as C(gpu_facts) (and sets them as a fact of the host).
"""

EXAMPLES = r"""
- name: Gather GPU facts (fails naming bus ids when a GPU is lost)
  vllm_fleet.fleet.gpu_facts:

- name: Gather GPU facts and check that CUDA initialises (device nodes, nvidia-uvm)
  vllm_fleet.fleet.gpu_facts:
    cuda_init: true

- name: Gather GPU facts before repairing the driver; read the problems instead of failing
  vllm_fleet.fleet.gpu_facts:
    fail_on_problems: false
  register: gpu

- name: Gather GPU facts from captured outputs (test seam, lab without a GPU)
  vllm_fleet.fleet.gpu_facts:
    fixture_dir: "{{ playbook_dir }}/fixtures/gpu/h200x2-nvlink-p2p"
"""

RETURN = r"""
gpu_facts:
  description: What was found; also set as the fact C(gpu_facts).
  returned: always (also in a failure caused by problems)
  type: dict
  contains:
    present:
      description: Whether nvidia-smi ran and answered.
      type: bool
      sample: true
    msg:
      description: What was found, or why nothing was.
      type: str
      sample: "2 NVIDIA GPU(s) found"
    problems:
      description: >-
        What stops GPUs from serving, each with the fix: a loaded driver with nvidia-smi failing,
        lost GPUs (bus ids), driver/userspace version skew, missing device nodes, CUDA that
        cannot initialise.
      type: list
      elements: str
      sample: ["nvidia-smi lists 7 GPU(s) but 8 NVIDIA GPU(s) are on the PCI bus and in the driver; it cannot open 0000:5d:00.0 (Unknown Error); ..."]
    gpu_count:
      description: Number of GPUs nvidia-smi lists (0 when absent).
      type: int
      sample: 2
    driver_loaded:
      description: Whether the NVIDIA kernel module is loaded (its proc file was read).
      type: bool
    pci_gpu_count:
      description: NVIDIA VGA/3D controllers on the PCI bus (null when not readable).
      type: int
      sample: 2
    pci_gpu_slots:
      description: Their bus ids, normalised (C(0000:18:00.0)).
      type: list
      elements: str
    driver_gpu_slots:
      description: Bus ids of the GPUs the kernel module drives (/proc/driver/nvidia/gpus); null when not readable.
      type: list
      elements: str
    expected_gpu_slots:
      description:
        - Bus ids this machine must see (O(gpu_bus_ids), else the PCI bus and the driver's list).
        - In a container (C(container) set), the GPUs of the driver's list whose C(/dev/nvidia<minor>) node
          it was given - the driver's list there is the host's.
      type: list
      elements: str
    lost_gpus:
      description: GPUs nvidia-smi named but could not open (C(bus_id), C(error)).
      type: list
      elements: dict
    driver_version:
      description: Driver version nvidia-smi reports.
      type: str
      sample: "580.159.04"
    cuda_version:
      description: Highest CUDA version the driver supports.
      type: str
      sample: "13.0"
    kernel_module:
      description: >-
        Loaded kernel module flavour (C(open), C(proprietary) or C(unknown)), its version and
        where that was read (C(proc), C(kernel_log) (the banner in a captured C(dmesg)) or
        C(modinfo)).
      type: dict
      sample: {"flavour": "open", "version": "580.159.04", "source": "proc"}
    gpus:
      description: One entry per GPU, by index.
      type: list
      elements: dict
      contains:
        index: {description: GPU index, type: int}
        name: {description: Product name, type: str, sample: "NVIDIA H200"}
        uuid: {description: GPU UUID, type: str}
        pci_bus_id: {description: PCI bus id, type: str, sample: "00000000:00:06.0"}
        memory_total_bytes: {description: 'Framebuffer memory, in bytes', type: int, sample: 150754820096}
        memory_used_bytes: {description: 'Memory in use, in bytes', type: int}
        memory_free_bytes: {description: 'Memory free, in bytes', type: int}
        compute_capability: {description: "Compute capability, major.minor", type: str, sample: "12.0"}
        persistence_mode: {description: Persistence mode on, type: bool}
        architecture: {description: Architecture name from nvidia-smi -q -x, type: str, sample: "Hopper"}
        minor_number: {description: Device minor (/dev/nvidiaN), type: int, sample: 0}
    topology:
      description: >-
        nvidia-smi topo -m as data. C(matrix) maps device to device to link code
        (NV#, PIX, PXB, PHB, NODE, SYS); C(cpu_affinity), C(numa_affinity) per GPU;
        C(interconnect) is C(nvlink) when every GPU pair has NVLink, C(pcie) otherwise,
        C(none) below two GPUs; C(worst_link) is the worst pair's code.
      type: dict
      sample: {"interconnect": "nvlink", "worst_link": "NV18", "gpu_pairs": {"GPU0-GPU1": "NV18"}}
    processes:
      description: Processes holding GPU memory that nvidia-smi can see (none of other PID namespaces).
      type: list
      elements: dict
      contains:
        pid: {description: Process id, type: int}
        used_memory_bytes: {description: 'GPU memory held, in bytes', type: int}
        gpu_uuid: {description: UUID of the GPU, type: str}
        gpu_index: {description: Index of the GPU, type: int}
    device_nodes:
      description: NVIDIA character devices found, path to C(major:minor); null when not read.
      type: dict
      sample: {"/dev/nvidiactl": "195:255", "/dev/nvidia0": "195:0", "/dev/nvidia-uvm": "238:0"}
    cuda:
      description: >-
        The CUDA initialisation check (O(cuda_init)): C(checked), C(library_loaded),
        C(initialised), C(device_count), C(driver_cuda_version), C(error).
      type: dict
      sample: {"checked": true, "initialised": true, "device_count": 2, "driver_cuda_version": "13.0"}
    container:
      description: The container kind when this machine is one (C(lxc), C(docker)), else null.
      type: str
    kernel_log:
      description: >-
        What a captured kernel log (C(dmesg.txt) in O(fixture_dir)) says of the driver; null when
        none was read.
      type: dict
      contains:
        banner:
          description: "The last C(NVRM: loading NVIDIA UNIX ...) line, or null."
          type: str
          sample: "[    1.792940] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build ..."
        xids:
          description: >-
            Xid errors in order: C(bus_id) (str), C(xid) (int), C(text) (str), C(time) (float,
            seconds since boot, null without timestamps). The driver's "fallen off the bus"
            message without an Xid line counts as Xid 79.
          type: list
          elements: dict
          sample: [{"bus_id": "0000:44:00.0", "xid": 79, "text": "GPU has fallen off the bus", "time": null}]
        warnings:
          description: One line per GPU with an Xid that needs a reset or a reboot (48, 63, 64, 74, 79, 92, 94, 95, 119, 120).
          type: list
          elements: str
    fabric:
      description: >-
        The PCIe fabric (null when nvidia-smi does not answer or O(fabric=false)): C(gpus) per
        index with C(pcie) (C(gen_current), C(gen_max), C(width_current), C(width_max),
        C(pstate), C(status) ok/idle/degraded/unknown, C(why)), C(ecc_mode),
        C(ecc_uncorrected_volatile), C(retired_pages_pending), C(remapped_rows_pending),
        C(remapped_rows_failure), C(bridges) above the GPU (C(bus_id), C(acs) control bits,
        C(readable); from sysfs paths, or from the bridges' bus ranges in C(lspci -vvv)),
        C(iommu_group), C(iommu_type); C(p2p_read) (C(matrix) of
        OK/CNS/GNS/TNS/NS/DR/U, C(not_ok)); C(iommu) (C(groups), C(cmdline), C(mode)
        off/passthrough/translated/unknown, C(cmdline_mode) (str) off/on/passthrough/unknown
        from the kernel command line alone); C(acs_source) (lspci, sysfs or null);
        C(warnings) (degraded links, ECC errors, remapping), each with its fix.
      type: dict
"""

import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    FixtureHost,
    LiveHost,
    gather,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "path"},
            "proc_version_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "sysfs_pci_path": {"type": "path", "default": "/sys/bus/pci/devices"},
            "dev_path": {"type": "path", "default": "/dev"},
            "gpu_bus_ids": {"type": "list", "elements": "str", "default": []},
            "cuda_init": {"type": "bool", "default": False},
            "fabric": {"type": "bool", "default": True},
            "device_nodes": {"type": "bool", "default": True},
            "fail_on_problems": {"type": "bool", "default": True},
            "fixture_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["fixture_dir"]:
        if not os.path.isdir(p["fixture_dir"]):
            module.fail_json(
                msg=f"fixture_dir: wanted a directory of captures, found none at {p['fixture_dir']}"
            )
        host = FixtureHost(p["fixture_dir"])
    else:
        smi = p["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
        if smi and not os.access(smi, os.X_OK):
            smi = None
        host = LiveHost(
            module.run_command,
            smi,
            paths={
                "proc_version": p["proc_version_path"],
                "sysfs_pci": p["sysfs_pci_path"],
                "dev": p["dev_path"],
            },
            python=sys.executable,
            lspci=module.get_bin_path("lspci"),
            timeout_bin=module.get_bin_path("timeout"),
            modinfo=module.get_bin_path("modinfo"),
            cuda_init=p["cuda_init"],
        )
    try:
        facts = gather(
            host,
            expected_bus_ids=p["gpu_bus_ids"],
            fabric=p["fabric"],
            device_nodes=p["device_nodes"],
        )
    except GpuFactsError as exc:
        module.fail_json(msg=f"Could not read GPU facts: {exc}")
    if facts["problems"] and p["fail_on_problems"]:
        module.fail_json(
            msg="GPU problems: " + " | ".join(facts["problems"]),
            gpu_facts=facts,
            rc=facts.get("nvidia_smi_rc"),
        )
    module.exit_json(changed=False, gpu_facts=facts, ansible_facts={"gpu_facts": facts})


if __name__ == "__main__":
    main()
