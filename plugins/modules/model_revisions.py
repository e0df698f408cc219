#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_revisions
short_description: Retention of a model repo's downloaded revisions (one folder per commit)
version_added: "0.3.0"
description:
  - Lists the revisions M(vllm_fleet.fleet.hf_download) verified under O(base_dir)
    (C(snapshots/<commit>/) folders, and the flat layout of earlier versions), newest first.
  - Keeps every commit in O(protect) (the serving revision and the one a rollback returns to),
    then the most recently verified others until O(keep) revisions stay, and removes the rest.
  - Removes only what the tool wrote, file by file from each revision's manifest, then the
    folders left empty. A folder without a manifest (a download in progress, files somebody
    else put there) is reported in RV(unmanaged) and never touched.
author:
  - vllm-fleet maintainers (@vllm-fleet)
options:
  base_dir:
    description: The repo's base folder (hf_download's O(vllm_fleet.fleet.hf_download#module:local_dir)).
    type: path
    required: true
  keep:
    description: How many revisions to keep, the newest first; protected ones count too.
    type: int
    default: 2
  protect:
    description: Commits never removed, whatever their age.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Lists what it would remove and removes nothing.
  diff_mode:
    support: full
    description: The commits on disk before and after.
"""

EXAMPLES = r"""
- name: Keep the serving revision and the one before it
  vllm_fleet.fleet.model_revisions:
    base_dir: /srv/models/MiniMaxAI/MiniMax-M2.5
    keep: 2
    protect:
      - "{{ ansible_local.vllm_fleet.active.revision }}"
      - "{{ ansible_local.vllm_fleet.previous.revision }}"
"""

RETURN = r"""
revisions:
  description: The revisions kept, newest first (commit, dir, layout C(snapshot) or C(flat), bytes).
  type: list
  elements: dict
  returned: always
  sample: [{commit: 2f3c8a1e5b7d9c0a4e6f8b1d3c5a7e9f0b2d4c6a, dir: /srv/models/o/m/snapshots/2f3c8a1e5b7d9c0a4e6f8b1d3c5a7e9f0b2d4c6a,
            layout: snapshot, bytes: 230000000000}]
removed:
  description: The revisions removed (would be, in check mode), same fields.
  type: list
  elements: dict
  returned: always
bytes_freed:
  description: Disk space the removal frees, in bytes (files hard-linked into a kept revision
    free nothing and are not counted).
  type: int
  returned: always
unmanaged:
  description: Snapshot folders without a manifest, left alone.
  type: list
  elements: str
  returned: always
protected_missing:
  description: Commits in O(protect) that have no verified folder here (nothing to keep).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.revisions import (
    RevisionsError,
    prune,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "keep": {"type": "int", "default": 2},
            "protect": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = prune(p["base_dir"], p["keep"], p["protect"], check_mode=module.check_mode)
    except RevisionsError as exc:
        module.fail_json(msg="retention under %s: %s" % (p["base_dir"], exc))
    except OSError as exc:
        module.fail_json(msg="retention under %s could not remove a file: %s" % (p["base_dir"], exc))
    if not module._diff:  # noqa: SLF001 - AnsibleModule exposes diff mode only as _diff
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
