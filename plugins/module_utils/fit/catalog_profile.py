# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Per-GPU-architecture serve profiles of a catalog entry, as data.

A catalog entry may carry

    profiles:
      sm120:                       # compute capability 12.0 (RTX PRO 6000 Blackwell)
        serve: {attention_backend: TRITON_MLA, decode_context_parallel_size: 8}
        env: {NCCL_P2P_LEVEL: SYS}
        extra_args: []
        vllm: {verified_version: "0.19.1"}
      sm12x: {...}                 # any 12.x when no exact sm12<minor> profile exists
      sm90: {...}                  # Hopper (H100/H200)

catalog_profile() picks the profile for a GPU's compute capability (an exact
``sm<major><minor>`` name first, then the family ``sm<major>x``) or the one named
explicitly, and merges it over the entry:

* dict fields (serve, env, vllm, ...) merge one level deep; a profile value of
  null removes the base key (a flag the architecture must not get);
* extra_args are appended to the base list;
* any other field replaces the base value.

The result is the effective entry (without ``profiles``) plus which profile was
chosen and which keys it changed, so a plan can show where every flag came from.
"""

import re

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    GpuFactsError,
    parse_compute_capability,
)

_NAME = re.compile(r"^sm\d+x?$|^default$")


class CatalogProfileError(ValueError):
    """The entry or the request is malformed; the message names what was wanted and found."""


def profile_candidates(compute_capability):
    """'12.0' -> ['sm120', 'sm12x']; '9.0' -> ['sm90', 'sm9x']."""
    try:
        cc = parse_compute_capability(compute_capability)
    except GpuFactsError:
        cc = None
    if cc is None:
        raise CatalogProfileError(
            f"compute_capability must look like '12.0', got {compute_capability!r}"
        )
    major, minor = cc
    return [f"sm{major}{minor}", f"sm{major}x"]


def _merge_dict(field, base, overlay, changed):
    if base is not None and not isinstance(base, dict):
        raise CatalogProfileError(f"entry field {field} must be a dict to merge a profile into, "
                                  f"got {type(base).__name__}")
    merged = dict(base or {})
    for key, value in overlay.items():
        if value is None:
            if key in merged:
                del merged[key]
                changed.append(key)
            continue
        if merged.get(key) != value or key not in merged:
            changed.append(key)
        merged[key] = value
    return merged


def apply_profile(entry, profile_name, overlay):
    """The entry with one profile merged over it, and the keys changed per field."""
    if not isinstance(overlay, dict):
        raise CatalogProfileError(
            f"profile {profile_name} must be a dict of entry fields, got {type(overlay).__name__}"
        )
    effective = {k: v for k, v in entry.items() if k != "profiles"}
    changed = {}
    for field, value in overlay.items():
        if field == "profiles":
            raise CatalogProfileError(f"profile {profile_name} may not nest profiles")
        keys = []
        if field == "extra_args":
            if not isinstance(value, list):
                raise CatalogProfileError(
                    f"profile {profile_name} extra_args must be a list, got {type(value).__name__}"
                )
            effective["extra_args"] = list(effective.get("extra_args") or []) + list(value)
            keys = [str(v) for v in value]
        elif isinstance(value, dict):
            effective[field] = _merge_dict(field, effective.get(field), value, keys)
        else:
            if effective.get(field) != value:
                keys = [field]
            effective[field] = value
        if keys:
            changed[field] = keys
    return effective, changed


def _choose(profiles, compute_capability, profile):
    """(name, how) of the profile to apply, or (None, 'none')."""
    if profile not in (None, ""):
        if profile not in profiles:
            raise CatalogProfileError(
                f"profile {profile!r} was requested but the entry has only "
                f"{sorted(profiles) or 'none'}"
            )
        return profile, "requested"
    if compute_capability not in (None, ""):
        exact, family = profile_candidates(compute_capability)
        if exact in profiles:
            return exact, "exact"
        if family in profiles:
            return family, "family"
    if "default" in profiles:
        return "default", "default"
    return None, "none"


def catalog_profile(entry, compute_capability=None, profile=None):
    """Effective entry for a GPU architecture.

    Returns {"entry": effective entry, "profile": chosen name or None,
    "matched": "requested" | "exact" | "family" | "default" | "none",
    "compute_capability": the one given, "available": profile names,
    "changed": {field: [keys]}}."""
    if not isinstance(entry, dict):
        raise CatalogProfileError(f"catalog entry must be a dict, got {type(entry).__name__}")
    profiles = entry.get("profiles")
    if profiles is None:
        profiles = {}
    if not isinstance(profiles, dict):
        raise CatalogProfileError(
            f"profiles must be a dict of name -> overrides, got {type(profiles).__name__}"
        )
    bad = sorted(name for name in profiles if not _NAME.match(str(name)))
    if bad:
        raise CatalogProfileError(
            f"profile names must be sm<major><minor>, sm<major>x or default; found {bad}"
        )
    chosen, matched = _choose(profiles, compute_capability, profile)
    if chosen is None:
        effective, changed = {k: v for k, v in entry.items() if k != "profiles"}, {}
    else:
        effective, changed = apply_profile(entry, chosen, profiles[chosen])
    return {
        "entry": effective,
        "profile": chosen,
        "matched": matched,
        "compute_capability": None if compute_capability in (None, "") else str(compute_capability),
        "available": sorted(profiles),
        "changed": changed,
    }
