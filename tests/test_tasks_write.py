"""Writing native tasks: what write_task writes, load_task reads back the same; [environment]; the workspace hash."""

from __future__ import annotations

import json
import os
import time
import tomllib
from pathlib import Path

import pytest

from rollbox.sandbox import Limits, Network
from rollbox.tasks import (
    Comparator,
    Environment,
    FunctionGrading,
    PytestGrading,
    RewardKind,
    RewardSpec,
    ScriptGrading,
    StdioGrading,
    TaskFormatError,
    WorkspaceChangedError,
    _digest,
    load_task,
    rehash_task,
    workspace_sha256,
    write_task,
)
from rollbox.tasks._toml import dumps


@pytest.fixture(autouse=True)
def rollbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "rollbox-home"
    monkeypatch.setenv("ROLLBOX_HOME", str(home))
    return home


TEST_SH = {"test.sh": "exit 0\n"}
CASES = '{"input": "1\\n", "output": "1\\n"}\n'


@pytest.mark.parametrize(
    ("grading", "tests"),
    [
        (
            PytestGrading(fail_to_pass=("tests/test_a.py::test_x",), pass_to_pass=("t::y",), tests_in_workspace=True),
            {"tests/test_a.py": "def test_x(): pass\n"},
        ),
        (
            PytestGrading(
                fail_to_pass=("t::x",), tests_in_workspace=True, removed_by_tests=("pkg/__init__.py", "s.py")
            ),
            {"tests/test_a.py": "def test_x(): pass\n"},
        ),
        (PytestGrading(), {"test_b.py": "def test_y(): pass\n"}),
        (
            FunctionGrading(module="s.py", entry_point="f", check="check.py"),
            {"cases.jsonl": '{"args": [1], "kwargs": {}, "expected": 2}\n', "check.py": "def check(c): pass\n"},
        ),
        (FunctionGrading(module="s.py", entry_point="f", cases=None, check="c.py"), {"c.py": "def check(c): pass\n"}),
        (
            StdioGrading(command=("python3", "main.py", "--x"), comparator=Comparator.FLOAT, float_tolerance=0.01),
            {"cases.jsonl": CASES},
        ),
        (
            StdioGrading(command=("./run",), cases="c.jsonl", comparator=Comparator.CHECKER, checker="chk"),
            {"c.jsonl": CASES, "chk": "#!/bin/sh\n"},
        ),
        (ScriptGrading(script="verify.sh"), {"verify.sh": "exit 0\n"}),
    ],
)
def test_every_runner_round_trips(tmp_path: Path, grading: object, tests: dict[str, str]) -> None:
    environment = Environment(python="3.12", requirements=("numpy==1.26.4", "requests>=2"), env={"A": 'q"\n\x7fé'})
    limits = Limits(timeout_s=2.5, cpu_time_s=7, memory_bytes=300 << 20, pids=20, disk_bytes=10**6, output_bytes=4096)
    reward = RewardSpec(kind=RewardKind.F2P_P2P, f2p_weight=0.75, tamper_penalty=-0.5)
    metadata = {"source": "test", "tags": ["a", "b"], "difficulty": 3, "nested": {"x": 1.5, "ok": True}}
    task = write_task(
        tmp_path / "t",
        task_id="suite/one two",
        grading=grading,  # type: ignore[arg-type]
        instruction="Do it.\n",
        workspace={"s.py": "def f(x):\n    return x\n", "pkg/__init__.py": b""},
        tests=tests,
        solution={"s.py": "def f(x):\n    return 2 * x\n"},
        environment=environment,
        limits=limits,
        network=Network.LOOPBACK,
        reward=reward,
        metadata=metadata,
    )
    again = load_task(tmp_path / "t")
    for loaded in (task, again):
        assert loaded.id == "suite/one two" and loaded.grading == grading and loaded.instruction == "Do it.\n"
        assert loaded.limits == limits and loaded.network is Network.LOOPBACK and loaded.reward == reward
        assert loaded.environment == environment and loaded.metadata == metadata
        assert loaded.workspace_sha256 == workspace_sha256(tmp_path / "t" / "workspace")
        assert loaded.solution is not None and (loaded.solution / "s.py").read_text().endswith("2 * x\n")
    assert (tmp_path / "t" / "workspace" / "pkg" / "__init__.py").read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollbox-home", "t"]  # no staging left


