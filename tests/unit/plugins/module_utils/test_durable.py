# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46 case 4: every state file the product renames into place is fsynced, file then folder.

The review's strace of a switch counted 0 fsync/fdatasync for the deployment record, the
front door's upstream and the probe state; a crash after such a rename can leave a
zero-length file (XFS, ext4 without auto_da_alloc: saltstack/salt#69583's class). Each
writer is checked here through the system calls it makes (os.fsync is the call the kernel
sees), in the order that makes the rename durable.
"""

import json
import os
import stat

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import durable, record
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import replica_watch
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.watch import probe


@pytest.fixture
def calls(monkeypatch):
    """The writer's fsync, rename and folder opens, in order, the real calls made too."""
    seen = []
    real_fsync, real_replace, real_open = os.fsync, os.replace, os.open

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        seen.append(("fsync", "dir" if stat.S_ISDIR(mode) else "file"))
        return real_fsync(fd)

    def replace(src, dst):
        seen.append(("replace", os.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "open", real_open)
    return seen


def test_write_atomic_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, calls):
    target = tmp_path / "upstream.conf"
    durable.write_atomic(str(target), "server 127.0.0.1:8001;\n", mode=0o640)
    assert calls == [("fsync", "file"), ("replace", "upstream.conf"), ("fsync", "dir")]
    assert target.read_text() == "server 127.0.0.1:8001;\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["upstream.conf"]  # no temp left


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "record.json"
    target.write_text('{"active": "blue"}\n')

    def broken(_fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output error"):
        durable.write_atomic(str(target), '{"active": "green"}\n')
    assert target.read_text() == '{"active": "blue"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_the_temp_name_is_unpredictable_and_never_follows_a_planted_link(tmp_path):
    """mkstemp (O_EXCL): a link planted at a pid-based name, as the old writers used, is not
    followed and the file it points at is untouched."""
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    target = tmp_path / "probe.json"
    for name in (f"{target}.tmp.{os.getpid()}", str(tmp_path / ".probe-state.tmp")):
        os.symlink(victim, name)
    durable.write_atomic(str(target), "{}\n", prefix=".probe-state.")
    assert victim.read_text() == "keep\n"
    assert target.read_text() == "{}\n"


@pytest.mark.parametrize("writer", ["record", "probe", "rank", "manifest"])
def test_every_state_writer_goes_through_the_durable_write(tmp_path, calls, writer):
    path = tmp_path / "state.json"
    data = {"active": {"model": "tiny_gqa"}}
    {"record": lambda: record.write(str(path), data),
     "probe": lambda: probe.write_state(str(path), data),
     "rank": lambda: replica_watch._write(str(path), data),
     "manifest": lambda: hf_download.write_json_atomic(str(path), data)}[writer]()
    assert calls == [("fsync", "file"), ("replace", "state.json"), ("fsync", "dir")]
    assert json.loads(path.read_text()) == data
