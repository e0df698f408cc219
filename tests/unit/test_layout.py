"""plugins/module_utils is grouped by concern, in the dependency order docs/architecture.md
gives ("The layout of plugins/module_utils"): a package imports only from the packages
above it. Read from the code's own imports, so a new import across the order fails here."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PREFIX = "ansible_collections.vllm_fleet.fleet.plugins.module_utils."
# The one import against the order, inside a function: the request check applies each GPU
# profile to check every way an entry can be served.
EXCEPTIONS = {("engine/serve_args.py", "fit")}


def documented_order():
    """The packages as the table in docs/architecture.md lists them, top to bottom."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The layout of `plugins/module_utils`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)/` \|", section, re.MULTILINE)


def imported_packages(path):
    """(package, inside a function) for each import of this collection's module_utils."""
    tree = ast.parse(path.read_text())
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
              for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            yield node.module[len(PREFIX):].split(".")[0], id(node) in nested


def test_the_documented_packages_are_the_packages_on_disk():
    on_disk = sorted(p.name for p in MODULE_UTILS.iterdir() if p.is_dir()
                     and p.name != "__pycache__")
    assert sorted(documented_order()) == on_disk
    assert not list(MODULE_UTILS.glob("*.py")), "every module lives in a package"


def test_each_package_imports_only_from_packages_above_it():
    order = documented_order()
    wrong = []
    for path in sorted(MODULE_UTILS.glob("*/*.py")):
        package = path.parent.name
        for imported, in_function in imported_packages(path):
            rel = f"{package}/{path.name}"
            if imported == package or order.index(imported) < order.index(package):
                continue
            if (rel, imported) in EXCEPTIONS and in_function:
                continue
            wrong.append(f"{rel} imports from {imported}/")
    assert wrong == []


def test_the_check_fails_on_an_import_against_the_order(tmp_path):
    """The reader sees an import at module level and one inside a function."""
    path = tmp_path / "x.py"
    path.write_text(f"from {PREFIX}switch import cutover\n"
                    f"def f():\n    from {PREFIX}fit.model_fit import fit\n")
    assert sorted(imported_packages(path)) == [("fit", True), ("switch", False)]
