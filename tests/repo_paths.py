"""Paths the tests share; tests/ is on sys.path through tests/conftest.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
