"""Grading function tasks for real: legitimate solutions pass, wrong ones fail, and every known hack is caught."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CountingSandboxes, start_without_fds
from rollbox.judge import Outcome, Verdict, VerdictStatus, grade, grade_batch
from rollbox.sandbox import FreshSandboxes, Limits, Sandbox, SandboxConfig, WarmSandboxes
from rollbox.tasks import Task, TaskFormatError, load_task
from rollbox.tasks._cases import FunctionCase, load_function_cases

STUB = "def mean_pair(xs):\n    raise NotImplementedError\n"
CORRECT = textwrap.dedent("""
    def mean_pair(xs):
        return (min(xs), sum(xs) / len(xs))
""")
CASES = [
    {"args": [[1, 2, 3]], "kwargs": {}, "expected": {"$tuple": [1, 2.0]}},
    {"args": [[4]], "kwargs": {}, "expected": {"$tuple": [4, 4.0]}},
    {"args": [], "kwargs": {"xs": [0, 10]}, "expected": {"$tuple": [0, 5.0]}},
]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("mean-pair")
    (root / "workspace").mkdir()
    (root / "workspace" / "solution.py").write_text(STUB)
    (root / "workspace" / "test_visible.py").write_text("def test_placeholder():\n    assert True\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    (root / "task.toml").write_text(
        textwrap.dedent("""
        [grading]
        runner = "function"
        module = "solution.py"
        entry_point = "mean_pair"
        [limits]
        timeout = "3s"
        cpu_time = "2s"
        memory = "128M"
    """)
    )
    return load_task(root)


def grade_files(task: Task, tmp_path: Path, files: dict[str, str]) -> Verdict:
    workspace = tmp_path / "candidate"
    workspace.mkdir()
    for name, text in {"solution.py": STUB, **files}.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return asyncio.run(grade(task, workspace))


def test_correct_solution_passes(task: Task, tmp_path: Path) -> None:
    verdict = grade_files(task, tmp_path, {"solution.py": CORRECT})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0
    assert (verdict.passed, verdict.total) == (3, 3)
    data = verdict.to_json()
    assert list(data)[:8] == ["task_id", "status", "reward", "tests", "passed", "total", "flags", "duration_s"]
    json.dumps(data)


def test_grading_scratch_goes_where_configured_and_its_failure_is_rollboxs(
    task: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch, first, second = tmp_path / "scratch", tmp_path / "a", tmp_path / "b"
    for directory in (scratch, first, second):
        directory.mkdir()
    monkeypatch.setenv("ROLLBOX_SCRATCH_DIR", str(scratch))
    assert grade_files(task, first, {"solution.py": CORRECT}).status is VerdictStatus.PASSED
    assert list(scratch.iterdir()) == []  # nothing left behind; that it is used at all shows below
    scratch.rmdir()
    verdict = grade_files(task, second, {"solution.py": CORRECT})
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert str(scratch) in (verdict.error or ""), verdict


def test_the_untouched_stub_fails(task: Task, tmp_path: Path) -> None:
    verdict = grade_files(task, tmp_path, {})
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0
    assert {t.outcome for t in verdict.tests} == {Outcome.ERROR}


def test_wrong_types_fail(task: Task, tmp_path: Path) -> None:
    as_list = "def mean_pair(xs):\n    return [min(xs), sum(xs) / len(xs)]\n"
    assert grade_files(task, tmp_path, {"solution.py": as_list}).status is VerdictStatus.FAILED


LEGITIMATE = {
    "prints": CORRECT + "print('debugging output')\n",
    "helper module": "from helpers import lo\ndef mean_pair(xs):\n    return (lo(xs), sum(xs) / len(xs))\n",
    "threads": CORRECT.replace(
        "return", "import threading; t = threading.Thread(target=print); t.start(); t.join()\n    return"
    ),
    "subprocess": CORRECT.replace("return", "import subprocess; subprocess.run(['true'], check=True)\n    return"),
    # A bug, not tampering: the child returns into the driver too (its reports once repeated the parent's).
    "a fork that returns twice": CORRECT.replace("return", "import os; os.fork()\n    return"),
}


@pytest.mark.parametrize("name", LEGITIMATE)
def test_legitimate_solutions_pass(task: Task, tmp_path: Path, name: str) -> None:
    files = {"solution.py": LEGITIMATE[name], "helpers.py": "def lo(xs):\n    return min(xs)\n"}
    verdict = grade_files(task, tmp_path, files)
    assert verdict.status is VerdictStatus.PASSED, verdict


def test_files_that_only_matter_to_test_frameworks_are_the_candidates_own_here(task: Task, tmp_path: Path) -> None:
    # No test framework runs over a function task's tree: its own test file and a module named like the standard
    # library's are just part of its program.
    files = {
        "solution.py": "from code import lo\n" + CORRECT,
        "code.py": "lo = min\n",
        "test_mine.py": "assert False\n",
    }
    verdict = grade_files(task, tmp_path, files)
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert not [f for f in verdict.flags if f["code"].endswith("_dropped")]


#: Writes a line to every fd that might be the driver's result channel (``str.format`` it with the line's bytes).
TO_CHANNEL = (
    "import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, {!r} + b'\\n')\n"
    "    except OSError:\n        pass\n"
)
RETURNS_NONE, EXITS = "def mean_pair(xs):\n    return None\n", "os._exit(0)\n"
DEEP_500 = b"[" * 500 + b"]" * 500  # parsed, but deeper than a value may be

HACKS = {
    "always-equal object": "class E:\n    def __eq__(self, o): return True\ndef mean_pair(xs):\n    return E()\n",
    "always-equal int subclass": "class E(int):\n    def __eq__(self, o): return True\n"
    "def mean_pair(xs):\n    return E(1)\n",
    "always-equal tuple subclass": "class T(tuple):\n    def __eq__(self, o): return True\n"
    "def mean_pair(xs):\n    return T((1, 2.0))\n",
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n" + CORRECT,
    "os._exit(0) at import": "import os\nos._exit(0)\n",
    "sys.exit(0) at call": "import sys\ndef mean_pair(xs):\n    sys.exit(0)\n",
    "os._exit(0) at call": "import os\ndef mean_pair(xs):\n    os._exit(0)\n",
    "kill itself": "import os, signal\ndef mean_pair(xs):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "kill its parent": "import os, signal\ndef mean_pair(xs):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "print fake results": 'import sys\nprint(\'{"case": 0, "value": [1, 2.0]}\')\n'
    "sys.stdout.write('3 passed\\n')\ndef mean_pair(xs):\n    return None\n",
    "write to the result channel": TO_CHANNEL.format(b'{"case": 0, "value": {"$tuple": [1, 2.0]}}') + RETURNS_NONE,
    "write a report nested too deeply to parse": TO_CHANNEL.format(b"[" * 5000 + b"]" * 5000) + CORRECT,
    "report a malformed value and exit": TO_CHANNEL.format(b'{"case": 0, "value": {"$complex": []}}') + EXITS,
    "report an unhashable set member and exit": TO_CHANNEL.format(b'{"case": 0, "value": {"$set": [[1]]}}') + EXITS,
    "report a value nested too deeply and exit": TO_CHANNEL.format(b'{"case": 0, "value": %s}' % DEEP_500) + EXITS,
    "atexit forgery": 'import atexit, os\natexit.register(lambda: os.write(1, b\'{"case": 2, "value": 0}\\n\'))\n'
    "def mean_pair(xs):\n    raise ValueError\n",
    "infinite loop": "def mean_pair(xs):\n    while True:\n        pass\n",
    "memory bomb": "def mean_pair(xs):\n    x = []\n    while True:\n        x.append(bytearray(1 << 24))\n",
}


@pytest.mark.parametrize("name", HACKS)
def test_hacks_never_pass(task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_files(task, tmp_path, {"solution.py": HACKS[name]})
    assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), verdict
    assert verdict.reward is not None and verdict.reward <= 0, verdict


def test_the_same_candidate_gets_the_same_verdict(task: Task, tmp_path: Path) -> None:
    # Correct only where str hashes are those of PYTHONHASHSEED=0 (siphash13, Python 3.11 on), which the judge
    # fixes: under any other seed it fails, every time but one in 2**64.
    code = CORRECT.replace("    return", "    assert hash('x') == -3368204716105132637\n    return")
    workspace = tmp_path / "c"
    workspace.mkdir()
    (workspace / "solution.py").write_text(code)

    async def twice() -> list[Verdict]:
        return [await grade(task, workspace) for _ in range(2)]

    first, second = asyncio.run(twice())
    assert first.status is VerdictStatus.PASSED, first
    assert (first.status, first.tests) == (second.status, second.tests)


def test_a_huge_file_is_the_candidates_failure_not_infra(task: Task, tmp_path: Path) -> None:
    verdict = grade_files(task, tmp_path, {"solution.py": CORRECT, "blob.txt": "x" * (17 << 20)})
    assert verdict.status is VerdictStatus.ERROR and verdict.reward == 0.0
    assert [f["code"] for f in verdict.flags] == ["workspace_refused"]


def test_a_path_too_long_for_the_grading_tree_is_the_candidates_failure(task: Task) -> None:
    # 4,075 bytes: it fits under this short root, but not under the judge's scratch directory.
    with tempfile.TemporaryDirectory(dir="/tmp") as root:
        workspace = Path(root)
        shutil.copytree(task.workspace, workspace, dirs_exist_ok=True)
        (workspace / "solution.py").write_text(CORRECT)
        deep = workspace.joinpath(*["d" * 200] * 20, "f" * 52 + ".py")
        deep.parent.mkdir(parents=True)
        deep.write_text("X = 1\n")
        verdict = asyncio.run(grade(task, workspace))
    assert verdict.status is VerdictStatus.ERROR and verdict.reward == 0.0, verdict
    assert [f["code"] for f in verdict.flags] == ["workspace_refused"], verdict
    assert "too long for a path" in verdict.flags[0]["detail"]


def small_disk_task(task: Task, root: Path) -> Task:
    """The same task with a 4 MiB grading disk (1024 inodes)."""
    for item in ("workspace", "tests"):
        (root / item).mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text(STUB)
    (root / "tests" / "cases.jsonl").write_text((task.tests / "cases.jsonl").read_text())
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "mean_pair"\n[limits]\ndisk = "4M"\n'
    )
    return load_task(root)


def test_a_tree_beyond_the_disk_limit_is_the_candidates_failure(task: Task, tmp_path: Path) -> None:
    files = {"solution.py": CORRECT, **{f"data{i}.bin": "y" * (2 << 20) for i in range(3)}}
    verdict = grade_files(small_disk_task(task, tmp_path / "small"), tmp_path, files)
    assert verdict.status is VerdictStatus.ERROR and verdict.reward == 0.0
    assert [f["code"] for f in verdict.flags] == ["workspace_refused"]
    assert "disk limit" in verdict.flags[0]["detail"]


def test_a_tree_within_the_byte_limit_that_still_fills_the_disk_is_the_candidates_failure(
    task: Task, tmp_path: Path
) -> None:
    # Tiny files: few bytes, but more inodes than the 4 MiB grading sandbox has.
    files = {"solution.py": CORRECT, **{f"many/f{i}": "z" for i in range(2000)}}
    verdict = grade_files(small_disk_task(task, tmp_path / "small"), tmp_path, files)
    assert verdict.status is VerdictStatus.ERROR and verdict.reward == 0.0, verdict
    assert [f["code"] for f in verdict.flags] == ["workspace_too_large"]


def test_a_full_disk_under_the_hosts_scratch_is_infra_error_never_the_candidates(
    task: Task, tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grading tree is staged in the host's scratch (outside any sandbox's limit): that disk full is the
    # machine's failure, whatever the candidate's tree, which fits the task's limits.
    monkeypatch.setenv("ROLLBOX_SCRATCH_DIR", str(small_disk))
    (small_disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - (64 << 10)))
    verdict = grade_files(task, tmp_path, {"solution.py": CORRECT, "data.bin": "y" * (1 << 20)})
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert "No space left on device" in str(verdict.error) and not verdict.flags, verdict


@pytest.mark.filterwarnings("ignore:.*process.*:UserWarning")
def test_the_hosts_disk_full_under_a_sandbox_with_no_limit_of_its_own_is_infra_error(
    task: Task, tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process sandbox has no disk limit of its own: its /workspace is a directory on the host's disk, and a write
    # of the tree failing there for want of room is the host's full disk (the tree fits the task's limits), never
    # the candidate's tree too large.
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk))
    (small_disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - (256 << 10)))
    workspace = tmp_path / "candidate"
    workspace.mkdir()
    (workspace / "solution.py").write_text(CORRECT)
    (workspace / "data.bin").write_bytes(b"y" * (1 << 20))
    verdict = asyncio.run(grade(task, workspace, sandboxes=FreshSandboxes(backend="process")))
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert "No space left on device" in str(verdict.error) and not verdict.flags, verdict


def test_links_of_the_task_reach_the_grading_sandbox(task: Task, tmp_path: Path) -> None:
    root = tmp_path / "linked"
    (root / "workspace" / "impl").mkdir(parents=True)
    (root / "workspace" / "impl" / "real.py").write_text(STUB)
    (root / "workspace" / "solution.py").symlink_to("impl/real.py")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text((task.tests / "cases.jsonl").read_text())
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "mean_pair"\n'
    )
    candidate = tmp_path / "candidate"
    shutil.copytree(root / "workspace", candidate, symlinks=True)
    (candidate / "impl" / "real.py").write_text(CORRECT)
    verdict = asyncio.run(grade(load_task(root), candidate))
    assert verdict.status is VerdictStatus.PASSED, verdict


LEAVER = textwrap.dedent("""
    import os, subprocess
    for path in ("/tmp/.rollbox-judge/_values.pyc", "/tmp/.rollbox-judge/driver.pyc", "/workspace/sitecustomize.py",
                 "/tmp/sitecustomize.py", "/dev/shm/planted"):
        try:
            with open(path, "w") as f:
                f.write("import os\\nos._exit(0)\\n")
        except OSError:
            pass
    subprocess.Popen(["sh", "-c", "sleep 2; for fd in /proc/[0-9]*/fd/3; do echo forged > $fd; done"],
                     start_new_session=True)
    def mean_pair(xs):
        return None
