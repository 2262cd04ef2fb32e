"""Prints the commands of a README's first ``sh`` block under a ``## <section>`` heading, one
a line, so that `.ci/run` runs what the README says, verbatim, instead of a copy of it.

    python3 .ci/readme_commands.py README.md "Quick start" 2

The third argument, when given, is how many commands the block must hold: any other count
fails (exit 1), as does a missing section or block. Standard library only: it runs before
any virtualenv exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def section_commands(text: str, section: str) -> list[str]:
    """The non-blank lines of the first ```sh block in the ``## section`` part of ``text``."""
    heading = re.search(rf"^## {re.escape(section)}\s*$", text, flags=re.MULTILINE)
    if heading is None:
        raise ValueError(f"no '## {section}' heading")
    rest = text[heading.end():]
    following = re.search(r"^## ", rest, flags=re.MULTILINE)
    body = rest[: following.start()] if following else rest
    block = re.search(r"^```sh\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)
    if block is None:
        raise ValueError(f"no ```sh block under '## {section}'")
    return [line for line in block.group(1).splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    """Prints the commands; exit 1 (with why on stderr) when they cannot be read."""
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    path, section = Path(argv[1]), argv[2]
    try:
        commands = section_commands(path.read_text(encoding="utf-8"), section)
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1
    if len(argv) == 4 and len(commands) != int(argv[3]):
        print(f"{path}: '## {section}' has {len(commands)} commands, not {argv[3]}",
              file=sys.stderr)
        return 1
    for command in commands:
        print(command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
