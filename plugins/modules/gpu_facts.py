#!/usr/bin/python
# Copyright 2026 vllm-fleet contributors
# Apache License 2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather facts about NVIDIA GPUs, their driver and topology
version_added: "0.1.0"
description:
  - Reads what C(nvidia-smi) reports (C(--query-gpu ... --format=csv,noheader,nounits),
    C(-q -x), C(topo -m), C(--query-compute-apps)), C(/proc/driver/nvidia/version)
    and the PCI bus, and returns them as the fact C(gpu_facts).
  - Read-only. Where C(nvidia-smi) is absent or cannot reach a driver, returns
    facts with C(gpu_count=0), C(present=false) and a C(msg) saying why; it does not fail.
options:
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). Looked up on C(PATH) when not given.
    type: path
  proc_version_path:
    description:
      - File that names the loaded kernel module (open or proprietary).
    type: path
    default: /proc/driver/nvidia/version
  sysfs_pci_path:
    description:
      - Directory of PCI devices, read to count NVIDIA VGA (class 0300) and 3D
        (class 0302) controllers, as C(lspci -d 10de:) would list them.
    type: path
    default: /sys/bus/pci/devices
  fixture_dir:
    description:
      - B(Test seam.) A directory of captured outputs, one file per command
        (C(nvidia-smi-query-gpu.csv), C(nvidia-smi-q.xml), C(nvidia-smi-topo-m.txt),
        C(nvidia-smi-query-compute-apps.csv), C(proc-driver-nvidia-version.txt),
        C(modinfo-license.txt), C(lspci-n.txt)). When set, nothing is run on the
        host; the same parsers read these files instead. Missing files count as
        commands that could not run; a missing C(nvidia-smi-query-gpu.csv) means
        C(nvidia-smi) is absent.
      - Meant for labs and CI without a GPU; never set it in production.
    type: path
author:
  - vllm-fleet contributors
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
  facts:
    support: full
"""

EXAMPLES = r"""
- name: Gather GPU facts
  vllm_fleet.fleet.gpu_facts:

- name: Refuse to go on unless 8 Blackwell GPUs answer
  ansible.builtin.assert:
    that:
      - gpu_facts.gpu_count == 8
      - gpu_facts.gpus | map(attribute='compute_capability') | unique == ['12.0']
    fail_msg: "Wanted 8 GPUs of compute capability 12.0, found {{ gpu_facts.gpus | map(attribute='compute_capability') }}"

- name: Gather GPU facts from captured outputs (test seam, lab without a GPU)
  vllm_fleet.fleet.gpu_facts:
    fixture_dir: "{{ playbook_dir }}/fixtures/gpu/h200x2-nvlink"
"""

RETURN = r"""
gpu_facts:
  description: What was found; also set as the fact C(gpu_facts).
  returned: always
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
    gpu_count:
      description: Number of GPUs nvidia-smi lists (0 when absent).
      type: int
      sample: 2
    pci_gpu_count:
      description: NVIDIA VGA/3D controllers on the PCI bus (null when not readable).
      type: int
      sample: 2
    driver_version:
      description: Driver version.
      type: str
      sample: "580.159.04"
    cuda_version:
      description: Highest CUDA version the driver supports.
      type: str
      sample: "13.0"
    kernel_module:
      description: Loaded kernel module flavour (C(open), C(proprietary) or C(unknown)), its version and where that was read (C(proc) or C(modinfo)).
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
        memory_total_bytes: {description: Framebuffer memory, in bytes, type: int, sample: 150754820096}
        memory_used_bytes: {description: Memory in use, in bytes, type: int}
        memory_free_bytes: {description: Memory free, in bytes, type: int}
        compute_capability: {description: Compute capability, major.minor, type: str, sample: "12.0"}
        persistence_mode: {description: Persistence mode on, type: bool}
        architecture: {description: Architecture name from nvidia-smi -q -x, type: str, sample: "Hopper"}
    topology:
      description: >-
        nvidia-smi topo -m as data. C(matrix) maps device to device to link code
        (NV#, PIX, PXB, PHB, NODE, SYS); C(cpu_affinity), C(numa_affinity) per GPU;
        C(interconnect) is C(nvlink) when every GPU pair has NVLink, C(pcie) otherwise,
        C(none) below two GPUs; C(worst_link) is the worst pair's code.
      type: dict
      sample: {"interconnect": "nvlink", "worst_link": "NV18", "gpu_pairs": {"GPU0-GPU1": "NV18"}}
    processes:
      description: Processes holding GPU memory.
      type: list
      elements: dict
      contains:
        pid: {description: Process id, type: int}
        used_memory_bytes: {description: GPU memory held, in bytes, type: int}
        gpu_uuid: {description: UUID of the GPU, type: str}
        gpu_index: {description: Index of the GPU, type: int}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu_facts import (
    GpuFactsError,
    collect,
    collect_from_fixture,
    read_sysfs_pci,
)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "path"},
            "proc_version_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "sysfs_pci_path": {"type": "path", "default": "/sys/bus/pci/devices"},
            "fixture_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["fixture_dir"]:
            if not os.path.isdir(params["fixture_dir"]):
                module.fail_json(
                    msg=f"fixture_dir: wanted a directory of captures, found none at {params['fixture_dir']}"
                )
            facts = collect_from_fixture(params["fixture_dir"])
        else:
            smi = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
            if smi and not os.access(smi, os.X_OK):
                smi = None
            modinfo = module.get_bin_path("modinfo")
            license_text = None
            proc_text = _read(params["proc_version_path"])
            if not proc_text and modinfo:
                rc, out, _err = module.run_command([modinfo, "-F", "license", "nvidia"])
                license_text = out if rc == 0 else None
            facts = collect(
                module.run_command,
                nvidia_smi=smi,
                proc_version_text=proc_text,
                modinfo_license=license_text,
                lspci_text=read_sysfs_pci(params["sysfs_pci_path"]),
            )
    except GpuFactsError as exc:
        module.fail_json(msg=f"Could not read GPU facts: {exc}")
    module.exit_json(changed=False, gpu_facts=facts, ansible_facts={"gpu_facts": facts})


if __name__ == "__main__":
    main()
