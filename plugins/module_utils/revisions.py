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
protected ones (the serving commit and the one a rollback returns to), and
removes the rest: the files its manifest lists, the manifest, our partials,
then the folders left empty. Nothing else is deleted.
"""

from __future__ import absolute_import, division, print_function

import contextlib
import os
import shutil

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.hf_download import (
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


def prune(base_dir, keep, protect, check_mode=False):
    """Apply retention under `base_dir`. Returns the module's result dict."""
    revisions, unmanaged = list_revisions(base_dir)
    missing = sorted({c for c in protect or [] if c} - {r["commit"] for r in revisions})
    kept, removed = plan_prune(revisions, keep, protect)
    if not check_mode:
        for rev in removed:
            remove_revision(rev)
    summary = [{k: r[k] for k in ("commit", "dir", "layout", "bytes")} for r in kept]
    gone = [{k: r[k] for k in ("commit", "dir", "layout", "bytes")} for r in removed]
    return {
        "changed": bool(removed),
        "revisions": summary,
        "removed": gone,
        "bytes_freed": sum(r["bytes_unshared"] for r in removed),
        "unmanaged": unmanaged,
        "protected_missing": missing,
        "diff": {
            "before": {"revisions": [r["commit"] for r in revisions]},
            "after": {"revisions": [r["commit"] for r in kept]},
        },
    }
