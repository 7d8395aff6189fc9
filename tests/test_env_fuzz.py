"""Whatever a model can send is its own turn: ``step`` fuzzed with arbitrary JSON, strings of every kind, huge and
deeply nested values, wrong types, unknown tools, NUL characters and lone surrogates answers each with an
observation and one counted turn, never an exception and never ``infra_error``; the diff applier, which works on
what the model wrote, agrees exactly with the diffs ``difflib`` makes; raw completions parse whatever they hold."""

from __future__ import annotations

import asyncio
import difflib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollbox
from rollbox.env import TOOLS, EndReason, Episode, StepResult
from rollbox.env._patch import PatchError, PatchTimeout, apply_patch, parse_patch
from rollbox.env._text import _blocks, _unfenced, parse_tool_calls
from rollbox.env._toolbox import command_text
from rollbox.judge import VerdictStatus
from rollbox.sandbox import ExecResult, Status
from rollbox.server._peers import how_it_ended
from rollbox.tasks import Task
from test_env_tasks import write_calc_task

TOOL_NAMES = [tool["function"]["name"] for tool in TOOLS]
ARGUMENT_NAMES = sorted({key for tool in TOOLS for key in tool["function"]["parameters"]["properties"]})
FUZZ = settings(
    max_examples=160, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


def nested(depth: int, kind: str, leaf: Any = 0) -> Any:
    """``leaf`` inside ``depth`` lists or dicts (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


# Text of every kind: NUL, lone surrogates, every plane; and huge text (the kernel's one-argument limit, 2 MB).
TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
HUGE = st.builds(
    lambda c, n: c * n, st.sampled_from(["x", "\0", "é", "\ud800", "a\n"]), st.sampled_from([131_072, 2**21])
)
DEEP = st.builds(nested, st.sampled_from([100, 500, 990, 1000, 5000]), st.sampled_from(["list", "dict"]))
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**63, -(2**70)])
    | st.builds(pow, st.just(10), st.just(5000))
    | st.floats()
)
JSON = st.recursive(
    SCALARS | TEXT,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(TEXT | st.sampled_from(ARGUMENT_NAMES), inner, max_size=4)
    ),
    max_leaves=12,
)
ANYTHING = JSON | HUGE | DEEP | st.binary(max_size=20) | st.tuples(JSON) | st.builds(object)


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value)
    except (ValueError, RecursionError):
        return "[" * 100_000  # nested past any parser
    except TypeError:
        return "{not json"


PATHS = TEXT | st.sampled_from(
    ["calc.py", "new/x.py", "../x", "/etc/passwd", "/workspace", "a" * 300, "x/" * 3000 + "y", "", ".", "/dev/null"]
)
NUMBERS = st.sampled_from(["0", "1", "3", "99999999", "9" * 5000]) | st.integers(0, 50).map(str)
HUNK = st.builds(
    lambda a, b, c, d, lines: f"@@ -{a},{b} +{c},{d} @@\n" + "".join(lines),
    NUMBERS,
    NUMBERS,
    NUMBERS,
    NUMBERS,
    st.lists(
        st.sampled_from([" ", "-", "+", "\\", ""]).flatmap(lambda k: TEXT.map(lambda t: k + t + "\n")), max_size=6
    ),
)
DIFF = st.builds(
    lambda old, new, hunks: f"--- {old}\n+++ {new}\n" + "".join(hunks),
    PATHS.map(lambda p: "a/" + p),
    PATHS.map(lambda p: "b/" + p),
    st.lists(HUNK, max_size=3),
)
# Commands that leave the workspace in states the file tools must cope with: links, FIFOs, unreadable and binary
# files, a full disk, a deep tree; and ones that end badly.
COMMANDS = (
    TEXT
    | HUGE
    | st.sampled_from(
        [
            "ls -la",
            "ln -sf /etc/shadow calc.py",
            "mkdir -p d && ln -sfn /etc d/etc",
            "mkfifo pipe",
            "printf '\\377\\376' > blob",
            "chmod 000 calc.py",
            "rm -rf /workspace/* /tmp/.rollbox-visible; ln -s /etc /tmp/.rollbox-visible",
            "head -c 20M /dev/zero > big",
            "rm -f big",
            'python3 -c \'import os\nfor _ in range(300): os.mkdir("x"); os.chdir("x")\'',
            "yes | head -c 3000000",
            "kill -9 $$",
        ]
    )
)
WELL_TYPED = st.one_of(
    st.fixed_dictionaries({"name": st.just("bash"), "arguments": st.fixed_dictionaries({"command": COMMANDS})}),
    st.fixed_dictionaries(
        {
            "name": st.just("read_file"),
            "arguments": st.fixed_dictionaries({"path": PATHS}, optional={"start": SCALARS, "end": SCALARS}),
        }
    ),
    st.fixed_dictionaries(
        {"name": st.just("write_file"), "arguments": st.fixed_dictionaries({"path": PATHS, "content": TEXT | HUGE})}
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("edit"),
            "arguments": st.fixed_dictionaries(
                {"path": PATHS, "old": st.sampled_from(["a - b", "return", "", "\n"]) | TEXT, "new": TEXT | HUGE}
            ),
        }
    ),
    st.fixed_dictionaries(
        {"name": st.just("apply_patch"), "arguments": st.fixed_dictionaries({"unified_diff": DIFF | TEXT | HUGE})}
    ),
    st.fixed_dictionaries({"name": st.sampled_from(["run_tests", "submit"]), "arguments": st.just({})}),
)
# Calls of the wrong shape: any name, any arguments (values, JSON text, unknown and mistyped keys).
ARGUMENTS = (
    ANYTHING | st.dictionaries(st.sampled_from(ARGUMENT_NAMES) | TEXT, ANYTHING, max_size=4) | ANYTHING.map(_json_text)
)
WRONG = st.fixed_dictionaries({"name": st.sampled_from(TOOL_NAMES) | ANYTHING}, optional={"arguments": ARGUMENTS})
ACTIONS = st.one_of(
    WELL_TYPED,
    WELL_TYPED,
    WELL_TYPED.map(lambda call: {"name": call["name"], "arguments": _json_text(call["arguments"])}),
    WELL_TYPED.map(lambda call: {"type": "function", "function": call}),
    WRONG,
    ANYTHING | TEXT.map(_json_text),
)


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_calc_task(tmp_path_factory.mktemp("calc"))


class Episodes:
    """One episode at a time on a loop of the test's own, reset anew when one ends (a fuzzed submit)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.loop = asyncio.new_event_loop()
        self.env: Episode | None = None
        self.steps = 0

    def step(self, action: Any) -> tuple[Episode, int, StepResult]:
        if self.env is None:
            self.env = rollbox.make(self.task, max_turns=10_000, wall_s=3600, command_timeout_s=5, output_bytes=2**30)
            self.loop.run_until_complete(self.env.reset())
        env, before = self.env, self.env.turns
        result = self.loop.run_until_complete(env.step(action))
        self.steps += 1
        if result.done:
            self.loop.run_until_complete(env.close())
            self.env = None
        return env, before, result

    def close(self) -> None:
        if self.env is not None:
            self.loop.run_until_complete(self.env.close())
        self.loop.close()


@pytest.fixture
def episodes(calc: Task) -> Iterator[Episodes]:
    held = Episodes(calc)
    yield held
    held.close()


def assert_a_counted_turn(env: Episode, before: int, result: StepResult) -> None:
    """One turn, answered: an observation of text, recorded as strict JSON; never infra_error, never a null reward."""
    observation = result.observation
    assert isinstance(observation.text, str) and observation.text.encode("utf-8")
    assert result.info.turn == before + 1 and env.turns == before + 1
    assert observation.status is not Status.INFRA_ERROR
    assert result.reward is not None
    if result.done:
        assert result.info.end_reason is not EndReason.INFRA_ERROR
        assert result.info.verdict is not None and result.info.verdict.status is not VerdictStatus.INFRA_ERROR
    json.dumps(env.trajectory.turns[-1].to_json(), allow_nan=False)
    json.dumps(env.trajectory.to_json(), allow_nan=False)


@pytest.mark.timeout(900)
def test_any_action_is_an_observation_and_one_counted_turn(episodes: Episodes) -> None:
    @FUZZ
    @given(ACTIONS)
    def probe(action: Any) -> None:
        assert_a_counted_turn(*episodes.step(action))

    probe()
    assert episodes.steps >= 160


def test_the_reported_actions_are_turns(episodes: Episodes) -> None:
    """The issue's own cases: arguments nested 1,000 deep (as a value and as JSON text), a 2 MB command, a hunk
    header of 5,000 digits, a line number past any file."""
    deep = nested(1000, "dict")
    actions = [
        {"name": "bash", "arguments": {"command": deep}},
        {"name": "bash", "arguments": deep},
        {"name": "bash", "arguments": "[" * 1000 + "]" * 1000},
        {"name": "bash", "arguments": {"command": "x" * 2_000_000}},
        {
            "name": "apply_patch",
            "arguments": {"unified_diff": f"--- a/calc.py\n+++ b/calc.py\n@@ -{'9' * 5000} +1 @@\n"},
        },
        {"name": "read_file", "arguments": {"path": "calc.py", "start": 10**30}},
        {"name": "read_file", "arguments": {"path": "calc.py", "start": 10**5000}},
    ]
    expected = [
        "'command' must be a string",
        "unknown argument 'a'",
        "cannot be read: it is nested too deeply",
        "a command line holds at most 131071",
        "line number is too long",
        "'start' must be a line number",
        "'start' must be a line number",
    ]
    for action, text in zip(actions, expected, strict=True):
        env, before, result = episodes.step(action)
        assert_a_counted_turn(env, before, result)
        assert result.observation.error and text in result.observation.text, result.observation.text


LINES = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "a\r\n", "x\x0cy\n", "é\n"]), max_size=30)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(LINES, LINES, st.integers(0, 3), st.booleans())
def test_a_diff_difflib_makes_applies_to_exactly_the_new_text(
    old: list[str], new: list[str], context: int, no_newline: bool
) -> None:
    if no_newline and old and new:  # a last line without "\n" on both sides, as "\ No newline at end of file" says
        old[-1], new[-1] = old[-1].rstrip("\n") or "y", new[-1].rstrip("\n") or "z"
    diff = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(old, new, "a/f", "b/f", n=context)
    )
    if not diff:
        return  # no change: no diff to apply
    assert apply_patch(parse_patch(diff), lambda _: "".join(old)) == {"f": "".join(new)}


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(TEXT | DIFF | HUGE)
def test_any_text_parses_as_a_diff_or_says_why(text: str) -> None:
    try:
        apply_patch(parse_patch(text), lambda _: "a\nb\n")
    except PatchError as exc:
        assert str(exc)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(TEXT | ANYTHING.map(_json_text) | DEEP.map(lambda d: f"<tool_call>{_json_text(d)}</tool_call>"))
