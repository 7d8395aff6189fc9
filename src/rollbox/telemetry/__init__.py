"""rollbox.telemetry: what happened, reported by every layer through one small interface.

The interface (:func:`emit`, sinks) imports nothing else of rollbox, so that every layer, the sandbox included,
may report into it.
"""

from ._events import Event, JsonlSink, Sink, add_sink, emit, recording, remove_sink

__all__ = ["Event", "JsonlSink", "Sink", "add_sink", "emit", "recording", "remove_sink"]
