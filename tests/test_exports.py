"""The public API is exactly what ``__all__`` says: adding or removing a name is a deliberate change."""

from __future__ import annotations

import rollbox
import rollbox.sandbox


def test_top_level_exports() -> None:
    assert sorted(rollbox.__all__) == sorted(
        [
            "Backend",
            "ExecResult",
            "InsecureBackendWarning",
            "IsolationUnavailable",
            "Limits",
            "Network",
            "RollboxError",
            "Sandbox",
            "SandboxError",
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
