# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The serve-argument filters the vllm_service role renders its ExecStart= with."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.serve_args import FilterModule

FILTERS = FilterModule().filters()
VLLM = "/opt/vllm/0.32.0-cpu/bin/vllm"


def test_filter_names():
    assert sorted(FILTERS) == ["cache_environment",
                               "nvidia_device_nodes", "systemd_environment", "systemd_exec_line",
                               "systemd_quote", "systemd_specifier_text", "systemd_word",
                               "unit_name", "vllm_request_check", "vllm_serve_argv",
                               "vllm_sleep_settings", "vllm_unit_check"]


def test_a_models_unit_is_named_once():
    assert FILTERS["unit_name"]("minimax_m25") == "vllm-minimax_m25.service"


def test_the_request_check_filter_refuses_an_owned_value_naming_the_filter():
    entry = {"served_model_name": "tiny-gqa", "port": 8001, "extra_args": ["--hos", "x"]}
    with pytest.raises(AnsibleFilterError, match=(
            r"^vllm_request_check: catalog entry tiny_gqa: extra_args\[0\] holds '--hos', which"
            r" vLLM reads as --host")):
        FILTERS["vllm_request_check"](entry, "tiny_gqa", {})
    assert FILTERS["vllm_request_check"]({**entry, "extra_args": []}, "tiny_gqa") == {
        **entry, "extra_args": []}


def test_entry_to_argv_to_exec_line():
    entry = {"served_model_name": "tiny-gqa", "port": 8001,
             "serve": {"dtype": "float32", "max_model_len": 2048, "enforce_eager": True,
                       "override_generation_config": {"temperature": 0}},
             "extra_args": ["--seed", 0]}
    argv = FILTERS["vllm_serve_argv"](entry, VLLM, "/srv/models/lab/tiny-gqa")
    assert argv == [VLLM, "serve", "/srv/models/lab/tiny-gqa", "--host", "127.0.0.1",
                    "--port", "8001", "--served-model-name", "tiny-gqa",
                    "--enable-server-load-tracking", "--dtype", "float32",
                    "--max-model-len", "2048", "--enforce-eager",
                    "--override-generation-config", '{"temperature":0}', "--seed", "0"]
    assert FILTERS["systemd_exec_line"](argv) == (
        f"{VLLM} serve /srv/models/lab/tiny-gqa --host 127.0.0.1 --port 8001"
        " --served-model-name tiny-gqa --enable-server-load-tracking"
        " --dtype float32 --max-model-len 2048 --enforce-eager"
        ' --override-generation-config "{\\"temperature\\":0}" --seed 0')


def test_port_given_as_text_and_missing_serve_and_host_keyword():
    # A templated port arrives as text; null serve/extra_args mean none.
    entry = {"served_model_name": "m", "port": "8101", "serve": None, "extra_args": None}
    argv = FILTERS["vllm_serve_argv"](entry, VLLM, "/m", host="0.0.0.0")  # noqa: S104
    assert argv == [VLLM, "serve", "/m", "--host", "0.0.0.0", "--port", "8101",  # noqa: S104
                    "--served-model-name", "m", "--enable-server-load-tracking"]


@pytest.mark.parametrize(("entry", "message"), [
    ({"port": 8001}, "vllm_serve_argv: 'served_model_name'"),
    ({"served_model_name": "m"}, "vllm_serve_argv: 'port'"),
    ({"served_model_name": "m", "port": "eighty"},
     "vllm_serve_argv: invalid literal for int() with base 10: 'eighty'"),
    ({"served_model_name": "m", "port": None}, "vllm_serve_argv: int() argument must be"),
    ({"served_model_name": "m", "port": 70000},
     "vllm_serve_argv: catalog entry: port must be an integer 1-65535, got 70000"),
    ({"served_model_name": "m", "port": 8001, "serve": {"port": 9000}},
     "vllm_serve_argv: catalog entry: serve.port is vLLM's --port: the product owns it"),
    ({"served_model_name": "m", "port": 8001, "serve": {"--dtype": "half"}},
     "vllm_serve_argv: catalog entry: serve: serve option names are bare words"),
])
def test_bad_entries_raise_filter_errors_that_name_the_filter(entry, message):
    with pytest.raises(AnsibleFilterError) as caught:
        FILTERS["vllm_serve_argv"](entry, VLLM, "/m")
    assert str(caught.value).startswith(message)


