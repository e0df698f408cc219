# Copyright 2026 vllm-fleet contributors
"""The flavour filters the nvidia_driver role decides with."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.filter.nvidia import (
    FilterModule,
    nvidia_allowed_flavours,
    nvidia_default_flavour,
)


@pytest.mark.parametrize(
    ("ccs", "flavour"),
    [
        (["12.0"] * 8, "open"),  # 8x RTX PRO 6000 Blackwell: open is the default
        (["10.0"], "open"),
        (["9.0", "9.0"], "open"),
        (["7.0"], "proprietary"),
        ([], "open"),
    ],
)
def test_default_flavour(ccs, flavour):
    assert nvidia_default_flavour(ccs) == flavour


def test_allowed_flavours_blackwell_excludes_proprietary():
    assert nvidia_allowed_flavours(["12.0", "12.0"]) == ["open"]
    assert nvidia_allowed_flavours(["9.0"]) == ["open", "proprietary"]
    assert nvidia_allowed_flavours(["7.0", "12.0"]) == []


def test_filters_are_registered():
    assert set(FilterModule().filters()) == {"nvidia_default_flavour", "nvidia_allowed_flavours"}
