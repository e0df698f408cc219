import os
from types import SimpleNamespace

from ansible_collections.vllm_fleet.fleet.plugins.module_utils import disk_space

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
    assert r["msg"] == (
        "not enough disk space: need 246960619520 bytes (230.0 GiB) at /srv/models/x, "
        "free 107374182400 bytes (100.0 GiB)"
    )


def test_missing_path_uses_nearest_existing_parent(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    assert disk_space.existing_ancestor(str(deep)) == str(tmp_path)
    st = os.statvfs(tmp_path)
    assert disk_space.free_bytes(str(deep)) == st.f_bavail * st.f_frsize
    assert disk_space.same_filesystem(str(deep), str(tmp_path)) is True
