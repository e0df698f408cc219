# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 45 case 4: on the models volume nothing is followed or trusted.

Real files in tmp_path, planted as another user of a shared volume would: a symlinked lock
file, a FIFO lease, a lease linked to /dev/zero, a snapshot folder linked outside the repo,
a partial linked to a victim, and holders that renew forever or hang. Each case is bounded
by a thread join or a subprocess timeout, so the old code's hang fails the test instead of
hanging the run."""

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download as m
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import models_volume as mv

VICTIM_TEXT = b"root's precious file\n"
JOIN_S = 5.0


def _victim(tmp_path):
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(VICTIM_TEXT)
    return victim


def _in_thread(fn):
    """Run fn in a daemon thread; ({"value"|"error": ...}, thread) after JOIN_S at most."""
    out = {}

    def target():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001 - the test reads what came out
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(JOIN_S)
    return out, t


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path):
    local = tmp_path / "model"
    state = local / ".cache" / "vllm-fleet"
    state.mkdir(parents=True)
    victim = _victim(tmp_path)
    (state / "lock").symlink_to(victim)
    with pytest.raises(m.DownloadError, match=r"lock: .*lock is a symbolic link"), \
            m.model_lock(str(local)):
        pass
    assert victim.read_bytes() == VICTIM_TEXT


def test_a_symlinked_state_folder_is_refused(tmp_path):
    local = tmp_path / "model"
    (local / ".cache").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (local / ".cache" / "vllm-fleet").symlink_to(outside)
    with pytest.raises(m.DownloadError, match=r"vllm-fleet is a symbolic link, not a folder"), \
            m.model_lock(str(local)):
        pass
    assert list(outside.iterdir()) == []


def test_a_lock_file_with_a_second_hard_link_is_refused(tmp_path):
    local = tmp_path / "model"
    state = local / ".cache" / "vllm-fleet"
    state.mkdir(parents=True)
    victim = _victim(tmp_path)
    os.link(victim, state / "lock")
    with pytest.raises(m.DownloadError, match=r"has 2 hard links"), m.model_lock(str(local)):
        pass
    assert victim.read_bytes() == VICTIM_TEXT


def test_a_fifo_lease_is_refused_without_blocking(tmp_path):
    lease = tmp_path / "lease"
    os.mkfifo(lease)
    out, t = _in_thread(lambda: mv.LeaseLock(str(lease), poll_s=0.01).acquire())
    if t.is_alive():  # the old code: open() of the FIFO waits for a writer; let it go
        fd = os.open(lease, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    assert not t.is_alive(), "acquire() blocked on a FIFO lease for %.0f s" % JOIN_S
    assert isinstance(out.get("error"), mv.VolumeError), out
    assert "is a FIFO, not a regular file" in str(out["error"])
    assert str(lease) in str(out["error"])


def test_a_lease_linked_to_dev_zero_is_refused_within_bounds(tmp_path):
    """In a child with 1 GiB of address space and a 30 s timeout: the old code read /dev/zero
    until MemoryError; the new one refuses the link without reading a byte."""
    lease = tmp_path / "lease"
    lease.symlink_to("/dev/zero")
    child = textwrap.dedent("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import (
            models_volume as mv,
        )
        try:
            mv.LeaseLock(sys.argv[1], poll_s=0.01).acquire()
        except mv.VolumeError as e:
            print("REFUSED", e)
        else:
            print("TAKEN")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, "-c", child, str(lease)], capture_output=True,
                         text=True, timeout=30, env=env, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("REFUSED"), run.stdout
    assert "is a symbolic link" in run.stdout
    assert str(lease) in run.stdout


def test_state_reads_are_bounded_and_regular_only(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"{" + b" " * mv.STATE_LIMIT + b"}")
    with pytest.raises(mv.VolumeError, match=r"big is %d bytes, a state file is at most %d"
                       % (mv.STATE_LIMIT + 2, mv.STATE_LIMIT)):
        mv.read_state(str(big))
    with pytest.raises(mv.VolumeError, match=r"/dev/zero is a character device"):
        mv.read_state("/dev/zero")
    with pytest.raises(mv.VolumeError, match=r"is a directory"):
        mv.read_state(str(tmp_path))
    ok = tmp_path / "ok"
    ok.write_text('{"host": "a"}')
    assert mv.read_json_state(str(ok)) == {"host": "a"}
    assert mv.read_json_state(str(tmp_path / "absent")) == {}


def test_a_manifest_that_is_a_link_or_too_large_is_not_trusted(tmp_path):
    local = tmp_path / "model"
    local.mkdir()
    elsewhere = tmp_path / "other-manifest.json"
    elsewhere.write_text('{"version": 1, "revision": "a", "files": {}}')
    (local / m.MANIFEST_NAME).symlink_to(elsewhere)
    assert m.load_manifest(str(local)) == {}
    (local / m.MANIFEST_NAME).unlink()
    os.mkfifo(local / m.MANIFEST_NAME)
    out, t = _in_thread(lambda: m.load_manifest(str(local)))
    assert not t.is_alive()
    assert out == {"value": {}}


def _plant_outside(outside):
    files = [
        outside / ".cache" / "vllm-fleet" / "partial" / "w.bin.0123456789abcdef.partial",
        outside / ".cache" / "huggingface" / "download" / "w.bin.incomplete",
    ]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(VICTIM_TEXT)
    return files


def test_orphan_clean_up_never_follows_a_symlinked_snapshot(tmp_path):
    base = tmp_path / "repo"
    snaps = base / m.SNAPSHOTS_DIR
    current = snaps / ("a" * 40)
    (current / m.PARTIAL_DIR).mkdir(parents=True)
    outside = tmp_path / "someone-elses"
    planted = _plant_outside(outside)
    (snaps / ("b" * 40)).symlink_to(outside, target_is_directory=True)
    # a real snapshot whose .cache is a link outside, and one real orphan beside it
    real = snaps / ("c" * 40)
    real.mkdir()
    (real / ".cache").symlink_to(outside / ".cache", target_is_directory=True)
    mine = current / m.PARTIAL_DIR / "old.bin.fedcba9876543210.partial"
    mine.write_bytes(b"x" * 10)
    # an orphan that is itself a link: the link goes, its target stays
    linked = current / m.PARTIAL_DIR / "linked.bin.00000000000000ff.partial"
    victim = _victim(tmp_path)
    linked.symlink_to(victim)

    found = m.find_orphans(str(current), None, set(), base_dir=str(base))
    assert not [p for p in found if p.startswith(str(outside))], found
    assert sorted(found) == sorted([str(linked), str(mine)])
    assert m.remove_orphans(found) == sorted(found)
    assert all(f.read_bytes() == VICTIM_TEXT for f in planted)
    assert victim.read_bytes() == VICTIM_TEXT
    assert not mine.exists()
    assert not os.path.lexists(linked)


def test_a_planted_partial_link_is_never_written_through(tmp_path):
    local = tmp_path / "model"
    src = tmp_path / "src.bin"
    data = b"weights" * 100
    src.write_bytes(data)
    rf = m.RemoteFile("w.bin", len(data), "d" * 40, hashlib.sha256(data).hexdigest())
    part = m.partial_path(str(local), rf)
    os.makedirs(os.path.dirname(part))
    victim = _victim(tmp_path)
    os.symlink(victim, part)
    d = m.HfDownloader("org/repo", str(local))
    d.volume = {"fstype": "ext4"}
    with pytest.raises(m.DownloadError, match=r"partial file: .* is a symbolic link"):
        d._copy(str(src), rf)
    assert victim.read_bytes() == VICTIM_TEXT
    assert not (local / "w.bin").exists()


def test_a_linked_folder_below_the_partials_is_never_written_into(tmp_path):
    local = tmp_path / "model"
    partials = local / m.PARTIAL_DIR
    partials.mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (partials / "sub").symlink_to(outside, target_is_directory=True)
    part = m.partial_path(str(local), m.RemoteFile("sub/w.bin", 5, "e" * 40))
    with pytest.raises(m.DownloadError, match=r"partial/sub is a symbolic link or not a folder"):
        m.open_partial(part, append=False)
    assert list(outside.iterdir()) == []


def test_the_link_probe_name_is_unpredictable(tmp_path):
    seen = []

    def link(src, dst):
        seen.append(os.path.basename(src))
        os.link(src, dst)

    d = m.HfDownloader("org/repo", str(tmp_path), link=link)
    d.volume = {"fstype": "ext4"}
    # the old name, link-probe.<pid>, planted as a link to a victim: never opened
    victim = _victim(tmp_path)
    state = tmp_path / m.STATE_DIR
    state.mkdir(parents=True)
    (state / ("link-probe.%d" % os.getpid())).symlink_to(victim)
    assert d._links_work() is True
    assert victim.read_bytes() == VICTIM_TEXT
    assert seen
    assert seen[0] != "link-probe.%d" % os.getpid()
    assert len(seen[0]) == len("link-probe.") + 16


def test_a_holder_that_renews_forever_ends_the_wait_with_its_name(tmp_path):
    path = str(tmp_path / "lease")
    a = mv.LeaseLock(path, lease_s=0.2, host="host-a", progress=time.monotonic)
    a.acquire()
    try:
        b = mv.LeaseLock(path, lease_s=0.2, poll_s=0.02, host="host-b", wait_s=0.8)
        out, t = _in_thread(b.acquire)
        assert not t.is_alive(), "the wait for a renewed lease did not end"
        err = out.get("error")
        assert isinstance(err, mv.LeaseWaitError), out
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(a.record["since"]))
        assert "held by host host-a, pid %d since %s" % (os.getpid(), since) in str(err)
        assert "waited 1 s (the wait's bound) for the lease %s" % path in str(err)
    finally:
        a.release()


def test_a_hung_holder_stops_renewing_and_its_lease_is_taken(tmp_path):
    path = str(tmp_path / "lease")
    # host-a's heartbeat runs but its work stands still (a hung download)
    a = mv.LeaseLock(path, lease_s=0.2, host="host-a", progress=lambda: 42, stall_s=0.3)
    a.acquire()
    try:
        b = mv.LeaseLock(path, lease_s=0.2, poll_s=0.02, host="host-b", wait_s=4)
        out, t = _in_thread(b.acquire)
        assert not t.is_alive()
        assert "error" not in out, out
        assert b.broke
        assert b.broke[0]["host"] == "host-a"
        assert "was not renewed" in b.broke[0]["why"]
        assert a.lost
        assert "no progress for" in a.lost
        b.release()
    finally:
        a.release()


def test_the_heartbeat_never_renews_a_lease_that_is_no_longer_its_own(tmp_path):
    path = tmp_path / "lease"
    a = mv.LeaseLock(str(path), lease_s=60, host="host-a")
    a.acquire()
    a._stop.set()
    os.remove(path)
    path.write_text('{"host": "host-b", "pid": 7, "token": "b"}')
    os.utime(path, (1, 1))
    assert a.renew({}) is False
    assert "held by host-b pid 7" in a.lost
    assert path.stat().st_mtime == 1  # the new holder's lease was not touched
    a.release()
    assert path.exists()


@pytest.mark.parametrize("how", ["_copy", "_link"])
def test_a_linked_folder_below_the_model_folder_never_receives_the_file(tmp_path, how):
    """Found by a new-user trial reading docs/security.md: the verified file went in with
    makedirs(dirname(dest)) and a rename, so a folder in its path that another user of the
    volume made a symbolic link took the file outside the model folder."""
    local = tmp_path / "model"
    local.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (local / "sub").symlink_to(outside, target_is_directory=True)
    src = tmp_path / "src.bin"
    data = b"weights" * 100
    src.write_bytes(data)
    rf = m.RemoteFile("sub/w.bin", len(data), "d" * 40, hashlib.sha256(data).hexdigest())
    d = m.HfDownloader("org/repo", str(local))
    d.volume = {"fstype": "ext4"}
    with pytest.raises(m.DownloadError, match=r"sub/w.bin: its folder .* leads to .*elsewhere, "
                                              r"outside the model folder"):
        getattr(d, how)(str(src), rf)
    assert list(outside.iterdir()) == []


def test_a_model_folder_reached_through_a_link_is_still_written(tmp_path):
    """The model folder itself may be reached through a link (a models root on a mounted
    volume): folders below it are compared after resolving it."""
    real = tmp_path / "volume" / "model"
    real.mkdir(parents=True)
    (tmp_path / "model").symlink_to(real, target_is_directory=True)
    src = tmp_path / "src.bin"
    data = b"weights" * 100
    src.write_bytes(data)
    rf = m.RemoteFile("sub/w.bin", len(data), "d" * 40, hashlib.sha256(data).hexdigest())
    d = m.HfDownloader("org/repo", str(tmp_path / "model"))
    d.volume = {"fstype": "ext4"}
    assert d._copy(str(src), rf) is True
    assert (real / "sub" / "w.bin").read_bytes() == data
