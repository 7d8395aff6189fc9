"""The tools' work in the agent's sandbox, each turned into what the agent sees.

Every tool call ends by its deadline (the command timeout, or what is left of the episode's wall time, whichever
comes first): a command's timeout is the time left, and file work looks at the clock between pieces. File work
goes through the sandbox's link-refusing host-side file access, in worker threads, never on the event loop: reads
one file at a time (4 MB at most), writes in batches (a patch adding a thousand files is a few hand-offs, no
process at all). A write keeps a file's mode and fails where the agent's own write would (a full disk, a file
over the file size limit); paths are checked to lie inside /workspace before anything is read or written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rollbox.sandbox import ExecResult, Sandbox, Status, signal_name

from ._patch import PatchError, PatchTimeout, apply_patch, parse_patch
from ._tools import ActionError, ToolCall, workspace_path
from ._types import Observation
from ._visible import VisibleTests

__all__ = ["Outcome", "Toolbox"]

#: The largest file read_file, edit and apply_patch read (a bigger one: read it in parts with bash).
_MAX_READ = 4 * 1024 * 1024
#: The longest bash command: the kernel's limit on one argument of a program (MAX_ARG_STRLEN), less its NUL.
_MAX_COMMAND = 128 * 1024 - 1
#: One hand-off of writes to a worker thread holds at most this many files, or bytes: the clock is looked at
#: between two.
_BATCH_FILES = 256
_BATCH_BYTES = 4 * 1024 * 1024
_ENDS = {
    Status.TIMEOUT: "timed out: every process of the command was killed",
    Status.CPU_TIME_LIMIT: "hit the CPU time limit: every process of the command was killed",
    Status.MEMORY_LIMIT: "hit the memory limit: the command was killed",
    Status.OUTPUT_LIMIT: "printed more than the output limit: the command was killed",
    Status.PIDS_LIMIT: "hit the process limit: the command was killed",
    Status.DISK_LIMIT: "filled the disk (no space left in /workspace, /tmp and /dev/shm together)",
    Status.INFRA_ERROR: "could not run: rollbox or the host failed",
}
_FILE_ERRORS = {
    errno.ENOENT: "no such file",
    errno.ELOOP: "the path is or passes through a symbolic link; use bash for it",
    errno.EINVAL: "not a regular file",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.EISDIR: "a directory, not a file; list it with bash (ls)",
    errno.ENAMETOOLONG: "the path, or a name in it, is too long",
    errno.ENOSPC: "the disk is full (no space left in /workspace, /tmp and /dev/shm together)",
}


#: Where diffs are parsed and applied: threads of their own, so that a diff that computes until its deadline (a
#: hostile one can) never holds up the shared worker threads that every sandbox's file work and the judge use.
_PATCHING = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rollbox-env-patch")


class _Late(Exception):
    """A tool call's deadline came before its file work was done; the message says what was done."""


@dataclass(frozen=True)
class Outcome:
    """What one tool call came to: the text for the agent and, for tools that ran a command, its result."""

    text: str
    error: bool = False
    result: ExecResult | None = None
    #: How the call ended, where no command's result says it (a write that filled the disk: ``disk_limit``).
    status: Status | None = None

    def observation(self, tool: str | None) -> Observation:
        """As the observation of ``tool`` (not yet cut to the budget)."""
        result = self.result
        return Observation(
            text=self.text,
            tool=tool,
            error=self.error,
            status=result.status if result else self.status,
            exit_code=result.exit_code if result else None,
        )


def command_text(result: ExecResult) -> str:
    """A command's output and how it ended, as the agent reads it."""
    parts = [result.stdout_text]
    if result.stderr:
        parts.append(
            ("" if not result.stdout or result.stdout.endswith(b"\n") else "\n") + "[stderr]\n" + result.stderr_text
        )
    text = "".join(parts)
    if text and not text.endswith("\n"):
        text += "\n"
    if result.status in (Status.OK, Status.NONZERO_EXIT):
        end = f"[exit code {result.exit_code}]"
    elif result.status is Status.SIGNALED and result.signal:
        end = f"[killed by signal {result.signal} ({signal_name(result.signal)})]"
    else:
        end = f"[{result.status.value}: the command {_ENDS.get(result.status, result.status.value)}]"
    return text + end


