# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""What a switch reads of the GPUs: nvidia-smi when it decides, and after blue stops or sleeps.

The cutover (cutover.py) asks this one object whether green's GPUs are free, whether a
process that belongs to no model service holds them, whether blue's stopping processes
still hold them, and, after blue went to sleep, whether green would start beside what blue
keeps (vLLM's startup check at green's share), measuring what blue keeps per GPU.
`gpu_processes` is gpu_facts' snapshot ({"gpus", "processes"}), a function returning it,
or only its process list (then memory is not checked); None where nvidia-smi is not read.
"""

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_memory import (
    unexplained_memory,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import unit_pids
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.warm_switch import (
    green_room,
    sized_share,
    sleep_residual_bytes,
)


class GpuCheckError(FieldsError):
    """A GPU check that fails the switch; the cutover raises it as its own error."""


def foreign_gpu_processes(gpu_processes, gpus, allowed_pids):
    """Processes holding memory on any of `gpus` that are not in `allowed_pids`."""
    wanted = {str(g) for g in gpus or []}
    return [p for p in gpu_processes or []
            if str(p.get("gpu_index")) in wanted and int(p.get("pid", -1)) not in allowed_pids]


def sleeper_bytes(snap, gpu, pids):
    """What `pids` hold on `gpu`: their memory as nvidia-smi lists it, else (none listed:
    inside a container) the GPU's used memory less the other processes'."""
    procs = [p for p in snap.get("processes") or [] if str(p.get("gpu_index")) == str(gpu)]
    own = [p for p in procs if int(p.get("pid", -1)) in pids]
    if own:
        return sum(p.get("used_memory_bytes") or 0 for p in own)
    card = next((g for g in snap.get("gpus") or [] if str(g.get("index")) == str(gpu)), {})
    return (card.get("memory_used_bytes") or 0) - sum(p.get("used_memory_bytes") or 0
                                                      for p in procs)


class SwitchGpus:
    """The GPUs of one switch to `green` (its model, unit and gpus), read through `host`
    (clock, sleep, run_command, cgroup_root). `confirm_s` bounds the post-sleep check and
    `poll_s` spaces its reads; `residual` is what blue kept per GPU at its last read."""

    def __init__(self, host, green, settings, gpu_processes, confirm_s, poll_s):
        self.host = host
        self.green = green
        self.settings = settings
        self.gpu_processes = gpu_processes
        self.confirm_s = confirm_s
        self.poll_s = poll_s
        self.residual = None  # {GPU: bytes} blue's processes kept once asleep

    @property
    def read(self):
        """Whether nvidia-smi is read for green's GPUs at all."""
        return bool(self.green.get("gpus")) and self.gpu_processes is not None

    def snapshot(self):
        probe = self.gpu_processes
        try:
            snap = probe() if callable(probe) else probe
        except GpuFactsError as exc:
            raise GpuCheckError(f"nvidia-smi could not be read before the switch: {exc}") from None
        if isinstance(snap, list):
            return {"gpus": None, "processes": snap}
        return snap or {"gpus": None, "processes": []}

    def check_free(self, snap=None):
        """Memory on green's GPUs that no visible process holds: inside an LXC container,
        another container's (or the host's) processes are not listed, yet hold memory."""
        snap = self.snapshot() if snap is None else snap
        if snap.get("gpus") is None or not self.green.get("gpus"):
            return
        found = unexplained_memory(snap, self.green["gpus"],
                                   self.settings.unexplained_memory_bytes)
        if found:
            raise GpuCheckError(f"green {self.green['model']} cannot start: "
                                + "; ".join(f["msg"] for f in found))

    def check_before(self, units, blue_holds_them):
        """Before the switch: green's GPUs hold no process outside the model services'
        `units` (blue, green, the sleepers), and, unless blue still holds them
        (`blue_holds_them`: checked once it stopped), no memory no process explains."""
        if not self.read:
            return
        snap = self.snapshot()
        if not blue_holds_them:
            self.check_free(snap)
        procs = snap.get("processes")
        if not procs:
            return
        allowed = set()
        for unit in units:
            allowed |= unit_pids(unit, self.host.run_command, self.host.cgroup_root)
        foreign = foreign_gpu_processes(procs, self.green["gpus"], allowed)
        if foreign:
            held = ", ".join(f"pid {p['pid']} holds {p.get('used_memory_bytes', '?')} "
                             f"bytes on GPU {p['gpu_index']}" for p in foreign)
            raise GpuCheckError(f"green {self.green['model']} cannot start: processes "
                                f"that belong to no model service hold memory on its "
                                f"GPUs ({held})")

    def held_by(self, pids):
        """Whether green's GPUs are still held by `pids` (blue's, stopping): nvidia-smi lists
        one of them there, or memory there is in use that no listed process explains
        (inside an LXC container blue's own processes are not listed). False without GPUs
        to read."""
        if not (pids and self.read):
            return False
        snap = self.snapshot()
        wanted = {str(g) for g in self.green["gpus"]}
        if any(str(p.get("gpu_index")) in wanted and int(p.get("pid", -1)) in pids
               for p in snap.get("processes") or []):
            return True
        return snap.get("gpus") is not None and bool(unexplained_memory(
            snap, self.green["gpus"], self.settings.unexplained_memory_bytes))

    def confirm_released(self, blue, green_asleep):
        """Where nvidia-smi is read: blue's sleep leaves green the memory it needs. On each GPU
        green shares with blue, vLLM's startup check at green's share (the plan's, its record
        sizing) must pass: what green will need against what is free, polled for `confirm_s`
        while blue's memory settles. A green whose share is not known: each of blue's GPUs
        down to the sleeper's residual. What blue keeps asleep is measured and kept
        (`residual`), for the record and the next plan. `green_asleep`: green's unit runs
        asleep (its own memory counts as free to it)."""
        gpus = blue.get("gpus") or []
        if not gpus or self.gpu_processes is None:
            return
        share = sized_share(self.green)
        shared = [g for g in gpus if g in (self.green.get("gpus") or [])] if share else []
        bound = self.settings.sleep_residual_bytes or sleep_residual_bytes(len(gpus))[0]
        run, root = self.host.run_command, self.host.cgroup_root
        pids = unit_pids(blue["unit"], run, root)
        green_pids = unit_pids(self.green["unit"], run, root) if green_asleep else set()
        asked = self.host.clock()
        while True:
            snap = self.snapshot()
            if snap.get("gpus") is None:
                return
            held = {g: sleeper_bytes(snap, g, pids) for g in gpus}
            self.residual = held
            if share:
                failed = self.green_short(snap, shared, share, green_pids)
            else:
                failed = [f"GPU {g} {b} bytes" for g, b in sorted(held.items()) if b > bound]
            if not failed:
                return
            if self.host.clock() - asked >= self.confirm_s:
                raise GpuCheckError(
                    (f"blue {blue['model']} sleeps but green {self.green['model']} would not "
                     f"start at its share {share} after {self.confirm_s:g} s (blue keeps "
                     + ", ".join(f"GPU {g} {b} bytes" for g, b in sorted(held.items()))
                     + "): " if share else
                     f"blue {blue['model']} sleeps but still holds more than its residual of "
                     f"{bound} bytes per GPU after {self.confirm_s:g} s: ") + ", ".join(failed))
            self.host.sleep(self.poll_s)

    def green_short(self, snap, gpus, share, green_pids):
        """vLLM's startup check for green at `share` on each of `gpus` now: the GPUs where it
        would fail, each with what is free and what the share asks."""
        short = []
        for gpu in gpus:
            card = next((c for c in snap.get("gpus") or [] if str(c.get("index")) == str(gpu)),
                        None)
            if card is None:
                continue
            own = sleeper_bytes(snap, gpu, green_pids) if green_pids else 0
            room = green_room(card, share, own)
            if room["short_bytes"]:
                short.append(f"GPU {gpu} has {room['free_bytes']} bytes free, its share asks "
                             f"{room['requested_bytes']}")
        return short
