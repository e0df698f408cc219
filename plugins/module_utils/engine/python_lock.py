# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A hash lock of a Python environment (`uv pip compile --generate-hashes`), read and compared.

Every virtualenv the project makes is installed from such a lock with pip's
`--require-hashes --no-deps`: the project's own (requirements/dev.txt), each
vLLM version and variant a host installs (roles/vllm_install/files/locks/) and
the download's tools (roles/model_download/files/locks/). This module is the
one reader of those files: the pins they hold, their digest (what the
deployment record and the plan show) and how an installed environment differs
from them. Plain text in, plain values out: the controller's filters, the host's
venv_facts module and the project's own `make test` check call the same code.
"""

import hashlib
import re

# `name==version \` or `name==version ; marker`, as uv writes it; a name in
# PEP 508's spelling, a version in PEP 440's (with a local label: 2.13.0+cpu).
_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
# Packages a virtualenv brings itself (python3 -m venv): not installed from a lock.
VENV_OWN = ("pip", "setuptools", "wheel")


class LockError(ValueError):
    """A lock file that is not a pinned hash lock."""


def canonical(name):
    """PEP 503 normalised name: Huggingface_Hub, huggingface.hub -> huggingface-hub."""
    return re.sub(r"[-_.]+", "-", name).lower()


def digest(text):
    """The lock's identity: sha256 of its text, the first 16 hex digits (as the record shows it)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pins(text, source="lock"):
    """{canonical name: version} of every requirement in `text`.

    Refuses (LockError) a requirement that is not pinned with `==` or carries no
    hash: pip's --require-hashes would refuse it later, on the host, after changes.
    """
    found = {}
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "--hash", "-")) or line[:1].isspace():
            continue
        match = _PIN_RE.match(stripped)
        if not match:
            raise LockError(f"{source} line {number}: {stripped!r} is not pinned with =="
                            " (make lock writes every requirement as name==version)")
        following = lines[number:number + 1]
        if not stripped.endswith("\\") or not following or "--hash=" not in following[0]:
            raise LockError(f"{source} line {number}: {match.group(1)}=={match.group(3)} "
                            "has no --hash (make lock writes every requirement with its hashes)")
        name = canonical(match.group(1))
        if name in found and found[name] != match.group(3):
            raise LockError(f"{source} line {number}: {name} pinned twice "
                            f"({found[name]} and {match.group(3)})")
        found[name] = match.group(3)
    if not found:
        raise LockError(f"{source} pins nothing")
    return found


def summary(text, source="lock"):
    """{'digest': ..., 'pins': {...}} of a lock's text: what the controller hands a host."""
    return {"digest": digest(text), "pins": pins(text, source)}


def drift(wanted, installed, ignore=()):
    """How `installed` ({name: version}) differs from the lock's `wanted` pins.

    A list of {package, wanted, found}, sorted by package: a version that differs,
    a locked package missing (found None) and a package the lock lacks (wanted
    None). Names in `ignore`, and the virtualenv's own pip, setuptools and
    wheel where the lock does not name them, are not compared.
    """
    have = {canonical(name): version for name, version in installed.items()}
    want = {canonical(name): version for name, version in wanted.items()}
    # The venv's own pip, setuptools and wheel count only where the lock names them.
    skip = {canonical(name) for name in (*VENV_OWN, *ignore)} - set(want)
    return [{"package": name, "wanted": want.get(name), "found": have.get(name)}
            for name in sorted((set(have) | set(want)) - skip) if have.get(name) != want.get(name)]


def _row_words(row):
    if row["found"] is None:
        return f"{row['package']} wanted {row['wanted']}, missing"
    if row["wanted"] is None:
        return f"{row['package']} {row['found']} installed, not in the lock"
    return f"{row['package']} wanted {row['wanted']}, found {row['found']}"


def describe(rows, limit=12):
    """One line of drift rows: 'transformers wanted 5.19.0, found 5.18.1; ...' (`limit` of them)."""
    parts = [_row_words(row) for row in rows[:limit]]
    more = f"; and {len(rows) - limit} more" if len(rows) > limit else ""
    return "; ".join(parts) + more
