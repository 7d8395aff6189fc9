"""The ``exec`` kind: one command in a warm sandbox, its :class:`rollbox.ExecResult` as the job's result.

Payload::

    {"argv": ["python3", "main.py"], "files": {"main.py": "print(42)"}, "stdin": null,
     "limits": {"timeout_s": 5, "memory_bytes": 268435456}, "network": "none", "warm_python": false}

Everything but ``argv`` is optional; ``cpus`` (default 1) and ``resources`` (``{"gpu": 1}``, a Ray node's custom
resources) say what the job needs besides its memory limit. The result's status is the command's
(:class:`rollbox.Status`); an ``infra_error`` is retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollbox.sandbox import Limits, Network, Program, SandboxConfig

from ._errors import PayloadError
from ._kinds import JobContext, Outcome, requested
from ._model import Requirements
from ._pool_key import pool_key

__all__ = ["ExecKind", "exec_payload"]


def exec_payload(
    argv: list[str],
    *,
    files: Mapping[str, str] | None = None,
    stdin: str | None = None,
    limits: Limits | None = None,
    network: Network | str = Network.NONE,
    warm_python: bool = False,
) -> dict[str, Any]:
    """The payload of an ``exec`` job, from the same arguments as :class:`rollbox.sandbox.Program`."""
    fields = {k: getattr(limits, k) for k in Limits.__dataclass_fields__} if limits else {}
    return {
        "argv": list(argv),
        "files": dict(files or {}),
        "stdin": stdin,
        "limits": {k: v for k, v in fields.items() if v is not None},
        "network": Network(network).value,
        "warm_python": warm_python,
    }


_made: dict[tuple[tuple[Any, type, Any], ...], Limits] = {}


def _limits(fields: Mapping[str, Any]) -> Limits:
    """``Limits(**fields)``, made (and checked) once for each distinct value: a run's jobs mostly share one, and
    each job's is read when it is submitted and again when it runs. Keyed by each value's type too, so that
    ``True`` never passes for ``1``, nor ``1`` for ``1.0``.

    Raises:
        TypeError, ValueError: as ``Limits`` does.
    """
    if not isinstance(fields, Mapping):
        return Limits(**fields)  # says what is wrong with it
    try:
        key = tuple((name, type(value), value) for name, value in fields.items())  # stored payloads: one order
        found = _made.get(key)
    except TypeError:  # a name that is not text, or a value that is not hashable: Limits says what is wrong
        return Limits(**fields)
    if found is None:
        found = Limits(**fields)
        if len(_made) >= 1024:
            _made.clear()
        _made[key] = found
    return found


_configs: dict[tuple[Limits, str], SandboxConfig] = {}


def _config(limits: Limits, network: Any) -> SandboxConfig:
    """The sandbox configuration of a job's limits and network, made once for each (a run's jobs mostly share one).

    Raises:
        ValueError, TypeError: ``network`` names none.
    """
    try:
        found = _configs.get((limits, network))
    except TypeError:  # not hashable: not a network's name either
        found = None
    if found is None:
        found = SandboxConfig(limits=limits, network=Network(network))
        if len(_configs) >= 1024:
            _configs.clear()
        if type(network) is str:  # keyed by the exact text stored: Network("none") is not "none" as a key
            _configs[(limits, network)] = found
    return found


def _parse(payload: Mapping[str, Any]) -> tuple[Program, SandboxConfig]:
    try:
        config = _config(_limits(payload.get("limits", {})), payload.get("network", "none"))
        # Program checks every other field, on submission as when the job runs.
        program = Program(
            argv=payload["argv"],
            files=payload.get("files") or {},
            stdin=payload.get("stdin"),
            warm_python=payload.get("warm_python", False),
        )
    except KeyError as exc:
        raise PayloadError(f"an exec job's payload needs {exc}: {{'argv': ['python3', 'main.py'], ...}}") from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"invalid exec payload: {exc}") from exc
    return program, config


class ExecKind:
    """Runs ``argv`` with ``files`` written into /workspace first."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        _, config = _parse(payload)
        limits = config.limits
        return requested(payload, "exec", memory_bytes=limits.memory_bytes, pool=pool_key(limits, config.network))

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        program, config = _parse(payload)
        async with context.sandboxes.sandbox(config) as sb:
            for path, content in program.files.items():
                await sb.write_file(path, content)
            result = await sb.exec(program.argv, stdin=program.stdin, warm_python=program.warm_python)
        return Outcome(status=result.status.value, output=result.to_json(), error=result.error)
