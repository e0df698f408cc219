# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Which NVIDIA driver version a host keeps, and Debian version order.

The driver moves only when asked (issue 33, item 5): the role pins the exact
version this module chooses and holds the packages. choose() decides it from
what the operator set (nvidia_driver_version, nvidia_driver_branch), what is
installed and what the repository offers (`apt-cache madison`):
- a set version is the version;
- none set: the installed one, while it is of the branch (kept: a newer
  release of the branch does not move it);
- none set and none installed of the branch: the newest the repository
  offers of the branch (first install), then kept by the rule above.

compare() orders Debian versions as dpkg does (deb-version(7): epoch,
upstream, revision; `~` sorts before everything, letters before other
characters). Standard library only.
"""

from __future__ import annotations

import re

_DIGITS_RE = re.compile(r"^(\d*)(.*)$", re.DOTALL)
_NONDIGITS_RE = re.compile(r"^(\D*)(.*)$", re.DOTALL)


def _order(char):
    # deb-version(7): '~' before the end of a part, then letters, then the rest.
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a, b):
    while a or b:
        a_text, a = _NONDIGITS_RE.match(a).groups()
        b_text, b = _NONDIGITS_RE.match(b).groups()
        for i in range(max(len(a_text), len(b_text))):
            ca = _order(a_text[i]) if i < len(a_text) else 0
            cb = _order(b_text[i]) if i < len(b_text) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        a_num, a = _DIGITS_RE.match(a).groups()
        b_num, b = _DIGITS_RE.match(b).groups()
        na, nb = int(a_num or 0), int(b_num or 0)
        if na != nb:
            return -1 if na < nb else 1
    return 0


def _split(version):
    text = str(version).strip()
    epoch, rest = text.split(":", 1) if ":" in text else ("0", text)
    upstream, revision = rest.rsplit("-", 1) if "-" in rest else (rest, "")
    if not epoch.isdigit() or not upstream:
        raise ValueError(f"not a Debian version: {version!r} (wanted e.g. '580.95.05-1')")
    return int(epoch), upstream, revision


def compare(a, b):
    """-1, 0 or 1 as Debian version a sorts before, equal to or after b (dpkg's order)."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def upstream(version):
    """The driver version of a package version: '580.95.05-1' -> '580.95.05' ('' for '')."""
    if not version:
        return ""
    return _split(version)[1]


def madison_versions(text, package):
    """The versions `apt-cache madison PACKAGE` lists for that package, newest first
    (each once; lines of other packages ignored)."""
    found = []
    for line in (text or "").splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) >= 2 and parts[0] == package and parts[1] and parts[1] not in found:  # noqa: PLR2004
            found.append(parts[1])
    return sorted(found, key=_Key, reverse=True)


class _Key:
    def __init__(self, version):
        self.version = version

    def __lt__(self, other):
        return compare(self.version, other.version) < 0


def _of_branch(version, branch):
    return str(version).split(".", maxsplit=1)[0] == str(branch)


def choose(wanted, installed, branch, offered):
    """The driver version the host keeps, and whether reaching it changes the host.

    wanted: nvidia_driver_version ('' for none); installed: the installed kernel module
    package's version ('580.95.05-1', '' for none); branch: nvidia_driver_branch;
    offered: the package versions the repository offers (madison_versions), None when
    not read (check mode before the repository is configured).
    Returns {version, installed, change, why, refusal}: version is a driver version
    ('580.95.05', '' when none can be chosen yet), installed the installed driver version,
    change whether the installed one differs, why one sentence, refusal '' or why
    nothing may change.
    """
    have = upstream(installed)
    branch = str(branch)
    result = {"version": "", "installed": have, "change": False, "why": "", "refusal": ""}
    offered_up = [upstream(v) for v in offered or []]
    if wanted:
        wanted = str(wanted).strip()
        result["version"] = wanted
        result["why"] = f"nvidia_driver_version is {wanted}"
        if not _of_branch(wanted, branch):
            result["refusal"] = (
                f"nvidia_driver_version {wanted} is not of nvidia_driver_branch {branch}: "
                f"set nvidia_driver_branch to {wanted.split('.')[0]} as well"
            )
        elif offered is not None and wanted != have and wanted not in offered_up:
            result["refusal"] = (
                f"nvidia_driver_version {wanted} is not in the repository, which offers "
                f"{', '.join(offered_up) or 'no version'} of the kernel module package"
            )
    elif have and _of_branch(have, branch):
        result["version"] = have
        result["why"] = (
            f"nvidia_driver_version is empty: the installed {have} is kept (the newest of "
            f"branch {branch} when it was first installed)"
        )
    else:
        newest = [v for v in offered_up if _of_branch(v, branch)]
        if newest:
            result["version"] = newest[0]
            result["why"] = (
                f"nvidia_driver_version is empty and no driver of branch {branch} is "
                f"installed: the newest of the branch, {newest[0]}, is chosen and then kept"
            )
        elif offered is not None:
            result["refusal"] = (
                f"no driver of branch {branch} in the repository (it offers "
                f"{', '.join(offered_up) or 'no version'} of the kernel module package)"
            )
        else:
            result["why"] = (
                f"the newest of branch {branch} (the repository is not configured yet: check mode)"
            )
    result["change"] = bool(result["version"]) and result["version"] != have
    if not result["version"] and not result["refusal"]:
        result["change"] = True
    return result
