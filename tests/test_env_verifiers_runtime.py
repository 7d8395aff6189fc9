"""The verifiers adapter on a task whose runtime layer cannot be built: the rollout fails as a ``SandboxError``
(verifiers' masking) before the model is asked anything (``pip install 'rollbox[verifiers]'``; skipped without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_env_runtime import greet_task
from test_layers import wheels  # noqa: F401  (the fixture)
from test_policy import fixer

vf = pytest.importorskip("verifiers.v1")
from test_adapter_verifiers import ChatServer, play  # noqa: E402  (needs verifiers)


def test_a_rollout_whose_layer_cannot_be_built_is_masked_without_a_model_call(wheels: Path, tmp_path: Path) -> None:  # noqa: F811
    task = greet_task(tmp_path / "broken", "rbx-greet==9.9")
    server = ChatServer(fixer)
    try:
        [episode], left = play(server, [str(task.path)])
    finally:
        server.close()
    trace = episode.traces[0]
    assert not trace.ok and trace.errors[-1].type == "SandboxError", trace.errors
    assert "runtime could not be prepared" in trace.errors[-1].message and "rbx-greet" in trace.errors[-1].message
    assert server.sandboxes_seen == [] and left == set()  # no request reached the model; nothing left running
