"""Argument parsing and dispatch for the ``rollbox`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _demo, _doctor, _eval, _exec, _grade

_DESCRIPTION = """\
rollbox runs untrusted code in kernel-isolated sandboxes and turns what really happened into results you
can train on.

examples:
  rollbox doctor                                   what isolation works on this machine
  rollbox exec -- python3 -c 'print(42)'           run one command in a fresh sandbox
  rollbox exec --json --memory 256M --timeout 5 --file solve.py:solve.py -- python3 solve.py
  rollbox demo                                     a tour, including a contained attack
"""


def build_parser() -> argparse.ArgumentParser:
    """The full parser (exposed for tests and documentation)."""
    parser = argparse.ArgumentParser(
        prog="rollbox", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (_exec, _grade, _eval, _doctor, _demo):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
