# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""report_lines: the plan, the warm switch plan and the switch's report as lines under either
result format of the stdout callback (issue 47 item 6)."""

import json
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.report import report_lines

TABLE = ["Plan on x: 8x GPU   ", "         | a   ", "---------+----", "verdict  | fits", ""]


def test_yaml_gets_one_text_as_the_plan_printed_before():
    assert report_lines(TABLE, as_text=True) == \
        "Plan on x: 8x GPU\n         | a\n---------+----\nverdict  | fits\n"


def test_json_gets_one_item_per_line_and_no_escaped_line_breaks():
    lines = report_lines(TABLE, as_text=False)
    assert lines == ["Plan on x: 8x GPU", "         | a", "---------+----", "verdict  | fits"]
    assert "\\n" not in json.dumps({"msg": lines}, indent=4)


def test_a_line_holding_line_breaks_is_split_at_them():
    assert report_lines(["a\nb  ", "c"], as_text=False) == ["a", "b", "c"]
    assert report_lines("a\r\nb\n", as_text=False) == ["a", "b"]


@pytest.mark.parametrize("as_text", [True, False])
def test_a_report_of_one_line_stays_a_text(as_text):
    report = "tiny_mla@0123456789ab is active (switch; before: tiny_gqa@ba9876543210)"
    assert report_lines(report, as_text=as_text) == report


@pytest.mark.parametrize(("lines", "as_text", "wanted"), [
    ({"a": 1}, False, "a text or a list of texts, got {'a': 1}"),
    (["a", 2], False, "a text or a list of texts, got ['a', 2]"),
    (["a"], "False", "as_text true or false, got 'False'"),
])
def test_what_is_not_lines_is_refused_naming_it(lines, as_text, wanted):
    with pytest.raises(AnsibleFilterError, match="^report_lines wants " + re.escape(wanted)):
        report_lines(lines, as_text)
