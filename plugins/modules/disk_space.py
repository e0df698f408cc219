#!/usr/bin/python
# Copyright: vllm-fleet contributors
# Apache License 2.0

DOCUMENTATION = r"""
---
module: disk_space
short_description: Check that a filesystem has room for a download before any byte is fetched
description:
  - Compares the bytes a download needs, plus a margin, with the bytes free on the filesystem
    that will hold O(path) (the nearest existing parent when O(path) does not exist yet).
  - Read-only. Fails with need, free and path in bytes and GiB when the space is short,
    unless O(fail_on_short=false).
version_added: 0.1.0
options:
  path:
    description: Where the data will be written.
    type: path
    required: true
  need_bytes:
    description: Bytes still to be written (bytes).
    type: int
    required: true
  margin_bytes:
    description: Fixed headroom to keep free (bytes).
    type: int
    default: 0
  margin_ratio:
    description: Headroom as a fraction of O(need_bytes) (0.05 = 5 %).
    type: float
    default: 0.0
  fail_on_short:
    description: Fail when the space is short. With V(false) the module reports and returns.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
author:
  - vllm-fleet contributors
"""

EXAMPLES = r"""
- name: Check room for MiniMax-M2.5 on the models volume
  vllm_fleet.fleet.disk_space:
    path: /srv/models/MiniMaxAI/MiniMax-M2.5
    need_bytes: 230000000000
    margin_ratio: 0.05
"""

RETURN = r"""
path:
  description: The path that was asked about.
  returned: always
  type: str
filesystem_path:
  description: The existing folder whose filesystem was measured.
  returned: always
  type: str
need_bytes:
  description: Bytes needed, before margin (bytes).
  returned: always
  type: int
margin_bytes:
  description: Headroom added (bytes).
  returned: always
  type: int
required_bytes:
  description: need_bytes + margin_bytes (bytes).
  returned: always
  type: int
free_bytes:
  description: Bytes free to an unprivileged writer on that filesystem (bytes).
  returned: always
  type: int
fits:
  description: Whether required_bytes <= free_bytes.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.disk_space import check_space


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "need_bytes": {"type": "int", "required": True},
            "margin_bytes": {"type": "int", "default": 0},
            "margin_ratio": {"type": "float", "default": 0.0},
            "fail_on_short": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = check_space(p["path"], p["need_bytes"], p["margin_bytes"], p["margin_ratio"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"disk_space: cannot measure {p['path']}: {exc}")
    if not result["fits"] and p["fail_on_short"]:
        module.fail_json(changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
