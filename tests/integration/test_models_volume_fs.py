# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The models volume as it really is (issue 34, item 4), against the lab Hub.

Real filesystems where this machine can make them: a size-limited tmpfs (orphaned
partials: the plan fits once they are gone) and exFAT through FUSE on a loop device
(exfat-fuse, `apt install exfat-fuse exfatprogs`: link(2) answers EPERM, so a file two
revisions share is copied and the disk plan counts the copy). Through a seam where it
cannot: a filesystem without flock (Lustre mounted without ``-o flock`` answers ENOSYS,
tests/fixtures/mounts/posted.txt line 1; no such filesystem mounts here) and a lock that
holds only on the host that took it between two stagers (NFS with local_lock, BeeGFS's
default: the lab's containers share one kernel, whose flock every "host" would share) —
there the seam is the ``flock`` the downloader is given, and everything else is real.
"""

import errno
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    MANIFEST_NAME,
    DownloadError,
)
from huggingface_hub import HfApi

SMALL = "org/small"
SHARD1 = "model-00001-of-00002.safetensors"
REVS = "org/revs"
MiB = 1024 * 1024


def _need(*tools):
    """Root and the tools to make a filesystem; in CI (scripts/setup.sh installs them) their
    absence is a failure, not a skip."""
    missing = [t for t in tools if shutil.which(t) is None]
    why = None
    if os.geteuid() != 0:
        why = "mounting needs root"
    elif missing:
        why = "missing %s (apt install exfat-fuse exfatprogs)" % ", ".join(missing)
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of a given size (bytes) at tmp_path/<name>; unmounted after the test."""
    _need("mount", "umount")
    mounted = []

    def _mount(name, size):
        point = tmp_path / name
        point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", str(point)],
                       check=True)
        mounted.append(point)
        return point

    yield _mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture
def exfat(tmp_path):
    """exFAT (FUSE, on a loop device) of 64 MiB mounted at tmp_path/exfat."""
    _need("mkfs.exfat", "mount.exfat-fuse", "losetup", "umount")
    # What the machine itself lacks (no FUSE device, no free loop device: a container
    # without them) is a skip that says so, not a missing install.
    if not os.path.exists("/dev/fuse"):
        pytest.skip("this machine has no /dev/fuse: exFAT through FUSE cannot mount here")
    if subprocess.run(["losetup", "-f"], capture_output=True, check=False).returncode != 0:
        pytest.skip("this machine has no free loop device: exFAT cannot mount here")
    image, point = tmp_path / "exfat.img", tmp_path / "exfat"
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    subprocess.run(["mkfs.exfat", str(image)], check=True, capture_output=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True,
                          capture_output=True, text=True).stdout.strip()
    point.mkdir()
    try:
        subprocess.run(["mount.exfat-fuse", loop, str(point)], check=True, capture_output=True)
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)
        subprocess.run(["losetup", "-d", loop], check=False)


def enosys(fd, op):
    """flock as Lustre without -o flock answers it (tests/fixtures/mounts/posted.txt, line 1)."""
    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


def host_local(fd, op):
    """flock between two hosts whose locks hold only where they were taken: never a wait."""
    return


def files_of(folder):
    return {
        os.path.relpath(os.path.join(d, f), folder): os.path.getsize(os.path.join(d, f))
        for d, _dirs, names in os.walk(folder) for f in names
        if ".cache" not in os.path.relpath(d, folder).split(os.sep) and f != MANIFEST_NAME
    }


def test_no_flock_is_planned_and_handled_with_a_lease(hub, download, tmp_path):
    local = tmp_path / "m"
    plan = download(SMALL, local, check_mode=True, flock=enosys)
    assert plan["volume"]["flock"] == "[Errno 38] Function not implemented"
    assert plan["volume"]["locks"] == ["lease"]
    assert "no flock on this volume" in plan["volume"]["notes"][0]
    assert not local.exists()  # check mode wrote nothing
    r = download(SMALL, local, flock=enosys)
    assert r["bytes_downloaded"] == sum(hub.sizes[SMALL].values())
    assert files_of(local) == hub.sizes[SMALL]
    assert not (local / hf_download.LEASE_NAME).exists()  # released
    assert not (local / hf_download.LOCK_NAME).exists()  # no flock file was even made


def _two_stagers(hub, download, local, shared):
    """Stager a is held half way through SHARD1 by the Hub; stager b starts then."""
    hub.faults(hold_after={SHARD1: {"bytes": 4 * MiB, "count": 1}})
    progress = local.parent / "b-progress.json"
    results, errors = {}, {}

    def run(name, **kw):
        try:
            results[name] = download(SMALL, local, flock=host_local, shared_volume=shared, **kw)
        except DownloadError as e:
            errors[name] = e.msg

    a = threading.Thread(target=run, args=("a",))
    a.start()
    return a, run, progress, results, errors