""")


def test_in_warm_sandboxes_one_candidate_cannot_touch_the_next(task: Task, tmp_path: Path) -> None:
    from rollbox.sandbox import WarmSandboxes

    async def main() -> list[Verdict]:
        verdicts = []
        async with WarmSandboxes(size=1) as sandboxes:
            for name, code in (("leaver", LEAVER), ("honest", CORRECT), ("wrong", STUB)):
                workspace = tmp_path / name
                workspace.mkdir()
                (workspace / "solution.py").write_text(code)
                verdicts.append(await grade(task, workspace, sandboxes=sandboxes))
        return verdicts

    leaver, honest, wrong = asyncio.run(main())
    assert leaver.status is VerdictStatus.FAILED
    assert honest.status is VerdictStatus.PASSED and honest.reward == 1.0, honest
    assert wrong.status is VerdictStatus.FAILED and wrong.reward == 0.0, wrong


def test_drivers_fork_a_zygote_only_where_one_runs_or_is_starting() -> None:
    """A fresh sandbox runs the driver in one plain interpreter (starting a zygote for a single command costs
    more); a warm-Python sandbox forks its zygote (warm pools make them by default), and so does one whose zygote
    an earlier command started."""
    from rollbox.judge.runners._drivers import driver_command
    from rollbox.sandbox import WarmSandboxes

    async def main() -> list[tuple[list[str], bool]]:
        limits = Limits(timeout_s=5)
        async with (
            FreshSandboxes().sandbox(SandboxConfig(limits=limits)) as cold,
            WarmSandboxes(size=1) as pools,
            pools.sandbox(SandboxConfig(limits=limits)) as pooled,
        ):
            commands = [driver_command(cold, "/tmp/d.pyc", "x"), driver_command(pooled, "/tmp/d.pyc", "x")]
            await cold.write_file("t.py", "pass\n")
            assert (await cold.exec(["python3", "t.py"], warm_python=True)).ok
            return [*commands, driver_command(cold, "/tmp/d.pyc", "x")]

    assert asyncio.run(main()) == [
        (["python3", "-s", "/tmp/d.pyc", "x"], False),
        (["python3", "/tmp/d.pyc", "x"], True),
        (["python3", "/tmp/d.pyc", "x"], True),
    ]


def test_a_candidate_given_as_its_files_is_graded_as_its_workspace(task: Task, tmp_path: Path) -> None:
    """``grade(task, {"solution.py": code})``: the task's workspace with those files over it, with the same verdicts
    and flags as that workspace on disk; files that describe no workspace are the candidate's failure."""
    hacker = "import sys\nsys.exit(0)\n"

    async def main() -> list[Verdict]:
        verdicts = [await grade(task, {"solution.py": code}) for code in (CORRECT, STUB, hacker.encode())]
        workspace = tmp_path / "hacker"
        shutil.copytree(task.workspace, workspace)
        (workspace / "solution.py").write_text(hacker)
        verdicts.append(await grade(task, workspace))
        verdicts.append(await grade(task, {"../solution.py": CORRECT}))
        return verdicts

    correct, stub, hacker_files, hacker_directory, unclean = asyncio.run(main())
    assert correct.status is VerdictStatus.PASSED and correct.reward == 1.0, correct
    assert stub.status is VerdictStatus.FAILED and stub.reward == 0.0, stub
    assert (hacker_files.status, hacker_files.flags) == (hacker_directory.status, hacker_directory.flags)
    assert any(f["code"] == "exit_at_import" for f in hacker_files.flags), hacker_files
    assert unclean.status is VerdictStatus.ERROR and unclean.flags[0]["code"] == "workspace_refused", unclean


