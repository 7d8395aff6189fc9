"""Trainer adapters: rollbox episodes and the rollbox judge in the shapes trainers expect.

Each module imports its trainer library only when it is imported itself (``pip install 'rollbox[trl]'`` and so
on): ``rollbox.env.adapters.trl``, ``.verl``, ``.skyrl``, ``.verifiers`` and ``.gym`` (Gymnasium). The core of
rollbox depends on none of them. Here: where a single completion goes in its task's workspace (the placement
every adapter and the service's ``/submit`` share), which needs no trainer library.
"""

from ._common import CompletionError, completion_files, place_code, target_file

__all__ = ["CompletionError", "completion_files", "place_code", "target_file"]
