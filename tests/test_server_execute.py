"""The service's warm pools for one-shot executions (``/run_code``, ``/v1/exec``): one per configuration, each opened
once however many requests wait for it, and a request of another configuration never waits for that opening."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import pytest

from rollbox import telemetry
from rollbox.sandbox import Limits, SandboxError, SandboxPool, Status
from rollbox.server import ServerConfig
from rollbox.server._execute import Executor
from rollbox.server._languages import Languages
from rollbox.server._models import RunCodeRequest, RunStatus
from rollbox.telemetry import Event, LiveStats

LIMITS = Limits(timeout_s=5, memory_bytes=128 * 2**20)


def test_a_pool_opening_never_holds_back_the_requests_of_another_configuration(held_openings: asyncio.Event) -> None:
    cold = dataclasses.replace(LIMITS, timeout_s=6)

    async def main() -> tuple[bool, bool, int]:
        executor = Executor(ServerConfig(pool_size=8, warm_configs=2), Languages())
        try:
            held_openings.set()
            async with executor.sandbox(LIMITS, "t"):  # its pool is open
                pass
            await asyncio.sleep(0.5)  # and its sandbox reset, idle again
            held_openings.clear()  # the next opening waits
            cold_served = asyncio.Event()

            async def use_cold() -> None:
                async with executor.sandbox(cold, "t") as sb:
                    cold_served.set()
                    await sb.exec(["true"])

            opening = asyncio.create_task(use_cold())
            await asyncio.sleep(0.01)
            began = not cold_served.is_set()  # the cold pool is opening
            async with asyncio.timeout(30), executor.sandbox(LIMITS, "t") as sb:
                served_meanwhile = not cold_served.is_set()  # this request did not wait for it
                assert (await sb.exec(["true"])).status is Status.OK
            held_openings.set()
            await opening
            return began, served_meanwhile, len(executor._pools)
        finally:
            held_openings.set()
            await executor.close()

    assert asyncio.run(main()) == (True, True, 2)


def test_a_configuration_beyond_those_kept_warm_gets_a_fresh_sandbox_while_another_opens(
    held_openings: asyncio.Event,
) -> None:

    async def main() -> tuple[bool, int]:
        executor = Executor(ServerConfig(pool_size=4, warm_configs=1), Languages())
        try:
            first_served = asyncio.Event()

            async def first() -> None:
                async with executor.sandbox(LIMITS, "t"):
                    first_served.set()

            opening = asyncio.create_task(first())
            await asyncio.sleep(0.01)
            # The one pool kept warm is opening: another configuration is not kept, and gets a fresh sandbox at
            # once, without waiting for that opening.
            async with asyncio.timeout(30), executor.sandbox(dataclasses.replace(LIMITS, timeout_s=6), "t") as sb:
                fresh_meanwhile = not first_served.is_set()
                assert (await sb.exec(["true"])).status is Status.OK
            held_openings.set()
            await opening
            return fresh_meanwhile, len(executor._pools)
        finally:
            held_openings.set()
            await executor.close()

    assert asyncio.run(main()) == (True, 1)


def test_the_files_fetched_back_stop_at_the_requests_budget_however_many_hard_links_name_one_file() -> None:
    # One file of the largest size and hard links to it cost the program no disk, and the answer a copy each.
    code = "import os\nopen('big', 'wb').write(b'x' * 2**20)\nfor i in range(6): os.link('big', f'l{i}')\n"
    code += "open('small', 'w').write('tail')\n"
    request = RunCodeRequest(code=code, language="python", fetch_files=[*(f"l{i}" for i in range(6)), "small", "l0"])
    config = ServerConfig(pool_size=1, max_file_bytes=2**20, max_fetch_bytes=2 * 2**20 + 2**19)

    async def main() -> dict[str, str]:
        executor = Executor(config, Languages())
        try:
            response = await executor.run_code(request, tenant="t", run="r")
        finally:
            await executor.close()
        assert response.status is RunStatus.Success, response
        return response.files

    files = asyncio.run(main())
    # Two links fill all but half a MiB: no other link fits, the small file does; a path named twice is one.
    assert sorted(files) == ["l0", "l1", "small"]
    assert base64.b64decode(files["small"]) == b"tail" and len(base64.b64decode(files["l1"])) == 2**20


def test_a_sandbox_that_fails_to_start_is_one_infra_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reported by its failed sandbox.start alone: an execution's infra_error beside it counted the one failure
    twice in the live figures, the metrics and the infra error rate."""

    async def broken(pool: SandboxPool) -> SandboxPool:
        raise SandboxError("the host failed (made by the test)")

    class Sink:
        def __init__(self) -> None:
            self.events: list[Event] = []

        def write(self, event: Event) -> None:
            self.events.append(event)

    monkeypatch.setattr(SandboxPool, "__aenter__", broken)
    stats, events = LiveStats(), Sink()

    async def main() -> RunStatus:
        executor = Executor(ServerConfig(pool_size=1), Languages())
        try:
            with telemetry.recording(stats), telemetry.recording(events):
                answer = await executor.run_code(
                    RunCodeRequest(code="print(1)", language="python"), tenant="t", run="r"
                )
            return answer.status
        finally:
            await executor.close()

    assert asyncio.run(main()) is RunStatus.SandboxError
    assert [(e.kind, e.fields.get("ok")) for e in events.events] == [("sandbox.start", False)]
    snapshot = stats.snapshot()
    assert len(snapshot["failures"]) == 1 and snapshot["infra_error_rate"] == 1.0, snapshot
