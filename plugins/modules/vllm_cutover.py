#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

DOCUMENTATION = r"""
---
module: vllm_cutover
short_description: Switch the active vLLM model service with health gates and automatic rollback
description:
  - Makes O(model) the active model on the host. The model serving now (blue) comes from the
    deployment record O(state_file); the model asked for is green.
  - V(sequential) points the front door at nothing (503 with Retry-After), drains blue, stops it,
    then starts green (the GPUs cannot hold both) as soon as blue's engine and workers have exited
    and nvidia-smi lists none of blue's processes on green's GPUs, while blue's API server may
    still be exiting (RV(blue_released_early)); V(parallel) starts green beside blue, switches
    the front door and drains and stops blue only after green passed its health gate;
    V(auto) is parallel when blue's and green's GPU sets are disjoint, else sequential.
  - The health gate is C(GET /health) 200, C(GET /v1/models) listing O(served_model_name), and one
    completion returning at least one token, polled until O(startup_timeout). A green unit that
    exits or is restarted by systemd fails the gate at once; one whose journal stays silent for
    O(startup_stall) seconds fails it then.
  - On any failure before the switch, green is stopped, blue is started again if it was stopped
    and gated healthy, and the module fails with C(rolled_back=true), the reason and green's
    journal lines.
  - Re-running with the active model, running and unchanged, runs one pass of the health gate
    (health, model list, one completion); when it fails, the unit is restarted through the gate
    (C(action=heal), with C(heal_reason)), else nothing changes. In check mode the pass runs and
    the result says what would be done.
  - While it acts on units, the module holds O(switch_marker); the host's periodic probe
    (the vllm_service role's C(vllm-fleet-probe.timer)) leaves the units alone while it exists.
  - One switch at a time per host (O(lock_file)). Run as an asynchronous task, a switch outlives
    its controller (a dropped connection, Ctrl-C, a killed C(ansible-playbook)) - it completes or
    rolls back by itself, and a re-run waits for it, then finds the record it left.
  - When green has GPUs, nvidia-smi is read at the moment the switch decides (not earlier in the
    play); a process that holds memory on green's GPUs and belongs to neither blue's nor green's
    unit stops the cutover before anything changes.
  - With O(switch_mode=warm), a sequential switch puts blue to sleep (vLLM's sleep mode,
    C(POST /sleep?level=N&mode=wait) after the drain) instead of stopping it, when blue's record
    entry says its unit can sleep (C(sleep_mode)); it confirms C(GET /is_sleeping) and, where
    nvidia-smi is read, blue's memory on each of its GPUs down to the sleeper's residual. A green
    that sleeps from an earlier switch (the record's C(sleeping), its unit running) is woken, not
    started, and gated on the running unit (its main process unchanged). A failed gate or wake
    stops green and wakes blue back. After a success blue stays asleep (the record's
    C(sleeping), newest last); beyond O(warm_standby_max) sleepers the oldest is stopped and
    disabled. Revision updates, multi-node replicas, parallel switches and a blue without
    sleep mode stay cold (RV(warm_refused)).
  - While a unit starts, the module writes where it stands (elapsed of its startup limit, the
    unit's last log line) to O(progress_file); run as an asynchronous task, M(vllm_fleet.fleet.async_follow)
    prints it on the controller.
version_added: 0.1.0
options:
  model:
    description: Catalog name of the model to make active (green).
    type: str
    required: true
  unit:
    description: Green's systemd unit, for example C(vllm-tiny_gqa.service).
    type: str
    required: true
  url:
    description: Green's own base URL, for example C(http://127.0.0.1:8001).
    type: str
    required: true
  served_model_name:
    description: The model name green must list on C(/v1/models).
    type: str
    required: true
  port:
    description: Green's TCP port; checked free before green starts.
    type: int
    required: true
  startup_timeout:
    description: Seconds green may take to pass its health gate (Kimi-K2.5 class models need 45 min or more).
    type: int
    default: 900
  model_dir:
    description:
      - Folder of the revision green serves (hf_download's RV(vllm_fleet.fleet.hf_download#module:model_dir),
        one folder per commit). With O(model_link), the unit reads the model through that link,
        and the switch points it here right before green starts.
      - When green is the active model and its link points at another folder, the run is a
        revision update (RV(action=update)), a sequential blue/green on the one unit (drain,
        stop, point the link at the new revision, start and gate); on a failed gate the link
        goes back to the old revision, which is started and gated again.
    type: path
  model_link:
    description: Host-local symlink the unit's C(--model) names (for example
      C(/var/lib/vllm-fleet/models/<model>)); written atomically by the switch only.
    type: path
  startup_stall:
    description:
      - Seconds green's journal may show nothing new while it starts (no line from the unit that
        it had not shown before in this start; a repeated line whose time stamps, pids or rates
        alone differ is not new, so vLLM's "No available shared memory broadcast block found in
        60 seconds" every minute is a stall) before its gate fails at stage C(stall), with its last journal lines, and the switch
        rolls back; O(startup_timeout) stays the outer bound. C(0) turns the check off.
      - The check runs at each health probe, so a stall is reported within this many seconds
        plus one O(health_interval) of the unit's last line. Set it above the longest silent
        phase of the model's start (a progress bar reaches the journal only when it ends).
    type: int
    default: 600
  strategy:
    description: How blue and green overlap.
    type: str
    choices: [sequential, parallel, auto]
    default: sequential
  gpus:
    description: Green's GPU indices (its CUDA_VISIBLE_DEVICES); recorded, and used by V(auto).
    type: list
    elements: int
    default: []
  gpu_facts_fixture_dir:
    description:
      - Test seam, as M(vllm_fleet.fleet.gpu_facts) has it - a folder of captured nvidia-smi outputs
        read instead of running nvidia-smi.
    type: path
  gpu_unexplained_memory_bytes:
    description:
      - Bytes of memory in use on one of green's GPUs that no process nvidia-smi lists may hold,
        before the switch refuses (inside an LXC container, other containers' processes are not
        listed, yet their memory is). Checked at preflight, and for a sequential switch again once
        blue's GPU holders have exited (green waits for blue's whole stop while it is not met),
        right before green starts.
    type: int
    default: 1073741824
  drain_timeout:
    description:
      - Seconds to wait for blue's requests in flight to end before it is stopped - vLLM's C(/load)
        (each request until the last byte of its response, a stream's tail included; the unit
        runs C(vllm serve --enable-server-load-tracking)) and its running and waiting requests
        (C(/metrics)), all 0 on two reads 0.2 s apart.
      - A vLLM without C(/load) is read by C(/metrics) alone.
    type: float
    default: 60
  frontdoor:
    description:
      - The nginx front door to switch. Omit for none.
    type: dict
    suboptions:
      upstream_file:
        description: The upstream include file nginx reads.
        type: path
        required: true
      url:
        description: The front door's own base URL, used to confirm a switch took effect.
        type: str
        required: true
      test_cmd:
        description: Command that checks nginx's configuration.
        type: list
        elements: str
        default: [nginx, -t]
      reload_cmd:
        description: Command that reloads nginx gracefully.
        type: list
        elements: str
        default: [systemctl, reload, nginx]
      key_file:
        description:
          - File whose first line is the front door's own API key, sent as a bearer token
            when the switch is confirmed through the front door. The key is read on the host
            and never returned or logged. Omit when the front door is open.
        type: path
      record_file:
        description:
          - Where the deployment record is published as Prometheus text (the front door
            serves it at C(/metrics/vllm-fleet)). Omit for none.
        type: path
      hold_file:
        description:
          - While this file exists the front door answers 503 "switching" (nginx tests it on
            every request). A sequential switch holds the front door with it and points the
            upstream at green behind it, so its outage holds no nginx reload. Omit to hold
            by pointing the upstream at nothing (a reload each way).
          - Keep it on a tmpfs (the role's C(/run/vllm-fleet/switching)) so a reboot cannot
            leave it. From the hold to the switch's end the upstream from before it is kept
            in C(<upstream_file>.before-switch); the front door role's boot unit puts it back
            before nginx starts (a switch a reboot cut never wrote the record).
        type: path
      pid_file:
        description:
          - nginx's master pid file. A hold reloads nginx, and the drain waits until the
            workers from before it (the master's children then, by C(pgrep -P)) have exited;
            only then has every request the front door let through before the hold ended,
            those whose body was still arriving (not yet counted by vLLM's C(/load)) among
            them. A file that cannot be read leaves the drain to the model server's counts.
        type: path
        default: /run/nginx.pid
      warm_file:
        description:
          - Written before a warm switch's hold and removed with it; while it exists the hold's
            503 tells clients to retry in a warm switch's seconds (the role's
            C(vllm_frontdoor_warm_retry_after_s)), not a cold one's. Omit for none.
        type: path
      hold_socket:
        description:
          - The front door's waiting room, a Unix socket this module listens on during a warm
            switch (module_utils/frontdoor/hold_room.py). While the warm file exists nginx sends each
            request the hold meets there and keeps its body; when the switch points the front
            door at a model (green, or blue after a rollback) the room tells nginx to send the
            held requests to it. Omit for none (a warm hold answers 503 at once, as a cold
            one does).
          - Keep it in the hold files' tmpfs folder (the role's C(/run/vllm-fleet/hold.sock)).
        type: path
      hold_max_s:
        description:
          - No request waits in the room longer than this many seconds from the hold's start;
            past it, and once the module ends, the hold's 503 + Retry-After.
        type: float
        default: 10.0
      hold_socket_user:
        description:
          - The user nginx's workers run as; its group may connect to the room (mode 0660).
            Omit for root's only (0600).
        type: str
  progress_file:
    description: JSON file on the host where a starting unit's progress is written (unset, none is).
    type: path
  progress_interval:
    description: Seconds between two writes of O(progress_file).
    type: float
    default: 10
  restart:
    description: Green's unit or files changed; restart green when it is already the active model.
    type: bool
    default: false
  health_interval:
    description: Seconds between health probes.
    type: float
    default: 2.0
  smoke_prompt:
    description: Prompt of the one completion the gate asks for.
    type: str
    default: Hello
  journal_lines:
    description: How many of green's journal lines a failure returns.
    type: int
    default: 40
  record:
    description: Extra fields written to the deployment record for green (repo_id, revision, ...).
    type: dict
    default: {}
  switch_marker:
    description:
      - File that exists while the module acts on units (removed afterwards, also on failure);
        the periodic probe skips while it is there and younger than its own bound.
      - Unset, no marker is written.
    type: path
  state_file:
    description: The deployment record, a local fact file (read back as C(ansible_local.vllm_fleet)).
    type: path
    default: /etc/ansible/facts.d/vllm_fleet.fact
  lock_file:
    description:
      - The host's switch lock (an exclusive flock held while a switch runs). A second cutover
        waits for the one in progress, then reads the record it left and converges from there.
    type: path
    default: /run/vllm-fleet/cutover.lock
  lock_timeout:
    description:
      - Seconds to wait for a switch in progress before failing without a change. Unset, twice
        O(startup_timeout) plus O(drain_timeout) plus 300 (a switch that rolls back starts two models).
    type: int
  phase:
    description:
      - V(switch) (the default) - the whole switch on this host, as described above.
      - The other values are one host's part in a switch in which a multi-node replica takes part
        (as green, O(replica), or as blue, the record's), run by the controller phase by phase over
        every host of the switch (the vllm_model role's C(cutover_replica.yml)) - V(plan) (reads
        only; none, commit or switch), V(stop) (front door to 503, drain and stop blue), V(start)
        (point the model link, start O(target)'s unit), V(gate) (O(target)'s gate on a head or a
        single host; fails at once when a worker that joined the head stops), V(commit) (green
        becomes the recorded active model), V(unwind) (stop green after a failed start or gate),
        V(release) (end an unwound switch).
      - From V(stop) to V(commit) or V(release) the host's O(switch_marker) stays, so its probe
        leaves the units alone between phases. Every phase, V(plan) too, holds the host's switch
        lock while it runs (a re-run's plan waits for a dead controller's gate job). V(plan)
        also says why the switch would fail before it starts (C(refused) - the single-host
        switch's preflight for this host's part) and plans a switch when O(restart) is set.
    type: str
    choices: [switch, plan, stop, start, gate, commit, unwind, release]
    default: switch
  target:
    description: Whose unit V(start) and V(gate) act on - green, or blue (the record's active model, after an unwind).
    type: str
    choices: [green, blue]
    default: green
  switch_mode:
    description:
      - V(cold) - blue stops. V(warm) - blue sleeps (when its unit can), see the description.
      - A green that sleeps from an earlier switch is woken in either mode (its unit runs).
    type: str
    choices: [cold, warm]
    default: cold
  sleep_level:
    description:
      - vLLM's sleep level blue is put to sleep at (the plan's choice, M(vllm_fleet.fleet.model_fit)'s
        warm switch plan) - V(1) keeps the weights in pinned host memory, V(2) discards them
        (its wake rereads them).
    type: int
    choices: [1, 2]
    default: 1
  warm_standby_max:
    description: Sleepers the host keeps at most; a newer one stops (and disables) the oldest.
    type: int
    default: 1
  sleep_mode:
    description:
      - Whether green's unit is started able to sleep (C(--enable-sleep-mode) and
        C(VLLM_SERVER_DEV_MODE=1)); recorded as the active entry's C(sleep_mode), which decides
        whether the next switch may put it to sleep.
    type: bool
    default: false
  sleep_residual_bytes:
    description:
      - GPU memory (bytes) a sleeping blue may keep on each of its GPUs (checked where
        nvidia-smi is read). Unset, the measured default (3.35 GiB at TP 1, plus the fit's
        non-torch term with tensor parallel; docs/warm-switch.md).
    type: int
  warm_refused:
    description:
      - Why the deploy's preflight planned this switch cold though warm mode was asked
        (M(vllm_fleet.fleet.warm_switch_plan)'s reasons - host RAM or GPU memory short, a
        parallel switch, ...). Set - the switch stays cold and RV(warm_refused) says this.
    type: str
  replica:
    description:
      - This host's place in green's multi-node replica (the filter
        P(vllm_fleet.fleet.record_replica#filter) of the replica's plan) - C(group), C(role) (V(head)
        or V(worker)), C(node_rank), C(nodes), C(head), C(ranks) (each C(name), C(role), C(ip),
        C(state_url)). Written into the record with green. Omit for a model this host serves alone.
      - A worker serves no API - its gate is that its unit runs; the head's gate fails at once when a
        worker's published rank state says it stopped after joining the head's start.
    type: dict
attributes:
  check_mode:
    support: full
    description: Reports the plan (action, blue, green) and touches nothing.
  diff_mode:
    support: full
    description: Shows the active model before and after.
notes:
  - The record holds the active model, its unit, port, URL, revision and start time, the previous
    model, and a short history; C(playbooks/rollback.yml) switches back to the previous model.
author:
  - vllm-fleet maintainers (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Switch to MiniMax-M2.5 (blue is stopped first; the GPUs cannot hold both)
  vllm_fleet.fleet.vllm_cutover:
    model: minimax_m25
    unit: vllm-minimax_m25.service
    url: http://127.0.0.1:8101
    served_model_name: minimax-m2.5
    port: 8101
    startup_timeout: 1800
    startup_stall: 900
    strategy: sequential
    record:
      repo_id: MiniMaxAI/MiniMax-M2.5
      revision: 0123456789abcdef0123456789abcdef01234567

- name: A multi-node replica's head - start its unit (the workers start next), then its gate
  vllm_fleet.fleet.vllm_cutover:
    phase: "{{ item }}"
    model: tiny_gqa
    unit: vllm-tiny_gqa.service
    url: http://127.0.0.1:8001
    served_model_name: tiny-gqa
    port: 8001
    replica: "{{ plan | vllm_fleet.fleet.record_replica(inventory_hostname) }}"
    switch_marker: /run/vllm-fleet/switching.json
  loop: [start, gate]
"""

