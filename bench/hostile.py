# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Hostile catalog input, class by class, through the real checks (issue 32).

Each class is a set of values put where a catalog entry, an inventory or a vault
puts them, and an expectation:
- refuse: the request phase's check (module_utils/engine/serve_args.py check_request,
  check_model_name; module_utils/frontdoor/api_keys.py api_key_problems) must refuse it;
- a config.json number the fit reads (issue 45 case 6): each field of the shipped
  MiniMax-M2.5 and Kimi-K2.5 configs set to a hostile value must make the fit
  say "cannot size" naming the field (refuse); the same number spelt as an
  integral float or as digits must still size (keep); an exception out of the
  fit counts as passed unexpectedly;
- keep: the check must accept it, and it must arrive intact: a unit value is
  quoted for its directive and read back with systemd's rules
  (tests/systemd_unit.py, a transcription of systemd's parser) as the same
  word; a key list is accepted as it is.
The table: class, values tried, refused, quoted-and-intact (kept as meant),
passed-unexpectedly (a value to refuse that passed) and refused-unexpectedly (a
value to keep that was refused). Exit 1 unless the last two are 0 everywhere.

  .venv/bin/python bench/hostile.py            the table (exit 0)
  .venv/bin/python bench/hostile.py --check    the table; exit 1 on any surprise
"""

import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests"))

# The repo's own checks and systemd reader (after the paths above).
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.serve_args import (  # noqa: E402
    PRODUCT_ENV,
    PRODUCT_OPTIONS,
    PRODUCT_UNITS,
    UNIT_ENV,
    check_model_name,
    check_request,
    systemd_environment,
    systemd_exec_line,
    vllm_serve_argv,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.model_fit import (  # noqa: E402
    CONFIG_NUMBERS,
    size_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.api_keys import (  # noqa: E402
    api_key_problems,
)
from systemd_unit import exec_argv, words  # noqa: E402

MODEL = "tiny_gqa"
ENTRY = {"description": "Lab model", "repo_id": "org/m", "served_model_name": "tiny-gqa",
         "port": 8001, "gpus": [], "env": {}, "serve": {"dtype": "float32"}, "extra_args": []}
SETTINGS = {"vllm_service_vllm_bin": "/opt/vllm/0.32.0-cpu/bin/vllm",
            "vllm_service_model_dir": "/var/lib/vllm-fleet/models/tiny_gqa",
            "vllm_service_home": "/var/lib/vllm", "vllm_service_user": "vllm"}
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - the hostile value, bound nowhere
NEGATABLE = ("enable-server-load-tracking", "enable-sleep-mode")
# What systemd or the shell treat specially, in otherwise plain values.
PRINTABLE = ["50%", "$HOME", "${X}", "a b", 'say "hi"', "it's", "C:\\dir", "a;b", ";", "\\;",
             "#x", "=x", "@x", "-x", "{}", "[x]", "\u2028", "\u00e9t\u00e9", "%i", "$$", ""]
CONTROL = ["\n", "\r", "\x00", "\t", "\x1b", "\x7f", "\x85", "\r\n"]
KEY = "Abcdefghijklmnop-0123456789"


def owned_spellings():
    """Every spelling of each product-owned option vLLM 0.32 reads as it."""
    for option in PRODUCT_OPTIONS:
        forms = [option, *([f"no-{option}"] if option in NEGATABLE else [])]
        for form in forms:
            under = form.replace("-", "_")
            yield from (f"--{form}", f"--{under}", f"--{form}=x", f"--{under}=x", f"--{form}.k")
            # Abbreviations argparse accepts (allow_abbrev) or refuses as ambiguous.
            yield from (f"--{form[:length]}" for length in range(3, len(form)))


def control_values():
    for char in CONTROL:
        yield f"--disable-log-stats{char}"
        yield f"x{char}ExecStartPre=/bin/touch /tmp/x"


def entry(**change):
    return {**ENTRY, **change}


def request(candidate, model=MODEL):
    """None when the request check accepts the entry, else its message."""
    try:
        check_request(model, candidate, SETTINGS)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def argv_intact(candidate):
    """The entry's argv, quoted for ExecStart= and read back as systemd does, is unchanged."""
    argv = vllm_serve_argv(SETTINGS["vllm_service_vllm_bin"], SETTINGS["vllm_service_model_dir"],
                           candidate["served_model_name"], candidate["port"], candidate["serve"],
                           candidate["extra_args"])
    return exec_argv(systemd_exec_line(argv)) == argv


def env_intact(name, value):
    return words(systemd_environment(name, value)) == [f"{name}={value}"]


# The shipped configs of the catalog's models (roles/vllm_model/files/model_configs) on
# the target: 8x RTX PRO 6000, TP 8.
CONFIGS = ("MiniMaxAI--MiniMax-M2.5.config.json", "moonshotai--Kimi-K2.5.config.json")
FIT_GPU = {"count": 8, "memory_total_bytes": 97_887 * 1_048_576, "compute_capability": "12.0",
           "interconnect": "pcie"}
FIT_SERVE = {"tensor_parallel_size": 8, "max_model_len": 4096, "gpu_memory_utilization": 0.92}
HOSTILE_NUMBERS = (-1, -(2**40), 2**31, 2**63, 10**400, 1.5, float("nan"), float("inf"),
                   float("-inf"), True, False, "12x", "", "-3", [], [8], {}, {"a": 1})


def fit_run(config, field):
    """run() of one config: (cannot size naming `field`, sized); an exception is neither."""
    def run():
        try:
            report = size_model(config, serve=dict(FIT_SERVE), gpu=dict(FIT_GPU),
                                weight_bytes=200 * 10**9)
        except Exception:  # noqa: BLE001 - any exception out of the fit is a finding
            return False, False
        refused = not report["sized"] and f"config.json's {field} is" in report["unsized_why"]
        return refused, bool(report["sized"])
    return run


def config_cases():
    """(hostile, kept) lists of (label, run) over the shipped configs' numeric fields."""
    hostile, kept = [], []
    for name in CONFIGS:
        base = json.loads((ROOT / "roles/vllm_model/files/model_configs" / name).read_text())
        inner = "text_config" if isinstance(base.get("text_config"), dict) else None
        fields = [key for key in CONFIG_NUMBERS
                  if isinstance((base[inner] if inner else base).get(key), int)]
        for field in fields:
            for value in HOSTILE_NUMBERS:
                changed = copy.deepcopy(base)
                (changed[inner] if inner else changed)[field] = value
                hostile.append((f"{name}:{field}={value!r}", fit_run(changed, field)))
            number = (base[inner] if inner else base)[field]
            for value in (float(number), str(number)):
                changed = copy.deepcopy(base)
                (changed[inner] if inner else changed)[field] = value
                kept.append((f"{name}:{field}={value!r}", fit_run(changed, field)))
    return hostile, kept


def classes():
    """(class, expectation, [(value, run)]): run() -> (refused, intact)."""
    hostile_numbers, kept_numbers = config_cases()
    yield ("config.json numbers the fit reads", "refuse", hostile_numbers)
    yield ("config.json numbers spelt otherwise", "keep", kept_numbers)

    def unit(candidate, intact=lambda: True):
        def run():
            refused = request(candidate) is not None
            return refused, (not refused) and intact()
        return run

    yield ("control characters in extra_args", "refuse",
           [(v, unit(entry(extra_args=[v]))) for v in control_values()])
    yield ("control characters in served_model_name", "refuse",
           [(v, unit(entry(served_model_name=v))) for v in control_values()])
    yield ("control characters in serve values", "refuse",
           [(v, unit(entry(serve={"max_model_len": v}))) for v in control_values()])
    yield ("control characters in env values", "refuse",
           [(v, unit(entry(env={"VLLM_X": v}))) for v in control_values()])
    yield ("printable specials in extra_args", "keep",
           [(v, unit(entry(extra_args=["--seed", v]),
                     lambda v=v: argv_intact(entry(extra_args=["--seed", v]))))
            for v in PRINTABLE])
    yield ("printable specials in env values", "keep",
           [(v, unit(entry(env={"VLLM_X": v}), lambda v=v: env_intact("VLLM_X", v)))
            for v in PRINTABLE])
    spellings = list(owned_spellings())
    yield ("owned options in extra_args", "refuse",
           [(v, unit(entry(extra_args=[v, ANY_ADDRESS]))) for v in spellings])
    yield ("owned options as serve keys", "refuse",
           [(v[2:], unit(entry(serve={v[2:]: "x"}))) for v in spellings
            if "=" not in v])
    yield ("owned options in serve values", "refuse",
           [(v, unit(entry(serve={"lora_modules": ["a=/b", v, ANY_ADDRESS]}))) for v in spellings])
    yield ("owned options in a GPU profile", "refuse",
           [(v, unit(entry(profiles={"sm90": {"extra_args": [v]}}))) for v in spellings])
    yield ("owned environment", "refuse",
           [(name, unit(entry(env={name: "1"}))) for name in (*PRODUCT_ENV, *UNIT_ENV)])
    # The Molecule scenarios' broken values: vLLM refuses them at start, not the product.
    broken = [["--max-num-seqs", "not-a-number"], ["--no-such-option"], ["--model-impl", "x"],
              ["--config-format", "auto"], ["--hostname", "x"], ["--max-num-seqs=lots"],
              ["--compilation-config.level", "3"], ["-O3"], ["--seed=0"]]
    yield ("other options (vLLM decides)", "keep",
           [(" ".join(v), unit(entry(extra_args=v), lambda v=v: argv_intact(entry(extra_args=v))))
            for v in broken])

    def name_run(name):
        def run():
            try:
                check_model_name(name)
            except ValueError:
                return True, False
            return False, True
        return run

    product = [unit_name.removeprefix("vllm-").rsplit(".", 1)[0] for unit_name in PRODUCT_UNITS]
    yield ("model names of product units or too long", "refuse",
           [(n, name_run(n)) for n in [*product, "fleet-next", "a" * 65, "a" * 243, "a" * 255]])
    yield ("model names beside them", "keep",
           [(n, name_run(n)) for n in ["fleet_probe", "my-fleet-probe", "a" * 64, "tiny_gqa"]])

    def keys_run(keys):
        def run():
            refused = bool(api_key_problems(keys, "vllm_frontdoor_api_keys"))
            return refused, not refused
        return run

    placeholders = ["REPLACE-with-a-long-random-key-for-client-one",
                    "REPLACE-with-a-long-random-key-for-the-balancer", "REPLACE-me-0123456789"]
    yield ("API keys: placeholders, bad tokens, exact repeats", "refuse",
           [(k[:12] + "...", keys_run([k])) for k in placeholders]
           + [(label, keys_run(keys)) for label, keys in [
               ("short", ["short"]), ("space", [KEY + " x"]), ("newline", [KEY + "\n"]),
               ("repeat", [KEY, KEY])]])
    yield ("API keys differing only in case", "keep",
           [(label, keys_run(keys)) for label, keys in [
               ("upper", [KEY, KEY.upper()]), ("lower", [KEY, KEY.lower()]),
               ("swapped", [KEY, KEY.swapcase(), KEY.upper()])]])


def measure():
    rows = []
    for name, expect, values in classes():
        refused = intact = passed = wrongly = 0
        for _value, run in values:
            was_refused, was_intact = run()
            refused += was_refused
            intact += was_intact
            if expect == "refuse" and not was_refused:
                passed += 1
            if expect == "keep" and not was_intact:
                wrongly += 1
        rows.append({"class": name, "expect": expect, "tried": len(values), "refused": refused,
                     "intact": intact, "passed": passed, "wrongly": wrongly})
    return rows


def table(rows):
    head = (f"{'class':<50} {'expect':<6} {'tried':>5} {'refused':>7} {'quoted-and-intact':>17}"
            f" {'passed-unexpectedly':>19} {'refused-unexpectedly':>20}")
    lines = [head, "-" * len(head)]
    lines.extend(f"{r['class']:<50} {r['expect']:<6} {r['tried']:>5} {r['refused']:>7}"
                 f" {r['intact']:>17} {r['passed']:>19} {r['wrongly']:>20}" for r in rows)
    counts = ("tried", "refused", "intact", "passed", "wrongly")
    total = {key: sum(r[key] for r in rows) for key in counts}
    lines.append(f"{'total':<50} {'':<6} {total['tried']:>5} {total['refused']:>7}"
                 f" {total['intact']:>17} {total['passed']:>19} {total['wrongly']:>20}")
    return "\n".join(lines), total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless nothing passed or was refused unexpectedly")
    args = parser.parse_args(argv)
    text, total = table(measure())
    print(text)
    surprises = total["passed"] + total["wrongly"]
    verdict = "OK" if surprises == 0 else "MISSED"
    print(f"hostile input: {total['passed']} passed unexpectedly, {total['wrongly']} refused "
          f"unexpectedly of {total['tried']} values: {verdict}")
    return 1 if surprises and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
