"""Trainer adapters: rollbox episodes and the rollbox judge in the shapes trainers expect.

Each module imports its trainer library only when it is imported itself (``pip install 'rollbox[trl]'`` and so
on): ``rollbox.env.adapters.trl``, ``.verl``, ``.skyrl``, ``.verifiers`` and ``.gym`` (Gymnasium). The core of
rollbox depends on none of them.
"""
