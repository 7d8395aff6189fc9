"""Every snippet of docs/train.md, read from the file and run (so that the page and the tests cannot drift): the
TRL snippets through ``GRPOTrainer.train()`` on the CPU, the verl snippets' files written and their commands'
overrides applied to verl's own configuration, with which verl's reward loader, dataset, agent-loop worker and
reward worker (a Ray actor) run. A tiny model made here stands in for the model's name; nothing is downloaded."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_env_tasks import humaneval_task, write_calc_task
from test_trainers_models import make_model, make_tokenizer

DOC = Path(__file__).parents[1] / "docs" / "train.md"
_SNIPPET = re.compile(r"<!-- snippet: ([\w-]+) -->\n```(\w+)\n(.*?)```", re.DOTALL)
MODEL_NAME = "Qwen/Qwen3-0.6B"
RUN_HERE = {"trl-single-turn", "trl-multi-turn", "trl-ray", "verl-files", "verl-one-machine", "verl-ray-cluster"}

pytestmark = [
    # TRL, transformers, verl and Ray warn of their own deprecations and of CPU training settings.
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"),
    pytest.mark.timeout(900),
]


def snippets() -> dict[str, str]:
    """The page's snippets by name (the ``<!-- snippet: NAME -->`` line before each fenced block)."""
    return {name: code for name, _, code in _SNIPPET.findall(DOC.read_text())}


def test_every_snippet_of_the_page_is_run_here() -> None:
    fenced = DOC.read_text().count("\n```") // 2
    assert set(snippets()) == RUN_HERE and len(snippets()) == fenced - 1  # all but the install commands


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory as the page assumes one: tasks/calc, tasks/HumanEval_0, and the model saved locally."""
    write_calc_task(tmp_path / "tasks" / "calc")
    shutil.copytree(humaneval_task(tmp_path / "humaneval").path, tmp_path / "tasks" / "HumanEval_0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a model name that slipped through fails instead of downloading
    yield tmp_path


def local_model(directory: Path) -> Path:
    """The tiny model and tokenizer, saved where a model's name would be looked up; a chat template TRL parses."""
    from trl.chat_template_utils import qwen2_5_chat_template

    make_model(make_tokenizer(directory, chat_template=qwen2_5_chat_template), directory)
    return directory


def run_python(name: str, namespace: dict[str, Any], model: Path) -> None:
    code = snippets()[name].replace(repr(MODEL_NAME).replace("'", '"'), repr(str(model)))
    exec(compile(code, f"{DOC}:{name}", "exec"), namespace)


def test_trl_snippets_train_on_one_machine_and_on_ray(workdir: Path) -> None:
    pytest.importorskip("trl", reason="trl is not installed: pip install torch==2.13.0 && pip install -e '.[trl]'")
    import ray

    model = local_model(workdir / "model")
    namespace: dict[str, Any] = {}
    run_python("trl-single-turn", namespace, model)
    assert isinstance(namespace["ds"][0]["task"], str)
    try:
        run_python("trl-ray", namespace, model)
    finally:
        ray.shutdown()


def test_trl_multi_turn_snippet_trains(workdir: Path) -> None:
    pytest.importorskip("trl", reason="trl is not installed: pip install torch==2.13.0 && pip install -e '.[trl]'")
    run_python("trl-multi-turn", {}, local_model(workdir / "model"))


def command_overrides(name: str, variables: dict[str, str]) -> list[str]:
    """The ``key=value`` overrides a snippet's ``python -m verl.trainer.main_ppo`` command passes (its shell
    variables expanded, and kept in ``variables`` for the next snippet)."""
    text = snippets()[name].replace("\\\n", " ")
    overrides: list[str] = []
    for line in text.splitlines():
        if assignment := re.fullmatch(r'(\w+)="(.*)"', line.strip()):
            variables[assignment[1]] = assignment[2]
            continue
        words = shlex.split(line)
        assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"], line
        for word in words[3:]:
            overrides += variables[word[1:]].split() if word.startswith("$") else [word]
    return overrides


def verl_config(overrides: list[str], model: Path) -> Any:
    """verl's own PPO configuration with the overrides (each key must exist there), the model's name local."""
    import verl
    from omegaconf import OmegaConf

    config = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    OmegaConf.set_struct(config, True)
    local = [o.replace(MODEL_NAME, str(model)) for o in overrides]
    return OmegaConf.merge(config, OmegaConf.from_dotlist(local))


def test_verl_snippets_through_verls_own_code(workdir: Path) -> None:
    pytest.importorskip("verl", reason="verl is not installed: pip install torch==2.13.0 && pip install -e '.[verl]'")
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from test_trainers_verl import FIX, ScriptedServer

    model = local_model(workdir / "model")
    run_python("verl-files", {}, model)
    variables: dict[str, str] = {}
    config = verl_config(command_overrides("verl-one-machine", variables), model)
    cluster = verl_config(command_overrides("verl-ray-cluster", variables), model)
    assert cluster.trainer.nnodes == 2 and get_custom_reward_fn(cluster) is not None
    assert get_custom_reward_fn(config) is not None

    tokenizer = make_tokenizer()  # the same as the saved one (trained the same way)
    dataset = RLHFDataset(data_files=config.data.train_files, tokenizer=tokenizer, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    scripts = {"calc.py subtracts": [FIX, "Fixed."], "has_close_elements": ["I cannot do it."]}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        reward_worker = ray.remote(RewardLoopWorker).remote(config)
        worker = AgentLoopWorker(
            config, llm_client=ScriptedServer(tokenizer, scripts), reward_loop_worker_handles=[reward_worker]
        )
        output = asyncio.run(worker.generate_sequences(batch))
    finally:
        ray.shutdown()
    assert output.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert list(output.non_tensor_batch["rollbox_status"]) == ["passed", "failed"]
    assert list(output.non_tensor_batch["rollbox_end_reason"]) == ["stopped", "no_tool_call"]
