# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The revisions of one model repo on disk, and which of them retention removes.

hf_download (with snapshots) writes each commit's files to
``<base>/snapshots/<sha>/`` and a manifest there once they are verified;
earlier versions wrote one flat folder, ``<base>/`` with its manifest. A
revision here is a folder with such a manifest: what the tool wrote, file by
file. A folder without one (a download in progress, anything somebody else
put there) is never a candidate for removal.

Retention keeps the `keep` most recently verified revisions plus the
protected ones (the serving commit and the one a rollback returns to; on a
shared volume also every commit another host's reference names,
module_utils/download/volume_refs.py), and removes the rest: the files its manifest
lists, the manifest, our partials, then the folders left empty. Nothing else is deleted.
"""

from __future__ import absolute_import, division, print_function

import contextlib
import os
import shutil

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import volume_refs
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    MANIFEST_NAME,
    SNAPSHOTS_DIR,
    STATE_DIR,
    load_manifest,
)

__metaclass__ = type


class RevisionsError(Exception):
    """A retention request that cannot be met."""


def _revision(folder, legacy):
    manifest = load_manifest(folder)
    if not manifest.get("revision"):
        return None
    files = sorted(manifest.get("files") or {})
    size = unshared = 0
    for path in files:
        with contextlib.suppress(OSError):
            st = os.stat(os.path.join(folder, path))
            size += st.st_size
            # A file hard-linked into another revision's folder frees nothing when removed here.
            unshared += st.st_size if st.st_nlink == 1 else 0
    return {
        "commit": manifest["revision"],
        "dir": folder,
        "layout": "flat" if legacy else "snapshot",
        "files": files,
        "bytes": size,
        "bytes_unshared": unshared,
        "verified_at": float(manifest.get("verified_at") or 0.0),
    }


def list_revisions(base_dir):
    """(revisions, unmanaged): the verified revisions under `base_dir`, newest first, and the
    snapshot folders without a manifest (left alone)."""
    found, unmanaged = [], []
    flat = _revision(base_dir, legacy=True)
    if flat:
        found.append(flat)
    snaps = os.path.join(base_dir, SNAPSHOTS_DIR)
    try:
        names = sorted(os.listdir(snaps))
    except OSError:
        names = []
    for name in names:
        folder = os.path.join(snaps, name)
        if not os.path.isdir(folder):
            continue
        rev = _revision(folder, legacy=False)
        if rev:
            found.append(rev)
        else:
            unmanaged.append(folder)
    found.sort(key=lambda r: (-r["verified_at"], r["dir"]))
    return found, unmanaged


def plan_prune(revisions, keep, protect):
    """(kept, removed): the protected commits stay, and the newest others while fewer than
    `keep` are kept in all; the rest goes."""
    if keep < 1:
        raise RevisionsError("keep must be at least 1 (the serving revision), got %d" % keep)
    protect = {c for c in protect or [] if c}
    # The protected ones take their slots first; the newest of the others fill what is left.
    slots = keep - sum(1 for rev in revisions if rev["commit"] in protect)
    kept, removed = [], []
    for rev in revisions:  # newest first
        if rev["commit"] in protect:
            kept.append(rev)
        elif slots > 0:
            kept.append(rev)
            slots -= 1
        else:
            removed.append(rev)
    return kept, removed


def _remove_empty_dirs(top):
    """Remove the empty folders under `top` (and `top` itself when empty), deepest first."""
    for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)


def remove_revision(rev):
    """Delete exactly what the tool wrote for `rev`: the files its manifest lists, the
    manifest, the partials; then the folders left empty (a snapshot folder only)."""
    folder = rev["dir"]
    for path in rev["files"]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, path))
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(folder, MANIFEST_NAME))
    if rev["layout"] == "snapshot":
        shutil.rmtree(os.path.join(folder, STATE_DIR, "partial"), ignore_errors=True)
        _remove_empty_dirs(folder)
    else:  # the flat layout shares its folder with the snapshots: only its own subfolders
        for path in rev["files"]:
            sub = os.path.dirname(path)
            if sub:
                _remove_empty_dirs(os.path.join(folder, sub.split("/")[0]))


def prune(base_dir, keep, protect, check_mode=False, references=None):
    """Apply retention under `base_dir`. Returns the module's result dict.

    `references`: what the shared volume's hosts hold of this repo
    (volume_refs.read_references): every commit they name is protected too, and an
    unreadable reference removes nothing (the result's `references_unreadable` names it).
    None: a volume of this host alone (the record's protect list only)."""
    references = references or {"held": {}, "unreadable": []}
    held = references.get("held") or {}
    unreadable = list(references.get("unreadable") or [])
    revisions, unmanaged = list_revisions(base_dir)
    protect = {c for c in protect or [] if c}
    missing = sorted(protect - {r["commit"] for r in revisions})
    kept, removed = plan_prune(revisions, keep, protect | set(held))
    if unreadable:  # a host's needs are unknown: keep every revision (fail safe)
        kept, removed = revisions, []
    if not check_mode:
        for rev in removed:
            remove_revision(rev)
    summary = [{k: r[k] for k in ("commit", "dir", "layout", "bytes")} for r in kept]
    gone = [{k: r[k] for k in ("commit", "dir", "layout", "bytes")} for r in removed]
    on_disk = {r["commit"] for r in revisions}
    return {
        "changed": bool(removed),
        "revisions": summary,
        "removed": gone,
        "bytes_freed": sum(r["bytes_unshared"] for r in removed),
        "unmanaged": unmanaged,
        "protected_missing": missing,
        "held_by_hosts": {c: hosts for c, hosts in sorted(held.items()) if c in on_disk},
        "references_unreadable": unreadable,
        "diff": {
            "before": {"revisions": [r["commit"] for r in revisions]},
            "after": {"revisions": [r["commit"] for r in kept]},
        },
    }


def prune_on_volume(base_dir, keep, protect, volume, check_mode=False, lease=None):
    """Retention on a models volume other hosts share: under the repo's lease (`lease`, a
    context manager; the download's, so no host stages or retains this repo meanwhile),
    write this host's reference, then read every host's and prune keeping what they name.

    `volume`: {models_root, repo_id, host, name, record, staged, retention}; `retention`
    false writes the reference only (before a switch: `staged` is the commit to come).
    Check mode writes nothing and reads the references without the lease."""
    ref = volume_refs.reference(volume["host"], volume["name"], volume["record"],
                                volume["repo_id"], volume.get("staged") or [])
    path = volume_refs.ref_path(volume["models_root"], volume["host"])  # a valid name first
    with lease if lease is not None and not check_mode else contextlib.nullcontext():
        ref_changed = volume_refs.written_revisions(path) != ref["revisions"]
        if not check_mode:
            volume_refs.write_reference(volume["models_root"], volume["host"], ref)
        if not volume.get("retention", True):
            return {"changed": ref_changed, "reference": path,
                    "reference_revisions": ref["revisions"]}
        references = volume_refs.read_references(volume["models_root"], volume["repo_id"])
        if check_mode:  # this host's reference as it would be written
            for e in ref["revisions"]:
                if e["repo_id"] == volume["repo_id"]:
                    references["held"].setdefault(e["revision"], []).append(
                        "%s (%s)" % (volume["host"], e["as"]))
        result = prune(base_dir, keep, protect, check_mode=check_mode, references=references)
    result.update(reference=path, reference_revisions=ref["revisions"],
                  changed=result["changed"] or ref_changed)
    return result
