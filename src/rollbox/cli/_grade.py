"""``rollbox grade``: grade a candidate workspace against a task and print the verdict."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.sandbox import IsolationUnavailable
from rollbox.tasks import TaskFormatError, load_task

from ._args import whole
from ._terminal import printable

_EPILOG = """\
The verdict: task_id, status, reward, tests [{id, outcome}], passed, total, flags, duration_s, error.
statuses: passed, failed, error, timeout, memory_limit, tampered, infra_error (reward null: mask it).

exit status: 0 whenever grading ran (read "status"), 1 on infra_error, 2 when the task or the arguments are
invalid, 130 when interrupted, 141 when the reader of the output went away.

examples:
  rollbox grade tasks/add --solution runs/42/workspace --json
  rollbox grade tasks/add --solution runs/42/workspace --repeat 5      # flakiness check
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``grade`` subcommand."""
    p = commands.add_parser(
        "grade",
        help="grade a candidate workspace against a task",
        description="Grade the workspace SOLUTION against the task in TASK_DIR, in a fresh sandbox built from the "
        "pristine task plus the candidate's allowed changes.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("task", type=Path, metavar="TASK_DIR", help="a task directory (task.toml, workspace/, tests/)")
    p.add_argument("--solution", type=Path, required=True, metavar="WORKSPACE_DIR", help="the candidate's workspace")
    p.add_argument("--json", action="store_true", help="print one JSON verdict")
    p.add_argument(
        "--repeat", type=whole(1, 1000), default=1, metavar="N", help="grade N times and report any disagreement"
    )
    p.set_defaults(run=_run)


async def _grade_repeatedly(args: argparse.Namespace) -> list[Verdict]:
    task = load_task(args.task)
    return [await grade(task, args.solution) for _ in range(args.repeat)]


def _run(args: argparse.Namespace) -> int:
    if not args.solution.is_dir():
        print(printable(f"rollbox grade: --solution {args.solution}: not a directory"), file=sys.stderr)
        return 2
    try:
        verdicts = asyncio.run(_grade_repeatedly(args))
    except TaskFormatError as exc:
        print(printable(f"rollbox grade: invalid task: {exc}"), file=sys.stderr)
        return 2
    except IsolationUnavailable as exc:
        print(printable(f"rollbox grade: cannot grade here: {exc}"), file=sys.stderr)
        return 1
    first = verdicts[0]
    output = first.to_json()
    if args.repeat > 1:
        outcomes = {(v.status, v.reward, v.tests) for v in verdicts}
        output["repeat"] = {
            "runs": len(verdicts),
            "flaky": len(outcomes) > 1,
            "statuses": [v.status.value for v in verdicts],
            "rewards": [v.reward for v in verdicts],
        }
    if args.json:
        print(json.dumps(output))
    else:
        lines = [
            f"{first.task_id}: {first.status.value}, reward {first.reward}, {first.passed}/{first.total} tests passed"
            f" in {first.duration_s:.2f} s"
        ]
        lines += [f"  {test.outcome.value:8s} {test.id}" for test in first.tests if test.outcome.value != "passed"]
        lines += [f"  flag {flag['code']}: {flag['path']} {flag['detail']}" for flag in first.flags]
        if first.error:
            lines.append(f"  error: {first.error}")
        if args.repeat > 1:
            lines.append(f"  repeat: {output['repeat']}")
        print(printable("\n".join(lines)))
    return 1 if first.status is VerdictStatus.INFRA_ERROR else 0
