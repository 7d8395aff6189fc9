"""``rollbox tour``: a short tour — the machine's isolation, commands and contained attacks, and a judge that
reward hacks do not fool."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rollbox.judge import grade
from rollbox.sandbox import Limits, Sandbox, temporary_directory
from rollbox.sandbox._doctor import diagnose
from rollbox.tasks import load_task

from ._terminal import printable

_TASK = {
    "task.toml": '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "add"\n'
    '[limits]\ntimeout = "3s"\n',
    "workspace/solution.py": "def add(a, b):\n    raise NotImplementedError\n",
    "tests/cases.jsonl": '{"args": [2, 3], "kwargs": {}, "expected": 5}\n'
    '{"args": [-1, 1], "kwargs": {}, "expected": 0}\n',
}
_CANDIDATES = {
    "a correct solution": "def add(a, b):\n    return a + b\n",
    "a wrong solution": "def add(a, b):\n    return a - b\n",
    "hack: an object equal to everything": "class E:\n    def __eq__(self, o):\n        return True\n"
    "def add(a, b):\n    return E()\n",
    "hack: exit 0 before any check": "import os\nos._exit(0)\n",
    "hack: print a fake result": 'print(\'{"case": 0, "value": 5}\')\ndef add(a, b):\n    return None\n',
}


async def _judge() -> None:
    with temporary_directory("rollbox-demo-") as scratch:
        root = Path(scratch)
        for name, text in _TASK.items():
            (root / "task" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "task" / name).write_text(text)
        task = load_task(root / "task")
        for title, code in _CANDIDATES.items():
            (root / title).mkdir()
            (root / title / "solution.py").write_text(code)
            verdict = await grade(task, root / title)
            print(printable(f"  {title:40s} {verdict.status.value:8s} reward {verdict.reward}"))


_RUNS: list[tuple[str, list[str]]] = [
    ("an ordinary program", ["python3", "-c", "import sys; print('hello from', sys.version.split()[0])"]),
    (
        "threads and subprocesses",
        [
            "python3",
            "-c",
            "import subprocess, threading; t = threading.Thread(target=print, args=('thread ok',));"
            " t.start(); t.join();"
            " print(subprocess.run(['sh', '-c', 'echo child ok'], capture_output=True, text=True).stdout.strip())",
        ],
    ),
    ("attack: fork bomb", ["sh", "-c", "b() { b | b & }; b; sleep 5"]),
    ("attack: memory bomb", ["python3", "-c", "x = []\nwhile True: x.append(bytearray(1 << 24))"]),
    ("attack: read the host's /root and /etc/shadow", ["sh", "-c", "ls /root; cat /etc/shadow"]),
    (
        "attack: reach the network",
        ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 22), timeout=1)"],
    ),
    ("attack: leave a daemon behind", ["sh", "-c", "(sleep 1000 &) ; echo daemon started"]),
    ("after the daemon: what is still running", ["sh", "-c", "ls /proc | grep -c '^[0-9]'"]),
    ("attack: busy loop", ["python3", "-c", "while True: pass"]),
]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``tour`` subcommand."""
    p = commands.add_parser("tour", help="a short tour: isolation checks, contained attacks, a judge hacks do not fool")
    p.set_defaults(run=_run)


async def _tour() -> None:
    limits = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=128 * 2**20, pids=32)
    async with Sandbox(limits=limits) as sb:
        for title, argv in _RUNS:
            r = await sb.exec(argv)
            lines = (r.stdout_text + r.stderr_text).strip().splitlines()
            output = " | ".join(lines[:2] if len(lines) <= 2 else [lines[0], lines[-1]])[:110]
            print(
                f"\n$ {' '.join(argv)[:90]}\n  {title}: {r.status.value}"
                f" (exit {r.exit_code}, signal {r.signal}) in {r.wall_s:.2f} s; {output or '(no output)'}"
            )


def _run(args: argparse.Namespace) -> int:
    print("rollbox doctor:")
    checks = diagnose()
    for c in checks:
        print(printable(f"  [{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}"))
    if not all(c.ok for c in checks):
        print("Fix the missing features first (rollbox doctor says how).")
        return 1
    print("\nOne sandbox, several commands (limits: 5 s wall, 2 s CPU, 128 MiB, 32 pids, no network):")
    asyncio.run(_tour())
    print("\nThe judge, grading candidates for `add(a, b)` (inputs go in, outputs are compared outside):")
    asyncio.run(_judge())
    return 0
