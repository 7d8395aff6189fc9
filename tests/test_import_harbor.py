"""The Harbor importer, for real: a Harbor task written here becomes a script task whose reference (made by running
solve.sh in a sandbox) passes the judge and whose untouched workspace fails; the Dockerfile subset, and a clear
error for every line outside it."""

from __future__ import annotations

import asyncio
import os
import shutil
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollbox.judge import VerdictStatus, grade
from rollbox.tasks import Environment, ScriptGrading, import_tasks, load_task
from rollbox.tasks._dockerfile import DockerfileError, read_dockerfile
from rollbox.tasks._import_harbor import REWARD_DIR, SOLUTION_DIR, TESTS_DIR, _rewriter


@pytest.fixture(autouse=True)
def rollbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "rollbox-home"))


TASK_TOML = """\
version = "1.0"

[metadata]
author_name = "Test Author"
difficulty = "easy"
tags = ["python", "strings"]

[verifier]
timeout_sec = 30.0
env = { EXPECTED_GREETING = "Hello, /app user" }

[agent]
timeout_sec = 40.0

[environment]
build_timeout_sec = 300.0
cpus = 2
memory_mb = 1024
storage_mb = 512
allow_internet = false
"""

DOCKERFILE = """\
# syntax=docker/dockerfile:1
FROM python:3.11.9-slim AS base
RUN pip install --no-cache-dir -q requests==2.32.3 \\
    && python -m pip install --root-user-action ignore "attrs>=23"
WORKDIR /app
COPY requirements.txt /tmp/requirements.txt
RUN pip3 install -r /tmp/requirements.txt
COPY greet.py ./
COPY --chown=1000:1000 config/ /app/config/
COPY --chmod=755 run.sh /app/bin/run
ENV APP_HOME=/app GREETING_FILE=/app/config/greeting.txt
ENV LEGACY plain value
"""

TEST_SH = """\
#!/bin/bash
cd /app
python3 /tests/check.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

CHECK_PY = """\
import os, sys
sys.path.insert(0, "/app")
from greet import greet
assert os.environ["EXPECTED_GREETING"] == "Hello, /workspace user"
assert greet("world") == open("/app/config/greeting.txt").read().strip() + ", world"
"""

SOLVE_SH = """\
#!/bin/bash
set -e
cat > /app/greet.py <<'PY'
def greet(name):
    with open("/workspace/config/greeting.txt") as f:
        return f.read().strip() + ", " + name
PY
mkdir -p /app/notes && cp /solution/NOTES.md /app/notes/NOTES.md
"""


def overlay(solution: Path) -> dict[str, bytes]:
    """A reference solution as the judge takes files laid over the task's workspace."""
    return {p.relative_to(solution).as_posix(): p.read_bytes() for p in solution.rglob("*") if p.is_file()}