def test_two_stagers_with_host_local_locks_fetch_once_through_the_lease(
        hub, download, tmp_path, wait_until):
    local = tmp_path / "shared" / "m"
    a, run, progress, results, errors = _two_stagers(hub, download, local, shared=True)
    wait_until(lambda: hub.stats()["held"] == [f"{SMALL}/{SHARD1}"], "stager a held")
    b = threading.Thread(target=run, args=("b",),
                         kwargs={"progress_file": str(progress), "progress_interval": 0.1})
    b.start()
    wait_until(lambda: progress.exists() and json.loads(progress.read_text())["state"]
               == "waiting", "stager b to wait for the lease")
    waiting = json.loads(progress.read_text())
    assert waiting["waiting_for"]["pid"] == os.getpid()  # the holder's record
    hub.release()
    a.join()
    b.join()
    assert errors == {}
    total = sum(hub.sizes[SMALL].values())
    assert results["a"]["bytes_downloaded"] == total
    assert (results["b"]["bytes_downloaded"], results["b"]["changed"]) == (0, False)
    assert results["b"]["lock_waited_seconds"] > 0
    assert hub.stats()["requests"][f"{SMALL}/{SHARD1}"] == 1  # fetched once
    assert sum(hub.stats()["bytes_sent"].values()) == total
    assert results["b"]["volume"]["locks"] == ["flock", "lease"]


def test_two_stagers_without_the_shared_volume_setting_fetch_a_shard_twice(
        hub, download, tmp_path, wait_until):
    """What the lease prevents, shown: the same two stagers, the volume not named shared."""
    local = tmp_path / "shared" / "m"
    a, run, _progress, _results, errors = _two_stagers(hub, download, local, shared=False)
    wait_until(lambda: hub.stats()["held"] == [f"{SMALL}/{SHARD1}"], "stager a held")
    b = threading.Thread(target=run, args=("b",))
    b.start()
    b.join()  # nothing keeps b back: it fetches the shard a is still fetching
    hub.release()
    a.join()
    assert hub.stats()["requests"][f"{SMALL}/{SHARD1}"] >= 2
    # Whatever a met, it ends with the files whole or an error naming the other writer.
    if "a" in errors:
        assert "another writer" in errors["a"] or "something else" in errors["a"]
    final = download(SMALL, local, reverify=True)
    assert files_of(local) == hub.sizes[SMALL]
    assert final["files_mismatched"] in ([], [SHARD1])


