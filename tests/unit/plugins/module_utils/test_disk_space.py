# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
from types import SimpleNamespace

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import disk_space

GIB = 1024**3


def _statvfs(free):
    return lambda _path: SimpleNamespace(f_bavail=free // 4096, f_frsize=4096)


def test_enough_space_is_ok():
    r = disk_space.check("/srv/models/x", 10 * GIB, GIB, statvfs=_statvfs(12 * GIB))
    assert r["ok"] is True
    assert r["need_bytes"] == 11 * GIB
    assert r["free_bytes"] == 12 * GIB


def test_short_space_names_need_free_and_path_in_bytes_and_gib():
    r = disk_space.check("/srv/models/x", 230 * GIB, 0, statvfs=_statvfs(100 * GIB))
    assert r["ok"] is False
    # 230 GiB = 246960619520 bytes; free 100 GiB = 107374182400; short 130 GiB = 139586437120.
    # /srv/models/x does not exist here, so the filesystem is that of its nearest parent.
    where = disk_space.existing_parent("/srv/models/x")
    assert r["msg"] == (
        f"not enough disk space on {where} for /srv/models/x: need 246960619520 bytes "
        "(230.0 GiB = 230.0 GiB + margin 0.0 GiB), free 107374182400 bytes (100.0 GiB); "
        "short by 139586437120 bytes (130.0 GiB)"
    )


def test_margin_ratio_adds_a_fraction_of_the_need():
    r = disk_space.check_space("/x", 100 * GIB, margin_bytes=GIB, margin_ratio=0.05,
                               statvfs=_statvfs(200 * GIB))
    # 1 GiB fixed + 5 % of 100 GiB = 6 GiB of margin; 106 GiB required of 200 free.
    assert r["margin_bytes"] == 6 * GIB
    assert r["required_bytes"] == 106 * GIB
    assert r["fits"] is True
    assert r["msg"].startswith("enough disk space")


def test_missing_path_uses_nearest_existing_parent(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    assert disk_space.existing_ancestor(str(deep)) == str(tmp_path)
    seen = []

    def statvfs(path):
        seen.append(path)
        return SimpleNamespace(f_bavail=10, f_frsize=4096)

    # The filesystem measured is the one of the nearest existing parent.
    assert disk_space.free_bytes(str(deep), statvfs=statvfs) == 40960
    assert seen == [str(tmp_path)]
    assert disk_space.same_filesystem(str(deep), str(tmp_path)) is True