RETURN = r"""
action:
  description:
    - What was (or in check mode would be) done - none, record, frontdoor (only the front door
      re-pointed at the running active model), heal (the running active model failed its
      health probe and was restarted through the gate), start, restart, update (the active
      model moved to another revision, blue/green on its unit) or switch.
  returned: always
  type: str
revision_before:
  description: The active model's recorded revision before the run (commit sha; null when none).
  returned: always
  type: str
revision_after:
  description: The revision serving after the run (commit sha) - green's (the O(record)'s
    C(revision)), or blue's after a rollback; null when nothing serves.
  returned: always
  type: str
active_before:
  description: The active model before the run (null on a first deploy).
  returned: always
  type: str
active_after:
  description: The active model after the run (blue again after a rollback; null when the rollback failed too).
  returned: always
  type: str
rolled_back:
  description: Whether a failed green was undone and blue restored.
  returned: always
  type: bool
downtime_s:
  description: Seconds the front door had no model to send requests to (sequential strategy; 0 for parallel).
  returned: when a switch ran
  type: float
blue_drain:
  description:
    - How blue's drain went - drained (bool), seconds, running and waiting (C(/metrics)) and
      in_flight (C(/load)'s server_load; null when blue has no C(/load)) at the last read;
      frontdoor_in_flight, where the front door's workers are read, how many nginx workers
      from before the hold still carried requests they let through (0 when drained).
  returned: when blue was drained
  type: dict
blue_released_early:
  description:
    - Sequential switch to another unit - V(true) when green was started once blue's GPU holders
      had exited (vLLM's engine core and workers; with GPUs, none of blue's processes listed by
      nvidia-smi on green's GPUs and their memory explained) while blue's API server was still
      exiting; V(false) when green started only after blue's whole unit had stopped (its cgroup
      could not be read, memory stayed held, or the stop ended first).
    - C(phases.stop_blue) is the seconds until green could start, either way; blue's stop is
      waited for before blue's unit is disabled or started again by a rollback.
  returned: when a sequential switch to another unit got past blue's stop
  type: bool
strategy:
  description: The strategy used (V(auto) resolved).
  returned: always
  type: str
phases:
  description: Seconds each phase took (preflight, frontdoor, drain_blue, stop_blue, sleep_blue, start_green, wake_green, restart_green, rollback).
  returned: always
  type: dict
switch:
  description: V(warm) when blue was put to sleep, else V(cold).
  returned: when O(switch_mode=warm), a sleeper exists or green sleeps
  type: str
warm_refused:
  description:
    - Why a switch asked to be warm stayed cold - O(warm_refused) (the preflight's plan), a
      revision update, a multi-node replica, a parallel switch, blue without sleep mode,
      O(warm_standby_max=0), or no blue.
  returned: when O(switch_mode=warm) and the switch stayed cold
  type: str
blue_aborted:
  description:
    - Warm switch whose drain's deadline passed with requests still running on blue - how
      many the drain counted last; they were ended as a cold stop ends them, with vLLM's
      C(POST /abort_requests) before blue's fingerprint (so it is blue's alone), then blue
      was put to sleep with C(mode=abort) (C(mode=wait) would hold the sleep, and blue's
      scheduler, until they end).
  returned: when blue's drain did not end in time
  type: int
blue_abort_requests:
  description:
    - What C(POST /abort_requests) answered when it did not answer 200 (a vLLM without the
      route); blue's fingerprint was then taken beside the requests past the drain and its
      wake's check compares the token ids alone.
  returned: when blue_aborted is returned and that request failed
  type: str
  sample: "404 {\"detail\":\"Not Found\"}"
frontdoor_held:
  description:
    - What the front door's waiting room (O(frontdoor.hold_socket)) did in a warm switch -
      C(held) requests waited and were then sent to the model serving after it, C(refused)
      were answered 503 + Retry-After (past C(max_s), or nothing served), and how long the
      held ones waited (C(wait_p50_s), C(wait_p99_s), C(wait_max_s), seconds).
  returned: when a warm switch opened the room
  type: dict
  sample: {"held": 14, "refused": 0, "max_s": 10.0, "wait_p50_s": 0.41, "wait_p99_s": 0.77,
           "wait_max_s": 0.78}
blue_stragglers:
  description:
    - Requests that reached blue after its drain and found it asleep (they passed the front door
      just before its hold; vLLM's C(/load) counts them). Blue was woken so they were answered,
      drained and put to sleep again.
  returned: when there were any
  type: int
sleeper_restarted:
  description:
    - Why green, asleep from an earlier switch, was restarted cold instead of woken - it sleeps
      on another revision, or its unit or files changed while it slept (O(restart)).
  returned: when green slept and was restarted
  type: str
  sample: "tiny_gqa restarted, not woken: its unit or files changed while it slept"
sleep_level:
  description: The level blue was put to sleep at (1 or 2); null when it did not sleep.
  returned: when RV(switch) is returned
  type: int
blue_sleep_s:
  description: Seconds blue took to sleep (the request and its confirmation); null when it did not sleep.
  returned: when RV(switch) is returned
  type: float
green_wake_s:
  description: Seconds green's wake requests took until it said it is awake (before its gate); null on a cold start.
  returned: when RV(switch) is returned
  type: float
woke:
  description: Whether green was woken (not started).
  returned: when RV(switch) is returned
  type: bool
sleepers_stopped:
  description: The sleepers stopped because there were more than O(warm_standby_max).
  returned: when RV(switch) is returned
  type: list
  elements: str
failed_wakes:
  description:
    - The units whose wake failed in this switch (a wake request's error or timeout, or the
      gate after it) - each stopped, so a failed wake (level 2's C(reload_weights) or
      C(wake_up?tags=kv_cache) included) leaves no live process. C(model), C(unit), C(role)
      (green, or blue woken back), C(level), C(why), C(stopped) (false - C(systemctl stop)
      failed and its process may still run).
  returned: when a wake failed
  type: list
  elements: dict
  sample: [{"model": "tiny_gqa", "unit": "vllm-tiny_gqa.service", "role": "green", "level": 2,
            "why": "green tiny_gqa did not wake: POST /wake_up?tags=kv_cache answered timed out",
            "stopped": true}]
heal_reason:
  description: Why the active model was restarted - its unit and the gate stage and detail that failed.
  returned: when action is heal
  type: str
  sample: "vllm-tiny_gqa.service is active but failed its health probe at completion: POST /v1/completions: timed out"
time_to_healthy_s:
  description: Seconds from the start command of green's unit until green passed its health gate.
  returned: when green passed its gate
  type: float
green_health:
  description:
    - The gate's outcome for green (ok, seconds since the start, stage, detail, attempts); stage
      V(stall) when its journal was silent for O(startup_stall) seconds. After a wake, stage
      V(fingerprint) when the woken model did not give the greedy tokens (and logprobs) it
      gave before it slept, or none could be taken; V(fingerprint=matched) when it did, with
      V(fingerprint_beside) (requests running beside one of the two fingerprints, so the token ids
      alone were compared) when it could not be taken alone.
  returned: when green was started
  type: dict
waited_for_switch:
  description:
    - The switch in progress this run waited for (pid, model, since) and how long (waited_s, seconds).
    - In check mode the switch in progress, if any; its outcome is not in the plan.
  returned: when another switch was in progress
  type: dict
journal:
  description: Green's journal lines after a failure.
  returned: on failure
  type: list
  elements: str
phase:
  description: The phase run, when O(phase) is not V(switch).
  returned: when O(phase) is not V(switch)
  type: str
role:
  description: This host's part in green (V(plan), V(commit)) or in O(target) (V(start), V(gate)) - head, worker or single.
  returned: when O(phase) is plan, start, gate or commit
  type: str
blue_role:
  description: This host's part in blue, the recorded active model - head, worker, single, or null when none.
  returned: when O(phase) is plan
  type: str
refused:
  description: Why the switch would fail on this host before any change (green's unit not installed, its port taken, processes on its GPUs).
  returned: when O(phase) is plan and the switch would be refused
  type: str
ok:
  description: Whether O(target) passed its gate (a worker - whether its unit runs).
  returned: when O(phase) is gate
  type: bool
invocation:
  description: systemd's InvocationID of the unit V(start) started (a worker joins its head's).
  returned: when O(phase) is start and a unit was started
  type: str
stopped:
  description: The units V(stop) stopped (V(unwind) - green's unit, when it stopped it).
  returned: when O(phase) is stop or unwind
  type: raw
blue_health:
  description: The gate's outcome for blue, when O(target) is blue.
  returned: when O(phase) is gate and O(target) is blue
  type: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as records
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import write_atomic
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import replica_cutover
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    SETTLE_CONFIRMATIONS,
    FrontDoor,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_host, gpu_memory
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import switch_lock
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Host,
    Settings,
)


def gpu_reader(module, fixture_dir):
    """A function that reads nvidia-smi (per-GPU used memory, processes) when called;
    None without nvidia-smi (a host with no NVIDIA GPU, like the lab)."""
    if fixture_dir:
        return lambda: gpu_host.collect_from_fixture(fixture_dir)
    smi = module.get_bin_path("nvidia-smi")
    if not smi:
        return None
    return lambda: gpu_memory.memory_snapshot(module.run_command, nvidia_smi=smi)


def green_entry(p):
    """Green as the switch and the record see it, from the module's parameters."""
    green = dict(p["record"])
    green.update({
        "model": p["model"], "unit": p["unit"], "url": p["url"], "port": p["port"],
        "served_model_name": p["served_model_name"], "startup_timeout_s": p["startup_timeout"],
        "startup_stall_s": p["startup_stall"], "gpus": p["gpus"],
    })
    # The record's active entry says whether its unit can sleep (absent, as a cold-mode record
    # written before warm switches has it: it cannot).
    if p["sleep_mode"] or p["switch_mode"] == "warm":
        green["sleep_mode"] = p["sleep_mode"]
    for key in ("model_dir", "model_link"):
        if p[key]:
            green[key] = p[key]
    if p["replica"]:
        green["replica"] = p["replica"]
    return green