def _batches(files: dict[str, bytes | None]) -> Iterator[dict[str, bytes | None]]:
    batch: dict[str, bytes | None] = {}
    size = 0
    for path, data in files.items():
        batch[path] = data
        size += len(data or b"")
        if len(batch) >= _BATCH_FILES or size >= _BATCH_BYTES:
            yield batch
            batch, size = {}, 0
    if batch:
        yield batch


class Toolbox:
    """The tools of one episode, working in its sandbox."""

    def __init__(self, sandbox: Sandbox, visible: VisibleTests) -> None:
        self.sandbox = sandbox
        self.visible = visible

    async def run(self, call: ToolCall, deadline: float) -> Outcome:
        """Carry out ``call`` (any tool but ``submit``) by ``deadline`` (``time.monotonic()``)."""
        args = call.arguments
        try:
            if call.name == "bash":
                return await self._bash(args["command"], deadline)
            if call.name == "read_file":
                return self._lines(call, await self._read(workspace_path(args["path"])))
            if call.name == "write_file":
                return await self._write({workspace_path(args["path"]): args["content"]}, deadline)
            if call.name == "edit":
                return await self._edit(workspace_path(args["path"]), args["old"], args["new"], deadline)
            if call.name == "apply_patch":
                return await self._patch(args["unified_diff"], deadline)
            if call.name == "run_tests":
                if not self.visible:
                    return Outcome("This task has no visible tests: check your work with bash, then submit().")
                try:
                    result = await self.visible.run(self.sandbox, _left(deadline))
                except OSError as exc:
                    return _write_failed("the visible tests", exc, "the tests did not run")
                return Outcome(command_text(result), result=result)
        except ActionError as exc:
            return Outcome(f"Error: {call.name}: {exc}", error=True)
        except _Late as exc:
            return Outcome(f"Error: {call.name}: {exc}", error=True, status=Status.TIMEOUT)
        raise AssertionError(f"no tool {call.name!r}")  # parse_action admits only known tools

    async def _bash(self, command: str, deadline: float) -> Outcome:
        size = len(command.encode())
        if size > _MAX_COMMAND:
            raise ActionError(
                f"the command is {size} bytes; a command line holds at most {_MAX_COMMAND} (the kernel's limit on "
                "one argument): write a long script to a file with write_file, then run it with bash"
            )
        result = await self.sandbox.exec(["bash", "-c", command], timeout_s=_left(deadline))
        return Outcome(command_text(result), result=result)

    async def _read(self, path: str) -> str:
        """The text of the workspace file ``path``.

        Raises:
            ActionError: it is missing, not a regular file, behind a link, too large, or not text.
        """
        text = await self._read_if_any(path)
        if text is None:
            raise ActionError(f"cannot read {path!r}: {_FILE_ERRORS[errno.ENOENT]}")
        return text

    async def _read_if_any(self, path: str) -> str | None:
        """The text of the workspace file ``path``, or None when there is none (as :meth:`_read` otherwise)."""
        try:
            data = await self.sandbox.read_file(path, max_bytes=_MAX_READ)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            reason = {
                errno.ELOOP: "the path is or passes through a symbolic link; read it with bash (cat)",
                errno.EFBIG: f"the file is larger than {_MAX_READ} bytes; read parts of it with bash (head, sed -n)",
            }.get(exc.errno or 0) or _FILE_ERRORS.get(exc.errno or 0, exc.strerror or str(exc))
            raise ActionError(f"cannot read {path!r}: {reason}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ActionError(
                f"{path!r} is a binary file of {len(data)} bytes; inspect it with bash (xxd, od)"
            ) from None

    @staticmethod
    def _lines(call: ToolCall, text: str) -> Outcome:
        start, end = call.arguments.get("start"), call.arguments.get("end")
        if start is None and end is None:
            return Outcome(text if text else "(the file is empty)")
        lines = text.splitlines(keepends=True)
        first, last = start or 1, end if end is not None else len(lines)
        if first < 1 or last < first:
            shown = f"start={start}, end={end}" + (f" (the file has {len(lines)} lines)" if end is None else "")
            raise ActionError(f"start and end must satisfy 1 <= start <= end, got {shown}")
        shown_lines = "".join(lines[first - 1 : last])
        return Outcome(f"[lines {first}-{min(last, len(lines))} of {len(lines)}]\n{shown_lines}")

    async def _write(self, files: dict[str, str | None], deadline: float) -> Outcome:
        """Write (or, for ``None``, delete) each file, as the agent's own write would, in batches by ``deadline``."""
        limit = self.sandbox.limits.effective_file_size_bytes
        encoded = {path: None if text is None else text.encode() for path, text in files.items()}
        for path, data in encoded.items():
            if data is not None and len(data) > limit:
                return Outcome(
                    f"Error: {path!r} would hold {len(data)} bytes, more than the sandbox's file size limit of "
                    f"{limit}; nothing was written",
                    error=True,
                    status=Status.DISK_LIMIT,
                )
        done = 0
        for batch in _batches(encoded):
            if time.monotonic() >= deadline:
                raise _Late(
                    f"ran out of time after writing {done} of {len(encoded)} files (the command timeout, or the "
                    "episode's wall time, came first); the rest were not written"
                )
            try:
                await self.sandbox.write_files(batch)
            except OSError as exc:
                failed = exc.filename if isinstance(exc.filename, str) else "a file"
                before = list(encoded).index(failed) if failed in encoded else done
                return _write_failed(
                    repr(failed), exc, f"{before} of {len(encoded)} files before it were written, the rest were not"
                )
            done += len(batch)
        changed = ", ".join(
            f"{p} ({'deleted' if d is None else f'{len(d)} bytes'})" for p, d in list(encoded.items())[:50]
        )
        more = f" and {len(encoded) - 50} more" if len(encoded) > 50 else ""
        return Outcome(f"Wrote {changed}{more}." if changed else "Nothing to change.")

    async def _edit(self, path: str, old: str, new: str, deadline: float) -> Outcome:
        if not old:
            raise ActionError("'old' must not be empty: give the exact text to replace")
        text = await self._read(path)
        count = text.count(old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ActionError(f"'old' {where} in {path!r}; it must occur exactly once (include more context)")
        return await self._write({path: text.replace(old, new, 1)}, deadline)

    async def _patch(self, diff: str, deadline: float) -> Outcome:
        # Parsed and applied in worker threads that stop at the deadline; every file the diff names is read once,
        # its path checked, before anything is applied, then every change is written at once.
        loop = asyncio.get_running_loop()
        try:
            parsed = await loop.run_in_executor(_PATCHING, functools.partial(parse_patch, diff, deadline=deadline))
            # Each file by its one path in the workspace: 'calc.py' and './calc.py' are one file, patched in turn
            # (as two, each part applied to the original and the last one written).
            patches = [
                dataclasses.replace(
                    patch,
                    old_path=None if patch.old_path is None else workspace_path(patch.old_path),
                    new_path=None if patch.new_path is None else workspace_path(patch.new_path),
                )
                for patch in parsed
            ]
            contents: dict[str, str | None] = {}
            for patch in patches:
                for path in (patch.old_path, patch.new_path):
                    if path is not None and path not in contents:
                        if time.monotonic() >= deadline:
                            raise PatchTimeout("reading the files it names took longer than the time left")
                        contents[path] = await self._read_if_any(path)
            apply = functools.partial(apply_patch, patches, contents.__getitem__, deadline=deadline)
            changes = await loop.run_in_executor(_PATCHING, apply)
        except PatchTimeout as exc:
            raise _Late(
                f"ran out of time: {exc} (the command timeout, or the episode's wall time, came first); nothing changed"
            ) from None
        except PatchError as exc:
            raise ActionError(f"the patch does not apply, nothing changed: {exc}") from None
        return await self._write(changes, deadline)


def _write_failed(what: str, exc: OSError, then: str) -> Outcome:
    """A write the sandbox refused (a full disk, a link on the path), as the agent's error."""
    reason = _FILE_ERRORS.get(exc.errno or 0, exc.strerror or str(exc))
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return Outcome(
        f"Error: writing {what} failed: {reason}; {then}", error=True, status=Status.DISK_LIMIT if full else None
    )


def _left(deadline: float) -> float:
    """Seconds to ``deadline``; a command given none times out at once."""
    return max(deadline - time.monotonic(), 0.001)