def harbor_task(root: Path, dockerfile: str = DOCKERFILE, solve: str | None = SOLVE_SH) -> Path:
    files = {
        "task.toml": TASK_TOML,
        "instruction.md": "Fix /app/greet.py: greet(name) returns the greeting in /app/config/greeting.txt.\n",
        "environment/Dockerfile": dockerfile,
        "environment/requirements.txt": "# for the checks\npytest>=7\n",
        "environment/greet.py": "def greet(name):\n    return 'hi ' + name\n",
        "environment/config/greeting.txt": "Hello\n",
        "environment/run.sh": "python3 greet.py\n",
        "tests/test.sh": TEST_SH,
        "tests/check.py": CHECK_PY,
        "solution/NOTES.md": "Reads the greeting from the file.\n",
    }
    if solve is not None:
        files["solution/solve.sh"] = solve
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def test_a_harbor_task_becomes_a_script_task_whose_reference_passes(tmp_path: Path) -> None:
    source = harbor_task(tmp_path / "harbor" / "greet-fix")
    report = import_tasks("harbor", tmp_path / "harbor", tmp_path / "out")
    assert report.ok, report.refused
    task = load_task(report.imported[0].path)
    assert task.id == "greet-fix" and task.grading == ScriptGrading(script="test.sh")
    assert task.environment == Environment(
        python="3.11",
        requirements=("requests==2.32.3", "attrs>=23", "pytest>=7"),
        env={
            "APP_HOME": "/workspace",
            "GREETING_FILE": "/workspace/config/greeting.txt",
            "LEGACY": "plain value",
        },
    )
    limits = task.limits
    assert (limits.timeout_s, limits.cpu_time_s, limits.memory_bytes, limits.disk_bytes, limits.pids) == (
        30.0,
        60.0,
        1024 << 20,
        512 << 20,
        256,
    )
    assert task.metadata["difficulty"] == "easy" and task.metadata["tags"] == ["python", "strings"]
    assert task.metadata["agent_timeout_s"] == 40.0 and task.metadata["allow_internet"] is False
    assert task.instruction.startswith("Fix /workspace/greet.py: greet(name) returns the greeting in /workspace/config")
    workspace = sorted(p.relative_to(task.workspace).as_posix() for p in task.workspace.rglob("*"))
    assert workspace == ["bin", "bin/run", "config", "config/greeting.txt", "greet.py"]  # not requirements.txt
    assert os.access(task.workspace / "bin" / "run", os.X_OK) and not os.access(task.workspace / "greet.py", os.X_OK)
    script = (task.tests / "test.sh").read_text()
    assert script.startswith("export EXPECTED_GREETING='Hello, /workspace user'\n#!/bin/bash\ncd /workspace\n")
    assert "python3 /tmp/rollbox-tests/check.py" in script and "> /tmp/rollbox-logs/verifier/reward.txt" in script
    # The reference is what solve.sh changed, found by running it: the fixed module and the notes it copied.
    assert task.solution is not None
    solution = sorted(p.relative_to(task.solution).as_posix() for p in task.solution.rglob("*") if p.is_file())
    assert solution == ["greet.py", "notes/NOTES.md"]
    assert "/workspace/config/greeting.txt" in (task.solution / "greet.py").read_text()
    passing = asyncio.run(grade(task, overlay(task.solution)))
    assert passing.status is VerdictStatus.PASSED and passing.reward == 1.0, passing
    failing = asyncio.run(grade(task, task.workspace))
    assert failing.status is VerdictStatus.FAILED and failing.reward == 0.0, failing
    assert (source / "tests" / "test.sh").read_text() == TEST_SH  # the source is left as it was


def test_solutions_that_fail_or_delete_and_an_unsupported_line_are_refused(tmp_path: Path) -> None:
    harbor = tmp_path / "harbor"
    harbor_task(harbor / "good")
    harbor_task(harbor / "apt", DOCKERFILE.replace("WORKDIR /app\n", "WORKDIR /app\nRUN apt-get install -y curl\n"))
    harbor_task(harbor / "failing", solve="echo 'cannot solve' >&2\nexit 3\n")
    harbor_task(harbor / "deleting", solve="rm /app/config/greeting.txt\n")
    harbor_task(harbor / "no-reference", solve=None)
    (harbor / "no-tests").mkdir()
    (harbor / "no-tests" / "instruction.md").write_text("x\n")
    report = import_tasks("harbor", harbor, tmp_path / "out")
    assert sorted(t.task_id for t in report.imported) == ["good", "no-reference"]
    reasons = {r.task_id: r.reason for r in report.refused}
    assert reasons["apt"] == (
        "environment/Dockerfile line 6: RUN apt-get install -y curl: only 'pip install' is in the subset; put "
        "other setup in the workspace"
    )
    assert reasons["failing"].startswith("solution/solve.sh did not succeed (nonzero_exit, exit code 3): cannot solve")
    assert "solution/solve.sh deletes config/greeting.txt from the workspace" in reasons["deleting"]
    assert reasons["no-tests"] == "environment/Dockerfile is missing: a Harbor task needs it"
    assert load_task(tmp_path / "out" / "no-reference").solution is None
    assert {r.where for r in report.refused} == {str(harbor / n) for n in ("apt", "failing", "deleting", "no-tests")}


