"""The Harbor importer: Harbor (Terminal-Bench) task directories as native ``script`` tasks.

A Harbor task is ``instruction.md``, ``task.toml``, ``environment/Dockerfile``, ``tests/test.sh`` (which writes
``/logs/verifier/reward.txt``) and optionally ``solution/solve.sh``. It becomes:

- workspace/: what the Dockerfile COPYs under its WORKDIR (the subset in :mod:`rollbox.tasks._dockerfile`);
  ``[environment]``: the base image's Python version, its ``pip install`` requirements and ``ENV`` variables;
- tests/: Harbor's tests/, run by the judge's ``script`` runner (``bash tests/test.sh`` from /workspace);
- solution/: the files ``solve.sh`` adds or changes in the workspace, found by running it at import time in a
  rollbox sandbox over the workspace (with ``[solution] env``): the reference is real, and a ``solve.sh`` that
  fails, or deletes a workspace file (an overlay cannot), refuses the task;
- ``[limits]`` from Harbor's task.toml (defaults as Harbor's): ``[verifier] timeout_sec`` the wall-clock limit of
  grading, that times ``[environment] cpus`` the CPU-time limit, ``memory_mb`` (or ``memory = "2G"``) the memory
  limit, ``storage_mb`` (or ``storage``) the disk limit; 256 processes. ``[agent] timeout_sec`` bounds the
  ``solve.sh`` run and is kept in ``[metadata] agent_timeout_s``; ``[verifier] env`` is exported at the top of
  test.sh (never to the agent); Harbor's ``[metadata]`` is kept (its dates, date-times and times as ISO 8601
  text: ``created = 2024-01-02`` becomes ``"2024-01-02"``). A prebuilt ``docker_image``, GPUs, MCP servers
  and docker-compose environments are refused. rollbox gives no internet: ``allow_internet`` is recorded
  (``[metadata] allow_internet``), and a test.sh that downloads its tools fails.
- A file the importer reads or carries (task.toml, instruction.md, the Dockerfile, what COPY copies, tests/,
  solution/) that leads through a symbolic link out of the task's directory (environment/ for COPY) refuses the
  task: a task carries its own files, never the host's.

Harbor's fixed paths become rollbox's in instruction.md and in the text files of tests/ and solution/ (workspace
files are left as they are): the WORKDIR (``/app``) is /workspace, ``/tests`` the judge's tests directory,
``/logs/verifier`` its reward directory, ``/solution`` where solve.sh runs from. Only whole path prefixes are
rewritten: the path starts a line or follows whitespace, a quote, ``=``, ``:``, ``(``, ``[`` or ``,`` and ends
where a path component ends (``/app/x``, ``"/app"``, ``PATH=/app``; never ``/apple``, ``/srv/app``,
``${ROOT}/app``, ``~/app`` or ``*/app``).

Until runtime layers are mounted in sandboxes, ``solve.sh`` runs with rollbox's own interpreter: a reference that
needs the task's requirements at solve time is refused with its error output.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import functools
import os
import re
import shlex
import shutil
import stat
import tomllib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rollbox.sandbox import (
    IsolationUnavailable,
    Limits,
    Sandbox,
    SandboxError,
    TreeTooLarge,
    parse_size,
    temporary_directory,
)

from ._digest import tree_entries
from ._dockerfile import DockerfileError, read_dockerfile
from ._environment import Environment
from ._importing import Draft, ImportRefused, ImportSourceError, Refusal
from ._jsonl import shorten
from ._model import ScriptGrading, Task
from ._write import write_task

__all__ = ["REWARD_DIR", "SOLUTION_DIR", "TESTS_DIR", "read_harbor"]

T = TypeVar("T")

#: Where the judge's script runner puts tests/ and its reward directory (``rollbox.judge._script``'s contract).
TESTS_DIR = "/tmp/rollbox-tests"
REWARD_DIR = "/tmp/rollbox-logs/verifier"
#: Where solve.sh runs from at import time.
SOLUTION_DIR = "/tmp/rollbox-solution"
_MiB = 1 << 20
#: Harbor's defaults for what a task.toml leaves out.
_DEFAULT_TIMEOUT_S = 600.0
_DEFAULT_MEMORY = 2048 * _MiB
_DEFAULT_STORAGE = 10240 * _MiB
_PIDS = 256
#: The largest number task.toml may give: far above any limit, far below the largest float.
_LARGEST = 2**62


def _number(table: dict[str, Any], key: str, where: str, default: float) -> float:
    value = table.get(key, default)
    # TOML spells inf and nan, and its integers have no bound: neither may reach float() or int().
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= _LARGEST:
        raise ImportRefused(
            f"task.toml {where} {key}: expected a positive, finite number (at most 2**62), got {shorten(value)}"
        )
    return float(value)


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ImportRefused(f"task.toml {key}: expected a table [{key}], got {shorten(value)}")
    return value


def _dates_as_text(value: Any) -> Any:
    """``value`` (read from TOML) with each date, date-time and time, at any depth, as its ISO 8601 text: they
    are facts about the task, kept as TOML wrote them, and task.toml's metadata holds no dates."""
    if isinstance(value, datetime.date | datetime.time):  # datetime.datetime is a date
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _dates_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(v) for v in value]
    return value


