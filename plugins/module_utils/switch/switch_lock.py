# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""One switch at a time on a host, whoever started it and whatever became of them.

The cutover runs as an asynchronous job on the host (async_wrapper detaches it from
the controller's connection), so a controller that dies mid-switch - a dropped SSH
connection, Ctrl-C, SIGKILL - leaves the switch to finish or roll back by itself.
What a re-run must not do is start a second switch beside the first. Every cutover
holds an exclusive flock on one file while it switches; a re-run waits for the one
in progress (saying whose it is), then reads the record that switch left and
converges from there: `action: none` when it ended where the re-run wants to be.

A flock dies with its process, so a lock can never be left behind by a crash: the
file's content (who took it last) is information, never the lock itself.
"""

import contextlib
import errno
import fcntl
import json
import os
import time

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
except ImportError:  # on the host: shipped beside the probe (roles/vllm_service/tasks/probe.yml)
    from errors import FieldsError  # type: ignore[no-redef]

LOCK_FILE = "/run/vllm-fleet/cutover.lock"
# Beyond the switch's own limits, how long a waiter allows it (seconds).
WAIT_MARGIN_S = 300


def wait_limit(lock_timeout, startup_timeout, drain_timeout):
    """Seconds to wait for a switch in progress: `lock_timeout` when set, else what the
    longest switch takes - twice startup_timeout (one that rolls back starts two
    models) plus drain_timeout plus WAIT_MARGIN_S."""
    if lock_timeout is not None:
        return lock_timeout
    return 2 * startup_timeout + int(drain_timeout) + WAIT_MARGIN_S


class SwitchBusyError(FieldsError):
    """Another switch held the lock longer than we were willing to wait; `holder` is whose it
    was ({pid, model, since}, or None), also the one field."""

    def __init__(self, msg, holder=None):
        super().__init__(msg, holder=holder)
        self.holder = holder


def read_holder(path):
    """Who took the lock last ({pid, model, since}), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.loads(handle.read() or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _try_lock(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def in_progress(path=LOCK_FILE):
    """The holder of a switch in progress ({pid, model, since}), or None when none is.

    Takes and drops the lock without waiting; nothing is written.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if _try_lock(fd):
            return None
        return read_holder(path) or {"pid": None, "model": None, "since": None}
    finally:
        os.close(fd)


def describe(holder):
    if not holder:
        return "another switch"
    return (f"the switch to {holder.get('model') or '?'} (pid {holder.get('pid') or '?'}, "
            f"since {holder.get('since') or '?'})")


@contextlib.contextmanager
def switch_lock(path, model, timeout_s, on_wait=None, clock=time.monotonic, sleep=time.sleep,
                now=None, poll_s=1.0):
    """Hold the host's switch lock; wait up to `timeout_s` for a switch in progress.

    Yields {"waited_s": seconds, "waited_for": holder or None}. `on_wait(holder, seconds)`
    is called while waiting (progress). Raises SwitchBusyError past the timeout.
    """
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, mode=0o755, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start = clock()
        holder = None
        while not _try_lock(fd):
            holder = holder or read_holder(path)
            waited = clock() - start
            if waited >= timeout_s:
                raise SwitchBusyError(f"{describe(holder)} still holds {path} after "
                                      f"{timeout_s:g} s of waiting; nothing was changed", holder)
            if on_wait is not None:
                on_wait(holder, waited)
            sleep(poll_s)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        stamp = now() if now else time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.write(fd, json.dumps({"pid": os.getpid(), "model": model, "since": stamp}).encode())
        yield {"waited_s": round(clock() - start, 1), "waited_for": holder}
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
