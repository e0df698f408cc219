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
  - On a models volume other hosts share (O(volume) set), retention is volume-wide. Under the
    repo's lease (the download's, C(<base_dir>/.cache/vllm-fleet/lease)) it first writes this
    host's reference, C(<models_root>/.vllm-fleet/refs/<host>.json), from its deployment record
    (O(record_file), its active, sleeping and previous revisions) and O(staged), then reads every
    host's reference and keeps each commit any of them names. A reference it cannot read or
    parse (a link, a FIFO, too large, not JSON) keeps every revision, and RV(references_unreadable)
    names it. A host that leaves the fleet leaves its reference (it keeps what it names) until an
    operator removes the file.
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
  volume:
    description:
      - Name of the models volume when other hosts mount it too (C(vllm_fleet_models_volume));
        V("") (the default) - this host's own volume, retention as it was (the protect list only).
    type: str
    default: ""
  models_root:
    description: Folder of all models on the volume (where C(.vllm-fleet/refs/) is). Required with O(volume).
    type: path
  repo_id:
    description: The repo O(base_dir) holds, C(org/name), as the references name it. Required with O(volume).
    type: str
  host:
    description: This host's name in the references (its inventory_hostname). Required with O(volume).
    type: str
  record_file:
    description: This host's deployment record, read for its reference (with O(volume)).
    type: path
    default: /etc/ansible/facts.d/vllm_fleet.fact
  staged:
    description: Commits of O(repo_id) this host staged to serve next, named in its reference too.
    type: list
    elements: str
    default: []
  retention:
    description: V(false) writes this host's reference only (before a switch) and removes nothing.
    type: bool
    default: true
  lease_s:
    description: Seconds the repo's lease may go unrenewed before a waiting host takes it over.
    type: int
    default: 60
  lease_wait_s:
    description: Seconds to wait for another host's lease on the repo before failing, naming the holder.
    type: int
    default: 14400
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
held_by_hosts:
  description: With O(volume), the commits on disk that a host's reference names, and who
    (C(<host> (serving|asleep|rollback|staged))), each kept.
  type: dict
  returned: always
references_unreadable:
  description: With O(volume), the references that could not be read or parsed (file, why);
    while any is listed, nothing is removed.
  type: list
  elements: dict
  returned: always
reference:
  description: With O(volume), the path of this host's reference.
  type: str
  returned: when O(volume) is set
reference_revisions:
  description: With O(volume), what this host's reference names (repo_id, revision, as).
  type: list
  elements: dict
  returned: when O(volume) is set
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as records
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import (
    models_volume,
    volume_refs,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    LEASE_NAME,
    STATE_DIR,
    DownloadError,
    check_state_dir,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.revisions import (
    RevisionsError,
    prune,
    prune_on_volume,
)


def _on_volume(module):
    """Retention across the hosts of the shared volume (module_utils/download/revisions.py)."""
    p = module.params
    record = records.load(p["record_file"])
    volume = {"models_root": p["models_root"], "repo_id": p["repo_id"], "host": p["host"],
              "name": p["volume"], "record": record, "staged": p["staged"],
              "retention": p["retention"]}
    lease = None
    if not module.check_mode:
        check_state_dir(p["base_dir"])  # .cache/vllm-fleet are folders, not links
        os.makedirs(os.path.join(p["base_dir"], STATE_DIR), exist_ok=True)
        lease = models_volume.LeaseLock(os.path.join(p["base_dir"], LEASE_NAME),
                                        lease_s=p["lease_s"], wait_s=p["lease_wait_s"])
    return prune_on_volume(p["base_dir"], p["keep"], p["protect"], volume,
                           check_mode=module.check_mode, lease=lease)


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "keep": {"type": "int", "default": 2},
            "protect": {"type": "list", "elements": "str", "default": []},
            "volume": {"type": "str", "default": ""},
            "models_root": {"type": "path"},
            "repo_id": {"type": "str"},
            "host": {"type": "str"},
            "record_file": {"type": "path", "default": records.RECORD_FILE},
            "staged": {"type": "list", "elements": "str", "default": []},
            "retention": {"type": "bool", "default": True},
            "lease_s": {"type": "int", "default": 60},
            "lease_wait_s": {"type": "int", "default": 14400},
        },
        supports_check_mode=True,
    )
    p = module.params
    missing = [k for k in ("models_root", "repo_id", "host") if p["volume"] and not p[k]]
    if missing:
        module.fail_json(msg="volume %s is shared: wanted %s too, found none"
                         % (p["volume"], ", ".join(missing)))
    try:
        if p["volume"]:
            result = _on_volume(module)
        else:
            result = prune(p["base_dir"], p["keep"], p["protect"], check_mode=module.check_mode)
    except RevisionsError as exc:
        module.fail_json(msg="retention under %s: %s" % (p["base_dir"], exc))
    except (volume_refs.VolumeRefError, records.RecordError, models_volume.VolumeError,
            DownloadError) as exc:
        module.fail_json(msg="retention under %s on the shared volume %s: %s"
                         % (p["base_dir"], p["volume"], exc))
    except OSError as exc:
        module.fail_json(msg="retention under %s could not remove a file: %s" % (p["base_dir"], exc))
    if not module._diff:  # noqa: SLF001 - AnsibleModule exposes diff mode only as _diff
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
