"""Running git on repositories rollbox does not trust: a fixed environment, never the user's or the system's
configuration, never a hook of the repository, no prompts."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from rollbox.sandbox import RollboxError

__all__ = ["GitError", "environment", "git", "git_command"]

#: Settings that keep a repository's own files from running anything (its configuration is rewritten before any
#: other command by scrub; these hold even before that, and in repositories rollbox only reads).
_SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat")


class GitError(RollboxError):
    """A git command failed; the message has the command, its exit status and the end of its error output."""


def environment() -> dict[str, str]:
    """The environment rollbox runs git with: nothing of the caller's but PATH."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "LC_ALL": "C",
        # Commits the tests and scrub make need an identity; no user's is read.
        "GIT_AUTHOR_NAME": "rollbox",
        "GIT_AUTHOR_EMAIL": "rollbox@localhost",
        "GIT_COMMITTER_NAME": "rollbox",
        "GIT_COMMITTER_EMAIL": "rollbox@localhost",
    }


def git_command(*args: str) -> list[str]:
    """The argv of ``git ARGS`` with rollbox's safe settings.

    Raises:
        GitError: there is no git on PATH.
    """
    executable = shutil.which("git", path=os.environ.get("PATH"))
    if executable is None:
        raise GitError("git is not installed (not on PATH); install it (apt-get install git)")
    return [executable, *_SAFE, *args]


def git(*args: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    """Run ``git ARGS`` in ``cwd`` with a fixed environment (see the module's docstring); its stdout.

    Raises:
        GitError: git exited non-zero, or is not installed.
    """
    argv = git_command(*args)
    done = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, env=environment(), check=False)
    if done.returncode != 0:
        error = done.stderr.decode("utf-8", "replace").strip()[-800:]
        raise GitError(f"git {' '.join(args)} (in {cwd}) failed with exit status {done.returncode}: {error}")
    return done.stdout
