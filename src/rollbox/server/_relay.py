"""The service's live figures over several workers: every worker but the first sends its events (and its gauges:
sandboxes open, pools, executions in flight) to the first worker once a tick, and the first keeps the figures,
the metrics and the alerts of the whole service, as one process would. Each worker writes its own events to the
run's JSONL file and the archive itself: only the figures travel."""

from __future__ import annotations

import collections
import json
import logging
import time
from typing import Any

from rollbox.telemetry import Event

from ._forward import PeerGone, forward
from ._peers import Peers

__all__ = ["RELAY_PATH", "Received", "Relay"]

#: Where the first worker takes what the others send (only over its Unix socket).
RELAY_PATH = "/_rollbox/relay"
#: Events kept while the first worker is away (restarting); older ones are dropped, and the drop is logged.
_MAX_KEPT = 100_000
#: A worker's gauges count for this many seconds after it sent them (a worker that died stops counting).
_GAUGES_FRESH_S = 5.0

_log = logging.getLogger("uvicorn.error")

#: A gauge: its name, its tenant (``""``: the service's total) and its value.
Gauge = tuple[str, str, float]


class Relay:
    """A sink of a worker other than the first: keeps the events it sees until :meth:`flush` sends them."""

    def __init__(self, peers: Peers) -> None:
        assert peers.me is not None
        self.peers = peers
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=_MAX_KEPT)
        self._dropped_reported = 0
        self.dropped = 0

    def write(self, event: Event) -> None:
        if len(self._events) == _MAX_KEPT:
            self.dropped += 1
        self._events.append(event.to_json())  # a deque's append is atomic: emitting threads need no lock

    async def flush(self, gauges: list[Gauge]) -> None:
        """Send what was kept, with the worker's gauges now, to the first worker (kept for the next flush when it
        is away)."""
        if self.dropped > self._dropped_reported:
            away = "rollbox serve: %d events left out of the live figures (the first worker was away)"
            _log.warning(away, self.dropped)
            self._dropped_reported = self.dropped
        first = self.peers.current(0)
        if first is None:
            return
        events = [self._events.popleft() for _ in range(len(self._events))]
        assert self.peers.me is not None
        body = json.dumps({"slot": self.peers.me.slot, "events": events, "gauges": gauges}, default=str).encode()
        headers = [(b"content-type", b"application/json")]
        try:
            reply = await forward(self.peers.socket(first), "POST", RELAY_PATH.encode(), headers, body)
        except PeerGone:
            reply = None
        if reply is None or reply.status != 204:
            self._events.extendleft(reversed(events))


class Received:
    """What the first worker has from the others: it gives their events to its sinks, and sums their gauges."""

    def __init__(self) -> None:
        self._gauges: dict[int, tuple[float, list[Gauge]]] = {}

    def take(self, body: bytes, sinks: list[Any]) -> None:
        """Take one worker's batch."""
        data = json.loads(body)
        for item in data["events"]:
            kind, at = item.pop("kind"), item.pop("at")
            event = Event(kind, at, item)
            for sink in sinks:
                sink.write(event)
        self._gauges[int(data["slot"])] = (time.monotonic(), [(str(n), str(t), float(v)) for n, t, v in data["gauges"]])

    def gauges(self) -> list[Gauge]:
        """The others' gauges sent in the last few seconds."""
        now = time.monotonic()
        return [g for at, values in self._gauges.values() if now - at < _GAUGES_FRESH_S for g in values]
