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
            "ExecResult",
            "InsecureBackendWarning",
            "IsolationUnavailable",
            "Limits",
            "Network",
            "PoolExhausted",
            "RollboxError",
            "Sandbox",
            "SandboxError",
            "SandboxPool",
            "SandboxStateError",
            "Status",
            "__version__",
            "run",
        ]
    )
    for name in rollbox.__all__:
        assert hasattr(rollbox, name)


def test_sandbox_exports() -> None:
    assert set(rollbox.__all__) - {"__version__"} <= set(rollbox.sandbox.__all__)
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
            "Comparator",
            "FunctionGrading",
            "Grading",
            "PytestGrading",
            "RewardKind",
            "RewardSpec",
            "ScriptGrading",
            "StdioGrading",
            "Task",
            "TaskFormatError",
            "humaneval_tasks",
            "load_task",
        ]
    )
    assert sorted(rollbox.judge.__all__) == sorted(
        [
            "GradedTest",
            "Outcome",
            "Solution",
            "Verdict",
            "VerdictStatus",
            "compute_reward",
            "grade",
            "grade_batch",
        ]
    )
    for module in (rollbox.tasks, rollbox.judge):
        for name in module.__all__:
            assert hasattr(module, name)


def test_layers_import_only_downwards() -> None:
    """sandbox imports nothing of rollbox; tasks only sandbox; judge only tasks and sandbox."""
    import ast
    from pathlib import Path

    allowed = {"sandbox": set(), "tasks": {"sandbox"}, "judge": {"tasks", "sandbox"}}
    root = Path(rollbox.__file__).parent
    for layer, may_import in allowed.items():
        for path in (root / layer).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rollbox."):
                    target = node.module.split(".")[1]
                    assert target == layer or target in may_import, f"{path.name} imports {node.module}"
