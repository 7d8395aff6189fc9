"""The ``script`` runner: a Harbor-style ``tests/test.sh``, run by the judge in a fresh sandbox.

In the sandbox, the grading tree is /workspace; the task's whole tests/ directory is /tmp/rollbox-tests, read-only;
and /tmp/rollbox-logs/verifier is the reward directory, read-only too. The judge runs ``bash
/tmp/rollbox-tests/SCRIPT`` with cwd /workspace and ``ROLLBOX_TESTS=/tmp/rollbox-tests``,
``ROLLBOX_REWARD_DIR=/tmp/rollbox-logs/verifier``. The script reports by writing ``reward.txt`` (one float) or
``reward.json`` (``{"reward": float}``) there; reward.txt wins when both are written.

The rule: there is one graded test, ``script``. It passes when the script ended by exiting (with any exit code: the
exit code alone never decides) and wrote a reward of at least 1.0. A lower reward, or none, fails it; a malformed
reward (not a finite number, over 4096 bytes) or a script killed by a signal is an error; a limit hit fails it, and
``run_status`` says which.

Only test.sh's own bash can write the reward. A program it starts runs as the same user, so no file could be kept
from it; the reward files are therefore not files (see ``_reward_shim.c``, loaded into that bash alone): when the
bash (or a subshell of it) opens exactly ``$ROLLBOX_REWARD_DIR/reward.txt`` or ``reward.json``, it gets a memfd no
other process holds, and it reports what it wrote, when it exits, on a stdout of its own. The bash is not
dumpable, so no program reaches its memory or descriptors through /proc; any other process that opens the path
finds the judge's read-only directory. ``echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"`` and ``cmd >
"$ROLLBOX_REWARD_DIR/reward.txt"`` (test.sh's redirection of a command's output) work; a program that opens the path
itself (``python3 -c "open(...).write('1')"``) writes nothing the judge reads, whoever wrote it, so a verifier must
write its reward from test.sh. A script that ``exec``s away from its bash, or is killed, reports no reward.

The tests are the task's pristine ones, written by the judge, read-only. The candidate owns /tmp and could rename
the judge's tests directory and put its own in its place for test.sh to run; the bash watches the directory and a
move of it during the run is ``tampered``.

What this runner cannot guarantee: what test.sh itself does with what the candidate controls. A verifier that
hands its reward path to a program (an argument, an ``export``), that runs the candidate's code in the process
whose exit status decides the reward, or that believes a file the candidate can write, is only as strong as that.
A must-fail canary reports verifiers that prove nothing: when the candidate passes, the same script also runs on
the pristine (unsolved) workspace; if that passes too, a ``verifier_proves_nothing`` flag says so, and the
candidate's result stands. The canary's finding is remembered per task content for the life of the process. A
scan of the candidate's changed files for the names of the reward channel flags them (``reward_channel_probe``);
it penalizes nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.sandbox import ExecResult, FreshSandboxes, SandboxSource, Status
from rollbox.tasks import ScriptGrading, Task

from ._channel import ForgedChannel, read_records
from ._drivers import judges_own
from ._missing import unless_missing
from ._native import reward_shim
from ._probe import grading_env
from ._report import RunnerReport
from ._tree import GradingTree

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
_SHIM = "/tmp/.rollbox-judge/reward.so"
#: Must-fail canary findings, by the content digest of (script, workspace, tests): a message, or None when it failed.
_CANARIES: dict[str, str | None] = {}


@dataclass(frozen=True)
class _Run:
    """One run of the script: how it ended, the test outcome it earned, the reward it wrote, and why the run was
    subverted, if it was."""

    result: ExecResult
    outcome: Outcome
    reward: float | None = None
    tampered: str | None = None


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


def _read_channel(stdout: str, *, truncated: bool) -> tuple[Outcome, float | None, dict[str, str]]:
    """The outcome and reward the shim reported, and what else its channel said (``ready``, ``forged``, ``moved``)."""
    notes: dict[str, str] = {}
    rewards: dict[str, bytes | None] = {}  # None: too large to be a reward
    try:
        records = read_records(stdout, truncated=truncated)
    except ForgedChannel as exc:
        return Outcome.MISSING, None, {"forged": str(exc)}
    for record in records:
        name = record.get("file")
        if record.get("ready") is True and "ready" not in notes:
            notes["ready"] = ""
        elif record.get("tests_moved") is True:
            notes["moved"] = f"the tests directory {TESTS_DIR} was moved or deleted while the script ran"
        elif name in _REWARD_FILES and name not in rewards and (record.get("too_large") is True or "hex" in record):
            try:
                rewards[name] = None if record.get("too_large") is True else bytes.fromhex(record["hex"])
            except (TypeError, ValueError):
                rewards[name] = None
        else:
            notes["forged"] = f"the reward channel carried a forged or repeated report: {json.dumps(record)[:200]}"
    for name in _REWARD_FILES:
        if name in rewards:
            data = rewards[name]
            try:
                reward = parse_reward(name, data if data is not None else b"")
            except ValueError:
                return Outcome.ERROR, None, notes  # not a reward: nothing to trust
            return (Outcome.PASSED if reward >= 1.0 else Outcome.FAILED), reward, notes
    return Outcome.FAILED, None, notes


async def _verify(task: Task, grading: ScriptGrading, tree: GradingTree, sandboxes: SandboxSource) -> _Run:
    """Run the task's script against ``tree`` in a fresh sandbox."""
    async with tree.sandbox(sandboxes, limits=task.limits, network=task.network) as sb:
        # The judge's own files first, the candidate's tree last: a tree that does not fit (blocks, inodes) then
        # fails its own write, the candidate's doing, and never the judge's preparation, which is rollbox's.
        with judges_own("tests/ directory"):
            await sb.write_tree(task.tests, TESTS_DIR, read_only=True)
            await sb.write_file(f"{REWARD_DIR}/.rollbox", b"", read_only=True)  # the directory, read-only to all
            await sb.write_file(_SHIM, reward_shim(), read_only=True)
        await tree.lay(sb)
        env = grading_env({"ROLLBOX_TESTS": TESTS_DIR, "ROLLBOX_REWARD_DIR": REWARD_DIR, "LD_PRELOAD": _SHIM})
        argv = ["bash", f"{TESTS_DIR}/{grading.script}"]
        result = unless_missing(sb, argv, await sb.exec(argv, env=env), runner="script")
    if result.status is Status.INFRA_ERROR:
        return _Run(result, Outcome.MISSING)
    outcome, reward, notes = _read_channel(result.stdout_text, truncated=result.stdout_truncated)
    if "ready" not in notes and "forged" not in notes:
        error = f"the reward shim did not load into bash ({result.status.value}): {result.stderr_text[-500:]}"
        return _Run(ExecResult.infra_error(error), Outcome.MISSING)
    tampered = notes.get("forged") or notes.get("moved")
    if result.status not in (Status.OK, Status.NONZERO_EXIT):
        return _Run(result, Outcome.ERROR if result.status is Status.SIGNALED else Outcome.FAILED, tampered=tampered)
    return _Run(result, outcome, reward, tampered)


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
        run = await _verify(task, grading, GradingTree(task.workspace), sandboxes)
        if run.result.status is Status.INFRA_ERROR:
            return None  # no finding; try again next time
        _CANARIES[key] = (
            f"must-fail canary: the pristine workspace also earns reward {run.reward} from tests/{grading.script}, "
            "so this task's verifier proves nothing"
            if run.outcome is Outcome.PASSED
            else None
        )
    return _CANARIES[key]


