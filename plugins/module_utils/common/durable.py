# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Durable atomic writes: every state file the product renames into place.

A rename is atomic, not durable: without an fsync of the file before it and of
the folder after it, a crash or power cut can leave the new name pointing at a
zero-length file (XFS; ext4 without auto_da_alloc), or the old file back
(saltstack/salt#69583's class). The deployment record, the front door's upstream
and hold file, the probe's state, the download's manifest and the ranks' states
are written here: a temp file of an unpredictable name in the same folder
(mkstemp: O_EXCL, never a file or link another process placed), written,
flushed and fsynced, given its mode, renamed over the target, and the folder
fsynced.
"""

import json
import os
import tempfile


def fsync_dir(folder):
    """fsync a folder, so a rename into it survives a crash (a no-op where the OS cannot)."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # a filesystem that cannot fsync a folder (some FUSE mounts): the rename stands
    finally:
        os.close(fd)


def write_atomic(path, text, mode=0o644, prefix=".vllm-fleet."):
    """Write `text` to `path` durably: temp file, fsync, chmod, rename, fsync of the folder."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def write_json_atomic(path, data, mode=0o644, prefix=".vllm-fleet.", **dump_args):
    """write_atomic of `data` as JSON (json.dumps's `dump_args`), with a final newline."""
    write_atomic(path, json.dumps(data, **dump_args) + "\n", mode=mode, prefix=prefix)
