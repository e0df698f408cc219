#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: warm_switch_plan
short_description: Whether a switch to a model can be warm on this host, at which sleep level and share
version_added: "0.3.0"
description:
  - The deploy's preflight side of a warm switch (vLLM's sleep mode, see docs/warm-switch.md).
    It reads the host's deployment record (O(state_file), with the active model and the
    sleepers), its RAM (C(MemAvailable) in C(/proc/meminfo)) and its GPUs (O(gpu_facts), less
    the memory of the model services' own processes, found through their units' cgroups),
    and works out the same plan as C(playbooks/plan.yml) does on a hardware profile.
  - Level 1 (weights pinned in host RAM) when the host's C(MemAvailable) less
    O(host_reserve_bytes) holds the active model's weights, else level 2 (weights reread at
    the wake) where a GPU run showed the active model's level-2 wake working on the vLLM it
    runs (its record's C(vllm_version)), else cold; O(sleep_level) V(1) or V(2) asks for one.
  - The C(gpu_memory_utilization) the model's unit gets (RV(warm_plan.share)) is the catalog's
    less the residual each sleeper keeps on the GPUs it shares with the model (vLLM refuses a
    start whose share exceeds the free memory); a model that is already running keeps the
    share it started with, so its unit does not change.
  - A warm switch that does not fit is planned cold, and RV(warm_plan.reasons) says why, in
    numbers.
  - Reads only; changes nothing.
author:
  - vllm-fleet maintainers (@vllm-fleet)
options:
  model:
    description: The model asked for (green), its catalog name.
    type: str
    required: true
  unit:
    description: Green's systemd unit.
    type: str
    required: true
  entry:
    description: Green's catalog entry as this host serves it (C(gpus), C(serve), C(nodes), C(revision), C(switch_mode)).
    type: dict
    required: true
  fit:
    description: Green's fit report (M(vllm_fleet.fleet.model_fit)); empty for a model on no GPU.
    type: dict
    default: {}
  fit_args:
    description:
      - The fit's inputs (C(config), C(kwargs)), so that green's fit is worked out again at a
        lowered share. Omitted - the lowered share is not checked against the fit.
    type: dict
  revision:
    description: The revision green is deployed at (a sleeper of another revision is restarted, not woken).
    type: str
  state_file:
    description: The host's deployment record (M(vllm_fleet.fleet.vllm_cutover)'s O(vllm_fleet.fleet.vllm_cutover#module:state_file)).
    type: path
    default: /etc/ansible/facts.d/vllm_fleet.fact
  gpu_facts:
    description:
      - M(vllm_fleet.fleet.gpu_facts)'s answer (C(gpus) with C(memory_total_bytes) and
        C(memory_used_bytes), C(processes) with C(pid), C(gpu_index), C(used_memory_bytes)).
        Absent or without GPUs - O(gpu_profile)'s GPUs, none of their memory used.
    type: dict
  gpu_profile:
    description: A hardware profile (C(count), C(memory_total_bytes)) for when no driver answers yet.
    type: dict
  switch_mode:
    description: The fleet's switch mode; the entry's C(switch_mode) overrides it.
    type: str
    choices: [cold, warm]
    default: cold
  sleep_level:
    description:
      - V(auto) - level 1 when the host RAM holds the active model's weights, else level 2
        only where a GPU run showed its level-2 wake working beside a sleeper, as a warm
        switch wakes it (its architecture, unquantized,
        on the exact vLLM version its deployment record's C(vllm_version) names - the
        allow-list C(LEVEL_2_WORKS) in C(plugins/module_utils/switch/warm_switch.py),
        docs/warm-switch.md), else a cold switch whose reason names the runs there are.
        V(1) - level 1, or a cold switch when it does not fit. V(2) - level 2, its reason
        saying unverified for a model off the allow-list; refused (the module fails,
        nothing changed) for an architecture a GPU run showed failing or a model with
        C(speculative_config) (vllm-project/vllm#52479, vllm-project/vllm#55013).
    type: str
    choices: [auto, "1", "2"]
    default: auto
  strategy:
    description:
      - The switch's strategy (M(vllm_fleet.fleet.vllm_cutover)'s); a parallel switch (V(auto)
        with disjoint GPU sets) is not warm.
    type: str
    choices: [sequential, parallel, auto]
    default: sequential
  warm_standby_max:
    description: Sleepers a host keeps at most; V(0) - every switch is cold.
    type: int
    default: 1
  sleep_residual_bytes:
    description:
      - GPU memory a sleeper keeps on each of its GPUs, in bytes. Omitted - a sleeper's own,
        measured with nvidia-smi, else modelled (docs/warm-switch.md).
    type: int
  host_reserve_bytes:
    description: Host RAM kept free beside level-1 sleepers' pinned weights, in bytes.
    type: int
    default: 34359738368
attributes:
  check_mode:
    support: full
    description: Reads the same in check mode; it changes nothing in either mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
notes:
  - The active model's vLLM version is its record entry's C(vllm_version) (C(0.33.0-cuda)), which
    the role writes from C(vllm_install_version); a record without it is not known to wake from
    level 2, so O(sleep_level=auto) switches it cold when level 1 does not fit.
  - The record keeps RV(warm_plan.sizing) for the model once it is active (M(vllm_fleet.fleet.vllm_cutover)'s
    O(vllm_fleet.fleet.vllm_cutover#module:record)); a record written before that has none, and a
    model on GPUs without it is not sized, so a switch from it is cold once.
"""

EXAMPLES = r"""
- name: Work out the warm switch to minimax_m25
  vllm_fleet.fleet.warm_switch_plan:
    model: minimax_m25
    unit: vllm-minimax_m25.service
    entry: "{{ served_entry }}"
    fit: "{{ fit_report }}"
    gpu_facts: "{{ gpu.gpu_facts }}"
    switch_mode: warm
  register: warm

- name: Show it
  ansible.builtin.debug:
    msg: "{{ warm.warm_plan.lines }}"
"""

RETURN = r"""
warm_plan:
  description: The decision.
  returned: always
  type: dict
  contains:
    mode:
      description:
        - V(warm) - the active model sleeps; V(cold) - it stops (or no switch).
        - V(refused) - O(sleep_level=2) for a model whose level-2 wake a run or report showed
          failing; the module fails with RV(warm_plan.refused).
      type: str
      sample: warm
    switch:
      description: Whether green replaces another model (false - it is the active one).
      type: bool
    level:
      description: The sleep level (1 or 2) when warm, else null.
      type: int
      sample: 1
    share:
      description: The C(gpu_memory_utilization) green's unit gets (fraction); null for a model on no GPU.
      type: float
      sample: 0.9013
    catalog_share:
      description: The catalog's C(gpu_memory_utilization) (fraction).
      type: float
      sample: 0.92
    unit_serve:
      description:
        - The serve options green's unit takes from the plan over its catalog entry's
          (C(vllm_model) merges them as they are) - C(gpu_memory_utilization) where
          RV(warm_plan.share) is not RV(warm_plan.catalog_share), else empty.
      type: dict
      sample: {gpu_memory_utilization: 0.9013}
    green_wakes:
      description: Green sleeps from an earlier switch and wakes instead of starting.
      type: bool
    refused:
      description: Why O(sleep_level=2) is refused and how to proceed (only when RV(warm_plan.mode) is V(refused)).
      type: str
      returned: when refused
    reasons:
      description: Why, in numbers (host RAM and GPU memory in GiB).
      type: list
      elements: str
    summary:
      description: One line.
      type: str
      sample: "minimax_m25 -> kimi_k25_int4: WARM, level 1: ..."
    lines:
      description: The plan's lines, as C(plan.yml) prints them.
      type: list
      elements: str
    host:
      description: Host RAM for level 1, in bytes (C(needed_bytes), C(ram_bytes), C(reserve_bytes), C(available_bytes), C(short_bytes)).
      type: dict
    gpu_checks:
      description: Per GPU of green, vLLM's free-memory check in bytes (C(requested_bytes), C(free_bytes), C(residual_bytes), C(short_bytes)).
      type: list
      elements: dict
    sizing:
      description:
        - What the record keeps of green (C(weights_bytes_per_gpu), C(gpus_needed),
          C(tensor_parallel_size), C(gpu_memory_utilization) it starts with,
          C(catalog_gpu_memory_utilization), C(mla), C(architecture), C(speculative) - the speculative
          decoding method or null, C(quantization) - the fit's quantization method, V(none) for
          unquantized weights, or null); empty for a model on no GPU or not sized.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as records
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_host
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import warm_switch
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import unit_pids


def plan(p, run_command, host):
    """The module's decision from its parameters (what the tests call)."""
    entry = dict(p["entry"] or {})
    if p["revision"]:
        entry["revision"] = p["revision"]
    green = warm_switch.green_model(p["model"], entry, p["fit"], p["switch_mode"], p["unit"])
    record = records.load(p["state_file"])
    entries = [record.get("active") or {}, *(record.get("sleeping") or [])]
    units = sorted({e.get("unit") for e in entries if e.get("unit")} | {p["unit"]})
    pids = {u: unit_pids(u, run_command) for u in units} if p["gpu_facts"] else {}
    gpus = warm_switch.host_gpus(p["gpu_facts"], p["gpu_profile"], pids, green)
    refit = None
    if p["fit_args"] and p["fit_args"].get("config"):
        refit = warm_switch.refit_with(p["fit_args"])
    return warm_switch.decide(
        green, record, gpus=gpus, host=host, gpu_facts=p["gpu_facts"], exclude_pids=pids,
        refit=refit,
        settings={"switch_mode": p["switch_mode"], "sleep_level": p["sleep_level"],
                  "standby_max": p["warm_standby_max"], "strategy": p["strategy"],
                  "residual_bytes_per_gpu": p["sleep_residual_bytes"],
                  "reserve_bytes": p["host_reserve_bytes"]})


def main():
    module = AnsibleModule(
        argument_spec={
            "model": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "entry": {"type": "dict", "required": True},
            "fit": {"type": "dict", "default": {}},
            "fit_args": {"type": "dict"},
            "revision": {"type": "str"},
            "state_file": {"type": "path", "default": records.RECORD_FILE},
            "gpu_facts": {"type": "dict"},
            "gpu_profile": {"type": "dict"},
            "switch_mode": {"type": "str", "choices": ["cold", "warm"], "default": "cold"},
            "sleep_level": {"type": "str", "choices": ["auto", "1", "2"], "default": "auto"},
            "strategy": {"type": "str", "choices": ["sequential", "parallel", "auto"],
                         "default": "sequential"},
            "warm_standby_max": {"type": "int", "default": 1},
            "sleep_residual_bytes": {"type": "int"},
            "host_reserve_bytes": {"type": "int",
                                   "default": warm_switch.DEFAULT_HOST_RESERVE_BYTES},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        # gpu_host's LiveHost reads /proc/meminfo (warm_switch.host_ram_for_sleepers)
        result = plan(p, module.run_command, gpu_host.LiveHost(module.run_command, None))
    except (warm_switch.WarmSwitchError, records.RecordError) as exc:
        module.fail_json(msg="warm switch plan for %s: %s" % (p["model"], exc))
    if result.get("mode") == "refused":
        # An explicit level a run or report showed failing: nothing has changed yet.
        module.fail_json(msg="warm switch to %s refused before any change: %s"
                         % (p["model"], result["refused"]), warm_plan=result)
    module.exit_json(changed=False, warm_plan=result)


if __name__ == "__main__":
    main()
