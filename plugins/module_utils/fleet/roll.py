# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The controller's decisions in a roll, across the hosts of a batch.

Which hosts of a fleet's batch leave the balancers (their switch stops the
model they serve), the replica's hosts and their ephemeral port range (the
inputs of its plan, module_utils/fleet/multinode.py) and the plans its firewall opens
ports for, and the replica switch's
decisions (roles/vllm_model/tasks/cutover_replica.yml): its hosts, each
host's scope, the scope's action, what refuses the switch before anything
changes, and what failed.

Pure functions of plain data: each takes what the hosts registered or were
given, as host name -> value, and returns lists, strings or booleans. The
filters in plugins/filter/roll.py expose them; the filter host_facts reads
those values from hostvars. Until issue 31 they were Jinja in
roles/vllm_model/vars/main.yml, and they keep its results exactly - Jinja's
case-insensitive unique and groupby included.

Standard library only.
"""

import base64
from collections.abc import Mapping

# The switch plans (vllm_cutover's `action`) that keep the model serving throughout.
IN_PLACE_ACTIONS = ("none", "record", "frontdoor")
# The kernel's default net.ipv4.ip_local_port_range, for a host whose was not read.
DEFAULT_EPHEMERAL = (32768, 60999)


def _fold(value):
    return value.lower() if isinstance(value, str) else value


def unique(values):
    """The values in order, each once, strings compared without case (Ansible's unique)."""
    seen, out = [], []
    for value in values:
        if _fold(value) not in seen:
            seen.append(_fold(value))
            out.append(value)
    return out


def _group_by(items, key):
    """(key, items) pairs sorted by key without case, as Jinja's groupby: each group is
    named by its first item's key."""
    groups = {}
    for item in sorted(items, key=lambda one: _fold(one.get(key))):
        groups.setdefault(_fold(item.get(key)), []).append(item)
    return [(found[0].get(key), found) for found in groups.values()]


# -- the roll: who leaves the balancers -----------------------------------------------
def switch_stops_model(plan):
    """Whether a host's switch plan (vllm_cutover in check mode, its registered result;
    None when the plan did not run) stops the model it serves: any action but none,
    record and frontdoor, which keep it serving throughout."""
    return (plan or {}).get("action", "none") not in IN_PLACE_ACTIONS


def batch_leaving(plans):
    """The hosts, of `plans` (host -> its switch plan, in batch order), whose switch stops
    the model they serve: the hosts of the batch that leave the balancers together."""
    return [host for host, plan in plans.items() if switch_stops_model(plan)]


# -- the replica's plan: its hosts and their ephemeral range ---------------------------
def replica_hosts(facts):
    """The replica group's hosts as replica_plan takes them: name, ip, interface.

    facts: host -> {vllm_fleet_replica_ip, vllm_fleet_replica_interface} (those set), in
    the group's order; one not set is ''.
    """
    return [{"name": host, "ip": given.get("vllm_fleet_replica_ip", ""),
             "interface": given.get("vllm_fleet_replica_interface", "")}
            for host, given in facts.items()]


def ephemeral_cover(reads):
    """One [low, high] port range that covers the ephemeral ranges of the replica's hosts.

    reads: host -> its slurp of /proc/sys/net/ipv4/ip_local_port_range (None, or a result
    without content, where it was not read: the kernel's default then).
    """
    lows, highs = [], []
    for given in reads.values():
        read = given or {}
        if "content" not in read:
            lows.append(DEFAULT_EPHEMERAL[0])
            highs.append(DEFAULT_EPHEMERAL[1])
            continue
        text = base64.b64decode(read["content"]).decode("utf-8")
        parts = text.split()
        if len(parts) < 2:  # noqa: PLR2004 - low and high
            raise ValueError(f"an ephemeral port range is 'LOW HIGH', got {text!r}")
        lows.append(int(parts[0]))
        highs.append(int(parts[1]))
    return [min(lows), max(highs)] if lows else list(DEFAULT_EPHEMERAL)


def firewall_plans(green, active, model, host):
    """The replica plans whose ports host `host` opens to their hosts (the vllm_service role's
    firewall): green's (`green`, a replica_plan; None when the model is served by each host
    alone), and the replica the host serves now (`active`, its record's active model) as a
    plan of one member from its record - a rollback needs its ports open again - unless it
    is green's model on its replica already."""
    plans = [green] if green is not None else []
    if isinstance(active, Mapping) and isinstance(active.get("replica"), Mapping) \
            and not (green is not None and active.get("model") == model):
        plans.append({"model": active.get("model"),
                      "members": [dict(active["replica"], name=host)]})
    return plans


# -- the replica switch ----------------------------------------------------------------
def replica_members(parts):
    """The hosts of the switch: of `parts` (host -> its part, the plan phase's registered
    result, None where it has none; in batch order), those whose plan ran (an action)."""
    return [host for host, part in parts.items() if isinstance(part, dict) and "action" in part]


def replica_scope(part, host, members):
    """Host `host`'s scope: itself and the ranks of its green and blue replicas (from its
    part), those that are members of the switch. A scope switches, fails and rolls back
    as one."""
    part = part if isinstance(part, dict) else {}
    wanted = [host, *part.get("green_ranks", []), *part.get("blue_ranks", [])]
    return unique(name for name in wanted if name in members)


def replica_action(parts):
    """What a scope does, from its hosts' parts (host -> part): none when every host's
    action is none; commit when each is none or commit (green runs behind a passed gate,
    only records or front doors lag); else switch."""
    actions = unique(part["action"] for part in parts.values())
    if actions == ["none"]:
        return "none"
    if all(action in ("none", "commit") for action in actions):
        return "commit"
    return "switch"


def replica_refusals(parts):
    """Why the switch is refused before anything changes, one sentence each; [] when not.

    parts: host -> part for every host of the switch, in its order. Refused: a replica
    (green's, or blue's on a host) with a rank outside the switch; a host whose part its
    preflight refuses (`refused`); ranks of one green replica on different revisions or
    vLLM builds.
    """
    refusals = []
    for host, part in parts.items():
        for kind in ("green", "blue"):
            missing = [rank for rank in part.get(f"{kind}_ranks", []) if rank not in parts]
            if missing:
                refusals.append(
                    f"{host}'s {kind} {part[kind]} is a replica with {', '.join(missing)}, not "
                    "in this run: a replica switches whole (run it with --limit covering all "
                    "its hosts).")
        if "refused" in part:
            refusals.append(f"{host} refuses its part: {part['refused']}.")
    greens = [part for part in parts.values() if part.get("green_group")]
    for replica, ranks in _group_by(greens, "green_group"):
        for key, what in (("green_revision", "revision"), ("green_vllm", "vLLM")):
            found = unique(rank[key] for rank in ranks)
            if len(found) > 1:
                refusals.append(
                    f"The ranks of replica {replica} would run different {what}s "
                    f"({', '.join(str(one) for one in found)}); every rank must run the same.")
    return refusals


def replica_failures(results, batch=None):
    """What failed in a scope, one 'host: why' each, in the scope's order.

    results: host -> {registered name: result} for the phases to look at, in phase order
    (the names a host has not registered left out). A result that failed names its msg.
    With `batch` (the hosts still in the run), a host of the scope that is not in it
    failed too: it left the run during the switch.
    """
    found = []
    for host, registered in results.items():
        if batch is not None and host not in batch:
            found.append(f"{host}: left the run during the switch (unreachable, or a task failed)")
        for given in registered.values():
            result = given or {}
            if result.get("failed", False):
                found.append(f"{host}: {result.get('msg', 'failed')}")
    return found


def replica_blue_labels(parts):
    """What the scope's hosts served before the switch (each part's blue, 'nothing' where
    none), each once, joined by commas."""
    return ", ".join(str(label) for label in unique(
        (part or {}).get("blue") or "nothing" for part in parts.values()))
