#!/usr/bin/env python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Does this Python's environment equal a hash lock? (scripts/setup.sh runs it with .venv's Python.)

    python scripts/venv_lock.py requirements/dev.txt            # exit 1 naming each package off
    python scripts/venv_lock.py requirements/dev.txt --extras   # the installed names the lock lacks

The comparison is the product's own (plugins/module_utils/engine/python_lock.py: the
hosts' vLLM virtualenvs are checked against their locks with the same code).
"""

import argparse
import importlib.metadata
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _python_lock():
    # Loaded by path: the collection is not installed into the project's venv.
    path = ROOT / "plugins" / "module_utils" / "engine" / "python_lock.py"
    spec = importlib.util.spec_from_file_location("vllm_fleet_python_lock", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed():
    """{name: version} of every distribution this interpreter's site-packages holds."""
    return {dist.metadata["Name"]: dist.version for dist in importlib.metadata.distributions()
            if dist.metadata["Name"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=pathlib.Path)
    parser.add_argument("--extras", action="store_true",
                        help="print the installed distributions the lock lacks, one a line")
    args = parser.parse_args(argv)
    lock = _python_lock()
    pins = lock.pins(args.lock.read_text(encoding="utf-8"), str(args.lock))
    rows = lock.drift(pins, installed())
    if args.extras:
        for row in rows:
            if row["wanted"] is None:
                print(row["package"])
        return 0
    if rows:
        count = f"{len(rows)} package{'s' * (len(rows) != 1)}"
        print(f"FAIL: {sys.prefix} differs from {args.lock} ({count}): {lock.describe(rows)}."
              f" `rm {sys.prefix}/.installed-lock && make setup` installs "
              "the lock again; a dependency change goes through pyproject.toml and `make lock`.",
              file=sys.stderr)
        return 1
    print(f"{sys.prefix} equals {args.lock}: {len(pins)} packages, "
          f"lock {lock.digest(args.lock.read_text(encoding='utf-8'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