@pytest.mark.parametrize(
    ("toml", "reason"),
    [
        ('[environment]\ndocker_image = "org/img:1"\n', "docker_image = 'org/img:1': a prebuilt image cannot be read"),
        ("[environment]\ngpus = 1\n", "gpus: rollbox sandboxes have no GPU"),
        ('[verifier]\ntimeout_sec = "long"\n', "[verifier] timeout_sec: expected a positive, finite number"),
        ("[environment]\nmemory_mb = inf\n", "[environment] memory_mb: expected a positive, finite number (at most"),
        ("[agent]\ntimeout_sec = nan\n", "[agent] timeout_sec: expected a positive, finite number (at most 2**62)"),
        (f"[environment]\nstorage_mb = {10**400}\n", "[environment] storage_mb: expected a positive, finite number"),
        (f'[environment]\nmemory = "{10**400}G"\n', "memory: invalid size '1000000000000000'...(402 characters)"),
        ('[environment]\nmemory = "lots"\n', "[environment] memory: invalid size 'lots'"),
        ("[environment]\nmemory_mb = 1\n", "Limits.memory_bytes must be at least 8 MiB"),
        ("[verifier\n", "task.toml: not valid TOML"),
    ],
)
def test_harbor_settings_rollbox_cannot_honour_are_refused(tmp_path: Path, toml: str, reason: str) -> None:
    root = harbor_task(tmp_path / "h" / "t", solve=None)
    (root / "task.toml").write_text(toml)
    report = import_tasks("harbor", tmp_path / "h", tmp_path / "out")
    (refusal,) = report.refused
    assert reason in refusal.reason, refusal


@pytest.mark.parametrize(
    ("link", "target", "copy", "reason"),
    [
        (
            "instruction.md",
            "key",
            "",
            "instruction.md leads through a symbolic link to {secret}/key, outside the task's",
        ),
        (
            "environment/Dockerfile",
            "Dockerfile",
            "",
            "environment/Dockerfile leads through a symbolic link to {secret}/",
        ),
        ("tests", "", "", "tests leads through a symbolic link to {secret}, outside the task's directory"),
        ("tests/data", "", "", "tests/data leads through a symbolic link to {secret}, outside the task's directory"),
        # A directory COPY copies (config/), a file named through a linked directory, a linked file named.
        ("environment/config/keys", "", "", "line 9: COPY config/: environment/config/keys leads through a symbolic"),
        ("environment/data", "", "COPY data/key /app/\n", "line 13: COPY data/key: environment/data/key leads through"),
        (
            "environment/greet.py",
            "key",
            "",
            "line 8: COPY greet.py: environment/greet.py leads through a symbolic link",
        ),
    ],
)
def test_links_out_of_the_task_are_refused(tmp_path: Path, link: str, target: str, copy: str, reason: str) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("HOST KEY\n")
    (secret / "Dockerfile").write_text(DOCKERFILE)
    (secret / "test.sh").write_text(TEST_SH)
    root = harbor_task(tmp_path / "h" / "t", dockerfile=DOCKERFILE + copy, solve=None)
    if (root / link).is_dir():
        shutil.rmtree(root / link)
    (root / link).unlink(missing_ok=True)
    (root / link).symlink_to(secret / target)
    report = import_tasks("harbor", tmp_path / "h", tmp_path / "out")
    (refusal,) = report.refused
    assert reason.format(secret=secret) in refusal.reason, refusal
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_links_inside_the_task_are_kept_and_never_written_through(tmp_path: Path) -> None:
    root = harbor_task(tmp_path / "h" / "t", solve=None)
    (root / "environment" / "config" / "alias.txt").symlink_to(root / "environment" / "config" / "greeting.txt")
    (root / "tests" / "run.sh").write_text(TEST_SH)
    (root / "tests" / "test.sh").unlink()
    (root / "tests" / "test.sh").symlink_to(root / "tests" / "run.sh")
    task = load_task(import_tasks("harbor", root, tmp_path / "out").imported[0].path)
    assert os.readlink(task.workspace / "config" / "alias.txt") == str(root / "environment/config/greeting.txt")
    assert not (task.tests / "test.sh").is_symlink()
    assert (task.tests / "test.sh").read_text().startswith("export EXPECTED_GREETING=")
    assert (root / "tests" / "run.sh").read_text() == TEST_SH  # the source is left as it was


