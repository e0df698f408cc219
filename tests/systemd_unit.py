# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Render the vllm_service unit as Ansible does, and read it back as systemd does.

render_unit() renders roles/vllm_service/templates/vllm.service.j2 with
jinja2 set up like Ansible's template module (trim_blocks, strict undefined),
the collection's real filters and Ansible's own `comment` filter.

The reading side is a transcription of systemd 252's parsers, not shlex:
- unit lines and continuations: verify-unit's parse_unit() (the one the role
  installs), after src/shared/conf-parser.c config_parse();
- words: extract_first_word() from src/basic/extract-word.c with
  EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE (+ _RELAX for ExecStart= arguments);
- escapes: cunescape_one() from src/basic/escape.c;
- `%` specifiers after unquoting (only `%%` is used here; any other `%x`
  is reported), and for ExecStart= `$VAR`, `${VAR}` and `$$` from
  src/basic/env-util.c replace_env_argv()/replace_env().
Where shlex.split() differs from systemd and this module follows systemd:
- separators are only space, tab, LF, CR (shlex: any str.isspace());
- backslash escapes are C escapes (\\n, \\t, \\x41, \\u20ac, \\101, \\s) inside
  AND outside double quotes, and inside single quotes too; shlex keeps them
  literal in single quotes and knows no C escapes;
- an unquoted lone `;` separates commands, `\\;` is a literal `;`;
- a quote may open mid-word (`a"b c"d` is one word `ab cd`), as in shlex,
  but an unbalanced quote is an error for systemd, not for shlex with
  posix=False;
- `%` and `$` are expanded after the words are split; shlex knows neither.
"""

import functools
import importlib.machinery
import importlib.util

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.vllm_fleet.fleet.plugins.filter.host_path import (
    FilterModule as HostPathFilters,
)
from ansible_collections.vllm_fleet.fleet.plugins.filter.serve_args import FilterModule
from repo_paths import ROOT

ROLE = ROOT / "roles" / "vllm_service"
TEMPLATE = ROLE / "templates" / "vllm.service.j2"
VERIFY_UNIT = ROLE / "files" / "verify-unit"
VLLM = "/opt/vllm/0.32.0-cpu/bin/vllm"
WHITESPACE = " \t\n\r"


def load_verify_unit():
    """roles/vllm_service/files/verify-unit as a module (it has no .py name)."""
    loader = importlib.machinery.SourceFileLoader("verify_unit", str(VERIFY_UNIT))
    spec = importlib.util.spec_from_loader("verify_unit", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


verify_unit = load_verify_unit()


@functools.cache
def _defaults_text():
    return (ROLE / "defaults" / "main.yml").read_text()


def role_defaults():
    """A fresh copy of the role's defaults."""
    return yaml.safe_load(_defaults_text())


@functools.cache
def _template():
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = CoreFilters().filters()["comment"]
    for name, func in {**FilterModule().filters(), **HostPathFilters().filters()}.items():
        env.filters[f"vllm_fleet.fleet.{name}"] = func
    return env.from_string(TEMPLATE.read_text())


@functools.cache
def _role_vars_text():
    return (ROLE / "vars" / "main.yml").read_text()


def role_vars(model):
    """The role's vars (its internal paths), the templated ones resolved for `model`."""
    found = {key: value for key, value in yaml.safe_load(_role_vars_text()).items()
             if not (isinstance(value, str) and "{{" in value)}
    found["vllm_service_unit"] = FilterModule().filters()["unit_name"](model)  # record.unit_name
    return found


def render_unit(entry, model="tiny_gqa", **overrides):
    """The unit text the role writes for entry, with the role's defaults and vars."""
    variables = role_defaults()
    variables.update(role_vars(model))
    variables.update(ansible_managed="Ansible managed", vllm_service_model=model,
                     vllm_service_entry=entry, vllm_service_vllm_bin=VLLM,
                     vllm_service_model_dir="/srv/models/vllm-fleet-lab/tiny-gqa")
    variables.update(overrides)
    return _template().render(variables)


# --- systemd's word splitting ----------------------------------------------

_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", "\\": "\\", '"': '"', "'": "'", "s": " "}


class SystemdSyntaxError(ValueError):
    """systemd would log a syntax error and ignore the value."""


def cunescape_one(text, pos):
    """(char, length) of the C escape at text[pos:] (after the backslash); cunescape_one()."""
    char = text[pos] if pos < len(text) else ""
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char], 1
    digits = {"x": 2, "u": 4, "U": 8}.get(char)
    if digits:
        code = text[pos + 1:pos + 1 + digits]
        if len(code) != digits or any(c not in "0123456789abcdefABCDEF" for c in code):
            raise SystemdSyntaxError(f"bad \\{char} escape")
        value = int(code, 16)
        if value == 0:
            raise SystemdSyntaxError("\\0 escapes are refused")
        return chr(value), 1 + digits
    if char and char in "01234567":
        code = text[pos:pos + 3]
        if len(code) != 3 or any(c not in "01234567" for c in code):
            raise SystemdSyntaxError("bad octal escape")
        value = int(code, 8)
        if value == 0:
            raise SystemdSyntaxError("\\000 is refused")
        return chr(value), 3
    raise SystemdSyntaxError(f"unknown escape \\{char}")


