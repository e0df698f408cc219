# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""api_keys: one rule for the front door's and the balancer's keys (issue 32)."""

import jinja2
import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.api_keys import (
    api_key_problems,
    check_api_keys,
)
from repo_paths import ROOT

KEY = "Abcdefghijklmnop-0123456789"


def test_keys_differing_only_in_case_are_two_keys():
    # The front door matches keys with case-sensitive expressions (api-keys.map.j2,
    # tests/integration/test_frontdoor_access.py: KEY.upper() is refused).
    assert api_key_problems([KEY, KEY.upper(), KEY.lower()], "vllm_frontdoor_api_keys") == []


def test_jinjas_unique_called_them_duplicates():
    # What the roles' `unique` assertion did: Jinja's do_unique ignores case by default.
    env = jinja2.Environment(autoescape=True)
    assert env.from_string("{{ keys | unique | list | length }}").render(
        keys=[KEY, KEY.upper()]) == "1"


def test_exact_duplicates_are_named_by_position_never_by_key():
    problems = api_key_problems([KEY, "x" * 20, KEY], "vllm_balancer_api_keys")
    assert problems == ["vllm_balancer_api_keys[2] repeats vllm_balancer_api_keys[0] exactly"]
    assert KEY not in " ".join(problems)


def example_placeholders():
    for path in sorted(ROOT.glob("inventory/**/*.example")):
        for value in yaml.safe_load(path.read_text()).values():
            for key in value if isinstance(value, list) else [value]:
                if isinstance(key, str) and key.startswith("REPLACE"):
                    yield path.relative_to(ROOT), key


def test_every_placeholder_shipped_in_an_example_file_is_refused():
    found = list(example_placeholders())
    assert len(found) >= 3, found  # both inventories' client keys and the balancer's own
    for path, key in found:
        problems = api_key_problems([key], "vllm_frontdoor_api_keys")
        assert problems == [("vllm_frontdoor_api_keys[0] is the placeholder from a "
                             "vault.yml.example file: put a real key in its place")], path


@pytest.mark.parametrize(("keys", "problem"), [
    (["short"], ("vllm_frontdoor_api_keys[0] is not a bearer token (wanted 16 or more of"
                 " A-Z a-z 0-9 . _ ~ + / = -, found 5 characters)")),
    ([KEY + " x"], "vllm_frontdoor_api_keys[0] is not a bearer token"),
    ([KEY + "\n"], "vllm_frontdoor_api_keys[0] is not a bearer token"),
    ([7], "vllm_frontdoor_api_keys[0] is not text (int)"),
    (KEY, "vllm_frontdoor_api_keys must be a list of keys, found str"),
])
def test_bad_keys_are_named(keys, problem):
    assert api_key_problems(keys, "vllm_frontdoor_api_keys")[0].startswith(problem)


def test_check_raises_every_problem_at_once():
    wanted = r"^k\[0\] is not a bearer token .*; k\[2\] repeats k\[1\]"
    with pytest.raises(ValueError, match=wanted):
        check_api_keys(["short", KEY, KEY], "k")
    assert check_api_keys([KEY], "k") == [KEY]
