# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filter report_lines: a report of several lines shaped for the stdout callback."""

from ansible.errors import AnsibleFilterError


def report_lines(lines, as_text):
    """The report's lines, each without trailing blanks (a line of `lines` that holds line
    breaks is split at them), shaped so the stdout callback prints them as lines: one text
    where `as_text` (a callback that prints results as YAML shows a text of several lines as a
    block of them, and folds a long item of a list at 80 columns), else the list (Ansible's
    default callback prints results as JSON: a text of several lines is one string of `\\n`
    escapes there, a list one line per item; empty lines at its end are left off). A report of
    one line stays a text either way."""
    if isinstance(lines, str):
        lines = [lines]
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise AnsibleFilterError(f"report_lines wants a text or a list of texts, got {lines!r}")
    if not isinstance(as_text, bool):
        raise AnsibleFilterError(f"report_lines wants as_text true or false, got {as_text!r}")
    lines = [part.rstrip() for line in lines for part in line.splitlines() or [""]]
    if as_text:
        return "\n".join(lines)
    while len(lines) > 1 and not lines[-1]:
        lines.pop()  # an empty line at the end would print as an item "" of its own
    return lines[0] if len(lines) == 1 else lines


class FilterModule:
    """vllm_fleet.fleet report filters."""

    def filters(self):
        return {"report_lines": report_lines}
