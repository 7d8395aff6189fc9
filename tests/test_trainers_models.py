"""A tokenizer and a tiny causal LM made here, from nothing (no model hub), for the trainer tests (no tests of its
own). The tokenizer is byte-level BPE, so every text round-trips; its chat template renders tools and tool calls
in the Hermes form (``<tool_call>{...}</tool_call>``) that verl's and TRL's parsers read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    '<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}</tool_call>'
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "Fix the bug in calc.py so that the tests pass.",
    '<tool_call>{"name": "bash", "arguments": {"command": "pytest -q"}}</tool_call>',
    "The quick brown fox jumps over the lazy dog. 0123456789 ()[]{}<>:;,.!?'\"-_=+*/\\|",
]


def make_tokenizer(directory: Path | None = None, *, chat_template: str = CHAT_TEMPLATE) -> Any:
    """A byte-level BPE tokenizer trained here on a few lines, saved to ``directory`` when one is given."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(_CORPUS * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = chat_template
    if directory is not None:
        tokenizer.save_pretrained(directory)
    return tokenizer


def make_model(tokenizer: Any, directory: Path | None = None, *, seed: int = 0) -> Any:
    """A randomly initialised two-layer Llama causal LM sized to ``tokenizer``, saved to ``directory`` when given."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if directory is not None:
        model.save_pretrained(directory)
    return model
