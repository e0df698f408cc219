# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Each role's meta/argument_specs.yml agrees with its defaults.

The spec is the role's typed interface (ansible-doc shows it, Ansible checks
inputs against it); defaults/ hold the values. A spec default that differs
from the real default, an option the spec marks required while defaults give
it a value, or a default with no spec, each makes the documentation lie.
"""

from pathlib import Path

import pytest
import yaml
from repo_paths import ROOT

ROLES = sorted(p.parent.parent for p in (ROOT / "roles").glob("*/meta/argument_specs.yml"))


def _defaults(role):
    folder = role / "defaults"
    files = sorted(folder.glob("main/*.yml")) or [folder / "main.yml"]
    values = {}
    for path in files:
        if path.exists():
            values.update(yaml.safe_load(path.read_text()) or {})
    return values


def _spec(role, entry="main"):
    return yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"][
        entry]["options"]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_spec_defaults_equal_the_roles_defaults(role):
    defaults, spec = _defaults(role), _spec(role)
    wrong = {name: (opt["default"], defaults.get(name, "(not in defaults)"))
             for name, opt in spec.items()
             if "default" in opt and opt["default"] != defaults.get(name, object())}
    assert wrong == {}, "spec default != defaults/ value: " + repr(wrong)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_required_options_have_no_default(role):
    defaults, spec = _defaults(role), _spec(role)
    both = sorted(n for n, opt in spec.items() if opt.get("required") and n in defaults)
    assert both == [], f"required in the spec but given a default: {both}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_in_the_spec(role):
    undocumented = sorted(set(_defaults(role)) - set(_spec(role)))
    assert undocumented == [], f"defaults without a spec entry: {undocumented}"


def test_the_catalog_entries_pass_the_typed_entry_spec():
    """Every catalog entry has the fields vllm_model's spec requires, of the right kind."""
    options = _spec(ROOT / "roles" / "vllm_model")["vllm_model_entry"]["options"]
    catalog = _defaults(ROOT / "roles" / "vllm_model")["vllm_fleet_catalog"]
    for name, entry in catalog.items():
        assert set(entry) <= set(options), f"{name}: fields the spec does not know"
        missing = [k for k, opt in options.items() if opt.get("required") and k not in entry]
        assert missing == [], f"{name}: missing {missing}"
        assert entry["vllm"]["variant"] in options["vllm"]["options"]["variant"]["choices"]
    assert Path(ROOT / "roles" / "vllm_model" / "meta" / "argument_specs.yml").is_file()
