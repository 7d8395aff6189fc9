"""TRL's own ``GRPOTrainer`` trains a policy on rewards rollbox computes from sandboxed execution (skipped where
trl is not installed: ``pip install torch==2.13.0 && pip install -e '.[trl]'``).

The policy is a tiny Llama initialised at random here and the tokenizer is trained here (nothing comes from a model
hub). Its completions go to the judge as a stdio task's ``solution.py``; sampling is limited to the tokens ``1``,
``2``, ``)``, a newline and the end of text, so that some completions are programs that run (``12\\n1``: reward 1)
and others are syntax errors (``1)2``: reward 0): the group has a reward spread, GRPO a gradient.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="trl is not installed: pip install torch==2.13.0 && pip install -e '.[trl]'")

from test_trainers_models import make_model, make_tokenizer

ALLOWED = ["1", "2", ")", "Ċ"]  # "Ċ" is the byte-level token of "\n"


def stdio_task(root: Path) -> Path:
    """A stdio task: any program that runs and prints nothing passes."""
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text("print('todo')\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text(json.dumps({"input": "", "output": ""}) + "\n")
    (root / "task.toml").write_text(
        'id = "quiet"\n[grading]\nrunner = "stdio"\ncommand = "python3 solution.py"\n'
        '[limits]\ntimeout = "10s"\ncpu_time = "5s"\nmemory = "128M"\n'
    )
    return root


# TRL and transformers warn of their own deprecations and of CPU training settings.
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.timeout(600)
def test_grpo_trainer_learns_from_rollbox_rewards(tmp_path: Path) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rollbox.env.adapters.trl import rollbox_reward

    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    task = stdio_task(tmp_path / "quiet")
    allowed = {tokenizer.convert_tokens_to_ids(t) for t in ALLOWED} | {tokenizer.eos_token_id}
    suppressed = [i for i in range(len(tokenizer)) if i not in allowed]

    graded: list[list[float | None]] = []

    def rollbox(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        rewards = rollbox_reward(prompts, completions, **kwargs)  # what rollbox's judge graded, as TRL gets it
        graded.append(rewards)
        return rewards

    dataset = Dataset.from_list([{"prompt": "Write a program that prints nothing:\n", "task": str(task)}] * 8)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        learning_rate=0.05,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=7,
        save_strategy="no",
        generation_kwargs={"suppress_tokens": suppressed},
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=rollbox, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logged) == 2 and len(graded) == 2, (logged, graded)
    for entry, rewards in zip(logged, graded, strict=True):
        assert None not in rewards and set(rewards) <= {0.0, 1.0}
        assert entry["rewards/rollbox/mean"] == pytest.approx(sum(rewards) / len(rewards))
        assert entry["reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert any(0.0 < sum(r) < len(r) for r in graded), f"no reward spread, no gradient: {graded}"
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert changed, "no weight changed after two optimizer steps"


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.timeout(600)
def test_grpo_trainer_runs_multi_turn_rollouts_in_rollbox_episodes(tmp_path: Path) -> None:
    """``environment_factory=RollboxTRLEnv``: TRL resets one episode per rollout and takes ``get_reward``, the
    judge's verdict on the workspace the rollout left, as a reward of its own."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from rollbox.env.adapters.trl import RollboxTRLEnv
    from test_env_tasks import write_calc_task

    judged: list[float | None] = []
    episodes: list[Any] = []

    class Recorded(RollboxTRLEnv):
        def reset(self, **row: Any) -> str:
            first = super().reset(**row)
            episodes.append(self.episode)
            return first

        def get_reward(self) -> float | None:
            reward = super().get_reward()
            judged.append(reward)
            return reward

    tokenizer = make_tokenizer(chat_template=qwen2_5_chat_template)  # a template TRL can parse tool calls from
    task = write_calc_task(tmp_path / "calc")
    prompt = [{"role": "user", "content": "Fix calc.py with the tools."}]
    dataset = Dataset.from_list([{"prompt": prompt, "task": str(task.path)}] * 4)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=7,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=make_model(tokenizer),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=Recorded,
    )
    trainer.train()

    assert trainer.state.global_step == 2 and len(judged) == 4 and len(episodes) == 4
    # The untrained policy makes no tool call that fixes calc.py: the judge fails the workspace it left, unmasked.
    assert judged == [0.0] * 4
    assert all(e.trajectory.verdict["status"] == "failed" and e.trajectory.end_reason == "stopped" for e in episodes)
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert [entry["reward"] for entry in logged] == [0.0, 0.0]
