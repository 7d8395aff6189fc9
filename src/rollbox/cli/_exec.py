"""``rollbox exec``: run one command in a fresh sandbox; ``--json`` prints the object the README describes."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from pathlib import Path
from typing import BinaryIO

from rollbox.sandbox import (
    ExecResult,
    InsecureBackendWarning,
    IsolationUnavailable,
    Limits,
    Network,
    Sandbox,
    SandboxError,
    parse_duration,
    run,
)
from rollbox.sandbox.images import Image, ImageError

from ._args import byte_size
from ._exec_image import image_for_exec
from ._terminal import printable

_EPILOG = """\
exit status: 0 whenever the sandbox ran (whatever the command did: read "status"), 1 when rollbox or the
host failed (status infra_error), 2 for a usage error, 130 when interrupted, 141 when the reader of the
output went away.

statuses: ok, nonzero_exit, signaled, timeout, cpu_time_limit, memory_limit, output_limit, pids_limit,
disk_limit, infra_error.

examples:
  rollbox exec -- sh -c 'echo hello'
  rollbox exec --json --cpu-time 1 -- python3 -c 'while True: pass'       # status: cpu_time_limit
  rollbox exec --json --file ./solve.py:solve.py --stdin input.txt -- python3 solve.py
  rollbox exec --image recipe:java --file Main.java:Main.java -- sh -c 'javac Main.java && java Main'
"""


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``exec`` subcommand."""
    defaults = Limits()
    p = commands.add_parser(
        "exec",
        help="run one command in a fresh sandbox",
        description="Run CMD in a fresh isolated sandbox and report what happened.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.add_argument(
        "--memory",
        type=byte_size,
        default=defaults.memory_bytes,
        metavar="SIZE",
        help="memory including swap, e.g. 256M (default 512M)",
    )
    p.add_argument(
        "--timeout",
        type=_duration,
        default=defaults.timeout_s,
        metavar="S",
        help="wall-clock seconds (default %(default)s)",
    )
    p.add_argument(
        "--cpu-time",
        type=_duration,
        default=defaults.cpu_time_s,
        metavar="S",
        help="CPU seconds over all processes (default %(default)s)",
    )
    p.add_argument(
        "--pids",
        type=int,
        default=defaults.pids,
        metavar="N",
        help="processes plus threads (default %(default)s)",
    )
    p.add_argument(
        "--output-limit",
        type=byte_size,
        default=defaults.output_bytes,
        metavar="BYTES",
        help="bytes kept per stream; more kills the command (default 1M)",
    )
    p.add_argument(
        "--disk",
        type=byte_size,
        default=defaults.disk_bytes,
        metavar="SIZE",
        help="writable space in /workspace, /tmp and /dev/shm together (default 256M)",
    )
    p.add_argument(
        "--open-files",
        type=int,
        default=defaults.open_files,
        metavar="N",
        help="open file descriptors per process (default %(default)s)",
    )
    p.add_argument(
        "--network",
        choices=[n.value for n in Network],
        default=Network.NONE.value,
        help="none (default) or a loopback of the sandbox's own",
    )
    p.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="HOST:SANDBOX",
        help="copy a host file in; a relative SANDBOX path lands under /workspace (repeatable)",
    )
    p.add_argument("--stdin", type=Path, metavar="FILE", help="feed FILE to the command's stdin")
    p.add_argument(
        "--image",
        metavar="REF|DIR|recipe:NAME",
        help="run on an image's root: a store reference, an OCI layout directory, or a recipe built on first use "
        "(recipe:java; a language's recipe raises the limits to what its toolchain needs)",
    )
    p.add_argument(
        "--backend",
        choices=["namespaces", "process"],
        default="namespaces",
        help="namespaces (default) or process (rlimits only: NOT a security boundary)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...", help="the command and its arguments")
    p.set_defaults(run=_run)