def test_legacy_sizes_and_harbor_defaults(tmp_path: Path) -> None:
    root = harbor_task(tmp_path / "h" / "t", dockerfile="FROM python:3.12\n", solve=None)
    (root / "task.toml").write_text('[environment]\nmemory = "2G"\nstorage = "1G"\nworkdir = "/srv/app"\n')
    (root / "instruction.md").write_text("Work in /srv/app, not /app.\n")
    task = load_task(import_tasks("harbor", root, tmp_path / "out").imported[0].path)
    assert (task.limits.timeout_s, task.limits.memory_bytes, task.limits.disk_bytes) == (600.0, 2 << 30, 1 << 30)
    assert task.environment == Environment(python="3.12") and task.instruction == "Work in /workspace, not /app.\n"
    assert task.metadata["allow_internet"] is True  # Harbor's default, recorded: rollbox gives no internet


def test_metadata_dates_datetimes_and_times_are_kept_as_iso_text(tmp_path: Path) -> None:
    root = harbor_task(tmp_path / "h" / "t", dockerfile="FROM python:3.12\n", solve=None)
    (root / "task.toml").write_text(
        "[metadata]\n"
        "created = 2024-01-02\n"
        "updated = 2024-01-02T03:04:05Z\n"
        "local = 2024-01-02T03:04:05.250\n"
        "at = 07:32:00\n"
        "history = [2023-12-31, { reviewed = 1999-02-03T04:05:06+01:00 }]\n"
        "[metadata.release]\n"
        "day = 2025-06-07\n"
    )
    report = import_tasks("harbor", root, tmp_path / "out")
    assert report.ok, report.refused  # was: "cannot write datetime.date(2024, 1, 2) ... as TOML"
    task = load_task(report.imported[0].path)
    metadata = {k: v for k, v in task.metadata.items() if k not in ("source", "agent_timeout_s", "allow_internet")}
    assert metadata == {
        "created": "2024-01-02",
        "updated": "2024-01-02T03:04:05+00:00",
        "local": "2024-01-02T03:04:05.250000",
        "at": "07:32:00",
        "history": ["2023-12-31", {"reviewed": "1999-02-03T04:05:06+01:00"}],
        "release": {"day": "2025-06-07"},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pytest /tests/test_outputs.py", f"pytest {TESTS_DIR}/test_outputs.py"),
        ('route("/solution")', f'route("{SOLUTION_DIR}")'),
        ("x=/app:/logs/verifier,[/app]", f"x=/workspace:{REWARD_DIR},[/workspace]"),
        ("/app.\n\t/app", "/workspace.\n\t/workspace"),
        # The end of another path: left as it is.
        ('out = f"{tmpdir}/solution/answer.txt"', None),
        ('cp "${ROOT}/tests/data.csv" .', None),
        ("ls $(pwd)/tests && cd ~/tests", None),
        ('find . -path "*/tests/*"', None),
        ('url = "http://localhost:8080/app" or localhost/tests', None),
        ("/apple /srv/app /app.py /tests-old", None),
    ],
)
def test_only_whole_path_prefixes_are_rewritten(text: str, expected: str | None) -> None:
    assert _rewriter("/app")(text) == (text if expected is None else expected)


REWRITES = {"/app": "/workspace", "/tests": TESTS_DIR, "/solution": SOLUTION_DIR, "/logs/verifier": REWARD_DIR}


def rewritten_by_hand(text: str) -> str:
    """The documented rule, one position at a time: a fixed path that starts a line or follows whitespace, a quote,
    ``=``, ``:``, ``(``, ``[`` or ``,``, and ends where a path component ends (``/``, the end, a character that is
    not a letter, digit, ``_``, ``.`` or ``-``, or a ``.`` that no letter, digit or ``_`` follows)."""

    def word(c: str) -> bool:
        return c.isalnum() or c == "_"

    def ends(rest: str) -> bool:
        return not rest or not (word(rest[0]) or rest[0] in ".-") or (rest[0] == "." and not word(rest[1:2] or " "))

    out, i = [], 0
    while i < len(text):
        opens = i == 0 or text[i - 1].isspace() or text[i - 1] in "\"'`=:([,"
        keys = sorted(REWRITES, key=len, reverse=True)
        key = next((k for k in keys if opens and text.startswith(k, i) and ends(text[i + len(k) :])), None)
        out.append(text[i] if key is None else REWRITES[key])
        i += 1 if key is None else len(key)
    return "".join(out)


