# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Free-space arithmetic for the disk preflight (no side effects)."""

import os

GIB = 1024 ** 3


def gib(value):
    """Bytes as GiB, rounded for messages."""
    return round(value / GIB, 2)


def existing_parent(path):
    """The nearest existing folder at or above `path` (the filesystem it will land on)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path, statvfs=os.statvfs):
    """Bytes an unprivileged writer can still use on the filesystem holding `path`."""
    st = statvfs(existing_parent(path))
    return st.f_bavail * st.f_frsize


def check_space(path, need_bytes, margin_bytes=0, margin_ratio=0.0, statvfs=os.statvfs,
                freed_bytes=0):
    """Compare what is needed (plus margin) with what is free (plus `freed_bytes`: what the
    run removes before it writes, orphaned partial files).

    Returns a dict with need/margin/required/free in bytes, `fits`, and a
    message that names need, free and path in bytes and GiB.
    """
    if need_bytes < 0:
        raise ValueError(f"need_bytes must be >= 0, got {need_bytes}")
    margin = int(margin_bytes + margin_ratio * need_bytes)
    required = int(need_bytes) + margin
    free_now = free_bytes(path, statvfs)
    free = free_now + int(freed_bytes)
    fits = free >= required
    where = existing_parent(path)
    freed = (f" = {gib(free_now)} GiB now + {gib(freed_bytes)} GiB of orphaned partial "
             f"files removed first" if freed_bytes else "")
    target = "" if os.path.abspath(path) == where else f" for {path}"
    msg = (
        f"{'enough' if fits else 'not enough'} disk space on {where}{target}: "
        f"need {required} bytes ({gib(required)} GiB = {gib(need_bytes)} GiB + margin "
        f"{gib(margin)} GiB), free {free} bytes ({gib(free)} GiB{freed})"
    )
    if not fits:
        msg += f"; short by {required - free} bytes ({gib(required - free)} GiB)"
    return {
        "path": path,
        "filesystem_path": where,
        "need_bytes": int(need_bytes),
        "margin_bytes": margin,
        "required_bytes": required,
        "free_bytes": free,
        "fits": fits,
        "msg": msg,
    }


existing_ancestor = existing_parent


def same_filesystem(a, b):
    """True when both paths (or their nearest existing parents) live on one device."""
    try:
        return os.stat(existing_parent(a)).st_dev == os.stat(existing_parent(b)).st_dev
    except OSError:
        return False


def check(path, need_bytes, margin_bytes=0, statvfs=os.statvfs, freed_bytes=0):
    """check_space() in the shape hf_download uses: need_bytes includes the margin, `ok`;
    free_bytes counts `freed_bytes` (removed before the first byte is written)."""
    result = check_space(path, need_bytes, margin_bytes=margin_bytes, statvfs=statvfs,
                         freed_bytes=freed_bytes)
    return {"path": path, "need_bytes": result["required_bytes"],
            "free_bytes": result["free_bytes"], "ok": result["fits"], "msg": result["msg"]}
