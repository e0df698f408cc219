# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Print the Debian archive URL this machine's apt uses (deb822 or one-line)."""

import re
import sys
from pathlib import Path

_D = Path("/etc/apt/sources.list.d")
SOURCES = [*sorted(_D.glob("*.sources")), Path("/etc/apt/sources.list"), *sorted(_D.glob("*.list"))]


def main() -> int:
    for path in SOURCES:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^URIs:\s*(\S+)", text, re.MULTILINE):
            if "security" not in match.group(1):
                print(match.group(1).rstrip("/"))
                return 0
        for match in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", text, re.MULTILINE):
            if "security" not in match.group(1):
                print(match.group(1).rstrip("/"))
                return 0
    print("no Debian mirror found in apt sources", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
