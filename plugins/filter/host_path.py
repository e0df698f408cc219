# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Host paths that the collection's own code owns (docs: host_path.yml, replica_rank_file.yml)."""

import importlib

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import MODULE_UTILS

# name -> (module_utils module, dotted below module_utils, its constant): the code that
# reads and writes the path owns it;
# templates and role vars ask it here instead of writing the path again.
HOST_PATHS = {
    "record": ("common.record", "RECORD_FILE"),
    "rank_dir": ("fleet.replica_watch", "RANK_DIR"),
    "venv_lock": ("engine.venv_facts", "LOCK_FILE"),
    "switch_lock": ("switch.switch_lock", "LOCK_FILE"),
    "frontdoor_own_key": ("frontdoor.frontdoor", "OWN_KEY_FILE"),
}


def host_path(name):
    """'record' -> '/etc/ansible/facts.d/vllm_fleet.fact'; 'rank_dir' -> '/run/vllm-fleet/ranks'."""
    if name not in HOST_PATHS:
        raise AnsibleFilterError(
            f"host_path: no host path named {name!r}; known: {', '.join(sorted(HOST_PATHS))}")
    module, constant = HOST_PATHS[name]
    # Imported at the first call (why: plugins/plugin_utils/filters.py).
    return getattr(importlib.import_module(f"{MODULE_UTILS}.{module}"), constant)


def replica_rank_file(model):
    """'tiny_gqa' -> '/run/vllm-fleet/ranks/tiny_gqa.json' (replica_watch.rank_file)."""
    return importlib.import_module(f"{MODULE_UTILS}.fleet.replica_watch").rank_file(model)


class FilterModule:
    """vllm_fleet.fleet host path filters."""

    def filters(self):
        return {"host_path": host_path, "replica_rank_file": replica_rank_file}
