"""Schemathesis over the service's own OpenAPI spec, against a running server: whatever it sends (bodies,
parameters and headers that match the spec, and ones that break it), no answer is a 5xx. Bounded: a few examples
per operation and mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import hypothesis
import hypothesis.errors
import pytest
import schemathesis
from schemathesis import GenerationMode

from rollbox.server import ServerConfig
from serving import Running, running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    home: Path = tmp_path_factory.mktemp("home")
    with running(ServerConfig(home=home, pool_size=2, archive_url="", max_timeout_s=2.0)) as r:
        yield r


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_request_gets_a_server_error(server: Running) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    server_errors: list[str] = []
    calls = 0
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @hypothesis.given(operation.as_strategy(generation_mode=mode))
            @hypothesis.settings(
                max_examples=8,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(hypothesis.HealthCheck),
            )
            def probe(case: schemathesis.Case) -> None:
                nonlocal calls
                response = case.call(timeout=30)
                calls += 1
                if response.status_code >= 500:
                    server_errors.append(
                        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
                    )

            try:
                probe()
            except hypothesis.errors.Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # an operation without input cannot be given a wrong one
    assert calls > 200
    assert not server_errors, "\n".join(server_errors[:10])
