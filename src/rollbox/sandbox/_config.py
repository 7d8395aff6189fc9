"""A sandbox's configuration as one value: what it is made with, passed whole from layer to layer.

    config = SandboxConfig(limits=Limits(timeout_s=5), network="loopback", env={"MODE": "test"})
    async with Sandbox(config) as sb: ...
    async with sandboxes.sandbox(config) as sb: ...          # any SandboxSource: fresh, warm, elastic
    async with sandboxes.sandbox(dataclasses.replace(config, image=image)) as sb: ...

It is frozen and hashable: warm pools are kept per configuration, keyed by it. Adding something a sandbox is made
with means adding a field here; the pools, the judge and the scheduler pass the value on unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._limits import Limits, Network
from .images._image import Image
from .runtime._store import Layer

__all__ = ["SandboxConfig"]


class _Variables(Mapping[str, str]):
    """Environment variables, read-only and hashable, in name order."""

    __slots__ = ("_items", "_map")

    def __init__(self, variables: Mapping[str, str] | None = None) -> None:
        items = tuple(sorted((variables or {}).items()))
        for name, value in items:
            if not isinstance(name, str) or not isinstance(value, str):
                raise ValueError(f"env: variables are strings, got {name!r}={value!r}")
        self._items = items
        self._map = dict(items)

    def __getitem__(self, name: str) -> str:
        return self._map[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._map == dict(other)

    def __repr__(self) -> str:
        return repr(self._map)


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """Everything a sandbox is made with. Two sandboxes of equal configurations are interchangeable.

    Attributes:
        limits: What every command may use.
        network: ``none`` (default) or ``loopback`` (a loopback of the sandbox's own); a string is accepted.
        runtime: A runtime layer (its Python and packages at /opt/rollbox), or None: rollbox's own Python on the
            host's root, none on an image's.
        image: An image whose unpacked root is the sandbox's ``/`` (see :mod:`rollbox.sandbox.images`), or None:
            the host's system directories, read-only.
        workspace: A host directory that /workspace starts as (copy-on-write; never written), or None: empty.
        env: Extra environment variables for every command (nothing of the host's environment is passed).
        interpreter_env: Variables the sandbox's pre-started Python (its zygote, see ``Sandbox(warm_python=...)``)
            starts under, over its own (``PYTHONHASHSEED=0``): what an interpreter reads only when it starts (a hash
            seed, ``LD_PRELOAD`` and the preloaded library's own), which a fork of it cannot take. A ``warm_python``
            command then runs as a fresh interpreter started under them would; give the commands the same ones in
            their environment. The zygote outlives each use of a warm sandbox, and starts again in the middle of
            one: these must name no file a program in the sandbox can write.

    Raises:
        ValueError: on construction, an unknown network or a variable that is not a string.
    """

    limits: Limits = field(default_factory=Limits)
    network: Network = Network.NONE
    runtime: Layer | None = None
    image: Image | None = None
    workspace: Path | None = None
    env: Mapping[str, str] = field(default_factory=_Variables)
    interpreter_env: Mapping[str, str] = field(default_factory=_Variables)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "network", Network(self.network))
        except ValueError:
            raise ValueError(f"unknown network {self.network!r}: expected 'none' or 'loopback'") from None
        if self.workspace is not None:
            object.__setattr__(self, "workspace", Path(os.fspath(self.workspace)).resolve())
        for name in ("env", "interpreter_env"):
            if not isinstance(getattr(self, name), _Variables):
                object.__setattr__(self, name, _Variables(getattr(self, name)))
        # Made once: pools are looked up by the configuration for every sandbox borrowed.
        object.__setattr__(
            self,
            "_hash",
            hash((self.limits, self.network, self.runtime, self.image, self.workspace, self.env, self.interpreter_env)),
        )

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    @classmethod
    def of(cls, config: SandboxConfig | None = None, **fields: Any) -> SandboxConfig:
        """``config``, or one made of ``fields`` (``limits=``, ``network=``, ...; ``None`` values mean the default):
        how the public constructors take either.

        Raises:
            ValueError: both were given, or a field is invalid.
        """
        given = {name: value for name, value in fields.items() if value is not None}
        if config is None:
            return cls(**given)
        if given:
            raise ValueError(
                f"give either a SandboxConfig or {', '.join(sorted(given))}=..., not both: "
                "dataclasses.replace(config, ...) changes a configuration"
            )
        return config