def _fail(message: str) -> int:
    print(printable(f"rollbox exec: {message}"), file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        return _fail("no command given: rollbox exec [OPTIONS] -- CMD...")
    try:
        limits = Limits(
            timeout_s=args.timeout,
            cpu_time_s=args.cpu_time,
            memory_bytes=args.memory,
            pids=args.pids,
            output_bytes=args.output_limit,
            disk_bytes=args.disk,
            open_files=args.open_files,
        )
    except ValueError as exc:
        return _fail(str(exc))
    files: dict[str, bytes] = {}
    for spec in args.file:
        host, sep, inside = spec.rpartition(":")
        if not sep or not host or not inside:
            return _fail(f"--file {spec!r}: expected HOST:SANDBOX, for example ./solve.py:solve.py")
        try:
            files[inside] = Path(host).read_bytes()
        except OSError as exc:
            return _fail(f"--file {spec!r}: cannot read {host}: {exc.strerror}")
    stdin = None
    if args.stdin is not None:
        try:
            stdin = args.stdin.read_bytes()
        except OSError as exc:
            return _fail(f"--stdin {args.stdin}: {exc.strerror}")
    image = None
    if args.image is not None:
        try:
            image, limits = image_for_exec(args.image, limits)
        except ImageError as exc:
            print(printable(f"rollbox exec: --image {args.image}: {exc}"), file=sys.stderr)
            return 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InsecureBackendWarning)
        try:
            if image is None:
                result = asyncio.run(
                    run(cmd, limits=limits, network=args.network, stdin=stdin, files=files, backend=args.backend)
                )
            else:
                result = asyncio.run(_run_on(image, cmd, limits=limits, network=args.network, stdin=stdin, files=files))
        except IsolationUnavailable as exc:
            result = ExecResult.infra_error(str(exc))
        except ValueError as exc:
            return _fail(str(exc))
    for warning in caught:
        print(printable(f"rollbox: WARNING: {warning.message}"), file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        _print_human(result)
    return 1 if result.error is not None else 0


async def _run_on(
    image: Image, cmd: list[str], *, limits: Limits, network: str, stdin: bytes | None, files: dict[str, bytes]
) -> ExecResult:
    """``cmd`` in a fresh sandbox on ``image``'s root: in /workspace when ``files`` are put there (relative paths
    name them), in the image's ``WorkingDir`` otherwise (where ``docker run`` starts it), /workspace without one."""
    start = None if files else image.working_directory()
    try:
        async with Sandbox(limits=limits, network=network, image=image) as sb:
            for path, content in files.items():
                await sb.write_file(path, content)
            return await sb.exec(cmd, stdin=stdin, cwd=start or "/workspace")
    except SandboxError as exc:
        return ExecResult.infra_error(str(exc))


def _write_all(stream: BinaryIO, data: bytes) -> None:
    """Write all of ``data``: a large buffered write can stop short without raising (a reader that left, a signal)."""
    view = memoryview(data)
    while view:
        view = view[stream.write(view) :]


def _print_human(result: ExecResult) -> None:
    _write_all(sys.stdout.buffer, result.stdout)
    sys.stdout.flush()
    _write_all(sys.stderr.buffer, result.stderr)
    how = f"exit {result.exit_code}" if result.exit_code is not None else f"signal {result.signal}"
    peak = f", peak {result.peak_memory_bytes / 2**20:.1f} MiB" if result.peak_memory_bytes else ""
    truncated = [name for name, t in (("stdout", result.stdout_truncated), ("stderr", result.stderr_truncated)) if t]
    note = f", {' and '.join(truncated)} truncated" if truncated else ""
    print(
        f"rollbox: {result.status.value} ({how}) in {result.wall_s:.3f} s wall, {result.cpu_s:.3f} s CPU{peak}{note}",
        file=sys.stderr,
    )
    if result.error:
        print(printable(f"rollbox: error: {result.error}"), file=sys.stderr)
