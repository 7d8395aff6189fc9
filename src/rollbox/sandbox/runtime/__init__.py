"""Runtime layers: the Python and packages a sandbox runs with, each built once and shared read-only.

    store = LayerStore()                                   # $ROLLBOX_HOME/layers
    layer = await store.ensure(RuntimeSpec(python="3.12", requirements=("attrs==23.2.0",)))
    async with Sandbox(runtime=layer) as sb:               # python3 is the layer's
        await sb.exec(["python3", "-c", "import attrs"])

``_spec`` says what a layer holds and its content key; ``_python`` finds the interpreters installed here;
``_build`` builds one with uv; ``_store`` keeps them (locks, lock files, gc); ``_mounts`` says where a sandbox
mounts its Python (``/opt/rollbox/python``, ``/opt/rollbox/env``), and ``_elf`` lets an interpreter start there.
"""

from ._errors import LayerBuildError, PythonNotFound
from ._python import Interpreter, find_python
from ._spec import RuntimeSpec
from ._store import Layer, LayerStore, rollbox_home

__all__ = [
    "Interpreter",
    "Layer",
    "LayerBuildError",
    "LayerStore",
    "PythonNotFound",
    "RuntimeSpec",
    "find_python",
    "rollbox_home",
]