def test_any_completion_parses_into_actions(text: str) -> None:
    assert isinstance(parse_tool_calls(text), list)


def test_a_diff_that_asks_for_much_work_stops_at_its_deadline() -> None:
    """A 580,000-line file named 1,200 times, each hunk found far from where its header says: the work stops at its
    deadline instead of running on."""
    text = "".join(f"{i}\n" for i in range(1, 580_001))
    diff = "--- a/big\n+++ b/big\n@@ -1,1 +1,1 @@\n-579990\n+579990\n" * 1200
    begin = time.monotonic()
    with pytest.raises(PatchTimeout):
        apply_patch(parse_patch(diff), lambda _: text, deadline=begin + 0.5)
    assert time.monotonic() - begin < 1.5


#: Pieces of model text that the parsing patterns of earlier versions could match more than one way.
PIECES = st.lists(
    st.sampled_from(["<tool_call>", "</tool_call>", "```", "```json", "json", " ", "\n", "\t", "{", "}", '"a"', "x"]),
    max_size=30,
).map("".join)
_PATTERN_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_PATTERN_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(PIECES)
def test_tool_call_blocks_and_fences_read_as_the_patterns_read_them(text: str) -> None:
    """The linear scan finds what the regular expressions it replaced found (they took cubic time)."""
    assert _blocks(text) == _PATTERN_BLOCK.findall(text)
    stripped = text.strip()
    fenced = _PATTERN_FENCE.match(stripped)
    assert _unfenced(stripped) == (fenced.group(1) if fenced else stripped)


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>" + " " * 200_000,
        "<tool_call>" + "\n" * 200_000 + "x",
        "<tool_call>" * 50_000,
        "```" + " " * 200_000 + "x",
        "```json" + "\n" * 200_000 + "{",
    ],
    ids=["unclosed block of spaces", "unclosed block of newlines", "opening tags", "fence of spaces", "json fence"],
)
def test_a_completion_parses_in_time_linear_in_its_length(text: str) -> None:
    """A degenerate completion (a few tokens repeated) took minutes to parse, on the loop every episode shares:
    4,000 spaces after an unclosed tag took over 30 s."""
    begin = time.monotonic()
    parse_tool_calls(text)
    assert time.monotonic() - begin < 1.0


