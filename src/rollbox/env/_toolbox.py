"""The tools' work in the agent's sandbox, each turned into what the agent sees.

Reads go through the host's link-refusing file access; writes run as the agent's own commands (``cat > FILE``),
so that they keep a file's mode, count against the sandbox's disk limit and fail as the agent's own writes would.
Paths are checked to lie inside /workspace before anything runs.
"""

from __future__ import annotations

import errno
import signal
from dataclasses import dataclass

from rollbox.sandbox import ExecResult, Sandbox, Status

from ._patch import PatchError, apply_patch, parse_patch
from ._tools import ActionError, ToolCall, workspace_path
from ._types import Observation
from ._visible import VisibleTests

__all__ = ["Outcome", "Toolbox"]

#: The largest file read_file, edit and apply_patch read (a bigger one: read it in parts with bash).
_MAX_READ = 4 * 1024 * 1024
_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
_ENDS = {
    Status.TIMEOUT: "timed out: every process of the command was killed",
    Status.CPU_TIME_LIMIT: "hit the CPU time limit: every process of the command was killed",
    Status.MEMORY_LIMIT: "hit the memory limit: the command was killed",
    Status.OUTPUT_LIMIT: "printed more than the output limit: the command was killed",
    Status.PIDS_LIMIT: "hit the process limit: the command was killed",
    Status.DISK_LIMIT: "filled the disk (no space left in /workspace, /tmp and /dev/shm together)",
    Status.INFRA_ERROR: "could not run: rollbox or the host failed",
}


@dataclass(frozen=True)
class Outcome:
    """What one tool call came to: the text for the agent and, for tools that ran a command, its result."""

    text: str
    error: bool = False
    result: ExecResult | None = None

    def observation(self, tool: str | None) -> Observation:
        """As the observation of ``tool`` (not yet cut to the budget)."""
        result = self.result
        return Observation(
            text=self.text,
            tool=tool,
            error=self.error,
            status=result.status if result else None,
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
        end = f"[killed by signal {result.signal} ({signal.Signals(result.signal).name})]"
    else:
        end = f"[{result.status.value}: the command {_ENDS.get(result.status, result.status.value)}]"
    return text + end


class Toolbox:
    """The tools of one episode, working in its sandbox."""

    def __init__(self, sandbox: Sandbox, visible: VisibleTests) -> None:
        self.sandbox = sandbox
        self.visible = visible

    async def run(self, call: ToolCall, timeout_s: float) -> Outcome:
        """Carry out ``call`` (any tool but ``submit``), its command within ``timeout_s``."""
        args = call.arguments
        try:
            if call.name == "bash":
                result = await self.sandbox.exec(["bash", "-c", args["command"]], timeout_s=timeout_s)
                return Outcome(command_text(result), result=result)
            if call.name == "read_file":
                return self._lines(call, await self._read(workspace_path(args["path"])))
            if call.name == "write_file":
                return await self._write({workspace_path(args["path"]): args["content"]}, timeout_s)
            if call.name == "edit":
                return await self._edit(workspace_path(args["path"]), args["old"], args["new"], timeout_s)
            if call.name == "apply_patch":
                return await self._patch(args["unified_diff"], timeout_s)
            if call.name == "run_tests":
                if not self.visible:
                    return Outcome("This task has no visible tests: check your work with bash, then submit().")
                result = await self.visible.run(self.sandbox, timeout_s)
                return Outcome(command_text(result), result=result)
        except ActionError as exc:
            return Outcome(f"Error: {call.name}: {exc}", error=True)
        raise AssertionError(f"no tool {call.name!r}")  # parse_action admits only known tools

    async def _read(self, path: str) -> str:
        """The text of the workspace file ``path``.

        Raises:
            ActionError: it is missing, not a regular file, behind a link, too large, or not text.
        """
        try:
            data = await self.sandbox.read_file(path, max_bytes=_MAX_READ)
        except OSError as exc:
            reason = {
                errno.ENOENT: "no such file",
                errno.ELOOP: "the path is or passes through a symbolic link; read it with bash (cat)",
                errno.EFBIG: f"the file is larger than {_MAX_READ} bytes; read parts of it with bash (head, sed -n)",
                errno.EINVAL: "not a regular file",
                errno.ENOTDIR: "a component of the path is not a directory",
                errno.EISDIR: "a directory, not a file; list it with bash (ls)",
            }.get(exc.errno or 0, exc.strerror or str(exc))
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
            raise ActionError(f"start and end must satisfy 1 <= start <= end, got start={start}, end={end}")
        shown = "".join(lines[first - 1 : last])
        return Outcome(f"[lines {first}-{min(last, len(lines))} of {len(lines)}]\n{shown}")

    async def _write(self, files: dict[str, str | None], timeout_s: float) -> Outcome:
        """Write (or, for ``None``, delete) each file as the agent's own command would."""
        for path, content in files.items():
            if content is None:
                result = await self.sandbox.exec(["rm", "-f", "--", path], timeout_s=timeout_s)
            else:
                argv = ["sh", "-c", _WRITE, "sh", path]
                result = await self.sandbox.exec(argv, stdin=content.encode("utf-8"), timeout_s=timeout_s)
            if not result.ok:
                return Outcome(f"Error: writing {path!r} failed:\n{command_text(result)}", error=True, result=result)
        changed = ", ".join(f"{p} ({'deleted' if c is None else f'{len(c.encode())} bytes'})" for p, c in files.items())
        return Outcome(f"Wrote {changed}." if changed else "Nothing to change.")

    async def _edit(self, path: str, old: str, new: str, timeout_s: float) -> Outcome:
        if not old:
            raise ActionError("'old' must not be empty: give the exact text to replace")
        text = await self._read(path)
        count = text.count(old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ActionError(f"'old' {where} in {path!r}; it must occur exactly once (include more context)")
        return await self._write({path: text.replace(old, new, 1)}, timeout_s)

    async def _patch(self, diff: str, timeout_s: float) -> Outcome:
        # Every file the diff names is read first (paths checked, from the sandbox), then applied all at once.
        contents: dict[str, str | None] = {}

        async def load(path: str) -> None:
            try:
                contents[path] = await self._read(path)
            except ActionError as exc:
                if "no such file" not in str(exc):
                    raise
                contents[path] = None

        try:
            for patch in parse_patch(diff):
                for name in (patch.old_path, patch.new_path):
                    if name is not None:
                        await load(workspace_path(name))
            changes = apply_patch(diff, lambda p: contents.get(workspace_path(p)))
        except PatchError as exc:
            raise ActionError(f"the patch does not apply, nothing changed: {exc}") from None
        return await self._write({workspace_path(p): c for p, c in changes.items()}, timeout_s)
