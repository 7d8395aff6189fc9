"""The optional extras install working sets: ``all`` is every optional part of rollbox but the trainer libraries,
``adapters`` every trainer library, and each trainer extra what its library needs but does not require."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

EXTRAS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
TRAINERS = {"trl", "verl", "verifiers"}


def names(extra: str) -> set[str]:
    return {re.split(r"[<>=!\[; ]", r, maxsplit=1)[0].lower() for r in EXTRAS[extra]}


def test_all_is_every_optional_part_but_the_trainer_libraries() -> None:
    parts = set(EXTRAS) - TRAINERS - {"all", "adapters", "dev"}
    assert names("all") == set().union(*(names(e) for e in parts))
    assert not names("all") & {"trl", "verl", "verifiers", "torch", "transformers"}


def test_adapters_is_every_trainer_library_and_what_each_needs() -> None:
    assert names("adapters") == set().union(*(names(e) for e in (*TRAINERS, "gym", "skyrl", "parquet")))
    # transformers below 5.13 parses tool calls with jmespath and requires it nowhere: GRPOTrainer with tools fails.
    assert "jmespath" in names("trl")
    # verl 0.9.1's agent loop imports these without requiring them.
    assert {"cachetools", "fastapi"} <= names("verl")
