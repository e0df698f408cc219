# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The check-mode plan counts the copies a volume without hard links needs (issue 46, 6a).

org/revs at main is staged in the flat layout of earlier versions; the plan for the same
commit with one folder per commit reuses every file (tests/integration/conftest.py). Where
link(2) is refused, each reused file is a copy and takes its size again: the plan must
count it, and a volume too small for the copies must be refused by the plan, not first by
a real run. The filesystem's type is told through the mounts the downloader is given and
the refusal through the `link` it is given (what exFAT, a FAT stick, a Samba share without
Unix extensions or a bind mount in between answer); everything else is real.
"""

import errno
import os

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    VOLUME_STATE,
)

REVS = "org/revs"


def _mounts(at, fstype):
    return [{"mount_point": "/", "fstype": "ext4", "options": []},
            {"mount_point": str(at), "fstype": fstype, "options": []}]


def _refused(code):
    """A link(2) that answers `code`, as the volume would."""
    def link(_src, _dst):
        raise OSError(code, os.strerror(code))
    return link


def _tree(top):
    """Every folder, and every file with its size, mtime and links: what a check-mode run
    must not change (a folder's mtime moves with the probe made and removed in it)."""
    seen = {}
    for d, dirs, names in os.walk(top):
        seen.update((os.path.relpath(os.path.join(d, n), top), "folder") for n in dirs)
        for n in names:
            st = os.lstat(os.path.join(d, n))
            seen[os.path.relpath(os.path.join(d, n), top)] = (
                st.st_size, st.st_mtime_ns, st.st_nlink)
    return seen


CASES = [
    # The type says it: counted without trying.
    ("exfat", os.link, False),
    ("vfat", os.link, False),
    # The type says links work (or does not say), the volume refuses: only a try tells.
    ("ext4", _refused(errno.EPERM), False),
    ("nfs4", _refused(errno.EOPNOTSUPP), False),
    ("cifs", _refused(errno.EXDEV), False),
    # Links work: nothing to copy.
    ("ext4", os.link, True),
]


@pytest.mark.parametrize(("fstype", "link", "links"), CASES)
def test_the_plan_counts_copies_where_the_volume_refuses_hard_links(
        hub, download, tmp_path, fstype, link, links):
    base = tmp_path / "org" / "revs"
    flat = download(REVS, base)
    main_bytes = sum(hub.sizes[REVS].values())
    assert flat["bytes_downloaded"] == main_bytes
    before = _tree(tmp_path)

    plan = download(REVS, base, snapshots=True, check_mode=True, link=link,
                    mounts=_mounts(tmp_path, fstype))
    assert plan["bytes_to_download"] == 0
    assert plan["bytes_reused"] == main_bytes
    assert plan["volume"]["hard_links"] is links
    copies = 0 if links else main_bytes
    assert plan["bytes_to_copy"] == copies
    assert plan["disk"]["need_bytes"] == copies
    assert plan["disk"]["ok"]
    assert _tree(tmp_path) == before  # the probe link made and removed, nothing else

    # A volume too small for the copies: the plan refuses it, naming the bytes to copy.
    free = os.statvfs(base).f_bavail * os.statvfs(base).f_frsize
    small = download(REVS, base, snapshots=True, check_mode=True, link=link,
                     mounts=_mounts(tmp_path, fstype), margin_bytes=free - main_bytes // 2)
    assert small["disk"]["ok"] is links, small["disk"]["msg"]
    if not links:
        assert ("of the need, 0 bytes to download and %d to copy (no hard links on %s)"
                % (main_bytes, fstype)) in small["disk"]["msg"]
    assert _tree(tmp_path) == before
    assert not (base / VOLUME_STATE).exists()  # check mode records nothing


def test_a_link_refused_on_a_known_linking_type_is_what_the_real_run_finds(
        hub, download, tmp_path):
    """The plan and the run agree: both try a link, both count the copies."""
    base = tmp_path / "org" / "revs"
    download(REVS, base)
    main_bytes = sum(hub.sizes[REVS].values())
    kw = {"snapshots": True, "link": _refused(errno.EPERM), "mounts": _mounts(tmp_path, "ext4")}
    plan = download(REVS, base, check_mode=True, **kw)
    run = download(REVS, base, **kw)
    assert (plan["bytes_to_copy"], run["bytes_to_copy"]) == (main_bytes, main_bytes)
    assert plan["volume"]["hard_links_error"] == run["volume"]["hard_links_error"] == (
        "[Errno 1] Operation not permitted")
    assert run["bytes_downloaded"] == 0
