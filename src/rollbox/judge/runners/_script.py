"""The ``script`` runner: a Harbor-style ``tests/test.sh``, run by the judge in a fresh sandbox.

In the sandbox, the grading tree is /workspace; the task's whole tests/ directory is /tmp/rollbox-tests, written by
the judge after the workspace; and /tmp/rollbox-logs/verifier is an empty reward directory, made fresh by the judge
(anything already there deleted). The judge runs ``bash /tmp/rollbox-tests/SCRIPT`` with cwd /workspace and
``ROLLBOX_TESTS=/tmp/rollbox-tests``, ``ROLLBOX_REWARD_DIR=/tmp/rollbox-logs/verifier``. The script reports by writing
``reward.txt`` (one float) or ``reward.json`` (``{"reward": float}``) there; reward.txt wins when both exist.

The rule: there is one graded test, ``script``. It passes when the script ended by exiting (with any exit code: the
exit code alone never decides) and left a reward of at least 1.0, in a file last modified during the run. A lower
reward, no reward file, or one modified outside the run fails it; an unreadable or malformed reward file (not a
finite number, a link, not a regular file) or a script killed by a signal is an error; a limit hit fails it, and
``run_status`` says which.

What this runner guarantees:

- the tests and the script are the task's pristine ones, written by the judge, never taken from the candidate;
- no reward from before the run counts: the directory is made fresh, and a file modified outside the run is ignored;
- the judge never follows a link, or opens a FIFO, planted in the reward directory.

What it cannot guarantee: that the reward was written by the script. The script runs the candidate's code in the same
sandbox, as the same user, so that code could write the reward directory, or edit /tmp/rollbox-tests before the
script reads them. Two checks narrow this, and neither closes it:

- a scan of the candidate's changed files for the names of the grading channel (``rollbox-logs``, ``rollbox-tests``,
  ``reward.txt``, ``reward.json``, ``ROLLBOX_REWARD_DIR``, ``ROLLBOX_TESTS``, in any case): a hit marks the report
  ``tampered``. A name assembled at run time escapes it; a legitimate file that mentions one is penalized.
- a must-fail canary: when the candidate passes, the same script also runs on the pristine (unsolved) workspace. If
  that passes too, the task's verifier proves nothing; a ``verifier_proves_nothing`` flag says so, and the
  candidate's result stands. The canary's finding is remembered per task content for the life of the process.

A task that needs a result channel the candidate cannot forge should use the ``pytest``, ``function`` or ``stdio``
runner.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.sandbox import ExecResult, FreshSandboxes, Sandbox, SandboxSource, Status
from rollbox.tasks import ScriptGrading, Task

from ._channel import GRADING_ENV
from ._report import RunnerReport

_FRESH = FreshSandboxes()

__all__ = ["REWARD_DIR", "TESTS_DIR", "parse_reward", "run_script", "scan_reward_channel"]

TESTS_DIR = "/tmp/rollbox-tests"
REWARD_DIR = "/tmp/rollbox-logs/verifier"
_REWARD_FILES = ("reward.txt", "reward.json")
_MAX_REWARD_BYTES = 4096
#: Lowercase names of the grading channel that no solution has a reason to mention.
_CHANNEL_NAMES = (
    b"rollbox-logs",
    b"rollbox-tests",
    b"reward.txt",
    b"reward.json",
    b"rollbox_reward_dir",
    b"rollbox_tests",
)
#: Slack for the kernel's coarse file-timestamp clock, which may lag the judge's clock by a tick.
_CLOCK_SLACK_S = 0.1
#: Must-fail canary findings, by the content digest of (script, workspace, tests): a message, or None when it failed.
_CANARIES: dict[str, str | None] = {}


@dataclass(frozen=True)
class _Run:
    """One run of the script: how it ended, the test outcome it earned, and the reward it left."""

    result: ExecResult
    outcome: Outcome
    reward: float | None = None


def parse_reward(name: str, data: bytes) -> float:
    """The reward in ``reward.txt`` (one number) or ``reward.json`` (``{"reward": number}``).

    >>> parse_reward("reward.txt", b"1\\n"), parse_reward("reward.json", b'{"reward": 0.5}')
    (1.0, 0.5)

    Raises:
        ValueError: the content is not a finite reward of that form (and nothing else, whatever the content:
            the candidate's code may have written it).
    """
    text = data.decode()
    if name.endswith(".json"):
        try:
            record = json.loads(text)
        except RecursionError:
            raise ValueError(f"{name} is nested too deeply to be a reward") from None
        value = record.get("reward") if isinstance(record, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f'{name} must hold {{"reward": NUMBER}}, got {text[:80]!r}')
    else:
        value = float(text.strip())
    try:
        reward = float(value)
    except OverflowError:  # an integer beyond any float
        raise ValueError(f"{name} holds a number too large to be a reward") from None
    if not math.isfinite(reward):
        raise ValueError(f"{name} holds {value}, not a finite reward")
    return reward


def _changed_files(pristine: Path, tree: Path) -> list[Path]:
    """Regular files of ``tree`` that are not byte-identical to the same path in ``pristine``."""
    changed: list[Path] = []
    for directory, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
        for name in files:
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file():
                continue
            original = pristine / path.relative_to(tree)
            if original.is_symlink() or not original.is_file() or original.read_bytes() != path.read_bytes():
                changed.append(path)
    return changed


def scan_reward_channel(pristine: Path, tree: Path) -> str | None:
    """Why the candidate's changes in ``tree`` look like an attempt on the reward channel, or ``None``."""
    for path in sorted(_changed_files(pristine, tree)):
        text = path.read_bytes().lower()
        for name in _CHANNEL_NAMES:
            if name in text:
                where = path.relative_to(tree).as_posix()
                return f"{where} mentions {name.decode()!r}, part of the script runner's reward channel"
    return None


async def _read_reward(sb: Sandbox, started: float, ended: float) -> tuple[Outcome, float | None, ExecResult | None]:
    """The outcome and reward from the reward directory, or the infrastructure failure that kept it unread."""
    # Every process of the script is dead by now, so what stat prints is the judge's own observation.
    paths = [f"{REWARD_DIR}/{name}" for name in _REWARD_FILES]
    stat = await sb.exec(["stat", "-c", "%n %.9Y %s", "--", *paths], cwd="/tmp")
    if stat.status is Status.INFRA_ERROR:
        return Outcome.MISSING, None, stat
    found: dict[str, tuple[float, int]] = {}  # name: (mtime, size)
    for line in stat.stdout_text.splitlines():
        path, stamp, length = line.rsplit(" ", 2)
        found[path.rpartition("/")[2]] = (float(stamp), int(length))
    for name in _REWARD_FILES:
        if name not in found:
            continue
        mtime, size = found[name]
        if not started - _CLOCK_SLACK_S <= mtime <= ended + _CLOCK_SLACK_S:
            return Outcome.FAILED, None, None  # modified outside the run: not a reward of this run
        if size > _MAX_REWARD_BYTES:
            return Outcome.ERROR, None, None  # no reward is that long: not read into the judge's memory
        try:
            reward = parse_reward(name, await sb.read_file(f"{REWARD_DIR}/{name}", max_bytes=_MAX_REWARD_BYTES))
        except (OSError, ValueError):
            return Outcome.ERROR, None, None  # a link, a FIFO, a directory, or not a reward: nothing to trust
        return (Outcome.PASSED if reward >= 1.0 else Outcome.FAILED), reward, None
    return Outcome.FAILED, None, None


async def _verify(task: Task, grading: ScriptGrading, tree: Path, sandboxes: SandboxSource) -> _Run:
    """Run the task's script against ``tree`` in a fresh sandbox."""
    async with sandboxes.sandbox(limits=task.limits, network=task.network) as sb:
        # The judge's own directories first, the candidate's tree last: a tree that does not fit (blocks, inodes)
        # then fails its own write, the candidate's doing, and never the judge's preparation, which is rollbox's.
        setup = await sb.exec(["sh", "-c", f"rm -rf /tmp/rollbox-logs && mkdir -p {REWARD_DIR}"], cwd="/tmp")
        if not setup.ok:
            error = setup.error or f"preparing {REWARD_DIR} failed ({setup.status.value}): {setup.stderr_text[-500:]}"
            return _Run(ExecResult.infra_error(error), Outcome.MISSING)
        await sb.write_tree(task.tests, TESTS_DIR)
        await sb.write_tree(tree)
        env = {**GRADING_ENV, "ROLLBOX_TESTS": TESTS_DIR, "ROLLBOX_REWARD_DIR": REWARD_DIR}
        started = time.time()
        result = await sb.exec(["bash", f"{TESTS_DIR}/{grading.script}"], env=env)
        ended = time.time()
        if result.status is Status.INFRA_ERROR:
            return _Run(result, Outcome.MISSING)
        if result.status not in (Status.OK, Status.NONZERO_EXIT):
            return _Run(result, Outcome.ERROR if result.status is Status.SIGNALED else Outcome.FAILED)
        outcome, reward, failure = await _read_reward(sb, started, ended)
    return _Run(failure or result, outcome, reward)


def _digest(grading: ScriptGrading, *roots: Path) -> str:
    digest = hashlib.sha256(grading.script.encode())
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            digest.update(f"\0{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


async def _canary(task: Task, grading: ScriptGrading, sandboxes: SandboxSource) -> str | None:
    """Why the script proves nothing (the pristine workspace passes it too), or ``None`` when it failed as it must."""
    key = _digest(grading, task.workspace, task.tests)
    if key not in _CANARIES:
        run = await _verify(task, grading, task.workspace, sandboxes)
        if run.result.status is Status.INFRA_ERROR:
            return None  # no finding; try again next time
        _CANARIES[key] = (
            f"must-fail canary: the pristine workspace also earns reward {run.reward} from tests/{grading.script}, "
            "so this task's verifier proves nothing"
            if run.outcome is Outcome.PASSED
            else None
        )
    return _CANARIES[key]


async def run_script(task: Task, grading: ScriptGrading, tree: Path, sandboxes: SandboxSource = _FRESH) -> RunnerReport:
    """Grade ``tree`` (the pristine task plus the candidate's changes) with the task's script in a fresh sandbox."""
    run = await _verify(task, grading, tree, sandboxes)
    if run.result.status is Status.INFRA_ERROR:
        return RunnerReport(
            tests=(GradedTest("script", Outcome.MISSING),), run_status=Status.INFRA_ERROR, detail=run.result.error
        )
    tampered = scan_reward_channel(task.workspace, tree)
    useless = await _canary(task, grading, sandboxes) if tampered is None and run.outcome is Outcome.PASSED else None
    return RunnerReport(
        tests=(GradedTest("script", run.outcome),),
        run_status=run.result.status,
        tampered=tampered is not None,
        detail=tampered,
        cpu_s=run.result.cpu_s,
        peak_memory_bytes=run.result.peak_memory_bytes or 0,
        flags=({"code": "verifier_proves_nothing", "path": f"tests/{grading.script}", "detail": useless},)
        if useless
        else (),
    )
