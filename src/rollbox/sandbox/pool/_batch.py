"""Batch execution: many programs in one call, spread over the machine, each result streamed back as it is done.

    programs = [Program(argv=["python3", "main.py"], files={"main.py": source}) for source in sources]
    async for index, result in run_batch(programs, limits=Limits(timeout_s=5)):
        print(index, result.status)

Every program runs in a sandbox of its own: a warm one from a pool, reset between programs, so that nothing of
one program reaches the next (see :meth:`Sandbox.reset`). Results arrive in the order programs finish, each with
the index of its program; every program gets exactly one result (``infra_error`` when rollbox or the host failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from rollbox.sandbox._config import SandboxConfig
from rollbox.sandbox._files import resolve_sandbox_path
from rollbox.sandbox._limits import Limits, Network
from rollbox.sandbox._result import ExecResult
from rollbox.sandbox._shortage import host_error

from ._pool import SandboxSource, WarmSandboxes

__all__ = ["Program", "as_finished", "run_batch"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Program:
    """One program of a batch: its command, the files it needs in /workspace, and its stdin."""

    argv: list[str]
    files: Mapping[str, bytes | str] = field(default_factory=dict)
    stdin: bytes | str | None = None
    #: Run ``["python3", SCRIPT, ...]`` by forking the sandbox's pre-started interpreter (see ``Sandbox.exec``).
    warm_python: bool = False

    def __post_init__(self) -> None:
        """Check every field as running the program would use it: a program that could never run is refused when it
        is made (a job's payload when it is submitted), not found out as an infrastructure error when it runs.

        Raises:
            ValueError: a field that is not what it should be, named (``Program.stdin``, a path of ``files``).
        """
        argv = self.argv  # a list or a tuple: a string would run as its characters
        if (
            not isinstance(argv, list | tuple)
            or not argv
            or not all(isinstance(a, str) and "\0" not in a for a in argv)
        ):
            raise ValueError(f"Program.argv must be a non-empty list of strings without NUL, got {argv!r:.200}")
        if not isinstance(self.stdin, bytes | str | None):
            raise ValueError(f"Program.stdin must be text, bytes or None, got {self.stdin!r:.80}")
        if not isinstance(self.files, Mapping):
            raise ValueError(f"Program.files must map paths to text or bytes, got {self.files!r:.80}")
        for path, content in self.files.items():
            if not isinstance(path, str) or not isinstance(content, bytes | str):
                raise ValueError(f"Program.files must map paths to text or bytes, got {path!r:.80}: {content!r:.40}")
            try:
                resolve_sandbox_path(path)
            except ValueError as exc:
                raise ValueError(f"Program.files: {exc}") from None
        if type(self.warm_python) is not bool:
            raise ValueError(f"Program.warm_python must be true or false, got {self.warm_python!r:.40}")
        if self.warm_python and (len(self.argv) < 2 or self.argv[0] != "python3" or self.argv[1].startswith("-")):
            raise ValueError(f"warm_python runs ['python3', SCRIPT, ARGS...] without options, got {self.argv!r}")


async def run_batch(
    programs: Iterable[Program],
    *,
    limits: Limits | None = None,
    network: Network | str = Network.NONE,
    workers: int | None = None,
    sandboxes: SandboxSource | None = None,
) -> AsyncGenerator[tuple[int, ExecResult], None]:
    """Run every program, ``workers`` at a time (default: the CPU count), and yield ``(index, result)`` as each ends.

    Args:
        programs: What to run; the index in the results is the position here.
        limits, network: For every program's sandbox.
        workers: How many programs run at once.
        sandboxes: Where sandboxes come from (default: warm pools of ``workers`` sandboxes, closed at the end).

    Raises:
        TypeError: an item of ``programs`` is not a :class:`Program`.
        ValueError: ``workers`` is not positive.
        IsolationUnavailable: the machine cannot give the isolation asked for.
    """
    todo = list(programs)
    if strays := [p for p in todo if not isinstance(p, Program)]:
        raise TypeError(
            f"run_batch takes Program items, such as Program(argv=['python3', 'main.py']); got {strays[0]!r}"
        )
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    config = SandboxConfig(limits=limits or Limits(), network=Network(network))
    owned = sandboxes is None
    source: SandboxSource = sandboxes or WarmSandboxes(
        size=min(workers, max(1, len(todo))), warm_python=any(p.warm_python for p in todo)
    )

    async def one(program: Program) -> ExecResult:
        try:
            async with source.sandbox(config) as sb:
                for path, content in program.files.items():
                    await sb.write_file(path, content)
                return await sb.exec(program.argv, stdin=program.stdin, warm_python=program.warm_python)
        except Exception as exc:  # every program gets its one result: a batch never waits for a missing one
            if isinstance(exc, OSError):
                return ExecResult.infra_error(host_error(type(exc).__name__, exc))
            return ExecResult.infra_error(f"{type(exc).__name__}: {exc}")

    jobs = [functools.partial(one, p) for p in todo]
    try:
        # Closed explicitly: the programs left are cancelled before the pool they use is closed.
        async with contextlib.aclosing(as_finished(jobs, workers=workers)) as results:
            async for item in results:
                yield item
    finally:
        if owned and isinstance(source, WarmSandboxes):
            await source.close()


async def as_finished(
    jobs: Sequence[Callable[[], Awaitable[T]]], *, workers: int
) -> AsyncGenerator[tuple[int, T], None]:
    """Run ``jobs`` (coroutine functions that never raise), ``workers`` at a time, started in their order, and
    yield ``(index, result)`` as each ends. Closing the iterator early (``contextlib.aclosing``) cancels the jobs
    left and waits for them: nothing keeps running behind the caller."""
    queue: asyncio.Queue[tuple[int, T]] = asyncio.Queue()
    gate = asyncio.Semaphore(workers)

    async def one(index: int, job: Callable[[], Awaitable[T]]) -> None:
        async with gate:
            result = await job()
        await queue.put((index, result))

    tasks = [asyncio.create_task(one(i, job)) for i, job in enumerate(jobs)]
    try:
        for _ in tasks:
            yield await queue.get()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