def test_each_comparison_means_what_its_assertion_meant() -> None:
    """``==`` is Python's on plain values, ``is`` the very singleton, ``close`` a tolerance no other value (a
    string, a list, NaN, an int too large for a float) slips through."""

    def case(expected: object, **how: Any) -> FunctionCase:
        return FunctionCase([], {}, expected, **how)

    assert case(1).matches(1.0) and case(1).matches(True) and not case(1).matches("1")
    assert case(True, compare="is").matches(True) and not case(True, compare="is").matches(1)
    assert case(None, compare="is").matches(None) and not case(None, compare="is").matches(0)
    close = case(0.5, compare="close", tolerance=1e-6)
    assert close.matches(0.5000001) and close.matches(complex(0.5, 0)) and not close.matches(0.51)
    assert not any(close.matches(v) for v in ("0.5", [0.5], float("nan"), float("inf"), 10**400, None))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"expected": 1, "apply": "len"}, "apply must be one of bool, tuple, not 'len'"),
        ({"expected": 1, "compare": "~="}, "compare must be one of ==, is, close, not '~='"),
        ({"expected": 1, "compare": "is"}, 'compare "is" needs expected null, true or false'),
        ({"expected": 1.0, "compare": "close"}, 'tolerance goes with compare "close"'),
        ({"expected": 1.0, "tolerance": 0.1}, 'tolerance goes with compare "close"'),
        ({"expected": 1.0, "compare": "close", "tolerance": -1}, "tolerance must be a positive number, not -1"),
        ({"expected": 1.0, "compare": "close", "tolerance": True}, "tolerance must be a positive number"),
        ({"expected": [1.0], "compare": "close", "tolerance": 0.1}, 'compare "close" needs a number expected'),
        ({"expected": 1, "expect": 2}, "unknown key(s) expect: a case has args, kwargs, expected"),
        ({"args": 1, "expected": 1}, "expected an object with args (a list)"),
    ],
)
def test_a_malformed_case_names_its_line_and_what_is_wrong(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"args": [1], "kwargs": {}, "expected": 1}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(TaskFormatError, match=re.escape(f"line 2: {message}")):
        load_function_cases(path)


