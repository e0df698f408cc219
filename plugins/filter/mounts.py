# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filter mount_of: the mount (from ansible_mounts) that holds a path."""

import posixpath

from ansible.errors import AnsibleFilterError


def mount_of(path, mounts):
    """The entry of `mounts` (the `ansible_mounts` fact) whose mount point is the longest
    prefix of `path`, with `is_mount_point` added (whether `path` is that mount point itself);
    None when no entry holds it. `path` is normalised (no `..`, no trailing slash); symbolic
    links are not followed."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise AnsibleFilterError(f"mount_of wants an absolute path, got {path!r}")
    if not isinstance(mounts, list):
        raise AnsibleFilterError(
            f"mount_of wants ansible_mounts (a list), got {type(mounts).__name__}")
    path = posixpath.normpath(path)
    best = None
    for entry in mounts:
        point = posixpath.normpath(str(entry.get("mount", "")))
        inside = point in (path, "/") or path.startswith(point + "/")
        if inside and (best is None or len(point) > len(posixpath.normpath(best["mount"]))):
            best = entry
    if best is None:
        return None
    return dict(best, is_mount_point=posixpath.normpath(str(best["mount"])) == path)


class FilterModule:
    """vllm_fleet.fleet mount filters."""

    def filters(self):
        return {"mount_of": mount_of}