def _size(table: dict[str, Any], mb_key: str, legacy: str, default: int) -> int:
    if mb_key in table:
        return int(_number(table, mb_key, "[environment]", default) * _MiB)
    if legacy in table:
        try:
            return parse_size(table[legacy])
        except ValueError as exc:
            raise ImportRefused(f"task.toml [environment] {legacy}: {exc}") from None
    return default


class _Settings:
    """What Harbor's task.toml says, in rollbox's terms."""

    def __init__(self, data: dict[str, Any]) -> None:
        verifier, agent = _table(data, "verifier"), _table(data, "agent")
        environment, solution = _table(data, "environment"), _table(data, "solution")
        if environment.get("docker_image"):
            raise ImportRefused(
                f"task.toml [environment] docker_image = {environment['docker_image']!r}: a prebuilt image cannot "
                "be read; describe the environment in environment/Dockerfile instead"
            )
        if environment.get("gpus"):
            raise ImportRefused("task.toml [environment] gpus: rollbox sandboxes have no GPU; set gpus = 0")
        if environment.get("mcp_servers"):
            raise ImportRefused("task.toml [environment] mcp_servers: MCP servers are not supported; remove them")
        cpus = _number(environment, "cpus", "[environment]", 1)
        timeout = _number(verifier, "timeout_sec", "[verifier]", _DEFAULT_TIMEOUT_S)
        self.agent_timeout = _number(agent, "timeout_sec", "[agent]", _DEFAULT_TIMEOUT_S)
        memory = _size(environment, "memory_mb", "memory", _DEFAULT_MEMORY)
        disk = _size(environment, "storage_mb", "storage", _DEFAULT_STORAGE)
        try:
            self.limits = Limits(
                timeout_s=timeout, cpu_time_s=timeout * cpus, memory_bytes=memory, disk_bytes=disk, pids=_PIDS
            )
            self.solve_limits = Limits(
                timeout_s=self.agent_timeout,
                cpu_time_s=self.agent_timeout * cpus,
                memory_bytes=memory,
                disk_bytes=disk,
                pids=_PIDS,
            )
        except ValueError as exc:
            raise ImportRefused(f"task.toml: {exc}") from None
        self.verifier_env = self._env(verifier, "[verifier]")
        self.solution_env = self._env(solution, "[solution]")
        workdir = environment.get("workdir")
        if workdir is not None and not (isinstance(workdir, str) and workdir.startswith("/")):
            raise ImportRefused(f"task.toml [environment] workdir: expected an absolute path, got {shorten(workdir)}")
        self.workdir: str | None = workdir
        metadata = _dates_as_text(_table(data, "metadata"))
        self.metadata: dict[str, Any] = {
            **metadata,
            "source": "harbor",
            "agent_timeout_s": self.agent_timeout,
            "allow_internet": environment.get("allow_internet", True) is not False,
        }

    @staticmethod
    def _env(table: dict[str, Any], where: str) -> dict[str, str]:
        env = table.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ImportRefused(f"task.toml {where} env: expected a table of NAME = 'value', got {shorten(env)}")
        return env


#: What may stand right before a path that is rewritten, besides whitespace and the start of a line: anything
#: else (``${ROOT}/tests``, ``~/tests``, ``*/tests``, ``host/app``) makes it the end of some other path.
_PATH_OPENERS = "\"'`=:([,"


