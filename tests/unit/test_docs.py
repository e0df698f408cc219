# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The documentation keeps its promises: nothing the README lost, no dead link, no stale owner.

The README is a new user's path and links the rest (docs/). Three things go
wrong quietly when text moves: a section is dropped on the way, a link or an
anchor points at nothing, and docs/architecture.md's owner table names a file
that no longer computes the value. Each is checked here against the files.
"""

import ast
import re

import pytest
import yaml
from repo_paths import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))

# Every `##`/`###` heading of the README before it was cut to a new user's
# path (commit e3ac45b), and where that section lives now: "README.md" when it
# stayed, else (docs file, its title there). A section that moves or is
# renamed is changed here in the same commit.
OLD_README_HEADINGS = {
    "The two commands (a fresh Debian 12 machine, no GPU, as root)": ("README.md", None),
    "The lab: real parts, no GPU": ("docs/testing.md", None),
    "The catalog": ("README.md", None),
    "Variables you will set": ("README.md", None),
    "The front door: the one public port": ("docs/operations.md", None),
    "A model name that survives a switch (the alias)": ("docs/operations.md", None),
    "Fleet balancer (HAProxy)": ("docs/fleet.md", None),
    "A fleet: pools behind a balancer, rolled host by host": ("docs/fleet.md", None),
    "Why HAProxy: the three candidates measured on the lab": ("docs/fleet.md", None),
    "One model across several hosts (vLLM's own multi-node serving)": (
        "docs/multinode.md", "One model across several hosts"),
    "Kimi-K2.5 across two 8-GPU hosts (not run on GPUs here)": ("docs/multinode.md", None),
    "The unit's sandbox": ("docs/operations.md", None),
    "Health over time": ("docs/operations.md", None),
    "A models root that must be mounted": ("docs/operations.md", None),
    "Revisions: one folder per commit, and a revision update is a switch": (
        "docs/operations.md", None),
    "Other playbooks": ("README.md", "The playbooks"),
    "Layout": ("docs/operations.md", None),
    "Tests": ("docs/testing.md", None),
    "Where the GPU matters": ("docs/operations.md", None),
}

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+).*?\1")


def _prose_lines(path):
    """The file's lines outside fenced code blocks (and indented code), with line numbers."""
    fence = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
        elif not line.startswith("    "):
            yield number, line


def _headings(path, levels=range(1, 7)):
    found = []
    for _number, line in _prose_lines(path):
        match = HEADING.match(line)
        if match and len(match.group(1)) in levels:
            found.append(match.group(2))
    return found


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path):
    seen, anchors = {}, set()
    for heading in _headings(path):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(path):
    for number, line in _prose_lines(path):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


# --- 1. nothing dropped ------------------------------------------------------


def test_the_map_names_real_files():
    for heading, (where, _title) in OLD_README_HEADINGS.items():
        assert (ROOT / where).is_file(), f"{heading!r} is mapped to {where}, which does not exist"


@pytest.mark.parametrize("heading", sorted(OLD_README_HEADINGS))
def test_every_old_readme_section_is_still_somewhere(heading):
    where, title = OLD_README_HEADINGS[heading]
    title = title or heading
    assert title in _headings(ROOT / where, levels=(1, 2, 3, 4)), (
        f"README section {heading!r} was to live in {where} as {title!r}: no such heading there")
    if where != "README.md":
        assert heading not in _headings(README), (
            f"{heading!r} is still a README heading: map it to README.md or move it")
        linked = {target.split("#")[0] for _number, target in _links(README)}
        assert where in linked, f"the README does not link {where}, which now holds {heading!r}"


def test_the_readme_stays_short():
    lines = README.read_text().count("\n")
    assert lines <= 350, f"README.md is {lines} lines: a new user's path is at most 350"


def test_the_readme_code_fences_are_closed():
    for path in [README, *DOCS]:
        fences = [line.strip() for line in path.read_text().splitlines() if FENCE.match(line)]
        assert len(fences) % 2 == 0, f"{path.name}: an odd number of code fences ({len(fences)})"


def test_the_budgets_in_testing_md_are_budgets_yml_s():
    """docs/testing.md shows the budgets; molecule/budgets.yml owns them."""
    budgets = yaml.safe_load((ROOT / "molecule" / "budgets.yml").read_text())["budgets_min"]
    shown = {}
    for line in (ROOT / "docs" / "testing.md").read_text().splitlines():
        match = re.match(r"^\| (`(\w+)`|all of them, wall time) \| (\d+) \|$", line)
        if match:
            shown[match.group(2) or "total"] = int(match.group(3))
    assert shown == budgets


# --- 2. every link resolves --------------------------------------------------

