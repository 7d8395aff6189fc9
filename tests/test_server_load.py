"""128 concurrent ``/run_code`` calls of a short Python program (where SandboxFusion's users report failures)
all complete, correctly, with no error. Latency figures are bench/bench_server.py's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from rollbox.server import ServerConfig
from serving import running

CONCURRENT = 128


@pytest.mark.slow
def test_128_concurrent_run_code_calls(tmp_path: Path) -> None:
    async def main(url: str) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=CONCURRENT, max_keepalive_connections=CONCURRENT)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
            payloads = [
                json.dumps({"code": f"print(sum(range({i})))", "language": "python", "run_timeout": 30, "stdin": ""})
                for i in range(CONCURRENT)
            ]
            headers = {"Content-Type": "application/json"}
            return await asyncio.gather(*(http.post("/run_code", content=p, headers=headers) for p in payloads))

    with running(ServerConfig(home=tmp_path, archive_url="")) as server:
        responses = asyncio.run(main(server.url))
        stats = server.service.stats.snapshot()
    assert [r.status_code for r in responses] == [200] * CONCURRENT
    bodies = [r.json() for r in responses]
    assert [b["status"] for b in bodies] == ["Success"] * CONCURRENT, [b for b in bodies if b["status"] != "Success"][
        :3
    ]
    assert [b["run_result"]["stdout"] for b in bodies] == [f"{sum(range(i))}\n" for i in range(CONCURRENT)]
    assert stats["executions"] == {"ok": CONCURRENT} and stats["infra_error_rate"] == 0.0
