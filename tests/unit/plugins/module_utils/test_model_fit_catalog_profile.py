# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""catalog_profile: per-GPU-architecture serve profiles merged over a catalog entry.

The entry below has the shape of the proposed catalog entry for Kimi-K2.5 (the flags and
their sources are in docs/catalog-sources.md); it is test data, not the catalog."""

import copy

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import catalog_profile as cp

KIMI = {
    "repo_id": "moonshotai/Kimi-K2.5",
    "revision": "4d01dfe0332d63057c186e0b262165819efb6611",
    "vllm": {"variant": "cuda", "version": "0.19.1", "min_version": "0.19.1"},
    "serve": {"tensor_parallel_size": 8, "max_model_len": 131072, "trust_remote_code": True,
              "gpu_memory_utilization": 0.92},
    "extra_args": [],
    "env": {},
    "profiles": {
        "sm120": {
            "serve": {"attention_backend": "TRITON_MLA", "kv_cache_dtype": "fp8",
                      "decode_context_parallel_size": 8, "mm_encoder_tp_mode": "data"},
            "env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"},
            "vllm": {"verified_version": "0.19.1"},
        },
        "sm90": {
            "serve": {"mm_encoder_tp_mode": "data", "gpu_memory_utilization": None},
            "extra_args": ["--async-scheduling"],
        },
    },
}


def test_rtx_pro_6000_gets_the_sm120_profile():
    chosen = cp.catalog_profile(KIMI, "12.0")
    assert (chosen["profile"], chosen["matched"]) == ("sm120", "exact")
    entry = chosen["entry"]
    assert entry["serve"] == {"tensor_parallel_size": 8, "max_model_len": 131072,
                              "trust_remote_code": True, "gpu_memory_utilization": 0.92,
                              "attention_backend": "TRITON_MLA", "kv_cache_dtype": "fp8",
                              "decode_context_parallel_size": 8, "mm_encoder_tp_mode": "data"}
    assert entry["env"] == {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    # dicts merge: the base vllm version stays, the verified one is added
    assert entry["vllm"] == {"variant": "cuda", "version": "0.19.1", "min_version": "0.19.1",
                             "verified_version": "0.19.1"}
    assert "profiles" not in entry
    assert chosen["changed"] == {
        "serve": ["attention_backend", "kv_cache_dtype", "decode_context_parallel_size",
                  "mm_encoder_tp_mode"],
        "env": ["NCCL_P2P_LEVEL", "NCCL_PROTO"],
        "vllm": ["verified_version"],
    }
    assert chosen["available"] == ["sm120", "sm90"]
    assert chosen["compute_capability"] == "12.0"


def test_h200_gets_sm90_and_null_removes_a_base_flag():
    chosen = cp.catalog_profile(KIMI, "9.0")
    assert (chosen["profile"], chosen["matched"]) == ("sm90", "exact")
    serve = chosen["entry"]["serve"]
    assert "gpu_memory_utilization" not in serve
    assert serve["mm_encoder_tp_mode"] == "data"
    assert "attention_backend" not in serve
    # extra_args are appended to the base list
    assert chosen["entry"]["extra_args"] == ["--async-scheduling"]
    assert chosen["changed"]["serve"] == ["mm_encoder_tp_mode", "gpu_memory_utilization"]
    assert chosen["changed"]["extra_args"] == ["--async-scheduling"]


def test_family_default_and_no_match():
    entry = copy.deepcopy(KIMI)
    entry["profiles"]["sm12x"] = entry["profiles"].pop("sm120")
    # 12.1 (DGX Spark class) has no exact profile: the sm12x family applies
    assert cp.catalog_profile(entry, "12.1")["matched"] == "family"
    # no profile for SM 8.9: the base entry, unchanged
    none = cp.catalog_profile(KIMI, "8.9")
    assert (none["profile"], none["matched"], none["changed"]) == (None, "none", {})
    assert none["entry"]["serve"] == KIMI["serve"]
    entry["profiles"]["default"] = {"env": {"VLLM_LOG_STATS_INTERVAL": "10"}}
    assert cp.catalog_profile(entry, "8.9")["profile"] == "default"
    # an entry without profiles is returned as it is
    plain = {k: v for k, v in KIMI.items() if k != "profiles"}
    assert cp.catalog_profile(plain, "12.0")["entry"] == plain


def test_requested_profile_wins_over_the_capability():
    chosen = cp.catalog_profile(KIMI, "12.0", profile="sm90")
    assert (chosen["profile"], chosen["matched"]) == ("sm90", "requested")


def test_the_entry_is_not_modified():
    before = copy.deepcopy(KIMI)
    cp.catalog_profile(KIMI, "12.0")
    cp.catalog_profile(KIMI, "9.0")
    assert before == KIMI


@pytest.mark.parametrize(("entry", "cc", "profile", "message"), [
    (KIMI, "12.0", "sm100", (r"profile 'sm100' was requested but the entry has only "
                             r"\['sm120', 'sm90'\]")),
    (KIMI, "twelve", None, r"compute_capability must look like '12.0', got 'twelve'"),
    ({"profiles": {"rtx": {}}}, "12.0", None, (r"profile names must be sm<major><minor>, "
                                               r"sm<major>x or default; found \['rtx'\]")),
    ({"profiles": []}, "12.0", None, r"profiles must be a dict of name -> overrides, got list"),
    ({"profiles": {"sm120": {"extra_args": "--x"}}}, "12.0", None,
     r"profile sm120 extra_args must be a list, got str"),
    ({"serve": ["x"], "profiles": {"sm120": {"serve": {"a": 1}}}}, "12.0", None,
     r"entry field serve must be a dict to merge a profile into, got list"),
    ("kimi", "12.0", None, r"catalog entry must be a dict, got str"),
])
def test_malformed_input_names_what_was_wanted(entry, cc, profile, message):
    with pytest.raises(cp.CatalogProfileError, match=message):
        cp.catalog_profile(entry, cc, profile)


def test_profile_candidates():
    assert cp.profile_candidates("12.0") == ["sm120", "sm12x"]
    assert cp.profile_candidates(9) == ["sm90", "sm9x"]
    assert cp.profile_candidates("10.3") == ["sm103", "sm10x"]
