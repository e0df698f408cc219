# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Controller-side help for the collection's filter plugins."""

import importlib

from ansible.errors import AnsibleFilterError

MODULE_UTILS = "ansible_collections.vllm_fleet.fleet.plugins.module_utils"


def module_util_filter(name, module, func=None):
    """Filter `name`: the function `func` (default: `name`) of module_utils/<module>.py.

    `module` is dotted below module_utils: "common.record" for module_utils/common/record.py.

    The module is imported at the filter's first call, not when the filter file is
    loaded: to resolve any one filter of a collection, Ansible loads every filter file
    of the collection in each task's worker process and compiles what they import from
    source there (the collection loader keeps no bytecode). Imported at the top, the
    filters' module_utils (about 4,700 lines) were compiled again for every task that
    used any filter of this collection: about 0.05 s of each such task on the lab.

    The function's KeyError, ValueError and TypeError are re-raised as
    AnsibleFilterError naming the filter.
    """
    def run(*args, **kwargs):
        target = getattr(importlib.import_module(f"{MODULE_UTILS}.{module}"), func or name)
        try:
            return target(*args, **kwargs)
        except (KeyError, ValueError, TypeError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    run.__name__ = name
    run.__doc__ = f"Filter {name}: module_utils/{module.replace('.', '/')}.py's {func or name}."
    return run