def test_defaults_write_a_minimal_task_toml(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t", task_id="t", grading=ScriptGrading(), tests={"test.sh": "exit 0\n"})
    data = tomllib.loads((tmp_path / "t" / "task.toml").read_text())
    assert data == {"id": "t", "grading": {"runner": "script"}, "workspace": {"sha256": task.workspace_sha256}}
    assert task.solution is None and task.environment == Environment() and task.limits == Limits()
    assert not (tmp_path / "t" / "instruction.md").exists()


def test_a_directory_of_files_is_copied_with_links_and_executable_bits(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "bin").mkdir(parents=True)
    (source / "bin" / "run").write_text("#!/bin/sh\n")
    (source / "bin" / "run").chmod(0o700)
    (source / "data.txt").write_text("x")
    (source / "empty").mkdir()
    (source / "link").symlink_to("data.txt")
    (source / "dangling").symlink_to("/nowhere")
    task = write_task(tmp_path / "t", task_id="t", grading=ScriptGrading(), workspace=source, tests={"test.sh": ""})
    copy = task.workspace
    assert os.access(copy / "bin" / "run", os.X_OK) and not os.access(copy / "data.txt", os.X_OK)
    assert os.readlink(copy / "link") == "data.txt" and os.readlink(copy / "dangling") == "/nowhere"
    assert (copy / "empty").is_dir() and task.workspace_sha256 == workspace_sha256(source)
    os.mkfifo(source / "pipe")
    with pytest.raises(TaskFormatError, match="pipe: is a FIFO, socket or device"):
        write_task(tmp_path / "u", task_id="u", grading=ScriptGrading(), workspace=source, tests={"test.sh": ""})
    assert not (tmp_path / "u").exists()


def test_an_existing_task_is_replaced_only_when_asked_and_a_bad_one_leaves_nothing(tmp_path: Path) -> None:
    write_task(tmp_path / "t", task_id="t", grading=ScriptGrading(), tests={"test.sh": "exit 0\n"})
    with pytest.raises(FileExistsError, match="exists; remove it, or replace it"):
        write_task(tmp_path / "t", task_id="t", grading=ScriptGrading(), tests={"test.sh": "exit 0\n"})
    task = write_task(tmp_path / "t", task_id="t2", grading=ScriptGrading(), tests={"test.sh": ""}, replace=True)
    assert task.id == "t2"
    with pytest.raises(TaskFormatError, match=r"names tests/cases\.jsonl, which does not exist"):
        write_task(tmp_path / "t", task_id="t3", grading=FunctionGrading(module="s.py", entry_point="f"), replace=True)
    assert load_task(tmp_path / "t").id == "t2"  # the old task stands
    with pytest.raises(ValueError, match="not a relative file path"):
        write_task(tmp_path / "v", task_id="v", grading=ScriptGrading(), tests={"../escape": ""})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollbox-home", "t"]


def test_toml_writer_round_trips_awkward_values() -> None:
    document = {
        "id": 'quote " backslash \\ newline \n tab \t del \x7f nul \x00 emoji \U0001f600',
        "odd key": {"a.b": [1, 2.5, True, "x"], "empty": {}, "inline": [{"k": "v"}]},
        "n": -3,
    }
    assert tomllib.loads(dumps(document)) == document
    with pytest.raises(ValueError, match=r"odd\.x: cannot write None"):
        dumps({"odd": {"x": None}})
    with pytest.raises(ValueError, match="f: TOML has no place for inf"):
        dumps({"f": float("inf")})


# -- [environment] -------------------------------------------------------------------------------------------------


def make_task(root: Path, environment: str, requirements: str | bytes | None = None) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("exit 0\n")
    (root / "task.toml").write_text('[grading]\nrunner = "script"\n' + environment)
    if requirements is not None:
        (root / "environment").mkdir()
        path = root / "environment" / "requirements.txt"
        path.write_bytes(requirements if isinstance(requirements, bytes) else requirements.encode())
    return root


def test_environment_merges_the_table_and_the_requirements_file(tmp_path: Path) -> None:
    root = make_task(
        tmp_path / "t",
        '[environment]\npython = "3.11"\nrequirements = ["numpy==1.26.4"]\nenv = { B = "2", A = "1" }\n',
        "# pinned\nrequests>=2  # http\n\nnumpy==1.26.4\nattrs ; python_version >= '3.8'\n",
    )
    task = load_task(root)
    assert task.environment.python == "3.11" and task.environment.env == {"A": "1", "B": "2"}
    assert task.environment.requirements == ("numpy==1.26.4", "requests>=2", "attrs ; python_version >= '3.8'")
    assert task.requirements == root / "environment" / "requirements.txt"
    assert load_task(make_task(tmp_path / "none", "")).environment == Environment()
    assert Environment().is_default and not task.environment.is_default


@pytest.mark.parametrize(
    ("table", "requirements", "message"),
    [
        ("python = 3.11\n", None, "python: expected a version MAJOR.MINOR such as '3.11', got 3.11 (quote it"),
        ('python = "2.7"\n', None, "got '2.7'"),
        ('python = "3.11.4"\n', None, "got '3.11.4'"),
        ('requirements = "numpy"\n', None, "requirements: expected a list of requirement strings, got 'numpy'"),
        ('requirements = ["numpy==="]\n', None, "[environment] requirements: 'numpy===' is not a valid requirement"),
        ('requirements = ["-r other.txt"]\n', None, "'-r other.txt' is a pip option"),
        ('env = { "1X" = "a" }\n', None, "env: '1X' is not a variable name"),
        ('env = { ROLLBOX_TESTS = "/x" }\n', None, "env: ROLLBOX_TESTS is reserved"),
        ("env = { A = 1 }\n", None, "env A: expected a string without NUL characters, got 1"),
        ('env = "A=1"\n', None, "env: expected a table of NAME = 'value'"),
        ('pyhton = "3.11"\n', None, "unknown key 'pyhton' in [environment]"),
        ("", "numpy\n--index-url https://example.com\n", "requirements.txt: line 2: '--index-url https://example.com'"),
        ("", "numpy\nnot a requirement!\n", "requirements.txt: line 2: 'not a requirement!' is not a valid"),
        ("", b"caf\xe9\n", "requirements.txt: cannot read it as UTF-8 text"),
    ],
)
def test_malformed_environments_say_file_key_and_fix(
    tmp_path: Path, table: str, requirements: str | bytes | None, message: str
) -> None:
    root = make_task(tmp_path / "t", "[environment]\n" + table, requirements)
    with pytest.raises(TaskFormatError) as caught:
        load_task(root)
    assert message in str(caught.value)
    assert str(root.resolve()) in str(caught.value)


def test_the_layer_key_is_stable_and_depends_only_on_what_a_layer_holds() -> None:
    one = Environment(python="3.11", requirements=("numpy==1.26.4", "Requests >= 2"), env={"A": "1"})
    same = Environment(python="3.11", requirements=("requests>=2", "numpy == 1.26.4", "numpy==1.26.4"))
    assert one.layer_key == same.layer_key and len(one.layer_key) == 64
    assert one.layer_spec() == {"python": "3.11", "requirements": ["numpy==1.26.4", "requests>=2"]}
    assert Environment(python="3.12", requirements=one.requirements).layer_key != one.layer_key
    assert Environment(python="3.11", requirements=("numpy==1.26.3", "requests>=2")).layer_key != one.layer_key
    # A fixed value: the key must never change between releases for the same spec, or every layer is rebuilt.
    assert Environment(python="3.11").layer_key == "385c308e9925a10096ad527d98087234db1def0153f5bb20771337ec8f66d11f"


# -- the workspace hash --------------------------------------------------------------------------------------------


def tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "run.sh").write_text("echo hi\n")
    (root / "link").symlink_to("pkg/mod.py")
    return root


