# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Which revisions the hosts of a shared models volume still need: their references.

Hosts that name one models volume (``vllm_fleet_models_volume``) read the same
revision folders, so retention on that volume is volume-wide: a revision is
removed only when no host of the volume serves it, has it asleep, may roll
back to it or has staged it to serve next. Each host keeps a **reference** on
the volume, ``<models_root>/.vllm-fleet/refs/<host>.json`` (this module is the
one owner of that path), that lists those revisions for every repo of its
deployment record:

    {"version": 1, "host": "gpu2", "volume": "nfs-a", "updated": "...",
     "revisions": [{"repo_id": "org/model", "revision": "<sha>", "as": "serving"}]}

`as` is ``serving`` (the record's active), ``asleep`` (its sleepers),
``rollback`` (its previous: what a rollback returns to) or ``staged`` (the
commit the host downloaded and is about to switch to).

The host's name is its inventory_hostname: the name the fleet already keys a
volume's stager by and the name an operator removes from the inventory; a
machine-id would change with a reinstall and leave an orphan behind. A host
that leaves the fleet leaves its reference: only an operator removes it (it
keeps the revisions it names, which is the safe side).

A reference is written durably (durable.write_atomic: unpredictable temp name,
fsync of file and folder) and read as the lease is (models_volume.read_state:
O_NOFOLLOW, a regular file, bounded). A reference that cannot be read or
parsed (a link, a FIFO, too large, not JSON, not this shape) names no
revisions that can be trusted: retention of every repo on the volume then
removes nothing, and says which file stopped it.
"""

from __future__ import absolute_import, division, print_function

import datetime as dt
import errno
import json
import os
import re
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import (
    write_json_atomic,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import models_volume

__metaclass__ = type

REFS_DIR = os.path.join(".vllm-fleet", "refs")
REF_SUFFIX = ".json"
REF_VERSION = 1
ROLES = ("serving", "asleep", "rollback", "staged")
# An inventory hostname as a file name: no separator, no leading dot (temp files and the
# folder's own entries start with one), no control characters.
_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@+:-]{0,199}$")


class VolumeRefError(Exception):
    """A reference that cannot be written; the message says what was wanted and found."""


class BadReferenceError(Exception):
    """A reference whose content is not a reference (what was wanted and found)."""


def refs_dir(models_root):
    """The folder of the volume's references."""
    return os.path.join(models_root, REFS_DIR)


def ref_path(models_root, host):
    """The reference of `host` on the volume mounted at `models_root`."""
    if not isinstance(host, str) or not _HOST_RE.match(host):
        raise VolumeRefError("wanted a host name usable as a file name (letters, digits, "
                             "'._@+:-', not starting with a dot), found %r" % (host,))
    return os.path.join(refs_dir(models_root), host + REF_SUFFIX)


def _now_iso(wall):
    return dt.datetime.fromtimestamp(wall(), dt.timezone.utc).isoformat(timespec="seconds")


def _entry(deployment, role):
    if not isinstance(deployment, dict):
        return None
    repo, rev = deployment.get("repo_id"), deployment.get("revision")
    if isinstance(repo, str) and repo and isinstance(rev, str) and rev:
        return {"repo_id": repo, "revision": rev, "as": role}
    return None


def entries_of(record, repo_id=None, staged=()):
    """The revisions a host's record needs kept: its active (serving), sleepers (asleep)
    and previous (rollback); plus `staged` commits of `repo_id`."""
    record = record or {}
    found = [_entry(record.get("active"), "serving")]
    found += [_entry(s, "asleep") for s in record.get("sleeping") or []]
    found.append(_entry(record.get("previous"), "rollback"))
    found += [{"repo_id": repo_id, "revision": c, "as": "staged"} for c in staged or []
              if repo_id and isinstance(c, str) and c]
    out, seen = [], set()
    for e in found:
        key = e and (e["repo_id"], e["revision"], e["as"])
        if e and key not in seen:
            seen.add(key)
            out.append(e)
    return out


def reference(host, volume, record, repo_id=None, staged=(), wall=time.time):
    """The reference `host` keeps on the volume for its `record`."""
    return {"version": REF_VERSION, "host": host, "volume": volume, "updated": _now_iso(wall),
            "revisions": entries_of(record, repo_id, staged)}


def _check_folders(models_root):
    """.vllm-fleet and its refs/ are folders, not links: a link would send the references
    (or their reading) elsewhere. Raises models_volume.VolumeError naming what was found."""
    found = models_volume.not_a_folder(models_root, REFS_DIR)
    if found:
        raise models_volume.VolumeError(
            "%s, wanted a folder: nothing on the volume is followed; remove it "
            "(someone else put it there)" % found)


def write_reference(models_root, host, data):
    """Write `host`'s reference durably; returns its path."""
    path = ref_path(models_root, host)
    try:
        _check_folders(models_root)
        os.makedirs(refs_dir(models_root), exist_ok=True)
        _check_folders(models_root)
        write_json_atomic(path, data, prefix=".ref.", indent=1, sort_keys=True)
    except (OSError, models_volume.VolumeError) as e:
        raise VolumeRefError("cannot write this host's reference %s: %s" % (path, e)) from e
    return path


def parse_reference(raw):
    """The entries of a reference's bytes; BadReferenceError saying what was wanted and found."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadReferenceError("wanted JSON, found %s" % e) from e
    if not isinstance(data, dict) or not isinstance(data.get("revisions"), list):
        found = data.get("revisions") if isinstance(data, dict) else data
        raise BadReferenceError("wanted an object with a 'revisions' list, found %s"
                                % type(found).__name__)
    for e in data["revisions"]:
        ok = isinstance(e, dict) and all(
            isinstance(e.get(k), str) and e.get(k) for k in ("repo_id", "revision"))
        if not ok:
            raise BadReferenceError("wanted each revision as {repo_id, revision, as}, "
                                    "found %r" % (e,))
    return data["revisions"]


def written_revisions(path):
    """The revisions the reference at `path` names now; None when it is absent or
    unreadable (it is written again either way)."""
    try:
        return parse_reference(models_volume.read_state(path))
    except (OSError, BadReferenceError, models_volume.VolumeError):
        return None


def _names(folder):
    """The reference files' names in `folder` (dot names are temp files being written)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(REF_SUFFIX) and not n.startswith("."))


def read_references(models_root, repo_id):
    """What the volume's references say about `repo_id`:

    {"held": {commit: ["<host> (<as>)", ...]}, "read": [paths], "unreadable": [{file, why}]}.
    A reference that cannot be read or parsed is listed in `unreadable` (retention then
    removes nothing); a folder of references that is a link or cannot be listed too."""
    folder = refs_dir(models_root)
    out = {"held": {}, "read": [], "unreadable": []}
    try:
        _check_folders(models_root)
        names = _names(folder)
    except (OSError, models_volume.VolumeError) as e:
        out["unreadable"].append({"file": folder, "why": str(e)})
        return out
    for name in names:
        path = os.path.join(folder, name)
        try:
            entries = parse_reference(models_volume.read_state(path))
        except FileNotFoundError:
            continue  # removed by an operator since the listing
        except (OSError, BadReferenceError, models_volume.VolumeError) as e:
            why = str(e) if not isinstance(e, OSError) or e.errno != errno.EACCES else \
                "permission denied"
            out["unreadable"].append({"file": path, "why": why})
            continue
        out["read"].append(path)
        host = name[:-len(REF_SUFFIX)]
        for e in entries:
            if e["repo_id"] == repo_id:
                who = "%s (%s)" % (host, e.get("as") or "?")
                out["held"].setdefault(e["revision"], [])
                if who not in out["held"][e["revision"]]:
                    out["held"][e["revision"]].append(who)
    return out