async def run_script(
    task: Task, grading: ScriptGrading, tree: GradingTree, sandboxes: SandboxSource = _FRESH
) -> RunnerReport:
    """Grade ``tree`` (the pristine task plus the candidate's changes) with the task's script in a fresh sandbox."""
    run = await _verify(task, grading, tree, sandboxes)
    if run.result.status is Status.INFRA_ERROR:
        return RunnerReport(
            tests=(GradedTest("script", Outcome.MISSING),), run_status=Status.INFRA_ERROR, detail=run.result.error
        )
    flags: list[dict[str, str]] = []
    probe = scan_reward_channel(task.workspace, tree.files)
    if probe is not None:
        flags.append({"code": "reward_channel_probe", "path": probe.partition(" ")[0], "detail": probe})
    useless = (
        await _canary(task, grading, sandboxes) if run.tampered is None and run.outcome is Outcome.PASSED else None
    )
    if useless:
        flags.append({"code": "verifier_proves_nothing", "path": f"tests/{grading.script}", "detail": useless})
    return RunnerReport(
        tests=(GradedTest("script", run.outcome),),
        run_status=run.result.status,
        tampered=run.tampered is not None,
        detail=run.tampered,
        cpu_s=run.result.cpu_s,
        peak_memory_bytes=run.result.peak_memory_bytes or 0,
        flags=tuple(flags),
    )
