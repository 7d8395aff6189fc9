"""What an episode hands back: observations, step information, and the states and ends of an episode."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rollbox.judge import Verdict, VerdictStatus
from rollbox.sandbox import Status

__all__ = ["EndReason", "EpisodeState", "Observation", "StepInfo", "StepResult"]


class EpisodeState(str, enum.Enum):
    """Where an episode is in its life. It moves only forward."""

    #: Made by :func:`rollbox.make`; :meth:`Episode.reset` starts it.
    NEW = "new"
    #: Reset: its sandbox is open and :meth:`Episode.step` takes actions.
    RUNNING = "running"
    #: Ended (submitted, out of budget, or an infrastructure failure) and judged; ``step`` refuses.
    DONE = "done"
    #: Closed: its sandbox is gone.
    CLOSED = "closed"


class EndReason(str, enum.Enum):
    """Why an episode ended. Every end but ``infra_error`` is judged on the workspace as it stands."""

    #: The agent called ``submit()``.
    SUBMITTED = "submitted"
    #: The last turn of ``Budget.max_turns`` was taken.
    MAX_TURNS = "max_turns"
    #: ``Budget.wall_s`` ran out.
    WALL_TIME = "wall_time"
    #: The observations reached ``Budget.output_bytes``.
    OUTPUT = "output"
    #: The caller ended it (:meth:`Episode.end`: a trainer's own turn limit came first).
    STOPPED = "stopped"
    #: rollbox or the host failed (the agent's sandbox, or exporting its workspace): no reward, mask it.
    INFRA_ERROR = "infra_error"


@dataclass(frozen=True, kw_only=True)
class Observation:
    """What the agent sees after reset or a tool call. ``text`` is what a model is shown; the rest describes it."""

    text: str
    #: The tool that produced it; ``None`` at reset.
    tool: str | None = None
    #: The action was malformed or could not be carried out (an error observation); it still counted a turn.
    error: bool = False
    #: How the tool's command ended, for tools that run one (``bash``, ``run_tests``, writes).
    status: Status | None = None
    exit_code: int | None = None
    #: The text was cut (to ``Budget.observation_bytes``, or to what ``Budget.output_bytes`` left).
    truncated: bool = False
    #: The size of the full text in bytes (UTF-8), before any cut.
    full_bytes: int = 0

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        """As a plain dict (the trajectory's form)."""
        return {
            "text": self.text,
            "tool": self.tool,
            "error": self.error,
            "status": self.status.value if self.status else None,
            "exit_code": self.exit_code,
            "truncated": self.truncated,
            "full_bytes": self.full_bytes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Observation:
        """The inverse of :meth:`to_json`."""
        return cls(
            text=data["text"],
            tool=data.get("tool"),
            error=bool(data.get("error")),
            status=Status(data["status"]) if data.get("status") else None,
            exit_code=data.get("exit_code"),
            truncated=bool(data.get("truncated")),
            full_bytes=int(data.get("full_bytes", 0)),
        )


@dataclass(frozen=True, kw_only=True)
class StepInfo(Mapping[str, Any]):
    """What else a step says, as attributes or, as trainers expect of ``info``, by key (``info["verdict"]``)."""

    #: The turn this step was (1 for the first).
    turn: int
    tool: str | None
    #: Seconds the step took, grading included.
    wall_s: float
    #: The step's shaped reward (the change in the visible tests' pass rate) when shaping is on, else ``None``.
    shaped_reward: float | None = None
    #: Set on the last step: why the episode ended.
    end_reason: EndReason | None = None
    #: Set on the last step: the judge's verdict (status ``infra_error``, reward ``None``: mask the episode).
    verdict: Verdict | None = None

    @property
    def status(self) -> VerdictStatus | None:
        """The episode's outcome on its last step (the verdict's status), else ``None``."""
        return self.verdict.status if self.verdict else None

    @property
    def truncated(self) -> bool:
        """Whether a budget, not the agent, ended the episode (Gymnasium's ``truncated``)."""
        return self.end_reason in (EndReason.MAX_TURNS, EndReason.WALL_TIME, EndReason.OUTPUT, EndReason.STOPPED)

    def _keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)] + ["status", "truncated"]

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def to_json(self) -> dict[str, Any]:
        """As a plain JSON dict."""
        return {
            "turn": self.turn,
            "tool": self.tool,
            "wall_s": round(self.wall_s, 6),
            "shaped_reward": self.shaped_reward,
            "end_reason": self.end_reason.value if self.end_reason else None,
            "verdict": self.verdict.to_json() if self.verdict else None,
            "status": self.status.value if self.status else None,
            "truncated": self.truncated,
        }


class StepResult(NamedTuple):
    """One step's result; unpacks as ``obs, reward, done, info``."""

    observation: Observation
    #: 0.0 before the end (or the shaped reward, when shaping is on); on the last step the verdict's reward,
    #: ``None`` for an infrastructure failure.
    reward: float | None
    done: bool
    info: StepInfo