def main():
    module = AnsibleModule(
        argument_spec={
            "model": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "served_model_name": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "startup_timeout": {"type": "int", "default": 900},
            "startup_stall": {"type": "int", "default": 600},
            "model_dir": {"type": "path"},
            "model_link": {"type": "path"},
            "strategy": {"type": "str", "choices": ["sequential", "parallel", "auto"],
                         "default": "sequential"},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "gpu_facts_fixture_dir": {"type": "path"},
            "gpu_unexplained_memory_bytes": {"type": "int", "default": 1073741824},
            "drain_timeout": {"type": "float", "default": 60.0},
            "frontdoor": {"type": "dict", "options": {
                "upstream_file": {"type": "path", "required": True},
                "url": {"type": "str", "required": True},
                "test_cmd": {"type": "list", "elements": "str", "default": ["nginx", "-t"]},
                "reload_cmd": {"type": "list", "elements": "str",
                               "default": ["systemctl", "reload", "nginx"]},
                "key_file": {"type": "path"},
                "record_file": {"type": "path"},
                "hold_file": {"type": "path"},
                "pid_file": {"type": "path", "default": "/run/nginx.pid"},
                "warm_file": {"type": "path"},
                "hold_socket": {"type": "path"},
                "hold_max_s": {"type": "float", "default": 10.0},
                "hold_socket_user": {"type": "str"},
            }},
            "progress_file": {"type": "path"},
            "progress_interval": {"type": "float", "default": 10.0},
            "restart": {"type": "bool", "default": False},
            "health_interval": {"type": "float", "default": 2.0},
            "smoke_prompt": {"type": "str", "default": "Hello"},
            "journal_lines": {"type": "int", "default": 40},
            "record": {"type": "dict", "default": {}},
            "state_file": {"type": "path", "default": records.RECORD_FILE},
            "lock_file": {"type": "path", "default": switch_lock.LOCK_FILE},
            "lock_timeout": {"type": "int"},
            "switch_marker": {"type": "path"},
            "phase": {"type": "str", "default": "switch",
                      "choices": ["switch", *replica_cutover.PHASES]},
            "target": {"type": "str", "default": "green", "choices": ["green", "blue"]},
            "replica": {"type": "dict"},
            "switch_mode": {"type": "str", "choices": ["cold", "warm"], "default": "cold"},
            "sleep_level": {"type": "int", "choices": [1, 2], "default": 1},
            "warm_standby_max": {"type": "int", "default": 1},
            "sleep_mode": {"type": "bool", "default": False},
            "sleep_residual_bytes": {"type": "int"},
            "warm_refused": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    # The unit's lifecycle needs systemctl and journalctl, the port check ss, the front door
    # nginx (its `nginx -t`).
    needed = ("systemctl", "journalctl", "ss") + (("nginx", "pgrep") if p["frontdoor"] else ())
    # Check mode only reports the plan: on a host where an earlier task would install
    # nginx, it is not there yet.
    binaries = {name: module.get_bin_path(name, required=not module.check_mode) or name
                for name in needed}
    green = green_entry(p)

    def run_command(argv):
        if argv and argv[0] in binaries:
            argv = [binaries[argv[0]], *argv[1:]]
        return module.run_command(argv)

    frontdoor = None
    if p["frontdoor"]:
        fd = p["frontdoor"]
        frontdoor = FrontDoor(run_command, fd["upstream_file"], fd["url"],
                              test_cmd=fd["test_cmd"], reload_cmd=fd["reload_cmd"],
                              key_file=fd["key_file"], record_file=fd["record_file"],
                              confirmations=SETTLE_CONFIRMATIONS, hold_file=fd["hold_file"],
                              pid_file=fd["pid_file"], warm_file=fd["warm_file"],
                              hold_socket=fd["hold_socket"], hold_max_s=fd["hold_max_s"],
                              hold_socket_user=fd["hold_socket_user"])
        green["frontdoor_url"] = fd["url"]
    settings = Settings(strategy=p["strategy"], restart=p["restart"],
                        health_interval=p["health_interval"], smoke_prompt=p["smoke_prompt"],
                        journal_lines=p["journal_lines"], drain_timeout=p["drain_timeout"],
                        progress_file=p["progress_file"],
                        progress_interval=p["progress_interval"],
                        unexplained_memory_bytes=p["gpu_unexplained_memory_bytes"],
                        switch_marker=p["switch_marker"], switch_mode=p["switch_mode"],
                        sleep_level=p["sleep_level"], warm_standby_max=p["warm_standby_max"],
                        sleep_residual_bytes=p["sleep_residual_bytes"],
                        warm_refused=p["warm_refused"])

    def cutover_for():
        return Cutover(Host(run_command), green, p["state_file"], settings, frontdoor=frontdoor,
                       gpu_processes=gpu_reader(module, p["gpu_facts_fixture_dir"]))

    if p["phase"] != "switch":
        module.exit_json(**_run_phase(module, p, lambda: replica_cutover.RankSwitch(
            Host(run_command), green, p["state_file"], settings, frontdoor=frontdoor,
            gpu_processes=gpu_reader(module, p["gpu_facts_fixture_dir"]))))
    try:
        result = _run(module, p, cutover_for)
    finally:
        if frontdoor is not None:  # no request waits on a room whose process ends
            frontdoor.close_room()
    if module._diff:  # noqa: SLF001 - how modules read --diff
        result["diff"] = {
            "before": f"active model: {result['active_before']}\n",
            "after": f"active model: {result['active_after']}\n",
        }
    module.exit_json(**result)


def _run(module, p, cutover_for):
    """Plan (check mode) or switch under the host's switch lock."""
    if module.check_mode:
        # The plan reads the record as it is now; a switch in progress may still change it.
        holder = switch_lock.in_progress(p["lock_file"])
        result = _plan_or_fail(module, cutover_for, p)
        if holder:
            result["waited_for_switch"] = dict(holder, waited_s=0.0)
        return result
    lock_timeout = switch_lock.wait_limit(p["lock_timeout"], p["startup_timeout"],
                                          p["drain_timeout"])
    said = []

    def waiting(holder, seconds):
        # Now and then, not every poll: the job in progress writes the same file.
        if p["progress_file"] and (not said or seconds - said[-1] >= p["progress_interval"]):
            said.append(seconds)
            write_atomic(p["progress_file"], json.dumps({
                "phase": "waiting for", "model": switch_lock.describe(holder),
                "elapsed_s": round(seconds, 1), "limit_s": lock_timeout}), prefix=".progress.")

    try:
        with switch_lock.switch_lock(p["lock_file"], p["model"], lock_timeout,
                                     on_wait=waiting) as waited:
            return _plan_or_fail(module, cutover_for, p, waited)
    except switch_lock.SwitchBusyError as exc:
        module.fail_json(msg=f"cutover to {p['model']} did not start: {exc.msg}",
                         changed=False, waited_for_switch=exc.holder)
    return None  # not reached: fail_json exits


def _run_phase(module, p, switch_for):
    """One phase of a replica switch, under the host's switch lock (plan too: it reads only,
    but after a switch in progress - a dead controller's gate job - is done with the host)."""
    if module.check_mode and p["phase"] != "plan":
        return {"phase": p["phase"], "changed": False,
                "msg": f"check mode: phase {p['phase']} is not run (only plan is)"}
    lock_timeout = switch_lock.wait_limit(p["lock_timeout"], p["startup_timeout"],
                                          p["drain_timeout"])
    try:
        with switch_lock.switch_lock(p["lock_file"], p["model"], lock_timeout) as waited:
            result = switch_for().run(p["phase"], records.load(p["state_file"]), p["target"])
            if waited["waited_for"]:
                result["waited_for_switch"] = dict(waited["waited_for"],
                                                   waited_s=waited["waited_s"])
    except switch_lock.SwitchBusyError as exc:
        module.fail_json(msg=f"phase {p['phase']} of the switch to {p['model']} did not start: "
                             f"{exc.msg}", changed=False, waited_for_switch=exc.holder)
    except records.RecordError as exc:
        module.fail_json(msg=str(exc), changed=False)
    except CutoverError as exc:
        fields = dict(exc.fields)
        fields.pop("changed", None)
        module.fail_json(msg=f"phase {p['phase']} of the switch to {p['model']}: {exc.msg}",
                         changed=p["phase"] != "plan", phase=p["phase"], **fields)
    if p["phase"] == "gate" and not result.get("ok"):
        health = result.get("green_health") or result.get("blue_health") or {}
        module.fail_json(msg=f"{p['target']} {result.get('model')} failed its gate on this host "
                             f"at {health.get('stage')}: {health.get('detail')}", **result)
    return result


def _plan_or_fail(module, cutover_for, p, waited=None):
    """Read the record (under the lock: the last switch's outcome) and run the plan."""
    try:
        record = records.load(p["state_file"])
    except records.RecordError as exc:
        module.fail_json(msg=str(exc), changed=False)
    extra = {}
    if waited and waited["waited_for"]:
        extra["waited_for_switch"] = dict(waited["waited_for"], waited_s=waited["waited_s"])
    try:
        result = cutover_for().run_plan(record, check_mode=module.check_mode)
    except CutoverError as exc:
        fields = dict(exc.fields)
        fields.pop("changed", None)
        # A refusal in preflight changed nothing; any later phase did.
        changed = bool(set(fields.get("phases") or {}) - {"preflight"})
        module.fail_json(msg=exc.msg, changed=changed, **fields, **extra)
    result.update(extra)
    return result


if __name__ == "__main__":
    main()
