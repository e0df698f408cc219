# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filter catalog_profile: a catalog entry's serve profile for one GPU architecture."""

from ansible.errors import AnsibleFilterError

# module_utils imported at a filter's first call (why: plugins/plugin_utils/filters.py).


def _catalog_profile(entry, compute_capability=None, profile=None):
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.catalog_profile import (
        CatalogProfileError,
        catalog_profile,
    )

    try:
        return catalog_profile(entry, compute_capability, profile)
    except CatalogProfileError as exc:
        raise AnsibleFilterError(f"catalog_profile: {exc}") from exc


class FilterModule:
    """vllm_fleet.fleet catalog profile filter."""

    def filters(self):
        return {"catalog_profile": _catalog_profile}