def extract_first_word(text, pos, relax=False):  # noqa: C901, PLR0912 - transcribes a C loop
    """(word or None, next pos); extract_first_word(UNQUOTE|CUNESCAPE[|CUNESCAPE_RELAX])."""
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    if pos >= len(text):
        return None, pos
    word = []
    quote = ""
    while True:
        if pos >= len(text):
            if quote:
                raise SystemdSyntaxError("unbalanced quoting")
            return "".join(word), pos
        char = text[pos]
        if char == "\\":
            if pos + 1 >= len(text):
                if relax and not quote:
                    word.append("\\")
                    return "".join(word), pos + 1
                raise SystemdSyntaxError("trailing backslash")
            try:
                unescaped, length = cunescape_one(text, pos + 1)
            except SystemdSyntaxError:
                if not relax:
                    raise
                unescaped, length = "\\" + text[pos + 1], 1
            word.append(unescaped)
            pos += 1 + length
        elif quote:
            if char == quote:
                quote = ""
            else:
                word.append(char)
            pos += 1
        elif char in "'\"":
            quote = char
            pos += 1
        elif char in WHITESPACE:
            return "".join(word), pos
        else:
            word.append(char)
            pos += 1


def expand_specifiers(word):
    """`%%` -> `%`; any other specifier is refused here (the template only writes `%%`)."""
    out = []
    pos = 0
    while pos < len(word):
        if word[pos] == "%":
            if word[pos + 1:pos + 2] != "%":
                raise SystemdSyntaxError(f"specifier %{word[pos + 1:pos + 2]} would be expanded")
            out.append("%")
            pos += 2
        else:
            out.append(word[pos])
            pos += 1
    return "".join(out)


def replace_env(word, environment):
    """`$$` -> `$`, `${VAR}` -> value; `$` before anything else stays (replace_env())."""
    out = []
    pos = 0
    while pos < len(word):
        if word.startswith("$$", pos):
            out.append("$")
            pos += 2
        elif word.startswith("${", pos) and "}" in word[pos:]:
            end = word.index("}", pos)
            out.append(environment.get(word[pos + 2:end], ""))
            pos = end + 1
        else:
            out.append(word[pos])
            pos += 1
    return "".join(out)


def exec_argv(value, environment=None):
    """The argv systemd runs for an ExecStart= value (one command; `;` is refused here)."""
    environment = environment or {}
    argv = []
    pos = 0
    while True:
        rest = value[pos:].lstrip(WHITESPACE)
        pos = len(value) - len(rest)
        if argv and (rest == ";" or rest.startswith(("; ", ";\t"))):
            raise SystemdSyntaxError("a second command after ';'")
        if argv and (rest == "\\;" or rest.startswith(("\\; ", "\\;\t"))):
            argv.append(";")
            pos += 2
            continue
        word, pos = extract_first_word(value, pos, relax=bool(argv))
        if word is None:
            break
        if not argv and word[:1] in "-@:+!":
            raise SystemdSyntaxError(f"program {word!r} starts with an ExecStart prefix")
        word = expand_specifiers(word)
        if argv and word.startswith("$") and word[1:2] not in ("{", "$"):
            argv.extend(environment.get(word[1:], "").split())
            continue
        argv.append(replace_env(word, environment))
    return argv


def words(value):
    """Environment=, ReadWritePaths=: unquoted, unescaped words with `%%` expanded."""
    out = []
    pos = 0
    while True:
        word, pos = extract_first_word(value, pos)
        if word is None:
            return out
        out.append(expand_specifiers(word))


def parsed(unit_text):
    """{'Section.Key': [values]} of a unit, as systemd reads it."""
    directives, problems = verify_unit.parse_unit(unit_text)
    assert not problems, problems
    out = {}
    for _unused, name, value in directives:
        out.setdefault(name, []).append(value)
    return out


def catalog():
    """The catalog's entries (its file is moving to the vllm_model role)."""
    for path in (ROOT / "roles" / "vllm_model" / "defaults" / "main" / "catalog.yml",
                 ROOT / "group_vars" / "all" / "models.yml"):
        if path.exists():
            return yaml.safe_load(path.read_text())
    raise FileNotFoundError("no model catalog found")


def tiny_gqa_entry():
    """The catalog's tiny_gqa entry with its one templated value resolved by hand."""
    data = catalog()
    entry = dict(data["vllm_fleet_catalog"]["tiny_gqa"])
    assert entry["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "{{ vllm_fleet_lab_cores.tiny_gqa }}"
    entry["env"] = {**entry["env"],
                    "VLLM_CPU_OMP_THREADS_BIND": data["vllm_fleet_lab_cores"]["tiny_gqa"]}
    return entry
