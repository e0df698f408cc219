# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Every module's DOCUMENTATION, EXAMPLES and RETURN parse and agree with its argument_spec."""

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


def _docs(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in {"DOCUMENTATION", "EXAMPLES", "RETURN"}:
                found[name] = yaml.safe_load(node.value.value)
    return found


def _spec_keys(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.keyword) and node.arg == "argument_spec"
                and isinstance(node.value, ast.Dict)):
            return {k.value for k in node.value.keys}
    return None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_docs_parse_and_match_the_spec(path):
    docs = _docs(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == path.stem
    assert {"check_mode", "diff_mode"} <= set(doc["attributes"])
    for option in doc.get("options", {}).values():
        assert option.get("type"), f"{path.stem}: every option has a type"
    spec = _spec_keys(path)
    if spec is not None:
        assert spec == set(doc.get("options", {})), f"{path.stem}: spec and DOCUMENTATION differ"
    assert isinstance(docs["EXAMPLES"], list)
    assert docs["EXAMPLES"][0]["name"][0].isupper()
    for name, value in docs["RETURN"].items():
        assert value.get("type"), f"{path.stem}: RETURN {name} has a type"
        assert value.get("returned"), f"{path.stem}: RETURN {name} says when it is returned"