def test_the_hash_covers_names_contents_executable_bits_links_and_directories(tmp_path: Path) -> None:
    root = tree(tmp_path / "a")
    base = workspace_sha256(root)
    assert workspace_sha256(tree(tmp_path / "b")) == base  # the same tree elsewhere
    os.utime(root / "run.sh", (1, 1))
    (root / "pkg").chmod(0o700)
    assert workspace_sha256(root) == base  # times and other mode bits are not part of it
    changes = [
        lambda: (root / "pkg" / "mod.py").write_text("x = 2\n"),
        lambda: (root / "run.sh").chmod(0o755),
        lambda: ((root / "link").unlink(), (root / "link").symlink_to("run.sh")),
        (root / "new-empty-dir").mkdir,
        lambda: (root / "run.sh").rename(root / "run2.sh"),
    ]
    seen = {base}
    for change in changes:
        change()
        digest = workspace_sha256(root)
        assert digest not in seen
        seen.add(digest)


def test_a_changed_workspace_is_refused_with_what_changed_and_the_fix(tmp_path: Path) -> None:
    source = tree(tmp_path / "src")
    task = write_task(tmp_path / "t", task_id="the-task", grading=ScriptGrading(), workspace=source, tests=TEST_SH)
    load_task(task.path)  # matches
    (task.workspace / "pkg" / "mod.py").write_text("x = 3\n")
    (task.workspace / "extra.txt").write_text("")
    with pytest.raises(WorkspaceChangedError) as caught:
        load_task(task.path)
    message = str(caught.value)
    assert "task 'the-task': workspace/ no longer matches its recorded hash" in message
    assert "(pkg/mod.py changed, extra.txt added)" in message
    assert f"'rollbox tasks rehash {task.path}'" in message and "--force" in message
    assert load_task(task.path, verify=False).id == "the-task"
    (task.path / "task.toml").write_text("# mine\n" + (task.path / "task.toml").read_text())
    digest = rehash_task(task.path)
    assert load_task(task.path).workspace_sha256 == digest == workspace_sha256(task.workspace)
    assert (task.path / "task.toml").read_text().startswith("# mine\n")  # the rest is kept as written