def test_empty_exec_line_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="systemd_exec_line: an ExecStart line needs"):
        FILTERS["systemd_exec_line"]([])


def test_environment_line_quoting():
    # The unit template writes Environment={{ key | systemd_environment(value) }}.
    # systemd.exec(5): "$" has no meaning in Environment=, only % specifiers do,
    # so "$" is written as is (it used to be doubled, and the service saw "$$").
    assert FILTERS["systemd_environment"]("VLLM_USE_V1", "1") == "VLLM_USE_V1=1"
    assert FILTERS["systemd_environment"]("NCCL_DEBUG_SUBSYS", "INIT ENV") == (
        '"NCCL_DEBUG_SUBSYS=INIT ENV"')
    assert FILTERS["systemd_environment"]("PATH_HINT", "$PATH:50%") == '"PATH_HINT=$PATH:50%%"'


def test_hostile_entry_is_a_filter_error_naming_field_and_model():
    entry = {"served_model_name": "m", "port": 8001,
             "extra_args": ["--disable-log-stats\n", "ExecStartPre=/bin/touch", "/tmp/x"]}
    with pytest.raises(AnsibleFilterError) as caught:
        FILTERS["vllm_serve_argv"](entry, VLLM, "/m", model="tiny_gqa")
    assert str(caught.value).startswith(
        "vllm_serve_argv: catalog entry tiny_gqa: extra_args[0] holds a control character"
        " (U+000A, line feed) at offset 19")


@pytest.mark.parametrize(("name", "args", "message"), [
    ("vllm_unit_check", ({"served_model_name": "m\n"}, "tiny_gqa"),
     "vllm_unit_check: catalog entry tiny_gqa: served_model_name holds a control character"),
    ("systemd_environment", ("A", "x\n"), "systemd_environment: environment variable A holds"),
    ("systemd_specifier_text", ("a\\",), "systemd_specifier_text: unit value ends in a backslash"),
    ("systemd_word", ("/a\n",), "systemd_word: unit word holds a control character"),
    ("systemd_quote", ("a\r",), "systemd_quote: command-line word holds a control character"),
    ("nvidia_device_nodes", (["x"],), "nvidia_device_nodes: invalid literal for int()"),
])
def test_unit_value_filters_raise_filter_errors_that_name_the_filter(name, args, message):
    with pytest.raises(AnsibleFilterError) as caught:
        FILTERS[name](*args)
    assert str(caught.value).startswith(message)


def test_unit_check_returns_the_entry_for_the_template():
    entry = {"served_model_name": "m", "port": 8001, "gpus": [0]}
    assert FILTERS["vllm_unit_check"](entry, "tiny_gqa", {"vllm_service_home": "/v"}) is entry


def test_the_entry_load_format_and_a_profile_override_reach_exec_start():
    """The unit's ExecStart= gets --load-format from the entry as served on the GPU
    (catalog_profile merges a profile's load_format over the entry's)."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.catalog_profile import (
        catalog_profile,
    )

    entry = {"served_model_name": "m", "port": 8001, "serve": {},
             "profiles": {"sm90": {"load_format": "instanttensor"}}}
    hopper = catalog_profile(entry, "9.0")["entry"]
    blackwell = catalog_profile(entry, "12.0")["entry"]
    argv = FILTERS["vllm_serve_argv"](hopper, VLLM, "/srv/models/m")
    assert argv[-2:] == ["--load-format", "instanttensor"]
    assert "--load-format" not in FILTERS["vllm_serve_argv"](blackwell, VLLM, "/srv/models/m")
    assert FILTERS["systemd_exec_line"](argv).endswith(" --load-format instanttensor")


def test_the_sleep_settings_filter_names_itself_on_a_bad_mode():
    assert FILTERS["vllm_sleep_settings"]({"vllm": {"variant": "cuda"}}, "warm")["sleep_flag"]
    with pytest.raises(AnsibleFilterError,
                       match=r"^vllm_sleep_settings: switch_mode must be cold or warm, got 'hot'"):
        FILTERS["vllm_sleep_settings"]({"switch_mode": "hot"}, "cold")