PIECES = [*REWRITES, "/logs", "/apple", "x", "_", ".", "-", "/", " ", "\n", "\t", '"', "'", "`", "=", ":", "("]
PIECES += ["[", ",", "$", "{", "}", ")", "~", "*", "+", "@"]


@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_the_rewriting_is_the_documented_rule(text: str) -> None:
    assert _rewriter("/app")(text) == rewritten_by_hand(text)


def dockerfile(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    path = tmp_path / "env" / "Dockerfile"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    for name, content in (files or {}).items():
        (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
        (path.parent / name).write_text(content)
    return path


def test_the_subset_reads_copies_of_directories_globs_and_the_exec_form(tmp_path: Path) -> None:
    path = dockerfile(
        tmp_path,
        """\
        FROM docker.io/library/python:3.10-bookworm
        WORKDIR /app
        COPY ["src", "lib/"]
        COPY *.txt data/
        COPY one.cfg two.cfg conf/
        RUN ["pip", "install", "six"]
        WORKDIR sub
        """,
        {"src/a.py": "", "src/pkg/b.py": "", "x.txt": "", "y.txt": "", "one.cfg": "", "two.cfg": ""},
    )
    with pytest.raises(DockerfileError, match=r"line 3: COPY puts /app/lib/a\.py outside the WORKDIR /app/sub"):
        read_dockerfile(path)
    image = read_dockerfile(path, workdir="/app")
    assert image.python == "3.10" and image.requirements == ["six"] and image.workdir == "/app"
    assert sorted(image.workspace) == [
        "conf/one.cfg",
        "conf/two.cfg",
        "data/x.txt",
        "data/y.txt",
        "lib/a.py",
        "lib/pkg/b.py",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FROM ubuntu:22.04\n", "line 1: FROM ubuntu:22.04: the base image must be python:MAJOR.MINOR"),
        ("FROM python:3\n", "line 1: FROM python:3: the base image must be python:MAJOR.MINOR"),
        ("FROM python:3.11\nFROM python:3.12\n", "line 2: a second FROM: multi-stage builds are outside the subset"),
        ("WORKDIR /app\n", "line 1: WORKDIR before FROM"),
        ("FROM python:3.11\nADD https://x/y.tgz /app/\n", "line 2: ADD is outside the subset"),
        ('FROM python:3.11\n\nCMD ["python3"]\n', "line 3: CMD is outside the subset"),
        ("FROM python:3.11\nRUN pip install --index-url https://x y\n", "line 2: pip option --index-url"),
        ("FROM python:3.11\nRUN pip install -e .\n", "line 2: pip option -e is outside the subset"),
        ("FROM python:3.11\nRUN pip install ./pkg\n", "line 2: pip install ./pkg: not a requirement"),
        ("FROM python:3.11\nRUN pip install -r req.txt\n", "line 2: pip install -r req.txt: no earlier COPY"),
        ("FROM python:3.11\nRUN pip install a && \\\n  apt-get update\n", "line 2: RUN apt-get update: only 'pip"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY nope.py .\n", "line 3: COPY nope.py: no such file in environment/"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY ../x .\n", "line 3: COPY ../x: outside the build context"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY --from=b x .\n", "line 3: COPY --from=b is outside the subset"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY a.py /usr/bin/\n", "line 3: COPY puts /usr/bin/a.py outside the"),
        ("FROM python:3.11\nCOPY a.py /app/\n", "line 2: COPY without a WORKDIR"),
        ("FROM python:3.11\nENV PATH=/x:$PATH\n", "line 2: ENV PATH: $ references are not expanded"),
        ("FROM python:3.11\nRUN pip install x \\\n", "line 2: the last instruction ends with a line continuation"),
        ("# escape=`\nFROM python:3.11\n", "line 1: the escape parser directive is not supported"),
        ("", "line 1: no FROM"),
    ],
)
def test_every_line_outside_the_subset_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = dockerfile(tmp_path, text, {"a.py": ""})
    with pytest.raises(DockerfileError) as caught:
        read_dockerfile(path)
    assert message in str(caught.value)
