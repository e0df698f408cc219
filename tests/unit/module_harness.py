# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Run a module's main() as Ansible runs it: its arguments in, the JSON it prints out.

The one harness every test under tests/unit/plugins/modules/ uses: the real
AnsibleModule (argument spec, check mode, no_log, exit_json/fail_json), the
arguments through ansible-core's own patch_module_args, the result read back
from the JSON line the module printed.
"""

import contextlib
import io
import json

import pytest
from ansible.module_utils.testing import patch_module_args


class ModuleResult(dict):
    """The module's result; `exit_code` is what it exited with (0, or 1 after fail_json)."""

    def __init__(self, result, exit_code):
        super().__init__(result)
        self.exit_code = exit_code


def run_module(main, args, *, check_mode=False, diff=False):
    """Call `main` with `args` as module arguments; return its ModuleResult.

    `failed` is always there: False unless the module called fail_json.
    """
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    out = io.StringIO()
    with (
        patch_module_args(args),
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit) as caught,
    ):
        main()
    result = json.loads(out.getvalue())
    result.setdefault("failed", False)
    return ModuleResult(result, caught.value.code)
