# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""models_volume: mounts as posted, where flock holds, hard links, the lease lock, stagers.

The mount lines are public captures (tests/fixtures/mounts/SOURCE.md). The lease lock runs
on this machine's real filesystem with two holders in one process: the lab's containers
share one kernel, so a lock that holds only on one host is modelled by giving each
"host" its own LeaseLock (no flock between them), which is exactly what the lease must
survive.
"""

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import models_volume as mv

POSTED = Path(__file__).parents[3] / "fixtures" / "mounts" / "posted.txt"


def posted():
    return {m["mount_point"]: m for m in mv.parse_mount_output(POSTED.read_text())}


def test_posted_mount_lines_read_as_their_lock_scope():
    m = posted()
    assert mv.lock_scope(m["/fsx"])[0] == "none"  # FSx for Lustre without -o flock
    assert "ENOSYS" in mv.lock_scope(m["/fsx"])[1]
    assert mv.lock_scope(m["/mnt/exacloud"])[0] == "hosts"
    assert mv.lock_scope(m["/mnt/beegfs"])[0] == "this-host"
    assert mv.lock_scope(m["/mnt/shared12"]) == (
        "hosts", "NFS without local_lock: flock is a lock on the server (nfs(5))")
    assert mv.lock_scope(m["/mnt/nfs"])[0] == "hosts"
    # Derived from the posted NFS lines by the options nfs(5) documents (none posted found).
    flock_local = dict(m["/mnt/shared12"], options=[
        o if not o.startswith("local_lock=") else "local_lock=flock"
        for o in m["/mnt/shared12"]["options"]])
    assert mv.lock_scope(flock_local)[0] == "this-host"
    nolock = dict(m["/mnt/nfs"], options=m["/mnt/nfs"]["options"] + ["nolock"])
    assert mv.lock_scope(nolock)[0] == "this-host"


def test_mountinfo_reads_superblock_options_and_escapes():
    # /proc/self/mountinfo of this machine's exFAT-on-FUSE lab mount (test_models_volume_fs.py)
    # and an NFS line with the posted options; a space in a mount point is \040 (proc(5)).
    text = (
        "46 27 7:0 / /tmp/ex\\040m rw,nosuid,nodev,relatime - fuseblk /dev/loop0 "
        "rw,user_id=0,group_id=0,default_permissions,allow_other,blksize=4096\n"
        "50 27 0:52 / /mnt/shared12 rw,relatime - nfs4 192.168.1.12:/mnt/nfs1 "
        "rw,vers=4.2,hard,proto=tcp,local_lock=flock,addr=192.168.1.12\n"
    )
    mounts = mv.parse_mountinfo(text)
    assert [(m["mount_point"], m["fstype"]) for m in mounts] == [
        ("/tmp/ex m", "fuseblk"), ("/mnt/shared12", "nfs4")]
    assert mv.lock_scope(mounts[1])[0] == "this-host"  # local_lock is a superblock option
    assert mv.mount_for("/tmp/ex m/models/x", mounts)["fstype"] == "fuseblk"
    assert mv.mount_for("/tmp/ex mm", mounts) is None
    assert mv.hard_links(mounts[0]) is None  # fuseblk: exFAT (no) or ntfs-3g (yes)
    assert mv.hard_links({"fstype": "exfat"}) is False
    assert mv.hard_links(mounts[1]) is True


def test_probe_flock_names_the_error_and_reads_nothing(tmp_path):
    assert mv.probe_flock(str(tmp_path / "not" / "yet")) is None  # nearest existing folder

    def enosys(fd, op):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    assert mv.probe_flock(str(tmp_path), flock=enosys) == "[Errno 38] Function not implemented"
    assert list(tmp_path.iterdir()) == []


def test_lease_waits_for_a_live_holder_then_takes_it(tmp_path):
    path = str(tmp_path / "lease")
    a = mv.LeaseLock(path, lease_s=30, poll_s=0.02, host="host-a")
    a.acquire()
    holder = json.loads(Path(path).read_text())
    assert (holder["host"], holder["pid"]) == ("host-a", os.getpid())
    seen = []
    b = mv.LeaseLock(path, lease_s=30, poll_s=0.02, host="host-b",
                     on_wait=lambda h, w: seen.append(h["host"]))
    got = {}
    t = threading.Thread(target=lambda: got.update(waited=b.acquire()))
    t.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen
    assert seen[0] == "host-a"
    assert t.is_alive()
    a.release()
    t.join(10)
    assert got["waited"] > 0
    assert json.loads(Path(path).read_text())["host"] == "host-b"
    assert b.broke == []
    b.release()
    assert not Path(path).exists()


def test_a_lease_nobody_renews_is_taken_after_lease_s_of_the_waiters_clock(tmp_path):
    path = tmp_path / "lease"
    # Left by a host that died: another host, so its pid cannot be asked.
    path.write_text(json.dumps({"host": "gone-host", "pid": 4242, "token": "gone-host:4242:1"}))
    now = [1000.0]
    b = mv.LeaseLock(str(path), lease_s=60, poll_s=5, host="host-b",
                     clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    waited = b.acquire()
    assert waited == 60  # twelve polls of 5 s on its own clock, the mtime never moved
    assert [h["host"] for h in b.broke] == ["gone-host"]
    assert "not renewed for 60 s" in b.broke[0]["why"]
    b.release()


def test_a_renewed_lease_is_not_taken(tmp_path):
    path = tmp_path / "lease"
    path.write_text(json.dumps({"host": "busy-host", "pid": 1, "token": "busy-host:1:1"}))
    now = [0.0]
    polls = []

    def sleep(s):
        now[0] += s
        polls.append(now[0])
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # the holder's heartbeat
        if len(polls) == 40:  # 200 s of renewals, then the holder releases
            path.unlink()

    b = mv.LeaseLock(str(path), lease_s=60, poll_s=5, host="host-b",
                     clock=lambda: now[0], sleep=sleep)
    assert b.acquire() == 200
    assert b.broke == []
    b.release()


def test_a_dead_process_of_this_host_is_taken_at_once(tmp_path):
    path = tmp_path / "lease"
    me = mv.LeaseLock(str(path), host="this-host")
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that existed and is gone
    path.write_text(json.dumps({"host": "this-host", "pid": pid,
                                "boot_id": me.record["boot_id"], "token": "x"}))
    assert me.acquire() < 5
    assert "is gone" in me.broke[0]["why"]
    me.release()


def test_the_heartbeat_renews_the_lease(tmp_path):
    path = tmp_path / "lease"
    lock = mv.LeaseLock(str(path), lease_s=0.2)
    lock.acquire()
    first = path.stat().st_mtime_ns
    deadline = time.monotonic() + 10
    while path.stat().st_mtime_ns == first and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.stat().st_mtime_ns != first
    lock.release()


def test_a_lease_that_cannot_be_made_is_a_clear_error(tmp_path):
    with pytest.raises(mv.VolumeError, match=r"cannot create the lease file .*/missing/lease"):
        mv.LeaseLock(str(tmp_path / "missing" / "lease")).acquire()


def test_one_stager_per_volume_in_play_order():
    batch = ["gpu1", "gpu2", "gpu3", "gpu4", "gpu5"]
    volume_of = {"gpu1": "nfs-a", "gpu2": "nfs-a", "gpu3": "", "gpu4": "nfs-b", "gpu5": "nfs-b"}
    assert mv.stagers(batch, volume_of) == {
        "gpu1": "gpu1", "gpu2": "gpu1", "gpu3": "gpu3", "gpu4": "gpu4", "gpu5": "gpu4"}


def test_a_late_breaker_leaves_the_new_holder_alone(tmp_path):
    """Two waiters judge one lease stale; b breaks it and takes a new one; then a's break
    runs with the stale holder it read. a must not remove b's lease (the new-user trial of
    issue 34 found the link-based give-back failing on exFAT: both held it)."""
    path = tmp_path / "lease"
    stale = {"host": "gone-host", "pid": 4242, "token": "gone-host:4242:1"}
    path.write_text(json.dumps(stale))
    b = mv.LeaseLock(str(path), host="host-b")
    b._break(stale, "test")
    assert b.acquire() < 5
    a = mv.LeaseLock(str(path), host="host-a")
    a._break(stale, "test")  # late: the lease now is b's
    assert json.loads(path.read_text())["token"] == b.token
    assert a.broke == []
    assert not (tmp_path / "lease.break").exists()
    b.release()


def test_a_guard_left_by_a_dead_breaker_is_cleared_after_lease_s(tmp_path):
    path = tmp_path / "lease"
    stale = {"host": "gone-host", "pid": 4242, "token": "gone-host:4242:1"}
    path.write_text(json.dumps(stale))
    (tmp_path / "lease.break").write_text("")  # a breaker that died holding its guard
    now = [0.0]
    w = mv.LeaseLock(str(path), lease_s=60, poll_s=5, host="host-w",
                     clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    waited = w.acquire()
    # 60 s until the lease is judged stale, 60 s more until the guard is: then it breaks.
    assert 120 <= waited <= 130
    assert [h["host"] for h in w.broke] == ["gone-host"]
    w.release()
