"""``rollbox doctor``: which isolation features really work here, and the fix for each that does not."""

from __future__ import annotations

import argparse
import json

from rollbox.sandbox._doctor import diagnose


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``doctor`` subcommand."""
    p = commands.add_parser(
        "doctor",
        help="check which isolation features work on this machine",
        description="Check root, namespaces, cgroups, the syscall filter and the rest, for real, from "
        "inside a sandbox where it matters. Exits 1 when anything is missing.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    checks = diagnose()
    ok = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ok": ok, "checks": [c.to_json() for c in checks]}, indent=2))
    else:
        for c in checks:
            print(f"  [{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}")
            if c.fix:
                print(f"        fix: {c.fix}")
        print("rollbox can isolate untrusted code here." if ok else "rollbox cannot fully isolate code here.")
    return 0 if ok else 1
