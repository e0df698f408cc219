# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The deployment record: which model a host serves, since when, and what came before.

One JSON file, a local fact (/etc/ansible/facts.d/vllm_fleet.fact, read back
as ansible_local.vllm_fleet): `active` (model, unit, port, URL, repo,
revision, vLLM, since, sleep_mode), `previous`, a short `history`, and
`sleeping` (models asleep after a warm switch; absent: none). Written atomically
(a temp file in the same folder, then a rename), so a reader never sees half
of it.
"""

import datetime as dt
import json
import os
import time

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import (
        write_atomic,
    )
except ImportError:  # on the host: shipped beside the probe (it repairs an unreadable record)
    from durable import write_atomic  # type: ignore[no-redef]

HISTORY = 10
# Where the record lives: its one owner (vllm_cutover's state_file default; the roles
# read it through the host_path filter).
RECORD_FILE = "/etc/ansible/facts.d/vllm_fleet.fact"
# A model's unit is vllm-<model>.service: the vllm_service role writes it (vllm_service_unit,
# through the unit_name filter), the record names it, the probe finds model units by it.
UNIT_PREFIX = "vllm-"
UNIT_SUFFIX = ".service"


def unit_name(model):
    """The systemd unit that serves catalog model `model`: vllm-<model>.service."""
    return f"{UNIT_PREFIX}{model}{UNIT_SUFFIX}"


class RecordError(Exception):
    """The record cannot be read."""


def empty():
    return {"active": None, "previous": None, "history": []}


def load(path):
    """The record, or an empty one when there is none yet."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return empty()
    except ValueError as exc:
        raise RecordError(f"deployment record {path} is not JSON: {exc}") from exc
    data.setdefault("active", None)
    data.setdefault("previous", None)
    data.setdefault("history", [])
    return data


def write(path, record):
    """Write the record atomically (temp file + rename in the same folder)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n", prefix=".vllm_fleet.")


def now_iso(clock=time.time):
    return dt.datetime.fromtimestamp(clock(), dt.timezone.utc).isoformat(timespec="seconds")


def same_deployment(active, green):
    """Whether the recorded active deployment already is `green` (model and record fields)."""
    if not active:
        return False
    keys = set(green) - {"since"}
    return all(active.get(k) == green.get(k) for k in keys)


def sleeping(record):
    """The record's sleepers (models asleep on the host, their units running), oldest first:
    each the fields of an active entry plus `level` (1 or 2), `since` (when it fell asleep)
    `main_pid`, `fingerprint` (what it computed before it slept: module_utils/switch/fingerprint.py;
    absent in a record written before issue 44, such a sleeper is restarted, not woken) and
    `residual_bytes_per_gpu` (the most it kept on one GPU once asleep, nvidia-smi). A
    record without `sleeping` has none."""
    return list((record or {}).get("sleeping") or [])


def with_active(record, green, blue, wall=time.time, asleep=None, residuals=None):
    """The record after `green` became active; `blue` (the one it replaced, or None)
    becomes `previous` and heads the history. `asleep`: the sleepers after the switch
    (None: the record's, unchanged); the key is written only when there are or were any.
    `residuals`: {model: what its sleep kept on each GPU (warm_switch.residual_entry)},
    merged into the record's, which outlive the sleep (the next plan of that model uses
    them: warm_switch.recorded_residual)."""
    active = dict(green, since=now_iso(wall))
    history = ([blue] if blue else []) + list(record.get("history") or [])
    new = {"active": active, "previous": blue or record.get("previous"),
           "history": history[:HISTORY]}
    asleep = sleeping(record) if asleep is None else list(asleep)
    if asleep or "sleeping" in record:
        new["sleeping"] = asleep
    kept = dict(record.get("residuals") or {}, **(residuals or {}))
    if kept:
        new["residuals"] = kept
    return new
