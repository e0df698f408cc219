# Copyright 2026 vllm-fleet contributors
"""Filters for choosing an NVIDIA kernel module flavour from compute capabilities."""

from __future__ import annotations

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu_facts import (
    allowed_flavours,
    default_flavour,
)

DOCUMENTATION = """
name: nvidia_default_flavour
short_description: Default NVIDIA kernel module flavour for a list of compute capabilities
description:
  - open when any GPU can run the open kernel modules (7.5 and newer, the only
    choice from 10.0 on), proprietary when none can; open for an empty list.
"""


def nvidia_default_flavour(capabilities):
    """['12.0', ...] -> 'open'; ['7.0'] -> 'proprietary'; [] -> 'open'."""
    flavours = {default_flavour(cc) for cc in capabilities or []}
    return "proprietary" if flavours == {"proprietary"} else "open"


def nvidia_allowed_flavours(capabilities):
    """Flavours every GPU in the list can run: ['12.0', '9.0'] -> ['open']."""
    allowed = {"open", "proprietary"}
    for cc in capabilities or []:
        allowed &= set(allowed_flavours(cc))
    return sorted(allowed)


class FilterModule:
    def filters(self):
        return {
            "nvidia_default_flavour": nvidia_default_flavour,
            "nvidia_allowed_flavours": nvidia_allowed_flavours,
        }