@pytest.mark.parametrize("number", range(1, 65))
def test_a_command_killed_by_any_signal_reads_as_one(number: int) -> None:
    """Real-time signals (32 to 64) have no name in Python's enum: `kill -40 $$` made the tool call raise."""
    text = command_text(ExecResult(status=Status.SIGNALED, signal=number))
    assert text.startswith(f"[killed by signal {number} (") and text.endswith(")]"), text
    assert how_it_ended(-number).startswith("killed by ")


def test_a_command_that_kills_itself_with_a_real_time_signal_is_a_counted_turn(episodes: Episodes) -> None:
    env, before, result = episodes.step({"name": "bash", "arguments": {"command": "kill -40 $$"}})
    assert_a_counted_turn(env, before, result)
    assert "[killed by signal 40 (SIGRTMIN+6)]" in result.observation.text, result.observation.text


def test_a_diff_that_names_one_file_two_ways_patches_it_in_turn(episodes: Episodes) -> None:
    """``calc.py`` and ``./calc.py`` are one file: the second part of the diff applies to what the first made (here
    it does not: nothing changes). Each part was applied to the original, and the last one written: an edit and a
    deletion of the same file both 'applied'."""
    diff = (
        "--- a/calc.py\n+++ b/calc.py\n@@ -2 +2 @@\n-    return a - b\n+    return a + b\n"
        "--- a/./calc.py\n+++ /dev/null\n@@ -1,6 +0,0 @@\n"
        "-def add(a, b):\n-    return a - b\n-\n-\n-def mul(a, b):\n-    return a * b\n"
    )
    env, before, result = episodes.step({"name": "apply_patch", "arguments": {"unified_diff": diff}})
    assert_a_counted_turn(env, before, result)
    assert result.observation.error and "the patch does not apply, nothing changed" in result.observation.text
    env, before, result = episodes.step({"name": "read_file", "arguments": {"path": "calc.py"}})
    assert "return a - b" in result.observation.text, result.observation.text
