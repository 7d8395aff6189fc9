"""What ``/metrics`` shows to whom. Series labelled with a tenant are an operator's: an admin key (or any caller
when auth is off) sees every series as the service keeps them. A tenant's key sees its own series, and every other
tenant's only as part of the service's totals; a scrape without a key sees only the totals. A total is the series
with ``tenant=""``: a counter's (or histogram's) sum over every tenant, a gauge's own total. The alerts (those
firing, and how often each fired) are an operator's too, as ``/v1/alerts`` shows them: left out for anyone else."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

__all__ = ["exposition"]

#: Families whose samples add up across tenants (a counter's count, a histogram's buckets, count and sum).
_ADDITIVE = frozenset({"counter", "histogram"})
#: Families shown to an operator only: the alerts of the whole service.
_OPERATORS = frozenset({"rollbox_alerts_firing", "rollbox_alerts"})


class _TenantView:
    """The families of ``registry`` as ``tenant`` (``None``: nobody in particular) may see them."""

    def __init__(self, registry: CollectorRegistry, tenant: str | None) -> None:
        self.registry, self.tenant = registry, tenant

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.name in _OPERATORS:
                continue
            if not any("tenant" in sample.labels for sample in family.samples):
                yield family
                continue
            shown = Metric(family.name, family.documentation, family.type, family.unit)
            totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                tenant = sample.labels.get("tenant")
                if self.tenant is not None and tenant == self.tenant:
                    shown.add_sample(sample.name, sample.labels, sample.value, sample.timestamp)
                if sample.name.endswith("_created"):
                    continue  # when a series began: no sum of those means anything
                if family.type in _ADDITIVE or tenant == "":
                    rest = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "tenant"))
                    totals[(sample.name, rest)] = totals.get((sample.name, rest), 0.0) + sample.value
            for (name, rest), value in totals.items():
                shown.add_sample(name, {**dict(rest), "tenant": ""}, value)
            yield shown


def exposition(registry: CollectorRegistry, *, operator: bool, tenant: str | None) -> bytes:
    """The Prometheus text of ``registry`` for an ``operator`` (everything), else for ``tenant`` (its own series and
    the totals; ``None``: the totals alone)."""
    return generate_latest(registry if operator else _TenantView(registry, tenant))
