#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: haproxy_server_state
short_description: Save HAProxy's server state before a reload, so drained servers stay drained
version_added: "0.4.0"
description:
  - Asks HAProxy's runtime API (the stats socket, O(socket)) for C(show servers state) and
    writes the answer to O(state_file), durably (temp file, fsync, rename).
  - With C(server-state-file) naming that file and C(load-server-state-from-file global)
    in the configuration (the vllm_balancer role's C(haproxy.cfg)), the workers a reload
    starts keep each server's state; a server drained or in maintenance stays so.
  - Run it just before every reload (HAProxy's documented procedure, management.txt).
author:
  - vllm-fleet maintainers (@vllm-fleet)
options:
  socket:
    description: HAProxy's runtime API socket (C(stats socket ... level admin) or C(level operator)).
    type: path
    required: true
  state_file:
    description: The file the configuration's C(server-state-file) names.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    description: Reads the state and reports whether the file would change; writes nothing.
  diff_mode:
    support: full
    description: The state file before and after.
"""

EXAMPLES = r"""
- name: Save HAProxy's server state (drained servers stay drained across the reload)
  vllm_fleet.fleet.haproxy_server_state:
    socket: /run/haproxy/admin.sock
    state_file: /var/lib/haproxy/server-state
"""

RETURN = r"""
state_file:
  description: The file written.
  type: str
  returned: always
servers:
  description: Each server (C(<backend>/<server>)) and its administrative state as HAProxy
    saves it (0 ready, 1 forced maintenance, 8 forced drain; other bits for inherited states).
  type: dict
  returned: always
  sample: {default/host1: 0, default/host2: 8}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.haproxy_state import (
    StateError,
    save,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "required": True},
            "state_file": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = save(p["socket"], p["state_file"], check_mode=module.check_mode)
    except StateError as exc:
        module.fail_json(msg=exc.msg, **exc.fields)
    if not module._diff:  # noqa: SLF001 - AnsibleModule exposes diff mode only as _diff
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