# External links are not fetched (the tests run offline); these schemes are allowed.
EXTERNAL = ("https://", "http://")


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(path):
    broken = []
    for number, target in _links(path):
        if target.startswith(EXTERNAL):
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            broken.append(f"{number}: {target} (a scheme other than {EXTERNAL})")
            continue
        file_part, _hash, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{number}: {target} ({dest.relative_to(ROOT)} does not exist)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{number}: {target} (no heading of {dest.name} has #{anchor})")
    assert broken == [], f"{path.name}: broken links:\n" + "\n".join(broken)


def test_the_link_check_sees_links_and_anchors():
    """The checker itself: GitHub's slugs, and a link is found outside code only."""
    assert _slug("Why HAProxy: the three candidates measured on the lab") == (
        "why-haproxy-the-three-candidates-measured-on-the-lab")
    assert _slug("The unit's sandbox") == "the-units-sandbox"
    assert _slug("Kimi-K2.5 across two 8-GPU hosts (not run on GPUs here)") == (
        "kimi-k25-across-two-8-gpu-hosts-not-run-on-gpus-here")
    assert _slug("`vllm_cutover` phases") == "vllm_cutover-phases"
    targets = [target for _number, target in _links(README)]
    assert "docs/fleet.md" in targets


# --- 3. docs/architecture.md's owners ----------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
PATHLIKE = re.compile(r"^[\w./-]+\.(?:ya?ml|py|j2)$")
IDENT = re.compile(r"^[A-Za-z_]\w*$")


def _owner_rows():
    """(value, computed-in cell) of each row of the table under "One owner per value"."""
    rows, inside = [], False
    for line in ARCHITECTURE.read_text().splitlines():
        if line.startswith("## "):
            inside = line == "## One owner per value"
            continue
        if inside and line.startswith("|") and not re.match(r"^\|\s*-", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if cells[:2] != ["value", "computed in"]:
                rows.append((cells[0], cells[1]))
    return rows


def _owner(cell):
    """The file a computed-in cell names (its first backticked path) and the names in the
    parentheses right after it: "`vllm_model/vars/main.yml` (`__vllm_model_catalog`)"."""
    for found in re.finditer(r"`([^`]+)`(?:\s*\(([^)]*)\))?", cell):
        if PATHLIKE.match(found.group(1)):
            match = found
            break
    else:
        return None, []
    names = [n for n in re.findall(r"`([^`]+)`", match.group(2) or "") if IDENT.match(n)]
    return match.group(1), names


def _resolve(name):
    for base in (ROOT, ROOT / "roles", ROOT / "plugins"):
        if (base / name).is_file():
            return base / name
    return None


SETS = {"vars", "ansible.builtin.set_fact", "set_fact"}


def _yaml_names(path):
    """Top-level keys, set_fact and vars keys, registered names and the modules tasks call."""
    data = yaml.safe_load(path.read_text())
    names = set()
    if isinstance(data, dict):
        names |= set(data)
    stack = list(data) if isinstance(data, list) else []
    while stack:
        task = stack.pop()
        if not isinstance(task, dict):
            continue
        for key, value in task.items():
            if key in {"block", "rescue", "always"} and isinstance(value, list):
                stack.extend(value)
            elif key in SETS and isinstance(value, dict):
                names |= set(value)
            elif key == "register":
                names.add(value)
            else:
                names.add(key.rsplit(".", 1)[-1])
    return names


def _python_names(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)  # an argument_spec entry: state_file=dict(...)
        elif isinstance(node, ast.Dict):  # or {"state_file": {...}}
            names |= {k.value for k in node.keys if isinstance(k, ast.Constant)
                      and isinstance(k.value, str)}
    return names


def _defined(path):
    if path.suffix in {".yml", ".yaml"}:
        return _yaml_names(path)
    if path.suffix == ".py":
        return _python_names(path)
    return set(re.findall(r"\w+", path.read_text()))  # a template: the names it uses


def test_the_owner_table_is_found():
    rows = _owner_rows()
    assert len(rows) >= 10
    assert ("the merged catalog", "`vllm_model/vars/main.yml` (`__vllm_model_catalog`)") in rows


@pytest.mark.parametrize(("value", "cell"), _owner_rows(), ids=[row[0] for row in _owner_rows()])
def test_each_value_is_computed_where_the_table_says(value, cell):
    name, names = _owner(cell)
    assert name is not None, f"{value!r}: the computed-in cell names no file: {cell!r}"
    path = _resolve(name)
    assert path is not None, f"{value!r}: {name} is not a file (from the root, roles/ or plugins/)"
    missing = sorted(set(names) - _defined(path))
    assert missing == [], f"{value!r}: not defined in {path.relative_to(ROOT)}: {missing}"


def test_the_owner_check_reads_each_kind_of_file():
    yml = _resolve("vllm_model/vars/main.yml")
    assert "__vllm_model_catalog" in _defined(yml)
    assert "gpu_facts" in _defined(_resolve("vllm_model/tasks/preflight.yml"))
    assert "upstream_conf" in _defined(_resolve("module_utils/frontdoor/frontdoor.py"))
    assert "no_such_value" not in _defined(yml)
    assert _owner("`a/b.yml` (`x`, `y`; prose)") == ("a/b.yml", ["x", "y"])
    assert _owner("one `gpu_facts` call in `t/p.yml`") == ("t/p.yml", [])
