# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filter volume_stagers: one stager per shared models volume.

The rule is module_utils/download/models_volume.py's.
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.models_volume import stagers


def volume_stagers(batch, hostvars, varname, default=""):
    """{host: stager} for the hosts of `batch`: see models_volume.stagers."""
    if not isinstance(batch, list):
        raise AnsibleFilterError(
            f"volume_stagers wants a list of hosts, got {type(batch).__name__}")
    volume_of = {}
    for host in batch:
        value = hostvars[host].get(varname, default) if host in hostvars else default
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise AnsibleFilterError(
                f"{varname} of {host} must be a volume name (a string), got {value!r}")
        volume_of[host] = value
    return stagers(batch, volume_of)


class FilterModule:
    """vllm_fleet.fleet volume filters."""

    def filters(self):
        return {"volume_stagers": volume_stagers}
