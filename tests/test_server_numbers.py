"""Every number a client sends the service — a job's CPUs, limits, priority, attempts and deadline; the sandboxes'
limits and timeouts; /run_code's; page sizes and sequence numbers — is checked at the edge: a value in range is
taken, any other (negative, zero, huge, NaN, Infinity, a bool, text, null) is a 4xx that names the field, and none
is a 5xx. Hypothesis draws the values; each is sent as JSON as Python writes it (NaN and Infinity included, which
the service's parser would otherwise take)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
from hypothesis import strategies as st

from rollbox.server import ServerConfig
from serving import Running, running

MiB = 2**20
CONFIG = {
    "max_timeout_s": 2.0,
    "max_memory_bytes": 1024 * MiB,
    "max_pids": 256,
    "max_disk_bytes": 512 * MiB,
    "max_output_bytes": 4 * MiB,
    "max_open_files": 4096,
}
CPUS = len(os.sched_getaffinity(0))

#: Numbers and what pass for them: in range, at the edges, beyond any, not finite, not numbers.
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -0.0, 1, 2, 0.5, 0.001, 0.0009, 8 * MiB, 2**31, 2**53 + 1, 2**63, 2**64, 10**400, 1e-300]),
    st.booleans(),
    st.none(),
    st.sampled_from(["1", "", "1e3", "NaN"]),
)


def _settings(examples: int) -> hypothesis.settings:
    return hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )


def _real(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _count(low: float, high: float) -> Callable[[Any], bool]:
    """A whole number in ``[low, high]`` (a float that is one too: limits take 1e9 for bytes)."""
    return lambda v: _real(v) and low <= v <= high and float(v).is_integer()


def _seconds(high: float) -> Callable[[Any], bool]:
    return lambda v: _real(v) and 0 < v <= high


def _or_null(in_range: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or in_range(v)


def _int(low: int, high: int) -> Callable[[Any], bool]:
    """An int exactly (the service's own fields take no float for a count, no text, no bool)."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


#: Each number of an exec job, where it goes in the body, and which values are in range.
JOB_FIELDS: dict[str, tuple[tuple[str, ...], Callable[[Any], bool]]] = {
    "cpus": (("payload", "cpus"), lambda v: _real(v) and 0.001 <= v <= CPUS),
    "resources.gpu": (("payload", "resources", "gpu"), lambda v: _real(v) and v == 0),  # no worker has a gpu
    "timeout_s": (("payload", "limits", "timeout_s"), _seconds(2.0)),
    "cpu_time_s": (("payload", "limits", "cpu_time_s"), _seconds(2.0)),
    "memory_bytes": (("payload", "limits", "memory_bytes"), _count(8 * MiB, 1024 * MiB)),
    "pids": (("payload", "limits", "pids"), _count(2, 256)),
    "disk_bytes": (("payload", "limits", "disk_bytes"), _count(1, 512 * MiB)),
    "output_bytes": (("payload", "limits", "output_bytes"), _count(1, 4 * MiB)),
    "open_files": (("payload", "limits", "open_files"), _count(1, 4096)),
    "file_size_bytes": (("payload", "limits", "file_size_bytes"), _or_null(_count(1, 512 * MiB))),
    "priority": (("priority",), _int(-1000, 1000)),
    "max_attempts": (("max_attempts",), _int(1, 20)),
    "deadline_s": (("deadline_s",), _or_null(_seconds(365 * 86_400))),  # null: no deadline
}


def _with(body: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``body`` with ``value`` set at ``path`` (a copy of each level on the way)."""
    out = dict(body)
    if len(path) == 1:
        out[path[0]] = value
    else:
        out[path[0]] = _with(out.get(path[0], {}), path[1:], value)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    home: Path = tmp_path_factory.mktemp("home")
    with running(ServerConfig(home=home, pool_size=2, archive_url="", run="numbers", **CONFIG)) as r:  # type: ignore[arg-type]
        yield r


@pytest.fixture(scope="module")
def client(server: Running) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _send(client: httpx.Client, method: str, url: str, body: Any) -> httpx.Response:
    """``body`` as Python's json writes it (NaN, Infinity and all)."""
    return client.request(method, url, content=json.dumps(body), headers={"Content-Type": "application/json"})


def _check(response: httpx.Response, what: tuple[str, Any], in_range: bool, accepted: int) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    taken = response.status_code == accepted
    assert taken == in_range, (what, response.status_code, response.text[:300])


@_settings(1000)
@hypothesis.given(field=st.sampled_from(sorted(JOB_FIELDS)), value=NUMBERS)
def test_a_jobs_numbers_are_taken_exactly_when_in_range(client: httpx.Client, field: str, value: Any) -> None:
    path, in_range = JOB_FIELDS[field]
    job = _with({"kind": "exec", "payload": {"argv": ["true"]}}, path, value)
    response = _send(client, "POST", "/v1/jobs", {"jobs": [job], "run": "numbers"})
    _check(response, (field, value), in_range(value), 201)
    if response.status_code == 201:
        (stored,) = response.json()
        cpus = stored["requirements"]["cpus"]
        assert 0.001 <= cpus <= CPUS and (field != "cpus" or cpus == value)
        assert -1000 <= stored["priority"] <= 1000 and 1 <= stored["max_attempts"] <= 20
    elif response.status_code in (400, 422):
        name = field.rsplit(".", maxsplit=1)[-1]
        assert name in response.json()["detail"], response.text  # it says which field is wrong


#: Any JSON, in the shapes a job takes: the names a job, an exec or grade payload and its limits use, holding
#: anything (numbers of every kind, text, lists, objects), nested.
_JOB_NAMES = st.sampled_from(
    ["kind", "payload", "key", "priority", "max_attempts", "deadline_s", "argv", "limits", "cpus", "resources",
     "env", "stdin", "files", "task", "reference", "workspace", "timeout_s", "memory_bytes", "pids", "jobs", "run"]
)  # fmt: skip
_ANY_JSON = st.recursive(
    NUMBERS | st.text(max_size=12) | st.sampled_from(["exec", "grade", "true", "python3"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_JOB_NAMES | st.text(max_size=6), inner, max_size=5),
    max_leaves=20,
)
#: Payloads near a right one (a command that runs, each other field anything), and any object of those names.
_PAYLOADS = st.fixed_dictionaries(
    {"argv": st.just(["true"]) | _ANY_JSON},
    optional={
        "limits": st.dictionaries(st.sampled_from(sorted(CONFIG)) | _JOB_NAMES, _ANY_JSON, max_size=3) | _ANY_JSON,
        **{name: _ANY_JSON for name in ("cpus", "resources", "env", "stdin", "files", "task", "reference")},
    },
) | st.dictionaries(_JOB_NAMES, _ANY_JSON, max_size=5)
_JOBS = st.lists(
    st.fixed_dictionaries({"kind": st.sampled_from(["exec", "grade"]), "payload": _PAYLOADS})
    | st.fixed_dictionaries(
        {"kind": st.sampled_from(["exec", "grade"]) | _ANY_JSON, "payload": _PAYLOADS | _ANY_JSON},
        optional={name: _ANY_JSON for name in ("key", "priority", "max_attempts", "deadline_s")},
    ),
    min_size=1,
    max_size=3,
)


@_settings(300)
@hypothesis.given(
    jobs=_JOBS, run=st.one_of(st.none(), st.just("numbers"), st.just("numbers"), _ANY_JSON), body=_ANY_JSON
)
def test_any_json_as_jobs_is_taken_or_refused_never_a_server_error(
    client: httpx.Client, jobs: list[Any], run: Any, body: Any
) -> None:
    """Whatever a client sends to ``POST /v1/jobs``, in the shape of jobs or not, is a 201 or the client's error."""
    for sent in ({"jobs": jobs} if run is None else {"jobs": jobs, "run": run}, body):
        response = _send(client, "POST", "/v1/jobs", sent)
        assert response.status_code in (201, 400, 404, 409, 413, 422), (sent, response.status_code, response.text)


@_settings(120)
@hypothesis.given(value=NUMBERS, where=st.sampled_from(["limit", "after", "job"]))
def test_page_sizes_sequence_numbers_and_ids_are_checked(client: httpx.Client, value: Any, where: str) -> None:
    """A query's number is text: whatever names a whole number in range is taken ("5", "5.0"), nothing else."""
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    low, high, url, params = {
        "limit": (1, 10_000, "/v1/jobs", {"limit": text}),
        "after": (0, 2**63 - 1, "/v1/runs/numbers/results", {"after": text, "follow": "false"}),
        "job": (1, 2**63 - 1, f"/v1/jobs/{text}", {}),
    }[where]
    response = client.get(url, params=params)
    assert response.status_code < 500, (where, value, response.status_code, response.text[:300])
    if response.status_code == 200:
        assert number.is_integer() and low <= number <= high, (where, value)
    else:
        moved = response.status_code == 307 and text == ""  # /v1/jobs/ is /v1/jobs
        assert response.status_code in (404, 422) or moved, (where, value, response.status_code, response.text[:300])


#: The sandboxes API's numbers (null: the server's default), and /run_code's.
SANDBOX_FIELDS: dict[str, Callable[[Any], bool]] = {
    "timeout_s": _seconds(2.0),
    "cpu_time_s": _seconds(2.0),
    "memory_bytes": _int(8 * MiB, 1024 * MiB),
    "pids": _int(2, 256),
    "disk_bytes": _int(1, 512 * MiB),
    "output_bytes": _int(1, 4 * MiB),
}
SANDBOX_FIELDS = {name: _or_null(ok) for name, ok in SANDBOX_FIELDS.items()}
RUN_CODE_FIELDS: dict[str, Callable[[Any], bool]] = {
    "run_timeout": lambda v: _real(v) and 0 < v <= 2.0,
    "compile_timeout": lambda v: _real(v) and 0 < v <= 2.0,
    "memory_limit_MB": lambda v: v == -1 or _int(8, 1024)(v),
}


@_settings(150)
@hypothesis.given(field=st.sampled_from(sorted(SANDBOX_FIELDS)), value=NUMBERS)
def test_a_sandboxes_limits_are_taken_exactly_when_in_range(client: httpx.Client, field: str, value: Any) -> None:
    response = _send(client, "POST", "/v1/sandboxes", {field: value})
    _check(response, (field, value), SANDBOX_FIELDS[field](value), 201)
    if response.status_code == 201:
        made = response.json()
        assert value is None or made["limits"][field] == value
        assert client.delete(f"/v1/sandboxes/{made['id']}").status_code == 204


@_settings(100)
@hypothesis.given(field=st.sampled_from(sorted(RUN_CODE_FIELDS)), value=NUMBERS)
def test_run_codes_numbers_are_taken_exactly_when_in_range(client: httpx.Client, field: str, value: Any) -> None:
    body = {"code": "print(1)", "language": "python", "compile_timeout": 1, "run_timeout": 1, field: value}
    response = _send(client, "POST", "/run_code", body)
    _check(response, (field, value), RUN_CODE_FIELDS[field](value), 200)
