"""Images built from recipes: the recipe's checks, and the build's reproducibility (the same recipe, built twice
from scratch, gives the same image digest) and hygiene (sorted entries, uid 0, clamped mtimes, no apt caches, logs,
device nodes or setuid bits)."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from image_builds import cached_build, need_mmdebstrap, run_in, unpack
from rollbox.sandbox.images._build import _normalized_layer, build
from rollbox.sandbox.images._recipe import (
    BuildError,
    Recipe,
    RecipeFile,
    combined_recipe,
    load_recipe,
    recipe_names,
)

#: Debian's essential set alone (the fastest build), with files of the recipe's own.
SMALL = Recipe(
    "rollbox-test-small",
    files=(
        RecipeFile("/etc/rollbox-test/greeting", "hello from the recipe\n"),
        RecipeFile("/usr/local/bin/greet", "#!/bin/sh\ncat /etc/rollbox-test/greeting\n", 0o755),
    ),
    env=(("PATH", "/usr/local/bin:/usr/bin:/bin"), ("GREETING", "1")),
)


def _manifest(layout: Path) -> tuple[str, dict[str, object], dict[str, object]]:
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    manifest = json.loads((layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_text())
    config_blob = layout / "blobs" / "sha256" / manifest["config"]["digest"].removeprefix("sha256:")
    return digest, manifest, json.loads(config_blob.read_text())


@pytest.mark.slow
def test_the_same_recipe_built_twice_from_scratch_gives_the_same_digest(tmp_path: Path) -> None:
    need_mmdebstrap()
    first = build(SMALL, cache=tmp_path / "one")
    digest, manifest, config = _manifest(first)
    second = build(SMALL, cache=tmp_path / "two")
    assert _manifest(second)[0] == digest
    assert (first / "index.json").read_bytes() == (second / "index.json").read_bytes()
    # The layer: sorted, owned by root, no mtime after the epoch, nothing of the build itself.
    layer = first / "blobs" / "sha256" / manifest["layers"][0]["digest"].removeprefix("sha256:")  # type: ignore[index]
    with tarfile.open(layer) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {(m.uid, m.gid) for m in members} == {(0, 0)}
    assert max(m.mtime for m in members) <= SMALL.epoch
    assert not [m for m in members if m.ischr() or m.isblk() or m.isfifo()]
    assert not [m for m in members if m.mode & 0o6000]
    build_only = ("var/cache/apt/", "var/lib/apt/lists/", "var/log/", "var/cache/ldconfig/aux-cache")
    assert not [m.name for m in members if m.name.startswith(build_only) and not m.isdir()]
    assert not [n for n in names if n.endswith("-old")]
    assert "var/lib/dpkg/status" in names
    by_name = {m.name: m for m in members}
    links = [m for m in members if m.islnk()]
    assert all(names.index(m.linkname) < names.index(m.name) for m in links)  # a link after its target
    assert by_name["usr/local/bin/greet"].mode == 0o755
    assert config["config"]["Env"] == ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=1"]  # type: ignore[index]
    assert config["config"]["Labels"]["org.rollbox.recipe.digest"] == SMALL.digest  # type: ignore[index]
    # The layout is one any OCI tool takes: umoci unpacks it, and the recipe's programs run in it.
    root = unpack(first, SMALL.name, tmp_path)
    assert run_in(root, "/usr/local/bin/greet").stdout == "hello from the recipe\n"
    ran = run_in(root, "sh", "-c", "echo $((6 * 7)); test -e /var/lib/dpkg/status && echo dpkg")
    assert ran.stdout == "42\ndpkg\n", ran.stderr


@pytest.mark.slow
def test_a_build_is_cached_by_the_recipe_digest() -> None:
    layout = cached_build(SMALL)
    assert layout.name == SMALL.digest.removeprefix("sha256:")
    written = (layout / "index.json").stat().st_mtime_ns
    start = time.monotonic()
    assert build(SMALL, cache=layout.parent) == layout
    assert time.monotonic() - start < 1.0
    assert (layout / "index.json").stat().st_mtime_ns == written


def test_a_package_debian_does_not_have_is_a_one_line_error(tmp_path: Path) -> None:
    need_mmdebstrap()
    with pytest.raises(BuildError) as caught:
        build(Recipe("rollbox-test-missing", packages=("no-such-package-rollbox",)), cache=tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "no-such-package-rollbox" in message and "apt-cache policy" in message
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # nothing half-built is kept


def test_the_digest_covers_what_the_build_takes_and_not_the_order_of_packages() -> None:
    base = Recipe("x", packages=("bb", "a1"))
    assert base.digest == Recipe("x", packages=("a1", "bb")).digest
    others = [
        Recipe("x", packages=("bb",)),
        Recipe("x", packages=("bb", "a1"), suite="trixie"),
        Recipe("x", packages=("bb", "a1"), epoch=1),
        Recipe("x", packages=("bb", "a1"), files=(RecipeFile("/etc/f", "1"),)),
        Recipe("x", packages=("bb", "a1"), env=(("A", "1"),)),
        Recipe("x", packages=("bb", "a1"), mirror="http://127.0.0.1/debian"),
    ]
    assert len({base.digest, *(r.digest for r in others)}) == len(others) + 1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('packages = ["python3"]\ncolour = "red"', "unknown keys ['colour']"),
        ('packages = ["Python 3"]', "not a Debian package name"),
        ('[files]\n"/etc/../../x" = "y"', "without '..'"),
        ('[files]\n"etc/x" = "y"', "must be absolute"),
        ('[files]\n"/etc/x" = { content = "y", mode = "755" }', "must be an integer"),
        ('[files]\n"/etc/x" = { content = "y", mode = 0o7777 }', "not within"),
        ('[env]\n"A-B" = "1"', "not a variable name"),
        ("packages = [1]", "must be a string"),
        ('epoch = "now"', "epoch must be an integer"),
        ("packages = [", "not TOML"),
    ],
)
def test_a_bad_recipe_is_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(BuildError, match="recipe bad") as caught:
        Recipe.from_toml("bad", text)
    assert says in str(caught.value)


def test_every_shipped_recipe_loads_and_an_unknown_name_lists_them() -> None:
    names = recipe_names()
    assert {"python", "java", "go", "rust", "typescript", "csharp", "kotlin", "racket", "d"} <= set(names)
    for name in names:
        recipe = load_recipe(name)
        assert recipe.name == name and recipe.packages
    with pytest.raises(BuildError, match=r"no recipe named 'cobol'; shipped recipes: .*python"):
        load_recipe("cobol")


def test_a_recipe_file_of_ones_own_is_loaded_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('packages = ["jq"]\n[env]\nLANG = "C.UTF-8"\n[files]\n"/etc/x" = { content = "y", mode = 0o600 }\n')
    recipe = load_recipe(path)
    assert recipe.name == "mine" and recipe.packages == ("jq",) and ("LANG", "C.UTF-8") in recipe.env
    assert recipe.files == (RecipeFile("/etc/x", "y", 0o600),)
    with pytest.raises(BuildError, match="cannot read recipe"):
        load_recipe(tmp_path / "absent.toml")


def test_a_combined_recipe_has_every_package_and_refuses_disagreements() -> None:
    combined = combined_recipe("all", [load_recipe("go"), load_recipe("python"), load_recipe("c")])
    assert set(combined.packages) == {"golang-go", "gcc", "libc6-dev", "python3", "python3-pytest"}
    assert ("GOCACHE", "/tmp/.cache/go-build") in combined.env
    with pytest.raises(BuildError, match="disagree on A"):
        combined_recipe("all", [Recipe("a", env=(("A", "1"),)), Recipe("b", env=(("A", "2"),))])


def _tar(entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info in entries:
            payload = data.get(info.name)
            if payload is not None:
                info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return out.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def _normalize(raw: bytes, recipe: Recipe = SMALL) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as source:
        _normalized_layer(source, recipe, out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as layer:
        members = layer.getmembers()
        return [(m, layer.extractfile(m).read() if m.isfile() else None) for m in members]  # type: ignore[union-attr]


def test_the_layer_drops_what_belongs_to_the_build_and_clamps_the_rest() -> None:
    future = SMALL.epoch + 10**6
    raw = _tar(
        [
            _entry("./", tarfile.DIRTYPE, mode=0o755),
            _entry("./dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3),
            _entry("./var/log/apt/history.log", mtime=future, uid=100),
            _entry("./var/cache/debconf/config.dat-old"),
            _entry("./usr/bin/su", mode=0o4755, mtime=future, uid=5, gid=7, uname="x"),
            _entry("./tmp", tarfile.DIRTYPE, mode=0o1777),
        ],
        {"./var/log/apt/history.log": b"log", "./usr/bin/su": b"su", "./var/cache/debconf/config.dat-old": b"old"},
    )
    kept = {m.name: m for m, _ in _normalize(raw)}
    assert "dev/null" not in kept and "var/log/apt/history.log" not in kept
    assert "var/cache/debconf/config.dat-old" not in kept
    su = kept["usr/bin/su"]
    assert (su.mode, su.mtime, su.uid, su.gid, su.uname) == (0o755, SMALL.epoch, 0, 0, "root")
    assert kept["tmp"].mode == 0o1777  # the sticky bit stays


@settings(max_examples=60, deadline=None)
@given(
    files=st.dictionaries(
        st.text("abcxyz", min_size=1, max_size=3).map(lambda s: f"d{s[0]}/{s}"), st.binary(max_size=8), min_size=1
    ),
    links=st.lists(st.tuples(st.text("abcxyz", min_size=1, max_size=4), st.integers(0, 50)), max_size=6),
)
def test_hard_links_survive_sorting_whatever_their_names(files: dict[str, bytes], links: list[tuple[str, int]]) -> None:
    """Sorting may put a link before its target: every name must still read as the file it was."""
    targets = sorted(files)
    folders = sorted({n.split("/")[0] for n in files} | {"a", "z"})  # links sort before or after their targets
    entries = [_entry(f"./{d}", tarfile.DIRTYPE, mode=0o755) for d in folders]
    entries += [_entry(f"./{name}") for name in targets]
    data = {f"./{name}": payload for name, payload in files.items()}
    expected = dict(files)
    for name, pick in links:
        link = f"{'az'[pick % 2]}/{name}"
        if link in expected:
            continue
        target = targets[pick % len(targets)]
        entries.append(_entry(f"./{link}", tarfile.LNKTYPE, linkname=f"./{target}"))
        expected[link] = files[target]
    layer = _normalize(_tar(entries, data))
    names = [m.name for m, _ in layer]
    assert names == sorted(names)
    content = {m.name: payload for m, payload in layer if m.isfile()}
    for member, _ in layer:
        if member.islnk():
            assert member.linkname in content and names.index(member.linkname) < names.index(member.name)
            content[member.name] = content[member.linkname]
    assert {n: content[n] for n in expected} == expected


def test_a_recipes_file_replaces_one_name_of_a_hard_linked_file_and_the_others_keep_the_packages() -> None:
    raw = _tar(
        [
            _entry("./usr", tarfile.DIRTYPE, mode=0o755),
            _entry("./usr/bin", tarfile.DIRTYPE, mode=0o755),
            _entry("./usr/bin/zz", mode=0o755),
            _entry("./usr/bin/aa", tarfile.LNKTYPE, linkname="./usr/bin/zz"),
            _entry("./usr/bin/mm", tarfile.LNKTYPE, linkname="./usr/bin/zz"),
        ],
        {"./usr/bin/zz": b"packaged"},
    )
    for replaced in ("/usr/bin/zz", "/usr/bin/aa"):
        recipe = Recipe("x", files=(RecipeFile(replaced, "recipe's", 0o755),))
        layer = _normalize(raw, recipe)
        content = {m.name: data for m, data in layer if m.isfile()}
        content |= {m.name: content[m.linkname] for m, _ in layer if m.islnk()}
        others = {"usr/bin/zz", "usr/bin/aa", "usr/bin/mm"} - {replaced.lstrip("/")}
        assert content[replaced.lstrip("/")] == b"recipe's"
        assert {content[n] for n in others} == {b"packaged"}, replaced