def test_only_a_newline_ends_a_case(tmp_path: Path) -> None:
    # A \r between a row's tokens is JSON whitespace and U+2028 may stand raw in its strings: both split a row
    # (reading in text mode, or splitlines) into two lines that are not JSON.
    path = tmp_path / "cases.jsonl"
    path.write_bytes('{"args": ["a\u2028b"],\r "kwargs": {}, "expected": 1}\n{"args": [], "expected": 2}\n'.encode())
    cases = load_function_cases(path)
    assert [(c.args, c.expected) for c in cases] == [(["a\u2028b"], 1), ([], 2)]


def test_a_cases_file_that_is_not_utf8_is_the_tasks_error(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b'{"args": [], "kwargs": {}, "expected": "\xff"}\n')
    with pytest.raises(TaskFormatError, match="cannot read the cases"):
        load_function_cases(path)


async def _collect(items: list[tuple[Task, Any]], **kw: Any) -> list[tuple[int, Verdict]]:
    return [item async for item in grade_batch(items, **kw)]


@pytest.mark.native_speed
def test_a_batch_gives_every_item_one_verdict_as_each_is_done(task: Task) -> None:
    slow = "import time\ntime.sleep(0.5)\n" + CORRECT
    items: list[tuple[Task, Any]] = [
        (task, {"solution.py": slow}),
        (task, {"solution.py": CORRECT}),
        (task, {"solution.py": STUB}),
        (task, {"solution.py": "import sys\nsys.exit(0)\n"}),
        (task, {"../solution.py": CORRECT}),
    ]
    results = asyncio.run(_collect(items, workers=2))
    assert sorted(i for i, _ in results) == list(range(5))
    assert results[-1][0] == 0, "the slow grading should end last"
    verdicts = dict(results)
    assert [verdicts[i].status for i in range(5)] == [
        VerdictStatus.PASSED,
        VerdictStatus.PASSED,
        VerdictStatus.FAILED,
        VerdictStatus.ERROR,
        VerdictStatus.ERROR,
    ], verdicts
    with pytest.raises(ValueError, match="workers"):
        asyncio.run(_collect(items, workers=0))
    with pytest.raises(ValueError, match="retries"):
        asyncio.run(_collect(items, retries=-1))


