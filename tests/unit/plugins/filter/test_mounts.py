# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""mount_of: which mount holds the models root (ansible_mounts as setup gathers it)."""

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.mounts import mount_of

MOUNTS = [
    {"mount": "/", "device": "/dev/sda1", "fstype": "ext4"},
    {"mount": "/srv", "device": "/dev/sdb1", "fstype": "xfs"},
    {"mount": "/srv/models", "device": "nfs:/models", "fstype": "nfs4"},
]


@pytest.mark.parametrize(("path", "mount", "is_mount_point"), [
    ("/srv/models", "/srv/models", True),
    ("/srv/models/", "/srv/models", True),
    ("/srv/models/org/name", "/srv/models", False),
    ("/srv/models2", "/srv", False),          # a sibling with the same prefix is not inside
    ("/srv/other/../models", "/srv/models", True),
    ("/srv", "/srv", True),
    ("/opt/models", "/", False),
    ("/", "/", True),
])
def test_the_longest_mount_point_that_holds_the_path(path, mount, is_mount_point):
    found = mount_of(path, MOUNTS)
    assert (found["mount"], found["is_mount_point"]) == (mount, is_mount_point)


def test_unmounted_root_is_found_on_the_parent_file_system():
    found = mount_of("/srv/models", MOUNTS[:2])
    assert found == {"mount": "/srv", "device": "/dev/sdb1", "fstype": "xfs",
                     "is_mount_point": False}


def test_no_mount_holds_it():
    assert mount_of("/srv/models", [{"mount": "/boot"}]) is None


@pytest.mark.parametrize(("path", "mounts", "msg"), [
    ("srv/models", MOUNTS, "mount_of wants an absolute path, got 'srv/models'"),
    ("/srv/models", "nope", "mount_of wants ansible_mounts (a list), got str"),
])
def test_bad_input_is_refused(path, mounts, msg):
    with pytest.raises(AnsibleFilterError, match=re.escape(msg)):
        mount_of(path, mounts)
