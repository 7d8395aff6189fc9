"""The shapes of the service's requests and responses (pydantic: validated at the edge, described in OpenAPI).

SandboxFusion's shapes (``RunCodeRequest``, ``RunCodeResponse``, ``SubmitRequest``, ``EvalResult``) keep its field
names, including ``memory_limit_MB``; rollbox's own use its units in names (``timeout_s``, ``memory_bytes``).
Every string and list has a bound, so that no request can make the service hold more than it allows.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollbox.scheduler import RUN_ID_MAX, RUN_ID_PATTERN

__all__ = [
    "CommandRunResult",
    "CommandRunStatus",
    "CreateEpisode",
    "CreateSandbox",
    "EvalResult",
    "EvalTestCase",
    "ExecRequest",
    "FileContent",
    "GradeRequest",
    "RunCodeRequest",
    "RunCodeResponse",
    "RunStatus",
    "SandboxInfo",
    "StepRequest",
    "SubmitJob",
    "SubmitJobs",
    "SubmitRequest",
    "TestConfig",
    "WriteFile",
]

_TEXT = 16 * 2**20  # characters of code or stdin: the body limit bounds them again
_PATH = 4096
_FILES = 1000
_YEAR_S = 365 * 86_400
_MOST = 2**62  # the largest limit a sandbox takes
T = TypeVar("T")


class _Strict(BaseModel):
    # Each field takes its own type only (no "5" or true for a number, no 2.0 for a count), and no number field
    # NaN or Infinity: they are not JSON, though Python's parser takes them.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _finite(value: T) -> T:
    """``value`` (plain JSON), if no number in it is NaN or infinite: such a number is no JSON, and could be
    neither compared nor answered back.

    Raises:
        ValueError: where the first such number is (``limits.timeout_s``).
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where or 'the value'} must be a finite number, got {item}")
        if isinstance(item, dict):
            stack.extend((f"{where}.{key}".lstrip("."), v) for key, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{where}[{index}]", v) for index, v in enumerate(item))
    return value


# --- SandboxFusion ---------------------------------------------------------------------------------------------


class RunCodeRequest(BaseModel):
    """SandboxFusion's ``POST /run_code`` request. Unknown fields are ignored, as SandboxFusion does."""

    model_config = ConfigDict(allow_inf_nan=False)

    code: str = Field(max_length=_TEXT, description="the program's source")
    language: str = Field(max_length=64, examples=["python"], description="see GET /v1/languages")
    stdin: str | None = Field(default=None, max_length=_TEXT)
    # Numbers are numbers only (no true for a timeout, no "256" for megabytes).
    compile_timeout: float = Field(
        10, gt=0, strict=True, description="seconds; absent: the language's (10 for most); at most the server's maximum"
    )
    run_timeout: float = Field(
        10,
        gt=0,
        strict=True,
        description="seconds (wall clock); absent: the language's (10 for most); at most the server's maximum",
    )
    memory_limit_MB: int = Field(
        -1, strict=True, description="-1: the server's default; else at most the server's maximum"
    )
    files: dict[str, str | None] = Field({}, max_length=_FILES, description="path -> base64 content")
    fetch_files: list[str] = Field([], max_length=_FILES, description="paths read back after the run")


class CommandRunStatus(str, enum.Enum):
    """SandboxFusion's outcome of one command."""

    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class CommandRunResult(BaseModel):
    """One command (the compile or the run), as SandboxFusion reports it, with rollbox's own status beside."""

    status: CommandRunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    #: rollbox's exact status (``ok``, ``timeout``, ``memory_limit``, ...): a field SandboxFusion does not have.
    rollbox_status: str | None = None


class RunStatus(str, enum.Enum):
    """SandboxFusion's outcome of a request."""

    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class RunCodeResponse(BaseModel):
    """SandboxFusion's ``POST /run_code`` response."""

    status: RunStatus
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


class TestConfig(BaseModel):
    """SandboxFusion's dataset configuration; rollbox reads ``compile_timeout``, ``run_timeout`` (ignored: the task's
    limits decide) and ``extra.path`` (the workspace file the completion becomes)."""

    __test__ = False  # not a test class, whatever pytest's naming rule says
    dataset_type: str | None = None
    language: str | None = None
    locale: str | None = None
    is_fewshot: bool | None = None
    compile_timeout: float | None = None
    run_timeout: float | None = None
    custom_extract_logic: str | None = Field(default=None, max_length=_TEXT, description="not run: ignored")
    provided_data: Any = None
    extra: dict[str, Any] = {}


class SubmitRequest(BaseModel):
    """SandboxFusion's ``POST /submit``: grade a completion against a dataset's problem (a rollbox task)."""

    dataset: str = Field(max_length=256, description="'humaneval', or the name of the server's task directory")
    id: int | str = Field(description="the problem: a task id (HumanEval/0, or 0 for humaneval)")
    completion: str = Field(max_length=_TEXT, description="the model's answer; a fenced code block is extracted")
    config: TestConfig = TestConfig()  # pydantic copies defaults


class EvalTestCase(BaseModel):
    """One graded test, in SandboxFusion's shape."""

    __test__ = False
    passed: bool
    exec_info: RunCodeResponse
    test_info: dict[str, Any] | None = None


class EvalResult(BaseModel):
    """SandboxFusion's ``POST /submit`` response; ``extra.verdict`` is rollbox's whole verdict."""

    id: int | str
    accepted: bool
    extracted_code: str
    full_code: str | None = None
    test_code: str | None = None
    tests: list[EvalTestCase]
    extracted_type: Literal["fenced", "incomplete_fenced", "heuristic", "empty"] | None = None
    extra: dict[str, Any] | None = None


# --- rollbox's own ---------------------------------------------------------------------------------------------


class CreateSandbox(_Strict):
    """A sandbox to make: its limits (each at most the server's maximum; the server's defaults otherwise)."""

    timeout_s: float | None = Field(default=None, gt=0, description="default wall-clock limit of each command")
    cpu_time_s: float | None = Field(default=None, gt=0)
    memory_bytes: int | None = Field(default=None, ge=8 * 2**20, le=_MOST)
    pids: int | None = Field(default=None, ge=2, le=_MOST)
    disk_bytes: int | None = Field(default=None, gt=0, le=_MOST)
    output_bytes: int | None = Field(default=None, gt=0, le=_MOST)
    network: Literal["none", "loopback"] = "none"
    warm_python: bool = False


class SandboxInfo(BaseModel):
    """A sandbox of the caller's."""

    id: str
    created_at: float
    last_used_at: float
    idle_timeout_s: float
    limits: dict[str, Any]
    network: str


class ExecRequest(_Strict):
    """A command to run in a sandbox."""

    argv: list[str] = Field(min_length=1, max_length=4096)
    stdin: str | None = Field(default=None, max_length=_TEXT, description="text (UTF-8)")
    stdin_b64: str | None = Field(default=None, max_length=_TEXT, description="bytes, base64")
    timeout_s: float | None = Field(default=None, gt=0)
    env: dict[str, str] = Field({}, max_length=256)
    cwd: str = Field("/workspace", max_length=_PATH)
    warm_python: bool = False


class WriteFile(_Strict):
    """A file to write in a sandbox: ``content`` (text) or ``content_b64`` (bytes), not both."""

    path: str = Field(min_length=1, max_length=_PATH, description="relative: under /workspace; or under /tmp")
    content: str | None = Field(default=None, max_length=_TEXT)
    content_b64: str | None = Field(default=None, max_length=_TEXT)
    mode: int = Field(0o644, ge=0, le=0o777)


class FileContent(BaseModel):
    """A file read from a sandbox."""

    path: str
    size: int
    content_b64: str


class CreateEpisode(_Strict):
    """An episode of a served task: overrides of the task's budget, and whether steps get shaped rewards."""

    task: str = Field(max_length=256)
    max_turns: int | None = Field(default=None, ge=1, le=10_000)
    wall_s: float | None = Field(default=None, gt=0, le=86_400)
    command_timeout_s: float | None = Field(default=None, gt=0)
    output_bytes: int | None = Field(default=None, gt=0, le=2**30)
    observation_bytes: int | None = Field(default=None, gt=0, le=2**26)
    shaped_rewards: bool = False
    run: str | None = Field(default=None, max_length=128, description="the run this episode belongs to")


class StepRequest(_Strict):
    """One tool call: ``{"name": ..., "arguments": {...}}`` (or OpenAI's ``{"function": {...}}`` form). A malformed
    one is the agent's error: an error observation that counts a turn, never a 4xx."""

    action: Any


class SubmitJob(_Strict):
    """One job: ``exec`` (``rollbox.scheduler.exec_payload``'s payload) or ``grade`` (``{"task": ID, "files":
    {path: text}}`` or ``{"task": ID, "reference": true}``)."""

    kind: Literal["exec", "grade"]
    payload: dict[str, Any] = Field(description="its kind's payload; for exec, also cpus (default 1, at least 0.001)")
    key: str | None = Field(default=None, max_length=512, description="idempotency key: submitted once")
    priority: int = Field(default=0, ge=-1000, le=1000)
    max_attempts: int = Field(default=3, ge=1, le=20)
    deadline_s: float | None = Field(default=None, gt=0, le=_YEAR_S, description="seconds from submission")

    @field_validator("payload")
    @classmethod
    def _finite_payload(cls, payload: dict[str, Any]) -> dict[str, Any]:
        return _finite(payload)


class SubmitJobs(_Strict):
    """Jobs to submit together (all or none), to one run."""

    jobs: list[SubmitJob] = Field(min_length=1, max_length=10_000)
    run: str | None = Field(
        default=None, max_length=RUN_ID_MAX, pattern=RUN_ID_PATTERN, description="default: the service's"
    )


class GradeRequest(_Strict):
    """A candidate to grade: the task's id and the files that stand for its workspace changes."""

    task: str = Field(max_length=256)
    files: dict[str, str] = Field(max_length=_FILES, description="workspace-relative path -> text")
    run: str | None = Field(default=None, max_length=128, description="the run this grading belongs to")