def _rewriter(workdir: str | None) -> Callable[[str], str]:
    """A function that rewrites Harbor's fixed paths (see the module's docstring) in a text."""
    mapping = {"/logs/verifier": REWARD_DIR, "/tests": TESTS_DIR, "/solution": SOLUTION_DIR}
    if workdir:
        mapping[workdir] = "/workspace"
    names = "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True))
    openers = re.escape(_PATH_OPENERS)
    pattern = re.compile(rf"(?:^|(?<=[\s{openers}]))({names})(?=/|$|[^\w.-]|\.(?!\w))", re.MULTILINE)
    return lambda text: pattern.sub(lambda m: mapping[m.group(1)], text)


def _copy_rewritten(source: Path, dest: Path, rewrite: Callable[[str], str]) -> None:
    """Copy the tree ``source`` to ``dest``, rewriting the paths in every UTF-8 text file."""
    base = os.fsencode(source)
    dest.mkdir(parents=True, exist_ok=True)
    for relative, st in tree_entries(source):
        origin, target = os.path.join(base, relative), dest / os.fsdecode(relative)
        if stat.S_ISDIR(st.st_mode):
            target.mkdir(exist_ok=True)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(origin), target)
        else:
            with open(origin, "rb") as f:
                data = f.read()
            try:
                text = data.decode("utf-8")
                data = data if "\0" in text else rewrite(text).encode("utf-8")
            except UnicodeDecodeError:
                pass
            target.write_bytes(data)
            target.chmod(0o755 if st.st_mode & stat.S_IXUSR else 0o644)


def _build_workspace(image_files: dict[str, tuple[Path, int | None]], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for relative, (source, mode) in sorted(image_files.items()):
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
            continue
        shutil.copyfile(source, target)
        executable = source.stat().st_mode & stat.S_IXUSR if mode is None else mode & stat.S_IXUSR
        target.chmod(0o755 if executable else 0o644)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end, from synchronous code that may itself be running inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _solve(workspace: Path, solution: Path, env: dict[str, str], limits: Limits, solved: Path) -> None:
    """Run solve.sh over ``workspace`` in a sandbox; copy the workspace it leaves to ``solved``.

    Raises:
        ImportRefused: solve.sh failed, or left more than the disk limit.
    """
    async with Sandbox(limits=limits, env=env) as sb:
        await sb.write_tree(workspace)
        await sb.write_tree(solution, SOLUTION_DIR)
        result = await sb.exec(["bash", f"{SOLUTION_DIR}/solve.sh"], cwd="/workspace")
        if not result.ok:
            detail = result.error or result.stderr_text.strip()[-600:] or result.stdout_text.strip()[-600:]
            raise ImportRefused(
                f"solution/solve.sh did not succeed ({result.status.value}, exit code {result.exit_code}): {detail}; "
                "fix it so that it solves the task from the workspace alone"
            )
        try:
            await sb.read_tree(solved, max_bytes=limits.disk_bytes)
        except TreeTooLarge as exc:
            raise ImportRefused(f"solution/solve.sh left a workspace too large to read back: {exc}") from None


def _same(original: Path, solved: Path, st: os.stat_result) -> bool:
    """Whether ``solved`` (a file or link of the solved workspace, lstat ``st``) is ``original`` unchanged."""
    if stat.S_ISLNK(st.st_mode):
        return original.is_symlink() and os.readlink(original) == os.readlink(solved)
    return (
        original.is_file()
        and not original.is_symlink()
        and bool(original.stat().st_mode & stat.S_IXUSR) == bool(st.st_mode & stat.S_IXUSR)
        and original.read_bytes() == solved.read_bytes()
    )


def _reference(workspace: Path, solved: Path, out: Path) -> None:
    """Write under ``out`` each file or link of ``solved`` that is new or changed against ``workspace``.

    Raises:
        ImportRefused: something of the workspace is gone from ``solved``.
    """
    left = {relative for relative, _ in tree_entries(solved)}
    missing = sorted(os.fsdecode(p) for p, _ in tree_entries(workspace) if p not in left)
    if missing:
        raise ImportRefused(
            f"solution/solve.sh deletes {', '.join(missing[:5])} from the workspace; a rollbox solution/ is laid "
            "over the workspace and can only add or change files"
        )
    for relative, st in tree_entries(solved):
        name = os.fsdecode(relative)
        if stat.S_ISDIR(st.st_mode) or _same(workspace / name, solved / name, st):
            continue
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(solved / name), out / name)
        else:
            shutil.copy2(solved / name, out / name)


