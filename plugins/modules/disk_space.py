#!/usr/bin/python
# Copyright: vllm-fleet contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: disk_space
short_description: Fail early when a filesystem lacks the bytes a task will write
version_added: "0.1.0"
description:
  - Compares O(need_bytes) plus O(margin_bytes) with the bytes an unprivileged writer can still
    use on the filesystem holding O(path) (or its nearest existing parent).
  - For a model download, feed it RV(vllm_fleet.fleet.hf_download#module:bytes_to_download) from
    a check-mode run of M(vllm_fleet.fleet.hf_download), which already subtracts files present and
    verified and counts resumable partial files as present.
author:
  - vllm-fleet contributors
options:
  path:
    description: Directory that will receive the bytes; need not exist yet.
    type: path
    required: true
  need_bytes:
    description: Bytes that will be written, in bytes.
    type: int
    required: true
  margin_bytes:
    description: Bytes to keep free beyond O(need_bytes).
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Check the models filesystem has room for the download
  vllm_fleet.fleet.disk_space:
    path: /srv/models/nvidia--MiniMax-M2.5-NVFP4
    need_bytes: "{{ __model_download_plan.bytes_to_download }}"
    margin_bytes: 10737418240
"""

RETURN = r"""
path:
  description: The path checked.
  type: str
  returned: always
need_bytes:
  description: Bytes needed, margin included, in bytes.
  type: int
  returned: always
free_bytes:
  description: Bytes available to an unprivileged writer, in bytes.
  type: int
  returned: always
msg:
  description: Need and free in bytes and GiB, and the path.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils import disk_space


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "need_bytes": {"type": "int", "required": True},
            "margin_bytes": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["need_bytes"] < 0 or p["margin_bytes"] < 0:
        module.fail_json(
            msg="need_bytes and margin_bytes must be >= 0, got %d and %d"
            % (p["need_bytes"], p["margin_bytes"])
        )
    result = disk_space.check(p["path"], p["need_bytes"], p["margin_bytes"])
    ok = result.pop("ok")
    if not ok:
        module.fail_json(**result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
