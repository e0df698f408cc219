# Copyright: vllm-fleet contributors
# Apache License 2.0
"""Free-space arithmetic for the disk_space and hf_download modules (stdlib only)."""

from __future__ import absolute_import, division, print_function

import os

GIB = 1024**3


def existing_ancestor(path):
    """The path itself or its nearest existing parent (a model dir may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path, statvfs=os.statvfs):
    """Bytes an unprivileged writer can still use on the filesystem holding path."""
    st = statvfs(existing_ancestor(path))
    return st.f_bavail * st.f_frsize


def same_filesystem(a, b):
    """True when both paths (or their nearest existing parents) live on one device."""
    try:
        return os.stat(existing_ancestor(a)).st_dev == os.stat(existing_ancestor(b)).st_dev
    except OSError:
        return False


def gib(n):
    return round(n / GIB, 2)


def check(path, need_bytes, margin_bytes=0, statvfs=os.statvfs):
    """Compare need (+ margin) with free space at path.

    Returns a dict: path, need_bytes (margin included), free_bytes, ok, msg.
    """
    need = int(need_bytes) + int(margin_bytes)
    free = free_bytes(path, statvfs=statvfs)
    ok = free >= need
    msg = "need {0} bytes ({1} GiB) at {2}, free {3} bytes ({4} GiB)".format(
        need, gib(need), path, free, gib(free)
    )
    if not ok:
        msg = "not enough disk space: " + msg
    return {"path": path, "need_bytes": need, "free_bytes": free, "ok": ok, "msg": msg}