def _refuse_links_out(task_dir: Path) -> None:
    """Refuse a task whose files that the importer reads or carries lead, through symbolic links, out of its
    directory: an instruction.md linked to a host file would otherwise be copied into the task.

    Raises:
        ImportRefused: naming the first such path and where it leads.
    """
    home = Path(os.path.realpath(task_dir))

    def check(relative: str) -> None:
        real = Path(os.path.realpath(task_dir / relative))
        if not real.is_relative_to(home):
            raise ImportRefused(
                f"{relative} leads through a symbolic link to {real}, outside the task's directory; put the file "
                "itself in the task"
            )

    for relative in ("task.toml", "instruction.md", "environment", "environment/Dockerfile", "tests", "solution"):
        check(relative)
    for tree in ("tests", "solution"):
        if (task_dir / tree).is_dir():
            for path, st in tree_entries(task_dir / tree):
                if stat.S_ISLNK(st.st_mode):
                    check(f"{tree}/{os.fsdecode(path)}")


def _write(task_dir: Path, root: Path, force: bool) -> Task:
    _refuse_links_out(task_dir)
    try:
        data = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ImportRefused(f"task.toml: not valid TOML ({exc})") from None
    settings = _Settings(data)
    for required in ("instruction.md", "environment/Dockerfile", "tests/test.sh"):
        if not (task_dir / required).is_file():
            compose = (task_dir / "environment" / "docker-compose.yaml").exists()
            hint = "; multi-container (docker-compose) environments are not supported" if compose else ""
            raise ImportRefused(f"{required} is missing: a Harbor task needs it{hint}")
    try:
        image = read_dockerfile(task_dir / "environment" / "Dockerfile", workdir=settings.workdir)
    except DockerfileError as exc:
        raise ImportRefused(f"environment/Dockerfile {exc}") from None
    try:
        environment = Environment(python=image.python, requirements=tuple(image.requirements), env=image.env)
    except ValueError as exc:
        raise ImportRefused(f"environment/Dockerfile: {exc}") from None
    rewrite = _rewriter(image.workdir)
    with temporary_directory("rollbox-harbor-") as scratch:
        work = Path(scratch)
        _build_workspace(image.workspace, work / "workspace")
        _copy_rewritten(task_dir / "tests", work / "tests", rewrite)
        if settings.verifier_env:
            exports = "".join(f"export {k}={shlex.quote(rewrite(v))}\n" for k, v in settings.verifier_env.items())
            script = work / "tests" / "test.sh"
            text = script.read_text(encoding="utf-8", errors="surrogateescape")
            script.unlink()  # a link is replaced, never written through
            script.write_text(exports + text, encoding="utf-8", errors="surrogateescape")
        solution: Path | None = None
        if (task_dir / "solution" / "solve.sh").is_file():
            _copy_rewritten(task_dir / "solution", work / "solve", rewrite)
            solution = work / "solution"
            solution.mkdir()
            env = {**environment.env, **settings.solution_env}
            try:
                _run(_solve(work / "workspace", work / "solve", env, settings.solve_limits, work / "solved"))
            except IsolationUnavailable:
                raise
            except SandboxError as exc:
                raise ImportRefused(f"could not run solution/solve.sh in a sandbox: {exc}") from None
            _reference(work / "workspace", work / "solved", solution)
        instruction = rewrite((task_dir / "instruction.md").read_text(encoding="utf-8"))
        return write_task(
            root,
            task_id=task_dir.name,
            grading=ScriptGrading(),
            instruction=instruction,
            workspace=work / "workspace",
            tests=work / "tests",
            solution=solution,
            environment=environment,
            limits=settings.limits,
            metadata=settings.metadata,
            replace=force,
        )


def read_harbor(source: str | os.PathLike[str]) -> list[Draft | Refusal]:
    """The Harbor tasks at ``source``: a task directory, or a directory of them (each subdirectory with a
    task.toml or an instruction.md), one draft each, named after its directory.

    Raises:
        ImportSourceError: ``source`` is not a directory, or holds no Harbor task.
    """
    root = Path(source)
    if not root.is_dir():
        raise ImportSourceError(f"{root}: not a directory; give a Harbor task directory, or a directory of them")

    def is_task(path: Path) -> bool:
        return (path / "task.toml").is_file() or (path / "instruction.md").is_file()

    directories = [root] if is_task(root) else sorted(p for p in root.iterdir() if p.is_dir() and is_task(p))
    if not directories:
        raise ImportSourceError(f"{root}: no Harbor task in it (a directory with task.toml and instruction.md)")
    return [Draft(d.name, str(d), functools.partial(_write, d)) for d in directories]
