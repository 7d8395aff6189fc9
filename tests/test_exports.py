"""The public API is exactly what ``__all__`` says: adding or removing a name is a deliberate change."""

from __future__ import annotations

import rollbox
import rollbox.judge
import rollbox.sandbox
import rollbox.tasks


def test_top_level_exports() -> None:
    assert sorted(rollbox.__all__) == sorted(
        [
            "Backend",
            "Client",
            "ExecResult",
            "InsecureBackendWarning",
            "IsolationUnavailable",
            "Limits",
            "Network",
            "PoolExhausted",
            "RollboxError",
            "Sandbox",
            "SandboxConfig",
            "SandboxError",
            "SandboxPool",
            "SandboxStateError",
            "Status",
            "__version__",
            "make",
            "run",
        ]
    )
    for name in rollbox.__all__:
        assert hasattr(rollbox, name)


def test_sandbox_exports() -> None:
    assert set(rollbox.__all__) - {"__version__", "make", "Client"} <= set(rollbox.sandbox.__all__)
    for name in rollbox.sandbox.__all__:
        assert hasattr(rollbox.sandbox, name)


def test_status_taxonomy_is_closed() -> None:
    assert [s.value for s in rollbox.Status] == [
        "ok",
        "nonzero_exit",
        "signaled",
        "timeout",
        "cpu_time_limit",
        "memory_limit",
        "output_limit",
        "pids_limit",
        "disk_limit",
        "infra_error",
    ]


def test_tasks_and_judge_exports() -> None:
    assert sorted(rollbox.tasks.__all__) == sorted(
        [
            "AuditFinding",
            "AuditReport",
            "Comparator",
            "Environment",
            "FORMATS",
            "Files",
            "FunctionGrading",
            "GitError",
            "Grading",
            "ImportRefused",
            "ImportReport",
            "ImportSourceError",
            "ImportedTask",
            "PytestGrading",
            "Refusal",
            "RewardKind",
            "RewardSpec",
            "ScriptGrading",
            "ScrubError",
            "ScrubReport",
            "StdioGrading",
            "Task",
            "TaskFormatError",
            "TaskSummary",
            "WorkspaceChangedError",
            "audit_task",
            "find_tasks",
            "humaneval_tasks",
            "import_tasks",
            "load_task",
            "load_tasks",
            "rehash_task",
            "scrub_repository",
            "summarize_task",
            "workspace_sha256",
            "write_task",
        ]
    )
    assert sorted(rollbox.judge.__all__) == sorted(
        [
            "GradedTest",
            "Outcome",
            "Solution",
            "Verdict",
            "VerdictStatus",
            "check_solution_path",
            "compute_reward",
            "grade",
            "grade_batch",
            "runtime_spec",
            "sandboxes_image",
            "task_image",
            "task_sandboxes",
        ]
    )
    for module in (rollbox.tasks, rollbox.judge):
        for name in module.__all__:
            assert hasattr(module, name)


def test_scheduler_exports() -> None:
    import rollbox.scheduler

    assert sorted(rollbox.scheduler.__all__) == sorted(
        [
            "API_KEY_VARIABLE", "RUN_ID_MAX", "RUN_ID_PATTERN", "TERMINAL", "TRANSITIONS", "Attempt", "Capacity",
            "ElasticSandboxes",
            "IdempotencyConflict", "IllegalTransition", "Job", "JobContext", "JobKind", "JobNotFound", "JobResult",
            "JobSpec", "JobState", "JobStore", "LocalWorker", "Outcome", "PayloadError", "ProcessWorker", "QueueFull",
            "Requirements",
            "RetryPolicy", "Scheduler", "SchedulerError", "StoreError", "Transition", "Unplaceable", "Worker",
            "WorkerLost", "episode_payload", "exec_payload", "get_kind", "kind_names", "machine_capacity", "pool_key",
            "process_workers", "recorded_file", "register_kind", "rollbox_home", "run_dir", "store_path",
            "store_target", "validate_payload",
        ]
    )  # fmt: skip
    for name in rollbox.scheduler.__all__:
        assert hasattr(rollbox.scheduler, name)


def test_layers_import_only_downwards() -> None:
    """Each layer imports only those below it (DESIGN.md); every layer may report into telemetry's events."""
    import ast
    from pathlib import Path

    below = {
        "telemetry": set(),
        "sandbox": set(),
        "tasks": {"sandbox"},
        "judge": {"tasks", "sandbox"},
        "curate": {"judge", "tasks", "sandbox"},
        "env": {"judge", "tasks", "sandbox"},
        "scheduler": {"env", "curate", "judge", "tasks", "sandbox"},
        "train": {"scheduler", "env", "curate", "judge", "tasks", "sandbox"},
        "client": {"judge", "tasks", "sandbox"},  # data types only; never the server it talks to
    }
    allowed = {layer: may | ({"telemetry"} if layer != "telemetry" else set()) for layer, may in below.items()}
    root = Path(rollbox.__file__).parent
    checked = 0
    for layer, may_import in allowed.items():
        for path in (root / layer).rglob("*.py"):
            package = ["rollbox", *path.parent.relative_to(root).parts]
            for node in ast.walk(ast.parse(path.read_text())):
                # Every name imported, as a dotted path: ``from X import y`` may import the module X.y, and the
                # top-level ``rollbox`` (bare, or ``from rollbox import Sandbox``) imports every layer.
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    # A relative import (level > 0) starts from the file's own package, or from one above it.
                    base = package[: len(package) - node.level + 1] if node.level else []
                    module = ".".join([*base, *([node.module] if node.module else [])])
                    names = [f"{module}.{alias.name}" for alias in node.names]
                else:
                    continue
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "rollbox":
                        checked += 1
                        target = parts[1] if len(parts) > 1 and (root / parts[1]).is_dir() else "the top-level package"
                        assert target == layer or target in may_import, f"{path.name} imports {name}"
    assert checked > 100  # relative imports, which most of these are, were seen