def test_rehash_adds_the_table_to_a_task_that_had_none(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", '[metadata]\nsource = "hand-made"\n')
    assert load_task(root).workspace_sha256 is None
    (root / "workspace" / "a.py").write_text("pass\n")
    digest = rehash_task(root)
    assert load_task(root).workspace_sha256 == digest and load_task(root).metadata == {"source": "hand-made"}
    (root / "task.toml").write_text('workspace = { sha256 = "' + "0" * 64 + '" }\n[grading]\nrunner = "script"\n')
    with pytest.raises(TaskFormatError, match="write it by hand"):
        rehash_task(root)
    (root / "task.toml").write_text('[grading]\nrunner = "script"\n[workspace]\nsha256 = "abc"\n')
    with pytest.raises(TaskFormatError, match="sha256: expected 64 lowercase hex digits, got 'abc'"):
        load_task(root)


def test_the_stat_cache_is_used_and_sees_an_edit_that_restores_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rollbox_home: Path
) -> None:
    monkeypatch.setattr(_digest, "_RACY_NS", 0)  # cache files however recently written (no 2 s wait here)
    monkeypatch.setattr(_digest, "_DIRECT_FILES", 0)  # and a tree this small too
    root = tree(tmp_path / "ws")
    digest = workspace_sha256(root)
    (cache_file,) = (rollbox_home / "cache" / "workspace-hashes").iterdir()
    cache = json.loads(cache_file.read_text())
    assert cache["files"]["pkg/mod.py"][4] == _digest._file_digest(os.fsencode(root / "pkg" / "mod.py"))
    # The cache is trusted while a file's signature holds: a wrong digest under a matching signature shows.
    cache["files"]["pkg/mod.py"][4] = "0" * 64
    cache_file.write_text(json.dumps(cache))
    assert workspace_sha256(root) != digest
    cache_file.write_text("{not json")
    assert workspace_sha256(root) == digest  # a corrupt cache costs time, never correctness
    # Same size, same modification time: only the change time (which no one can set) tells.
    stat = (root / "pkg" / "mod.py").stat()
    time.sleep(0.01)
    (root / "pkg" / "mod.py").write_text("x = 9\n")
    os.utime(root / "pkg" / "mod.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert workspace_sha256(root) != digest


def test_recently_changed_files_are_never_cached(
    tmp_path: Path, rollbox_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_digest, "_DIRECT_FILES", 0)
    root = tree(tmp_path / "ws")
    workspace_sha256(root)
    (cache_file,) = (rollbox_home / "cache" / "workspace-hashes").iterdir()
    assert json.loads(cache_file.read_text())["files"] == {}  # all written just now: read again next time


def test_a_small_workspace_is_hashed_without_its_cache(tmp_path: Path, rollbox_home: Path) -> None:
    root = tree(tmp_path / "ws")
    assert workspace_sha256(root) and not (rollbox_home / "cache").exists()
