# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The one rule for API keys: the front door's (vllm_frontdoor_api_keys) and the balancer's.

- A key is a bearer token: 16 or more of A-Z a-z 0-9 . _ ~ + / = - (KEY_PATTERN).
- Keys compare exactly, case included: the front door matches them with
  case-sensitive regular expressions (roles/vllm_frontdoor/templates/
  api-keys.map.j2) and HAProxy compares strings exactly, so two keys that
  differ only in case are two keys. (Ansible's `unique` filter compares
  without case: Jinja's do_unique, case_sensitive=False.)
- The placeholders shipped in the inventories' vault.yml.example files are
  refused: every one starts with PLACEHOLDER_PREFIX.
Problems name the variable, the position and the rule, never a key.
"""

import re

KEY_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,}")
# inventory/*/group_vars/*/vault.yml.example: "REPLACE-with-a-long-random-key-for-..."
PLACEHOLDER_PREFIX = "REPLACE-"


def api_key_problems(keys, variable):
    """What is wrong with a list of API keys, one line each; [] when nothing is."""
    if isinstance(keys, (str, bytes, dict)) or not isinstance(keys, (list, tuple)):
        return [f"{variable} must be a list of keys, found {type(keys).__name__}"]
    problems = []
    first = {}
    for index, key in enumerate(keys):
        where = f"{variable}[{index}]"
        if not isinstance(key, str):
            problems.append(f"{where} is not text ({type(key).__name__})")
            continue
        if key.startswith(PLACEHOLDER_PREFIX):
            problems.append(f"{where} is the placeholder from a vault.yml.example file: "
                            "put a real key in its place")
        elif not KEY_PATTERN.fullmatch(key):
            problems.append(f"{where} is not a bearer token (wanted 16 or more of "
                            "A-Z a-z 0-9 . _ ~ + / = -, found "
                            f"{len(key)} characters)")
        if key in first:
            problems.append(f"{where} repeats {variable}[{first[key]}] exactly")
        else:
            first[key] = index
    return problems


def check_api_keys(keys, variable):
    """The keys unchanged, or ValueError listing every problem."""
    problems = api_key_problems(keys, variable)
    if problems:
        raise ValueError("; ".join(problems))
    return keys