def test_exfat_has_no_hard_links_so_shared_files_are_copied_and_counted(
        hub, download, exfat):
    base = exfat / "org" / "revs"
    flat = download(REVS, base)  # the flat layout of earlier versions
    main_bytes = sum(hub.sizes[REVS].values())
    assert flat["bytes_downloaded"] == main_bytes

    plan = download(REVS, base, snapshots=True, check_mode=True)
    assert plan["volume"]["fstype"] == "fuseblk"
    # fuseblk is not known to link (ntfs-3g does, exFAT does not): the plan tries a link in
    # a temp folder it removes, and counts the copies (issue 46, case 6a).
    assert (plan["volume"]["hard_links"], plan["volume"]["hard_links_from"]) == (
        False, "tried here")
    assert plan["volume"]["hard_links_error"] == "[Errno 1] Operation not permitted"
    assert not (base / hf_download.VOLUME_STATE).exists()  # check mode records nothing
    assert plan["bytes_to_download"] == 0
    assert plan["bytes_to_copy"] == main_bytes
    assert plan["disk"]["need_bytes"] == main_bytes

    # A margin that leaves room for less than the copies: refused before any byte.
    free = os.statvfs(base).f_bavail * os.statvfs(base).f_frsize
    with pytest.raises(DownloadError) as refused:
        download(REVS, base, snapshots=True, margin_bytes=free - main_bytes // 2)
    assert "%d to copy (no hard links on fuseblk)" % main_bytes in refused.value.msg
    assert "Nothing was fetched; free space on the volume, lower model_download_margin_bytes" in (
        refused.value.msg)
    sha = plan["revision"]
    assert files_of(base / "snapshots" / sha) == {}  # nothing copied
    assert files_of(base) == hub.sizes[REVS]  # the flat files untouched

    r = download(REVS, base, snapshots=True)
    assert (r["volume"]["hard_links"], r["volume"]["hard_links_from"]) == (False, "tried here")
    assert r["volume"]["hard_links_error"] == "[Errno 1] Operation not permitted"
    assert (r["bytes_downloaded"], r["bytes_to_copy"]) == (0, main_bytes)
    assert files_of(base / "snapshots" / sha) == hub.sizes[REVS]
    assert os.stat(base / "snapshots" / sha / "config.json").st_nlink == 1
    again = download(REVS, base, snapshots=True, reverify=True)
    assert again["files_mismatched"] == []  # the copies are the Hub's bytes
    # The next plan on this volume knows: links were tried here and failed.
    later = download(REVS, exfat / "other", snapshots=True, check_mode=True)
    assert later["volume"]["hard_links_from"] == "filesystem type"  # another repo folder
    replan = download(REVS, base, revision="v2", snapshots=True, check_mode=True)
    assert (replan["volume"]["hard_links"], replan["volume"]["hard_links_from"]) == (
        False, "tried here")


def _leave_orphans(hub, download, base, v2_sha, wait_until):
    """Real leftovers: a download of revision v2 that gave up half way (our partial) and a
    huggingface_hub download into the folder killed half way (its .incomplete; somebody
    ran `hf download --local-dir` there)."""
    hub.faults(hold_after={"model.safetensors": {"bytes": 2 * MiB, "count": 1, "then": "drop"}})
    failed = {}

    def stage_v2():
        try:
            download(REVS, base, revision="v2", snapshots=True)
        except DownloadError as e:
            failed["msg"] = e.msg

    run = threading.Thread(target=stage_v2)
    run.start()
    wait_until(lambda: hub.stats()["held"] == [f"{REVS}/model.safetensors"], "v2 held")
    # The connection drops; the Hub then refuses the file (a token revoked, a repo gone).
    hub.faults(fail_file={"model.safetensors": {"status": 403, "count": -1}})
    hub.release()
    run.join()
    assert "403" in failed["msg"]
    hub.reset()
    # huggingface_hub writes in 10 MiB chunks (constants.DOWNLOAD_CHUNK_SIZE): a 48 MiB
    # file held at 12 MiB leaves 10 MiB in its .incomplete when the process is killed.
    hub.faults(hold_after={"org/big/model.safetensors": {"bytes": 12 * MiB, "count": 1}})
    code = ("import sys; from huggingface_hub import hf_hub_download; "
            "hf_hub_download('org/big', 'model.safetensors', local_dir=sys.argv[1], "
            "endpoint=sys.argv[2])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(base), hub.url])
    try:
        wait_until(lambda: hub.stats()["held"] == ["org/big/model.safetensors"],
                   "huggingface_hub held half way", timeout=60)
        wait_until(lambda: _incomplete_size(base) >= 10 * MiB, "its .incomplete written")
    finally:
        proc.kill()
        proc.wait()
    hub.reset()
    return sorted(
        os.path.join(d, f) for d, _dirs, names in os.walk(base) for f in names
        if f.endswith((".partial", ".incomplete")))


def _incomplete_size(base):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _dirs, names in os.walk(base)
               for f in names if f.endswith(".incomplete"))


def test_orphaned_partials_are_counted_by_the_plan_and_cleaned_by_the_run(
        hub, download, tmpfs, wait_until):
    api = HfApi(endpoint=hub.url)
    v2_sha = api.model_info(REVS, revision="v2").sha
    main_bytes = sum(hub.sizes[REVS].values())
    vol = tmpfs("models", 16 * MiB)
    base = vol / "org" / "revs"
    orphans = _leave_orphans(hub, download, base, v2_sha, wait_until)
    kinds = {os.path.splitext(p)[1] for p in orphans}
    assert kinds == {".incomplete", ".partial"}, orphans  # both kinds, both real
    assert any("/snapshots/%s/" % v2_sha in p and "model.safetensors" in p for p in orphans)
    orphan_bytes = sum(os.path.getsize(p) for p in orphans)
    assert orphan_bytes >= 12 * MiB
    ours = sum(os.path.getsize(p) for p in orphans if p.endswith(".partial"))
    free = os.statvfs(vol).f_bavail * os.statvfs(vol).f_frsize
    # A margin with which main fits only once every orphan is gone, ours included.
    margin = free + (orphan_bytes - ours) - main_bytes + ours // 2
    assert free + orphan_bytes - ours < main_bytes + margin <= free + orphan_bytes

    # Another catalog entry pins v2: its partial stays, and main does not fit.
    kept = download(REVS, base, snapshots=True, check_mode=True, margin_bytes=margin,
                    keep_revisions=[v2_sha])
    assert not kept["disk"]["ok"]
    assert [p for p in kept["orphans_removed"] if p.endswith(".partial")] == []

    plan = download(REVS, base, snapshots=True, check_mode=True, margin_bytes=margin)
    assert sorted(plan["orphans_removed"]) == orphans
    assert plan["bytes_orphaned"] == orphan_bytes
    assert plan["disk"]["ok"], plan["disk"]["msg"]
    assert all(os.path.exists(p) for p in orphans)  # check mode removes nothing

    r = download(REVS, base, snapshots=True, margin_bytes=margin)
    assert r["bytes_downloaded"] == main_bytes
    assert not any(os.path.exists(p) for p in orphans)
    assert files_of(base / "snapshots" / r["revision"]) == hub.sizes[REVS]
