"""``rollbox episode``: run one agent episode on a task with a policy, showing the turns as they happen."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from rollbox.env import PolicyError, Trajectory, Turn, make, policy_from_name, run_episode, write_trajectories
from rollbox.sandbox import IsolationUnavailable, SandboxError
from rollbox.tasks import TaskFormatError

from ._args import positive_seconds, whole
from ._terminal import printable

_EPILOG = """\
policies: reference (the task's solution/ through the tools), noop (submit at once), replay:FILE (the actions of
a recorded trajectory), openai:MODEL (a chat-completions server: --base-url, --api-key).

With --json, each turn is printed as one JSON line as it happens ({"turn": ...}), then the whole trajectory
({"trajectory": ...}): its verdict, reward (null on infra_error: mask it) and end_reason.

exit status: 0 when the episode ran and was judged (read the verdict), 1 on infra_error or when the policy
failed, 2 when the task or the arguments are invalid, 130 when interrupted.

examples:
  rollbox episode tasks/calc --policy reference
  rollbox episode tasks/calc --policy openai:qwen --base-url http://127.0.0.1:8000/v1 --trajectories runs.jsonl
  rollbox episode tasks/calc --policy replay:runs.jsonl --json
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``episode`` subcommand."""
    p = commands.add_parser(
        "episode",
        help="run one agent episode on a task with a policy",
        description="Run one multi-turn episode of TASK_DIR: POLICY acts through the tools in a sandbox, and the "
        "judge grades the final workspace in a fresh one.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("task", type=Path, metavar="TASK_DIR", help="a task directory (task.toml, workspace/, tests/)")
    p.add_argument("--policy", required=True, metavar="POLICY", help="reference, noop, replay:FILE or openai:MODEL")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    p.add_argument("--trajectories", type=Path, metavar="FILE", help="append the trajectory (.jsonl or .parquet)")
    p.add_argument("--max-turns", type=whole(1, 1_000_000), metavar="N", help="override the task's turn budget")
    p.add_argument("--wall-time", type=positive_seconds, metavar="S", help="override the episode's wall-time budget")
    p.add_argument("--shaped-rewards", action="store_true", help="reward each run_tests by the visible tests' gain")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai: the server's API root")
    p.add_argument("--api-key", default=None, help="openai: a bearer token")
    p.set_defaults(run=_run)


def _show(turn: Turn, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"turn": turn.to_json()}), flush=True)
        return
    action = turn.action
    name = action.get("name") if isinstance(action, dict) else None
    arguments = action.get("arguments") if isinstance(action, dict) else action
    shown = json.dumps(arguments, ensure_ascii=False) if not isinstance(arguments, str) else arguments
    more = "..." if len(shown) > 200 else ""
    print(printable(f"--- turn {turn.turn}: {name}({shown[:200]}{more})  [{turn.wall_s:.2f} s]"))
    text = turn.observation.text
    print(printable(text if len(text) <= 2000 else text[:2000] + f"\n... ({len(text)} characters)"), flush=True)


async def _episode(args: argparse.Namespace) -> Trajectory:
    options: dict[str, Any] = (
        {"base_url": args.base_url, "api_key": args.api_key} if args.policy.startswith("openai:") else {}
    )
    policy = policy_from_name(args.policy, **options)
    budget = {"max_turns": args.max_turns, "wall_s": args.wall_time}
    episode = make(args.task, shaped_rewards=args.shaped_rewards, **{k: v for k, v in budget.items() if v is not None})
    if not args.json:
        print(
            printable(f"task {episode.task.id}, policy {policy.name}, budget {episode.budget.max_turns} turns"),
            flush=True,
        )
    try:
        return await run_episode(episode, policy, on_turn=lambda turn: _show(turn, args.json))
    finally:
        close = getattr(policy, "aclose", None)
        if close is not None:
            await close()


def _run(args: argparse.Namespace) -> int:
    try:
        trajectory = asyncio.run(_episode(args))
    except (TaskFormatError, ValueError) as exc:
        print(printable(f"rollbox episode: {exc}"), file=sys.stderr)
        return 2
    except (PolicyError, SandboxError, IsolationUnavailable) as exc:
        print(printable(f"rollbox episode: {exc}"), file=sys.stderr)
        return 1
    verdict = trajectory.verdict or {}
    if args.json:
        print(json.dumps({"trajectory": trajectory.to_json()}))
    else:
        print(
            f"=== {trajectory.end_reason}: {verdict.get('status')}, reward {trajectory.reward}, "
            f"{verdict.get('passed')}/{verdict.get('total')} hidden tests passed, {len(trajectory.turns)} turns "
            f"in {trajectory.wall_s:.2f} s"
        )
        for flag in verdict.get("flags") or []:
            print(printable(f"  flag {flag['code']}: {flag['path']} {flag['detail']}"))
        if verdict.get("error"):
            print(printable(f"  error: {verdict['error']}"))
    if args.trajectories:
        try:
            write_trajectories(args.trajectories, [trajectory])
        except OSError as exc:
            where = "" if args.json else " (the trajectory is printed above with --json)"
            print(
                printable(
                    f"rollbox episode: cannot write the trajectory to {args.trajectories} ({exc.strerror or exc}); "
                    f"choose another --trajectories FILE{where}"
                ),
                file=sys.stderr,
            )
            return 1
    return 1 if trajectory.status == "infra_error" else 0
