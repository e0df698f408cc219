# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Property: whatever strings a catalog entry holds, the unit keeps its structure.

For any entry, rendering the real template either refuses it, naming the
model and a field that really holds an unsafe value, or writes a unit that,
read back with systemd's rules (tests/systemd_unit.py):
- has exactly the directives of a unit rendered from a tame entry of the same
  shape (and the ones its header lists, which verify-unit checks);
- runs exactly the argv vllm_serve_argv() builds, whose tail is extra_args
  verbatim;
- sets exactly the entry's environment, and describes the served name as is.
Synthetic input by design: arbitrary Unicode plus the characters systemd
treats specially. derandomize=True: the same examples on every run.
"""

import re

import jinja2
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.serve_args import (
    vllm_serve_argv,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from systemd_unit import VLLM, exec_argv, expand_specifiers, parsed, render_unit, verify_unit, words

MODEL_DIR = "/srv/models/vllm-fleet-lab/tiny-gqa"
# What systemd or Python treat specially; the control characters among them
# must be refused, the rest must come through literally.
SPECIAL = ["\n", "\r", "\x00", "\t", " ", "\x7f", "\x85", "%", "$", "{", "}", '"', "'", "\\",
           ";", "=", "-", "@", "[", "]", "#", "\u2028", "\u00e9"]
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OPTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# vLLM 0.32 options and environment the product owns, and the spellings vLLM
# reads as them (vllm/utils/argparse_utils.py: `_` is `-`, a name ends at `=`
# or `.`; argparse's abbreviations; BooleanOptionalAction's --no-): written out
# here apart from module_utils/engine/serve_args.py.
OWNED_FORMS = ["host", "port", "served-model-name", "model", "enable-server-load-tracking",
               "no-enable-server-load-tracking", "api-key", "enable-sleep-mode",
               "no-enable-sleep-mode", "config", "uds", "grpc-port", "allowed-local-media-path",
               # the probe's counters (issue 44 case 5), listeners and unpickling (issue 45)
               "disable-log-stats", "no-disable-log-stats", "api-server-count",
               "weight-transfer-config", "enable-elastic-ep", "no-enable-elastic-ep",
               "enable-fault-tolerance", "no-enable-fault-tolerance", "kv-events-config",
               "enable-log-requests", "no-enable-log-requests"]
OWNED_ENV = {"VLLM_SERVER_DEV_MODE", "VLLM_API_KEY", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
             "VLLM_USE_RUST_FRONTEND", "VLLM_RUST_FRONTEND_PATH",
             "VLLM_ALLOW_INSECURE_SERIALIZATION",
             # what the unit sets itself (issue 45 case 6: systemd keeps the last assignment)
             "HOME", "HF_HUB_OFFLINE", "PYTHONUNBUFFERED", "CUDA_DEVICE_ORDER",
             "CUDA_VISIBLE_DEVICES", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
             # the unit's compile caches, under the service home (issue 34)
             "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}


def owned(word):
    """Whether vLLM reads this argv word as a product-owned option."""
    word = str(word)
    name = re.split(r"[=.]", word[2:], maxsplit=1)[0].replace("_", "-")
    return word.startswith("--") and name != "" and any(f.startswith(name) for f in OWNED_FORMS)


ANY_TEXT = st.text(st.one_of(st.characters(blacklist_categories=("Cs",)), st.sampled_from(SPECIAL)),
                   max_size=12)
PRINTABLE_TEXT = st.text(st.one_of(st.characters(blacklist_categories=("Cs", "Cc")),
                                   st.sampled_from([c for c in SPECIAL if not CONTROL.match(c)])),
                         max_size=12)


def entries(text, gpu, env_name, option_name):
    scalar = st.one_of(text, st.integers(-10, 10**6), st.booleans(), st.none(),
                       st.floats(allow_nan=False, allow_infinity=False))
    return st.fixed_dictionaries({
        "description": text,
        "served_model_name": text,
        "port": st.integers(1, 65535),
        "startup_timeout_s": st.integers(1, 10**5),
        "gpus": st.lists(gpu, max_size=3),
        "env": st.dictionaries(env_name, st.one_of(text, st.integers()), max_size=3),
        "serve": st.dictionaries(
            option_name,
            st.one_of(scalar, st.lists(text, max_size=2), st.dictionaries(text, text, max_size=2)),
            max_size=3),
        "extra_args": st.lists(st.one_of(text, st.integers()), max_size=4),
    })


# Half the entries hold arbitrary strings anywhere (nearly all are refused);
# half hold any printable text in well-formed places (nearly all are written).
ENTRIES = st.one_of(
    entries(ANY_TEXT, st.one_of(st.integers(0, 15), ANY_TEXT),
            st.one_of(ANY_TEXT, st.sampled_from(["A", "VLLM_X", "_1", "TRITON_CACHE_DIR"])),
            st.one_of(ANY_TEXT, st.sampled_from(["dtype", "max_model_len"]))),
    entries(PRINTABLE_TEXT, st.one_of(st.integers(0, 15), st.integers(0, 15).map(str)),
            st.from_regex(ENV_NAME, fullmatch=True),
            st.from_regex(r"[a-z][a-z0-9_]*", fullmatch=True)
              .filter(lambda key: not owned(f"--{key}"))),
)


def unsafe_fields(entry):
    """The fields an independent reading says must be refused."""
    bad = {name for name in ("description", "served_model_name")
           if CONTROL.search(entry[name])}
    bad |= {f"gpus[{index}]" for index, gpu in enumerate(entry["gpus"])
            if not re.fullmatch(r"[0-9]+", str(gpu))}
    bad |= {f"env.{name}" for name, value in entry["env"].items()
            if not ENV_NAME.fullmatch(name) or CONTROL.search(str(value)) or name in OWNED_ENV}
    for key, value in entry["serve"].items():
        if not OPTION_NAME.fullmatch(key):
            bad.add("serve")
        items = value if isinstance(value, list) else [value]
        if CONTROL.search(key) or owned(f"--{key}") or any(
                CONTROL.search(str(item)) or owned(item)
                for item in items if not isinstance(item, (bool, dict)) and item is not None):
            bad.add(f"serve.{key}")
    bad |= {f"extra_args[{index}]" for index, arg in enumerate(entry["extra_args"])
            if CONTROL.search(str(arg)) or owned(arg)}
    return bad


def tame(entry):
    """An entry of the same shape with harmless values."""
    return {**entry, "description": "d", "served_model_name": "m",
            "gpus": list(range(len(entry["gpus"]))),
            "env": {f"V{index}": "v" for index in range(len(entry["env"]))},
            "serve": {}, "extra_args": []}


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES)
def test_any_entry_is_refused_by_name_or_keeps_the_units_structure(entry):
    bad = unsafe_fields(entry)
    try:
        unit = render_unit(entry)
    except (jinja2.TemplateError, AnsibleFilterError) as exc:
        message = str(exc)
        event("refused")
        assert bad, f"refused a safe entry: {message}"
        assert "catalog entry tiny_gqa: " in message
        assert any(f": {field}" in message for field in bad), (bad, message)
        return
    assert not bad, f"wrote a unit from unsafe fields {bad}"
    event("written")

    assert verify_unit.compare(unit) == []
    assert list(parsed(unit)) == list(parsed(render_unit(tame(entry))))
    directives = parsed(unit)
    assert [len(directives[key]) for key in ("Service.ExecStart", "Service.Environment")] == [
        # HOME, HF_HUB_OFFLINE, PYTHONUNBUFFERED, the three compile caches,
        # GLOO_SOCKET_IFNAME=lo; with GPUs CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES,
        # NCCL_SOCKET_IFNAME=lo; the entry's.
        1, 7 + 3 * bool(entry["gpus"]) + len(entry["env"])]

    environment = [word for value in directives["Service.Environment"] for word in words(value)]
    wanted = {name: str(value) for name, value in entry["env"].items()}
    assert environment[-len(wanted) or len(environment):] == [
        f"{name}={wanted[name]}" for name in sorted(wanted, key=str.lower)]  # Jinja dictsort

    argv = exec_argv(directives["Service.ExecStart"][0],
                     dict(word.split("=", 1) for word in environment))
    assert argv == vllm_serve_argv(VLLM, MODEL_DIR, entry["served_model_name"], entry["port"],
                                   entry["serve"], entry["extra_args"])
    assert argv[len(argv) - len(entry["extra_args"]):] == [str(a) for a in entry["extra_args"]]
    assert argv[argv.index("--served-model-name") + 1] == entry["served_model_name"]

    assert expand_specifiers(directives["Unit.Description"][0]) == (
        f"vLLM model server tiny_gqa ({entry['served_model_name']} on port {entry['port']})")