class _Flaky:
    """Warm sandboxes whose first ``failures`` borrowings fail as on a host out of file descriptors, to see what
    the batch retries."""

    def __init__(self, inner: WarmSandboxes, failures: int) -> None:
        self.inner, self.failures, self.borrowed = inner, failures, 0

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        self.borrowed += 1
        if self.failures:
            self.failures -= 1
            await start_without_fds(config.limits, config.network)
        async with self.inner.sandbox(config) as sb:
            yield sb

    def sandboxes(
        self, count: int, config: SandboxConfig, **kw: Any
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        return self.inner.sandboxes(count, config, **kw)


def test_a_batch_grades_again_what_rollbox_failed_and_never_what_the_candidate_did(task: Task) -> None:
    async def main() -> list[tuple[Verdict, int]]:
        outcomes = []
        async with WarmSandboxes(size=2) as warm:
            for solution, failures, retries in ((CORRECT, 1, 1), (CORRECT, 2, 1), (STUB, 0, 3)):
                flaky = _Flaky(warm, failures)
                items: list[tuple[Task, Any]] = [(task, {"solution.py": solution})]
                ((_, verdict),) = await _collect(items, sandboxes=flaky, retries=retries)
                outcomes.append((verdict, flaky.borrowed))
        return outcomes

    (retried, borrowed), (gave_up, tries), (candidates, once) = asyncio.run(main())
    assert (retried.status, borrowed) == (VerdictStatus.PASSED, 2), retried
    assert (gave_up.status, gave_up.reward, tries) == (VerdictStatus.INFRA_ERROR, None, 2), gave_up
    assert "Too many open files" in (gave_up.error or ""), gave_up
    assert (candidates.status, once) == (VerdictStatus.FAILED, 1), candidates


def test_closing_a_batch_early_cancels_the_gradings_left_and_leaves_nothing_running(task: Task) -> None:
    slow = "import time\ntime.sleep(0.5)\n" + CORRECT  # still being graded when the first verdict comes
    items: list[tuple[Task, Any]] = [(task, {"solution.py": CORRECT}), *[(task, {"solution.py": slow})] * 5]

    async def main() -> tuple[Verdict, int, int, list[asyncio.Task[Any]]]:
        async with WarmSandboxes(size=2) as warm:
            counting = CountingSandboxes(warm)
            async with contextlib.aclosing(grade_batch(items, workers=2, sandboxes=counting)) as verdicts:
                _index, first = await anext(verdicts)
            out_when_closed = counting.out  # nothing awaited since: the batch itself ended its gradings
        async with contextlib.aclosing(grade_batch(items, workers=2)) as verdicts:  # with a pool of its own
            await anext(verdicts)
        return first, counting.out, out_when_closed, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    first, out, out_when_closed, left = asyncio.run(main())
    assert first.status is VerdictStatus.PASSED and (out_when_closed, out) == (0, 0) and left == [], left


def test_a_batch_grades_identical_items_once_unless_asked(task: Task, tmp_path: Path) -> None:
    """Same task, same files: one grading, one verdict for every copy (text and bytes alike); a workspace
    directory is read when graded, so it is never shared."""
    workspace = tmp_path / "workspace"
    shutil.copytree(task.workspace, workspace)
    (workspace / "solution.py").write_text(CORRECT)
    items: list[tuple[Task, Any]] = [
        (task, {"solution.py": CORRECT}),
        (task, {"solution.py": STUB}),
        (task, {"solution.py": CORRECT.encode()}),
        (task, workspace),
        (task, workspace),
    ]

    async def main(dedupe: bool) -> tuple[dict[int, Verdict], int]:
        async with WarmSandboxes(size=2) as warm:
            counting = CountingSandboxes(warm)
            verdicts = dict(await _collect(items, workers=2, sandboxes=counting, dedupe=dedupe))
        return verdicts, counting.borrowed

    (shared, gradings), (alone, all_gradings) = asyncio.run(main(True)), asyncio.run(main(False))
    passed, failed = VerdictStatus.PASSED, VerdictStatus.FAILED
    assert [shared[i].status for i in range(5)] == [passed, failed, passed, passed, passed]
    assert shared[0] is shared[2] and shared[3] is not shared[4] and gradings == 4
    assert alone[0] is not alone[2] and all_gradings == 5


PROBED = textwrap.dedent("""
    import datetime
    import sys

    def probed(what):
        if what == "hash":
            return hash("rollbox")
        if what == "year":
            return datetime.date.today().year
        return "heapq" in sys.modules  # the zygote imported it; a plain interpreter running the driver does not
""")


def test_a_probe_forks_a_zygote_started_under_its_hash_seed_and_clock(tmp_path: Path) -> None:
    """Under a probe's hash seed and moved clock, a warm pool's grading forks a zygote that started under them
    (the candidate sees the seed and the clock); a plain interpreter sees them too; a zygote started under other
    variables is never forked for a grading."""
    from rollbox.curate._clock import ClockUnavailable, clock_env
    from rollbox.judge.runners._drivers import driver_command
    from rollbox.judge.runners._probe import probe

    try:
        env = {"PYTHONHASHSEED": "7", **clock_env("+3750d")}
    except ClockUnavailable:
        pytest.skip("libfaketime is not installed")

    def hashed(seed: str) -> int:
        code = "print(hash('rollbox'))"
        run = subprocess.run(
            [sys.executable, "-c", code], env={"PYTHONHASHSEED": seed}, capture_output=True, check=True
        )
        return int(run.stdout)

    assert hashed("7") != hashed("0")  # the judge's own seed would fail the case
    expected = [hashed("7"), (datetime.date.today() + datetime.timedelta(days=3750)).year, True]
    root = tmp_path / "task"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text("def probed(what):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    cases = [
        {"args": [what], "kwargs": {}, "expected": value}
        for what, value in zip(("hash", "year", "forked"), expected, strict=True)
    ]
    (root / "tests" / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "probed"\n[limits]\ntimeout = "5s"\n'
    )
    probed_task = load_task(root)

    async def main() -> tuple[Verdict, Verdict, tuple[list[str], bool]]:
        async with WarmSandboxes(size=1) as warm:
            with probe(env):
                forked = await grade(probed_task, {"solution.py": PROBED.encode()}, sandboxes=warm)
                plain = await grade(probed_task, {"solution.py": PROBED.encode()})
            config = SandboxConfig(limits=Limits(timeout_s=5), interpreter_env=env)
            async with warm.sandbox(config) as other:
                outside = driver_command(other, "/tmp/d.pyc")  # the judge's own grading: hash seed 0
        return forked, plain, outside

    forked, plain, outside = asyncio.run(main())
    assert [t.outcome for t in forked.tests] == [Outcome.PASSED] * 3, forked
    assert [t.outcome for t in plain.tests] == [Outcome.PASSED, Outcome.PASSED, Outcome.FAILED], plain
    assert outside == (["python3", "-s", "/tmp/d.pyc"], False)
