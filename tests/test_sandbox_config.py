"""SandboxConfig, the one value a sandbox's configuration travels as: equal configurations are one pool's (equal,
same hash), whatever order their variables came in; any difference is another pool; bad fields are refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollbox import Limits, Sandbox, SandboxConfig
from rollbox.sandbox import Network

names = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True)
variables = st.dictionaries(names, st.text(max_size=5), max_size=4)
configs = st.builds(
    SandboxConfig,
    limits=st.builds(Limits, timeout_s=st.sampled_from([1.0, 2.0]), pids=st.sampled_from([16, 32])),
    network=st.sampled_from(["none", "loopback", Network.NONE]),
    env=variables,
    interpreter_env=st.sampled_from([{}, {"PYTHONHASHSEED": "1"}, {"PYTHONHASHSEED": "2"}]),
)


@given(configs, configs)
def test_equal_configurations_hash_alike_and_differ_otherwise(a: SandboxConfig, b: SandboxConfig) -> None:
    fields = ("limits", "network", "runtime", "image", "workspace")
    same = all(getattr(a, f) == getattr(b, f) for f in fields) and dict(a.env) == dict(b.env)
    # A pool whose zygote started under another hash seed is another pool.
    same = same and dict(a.interpreter_env) == dict(b.interpreter_env)
    assert (a == b) is same
    if same:
        assert hash(a) == hash(b)


@given(variables)
def test_variables_in_any_order_are_one_configuration(env: dict[str, str]) -> None:
    reordered = dict(reversed(list(env.items())))
    assert SandboxConfig(env=env) == SandboxConfig(env=reordered)
    assert hash(SandboxConfig(env=env)) == hash(SandboxConfig(env=reordered))
    assert dict(SandboxConfig(env=env).env) == env


def test_replace_changes_one_part_and_a_new_hash_comes_with_it(tmp_path: Path) -> None:
    config = SandboxConfig(limits=Limits(timeout_s=3), env={"A": "1"})
    changed = dataclasses.replace(config, network="loopback", workspace=tmp_path)
    assert changed.network is Network.LOOPBACK and changed.workspace == tmp_path.resolve()
    assert changed != config and {config, changed} == {config, changed} and len({config, changed}) == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"network": "internet"}, "unknown network 'internet'"),
        ({"env": {"A": 1}}, "variables are strings"),
        ({"interpreter_env": {"PYTHONHASHSEED": 1}}, "variables are strings"),
    ],
)
def test_bad_fields_are_refused_in_one_line(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SandboxConfig(**fields)  # type: ignore[arg-type]


def test_a_sandbox_takes_a_configuration_or_its_fields_not_both() -> None:
    config = SandboxConfig(limits=Limits(timeout_s=3))
    assert Sandbox(config).config is config
    assert Sandbox(limits=Limits(timeout_s=3)).config == config
    with pytest.raises(ValueError, match="not both"):
        Sandbox(config, limits=Limits(timeout_s=4))
