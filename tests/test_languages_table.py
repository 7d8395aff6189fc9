"""The language table and where the service runs each language, without building anything: what runs on the
host, what Debian lacks (said, never faked), and limits that only ever rise to a language's needs."""

from __future__ import annotations

import shutil

from hypothesis import given
from hypothesis import strategies as st

from rollbox.sandbox import Limits
from rollbox.sandbox.images._languages import LANGUAGES
from rollbox.sandbox.images._recipe import load_recipe, recipe_names
from rollbox.server._languages import Languages


def test_every_language_names_a_shipped_recipe_or_says_why_debian_lacks_it() -> None:
    shipped = set(recipe_names())
    for name, language in LANGUAGES.items():
        if language.available:
            assert language.recipe in shipped, name
            assert not language.missing
        else:
            assert language.recipe is None and "Debian bookworm does not package" in language.missing, name
    assert {n for n, lang in LANGUAGES.items() if not lang.available} == {"julia", "swift", "lean"}
    assert {"R", "D_ut", "kotlin", "scala", "racket", "csharp", "typescript"} <= set(LANGUAGES)
    assert all(load_recipe(n).packages for n in shipped)


def test_on_the_host_only_the_host_toolchains_run_and_the_rest_say_why() -> None:
    languages = Languages("host")
    rows = {row["name"]: row for row in languages.listing()}
    assert set(rows) == set(LANGUAGES)
    assert rows["java"]["available"] is False and "--language-images" in str(rows["java"]["reason"])
    assert rows["julia"]["available"] is False and "Julia" in str(rows["julia"]["reason"])
    assert ("python" in languages.names()) == (shutil.which("python3") is not None)
    assert all(rows[n]["image"] is None for n in rows)
    recipes = {row["name"]: row for row in Languages("recipes").listing()}
    assert recipes["java"]["image"] == "java" and recipes["julia"]["image"] is None


@given(
    memory=st.integers(8 * 2**20, 2**40),
    pids=st.integers(2, 10**6),
    cpu=st.floats(0.001, 1e6, allow_nan=False),
    name=st.sampled_from(sorted(LANGUAGES)),
)
def test_a_languages_limits_only_rise_to_what_it_needs(memory: int, pids: int, cpu: float, name: str) -> None:
    base = Limits(memory_bytes=memory, pids=pids, cpu_time_s=cpu)
    language = LANGUAGES[name]
    raised = language.limits(base)
    assert raised.memory_bytes == max(memory, language.memory_bytes) and type(raised.memory_bytes) is int
    assert raised.pids == max(pids, language.pids) and type(raised.pids) is int
    assert raised.cpu_time_s == max(cpu, language.cpu_time_s)
    assert (raised.timeout_s, raised.disk_bytes, raised.output_bytes) == (
        base.timeout_s,
        base.disk_bytes,
        base.output_bytes,
    )
