# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filter volume_stagers: the stager of each host from hostvars (shared models volumes)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.volume_stagers import volume_stagers

VAR = "__model_download_volume_name"


def test_hosts_naming_one_volume_share_the_first_as_stager():
    hostvars = {"gpu1": {VAR: "nfs-a"}, "gpu2": {VAR: "nfs-a"}, "gpu3": {VAR: ""},
                "gpu4": {}, "gpu5": {VAR: None}}
    assert volume_stagers(["gpu2", "gpu1", "gpu3", "gpu4", "gpu5"], hostvars, VAR) == {
        "gpu2": "gpu2", "gpu1": "gpu2", "gpu3": "gpu3", "gpu4": "gpu4", "gpu5": "gpu5"}


def test_a_volume_name_that_is_not_a_string_is_refused_naming_the_host():
    with pytest.raises(AnsibleFilterError, match=r"__model_download_volume_name of gpu2 must be "
                       r"a volume name \(a string\), got \['nfs-a'\]"):
        volume_stagers(["gpu1", "gpu2"], {"gpu1": {}, "gpu2": {VAR: ["nfs-a"]}}, VAR)
    with pytest.raises(AnsibleFilterError, match="wants a list of hosts"):
        volume_stagers("gpu1", {}, VAR)
