"""Metrics of `dyncc collect`: Prometheus on a per-instance registry, or plain counters.

With `prometheus=False` (a run that serves no metrics, e.g. --once) the same
attributes are cheap in-process counters and prometheus_client is never
imported, which keeps the start-up of a one-shot collector short.
"""

from __future__ import annotations

from typing import Any


class _Plain:
    """The inc/set/observe/labels subset of prometheus_client metrics."""

    def __init__(self, store: dict[tuple[str, tuple[str, ...]], float], name: str, kind: str) -> None:
        self.store, self.name, self.kind = store, name, kind
        self.label_values: tuple[str, ...] = ()

    def labels(self, *values: str) -> _Plain:
        child = _Plain(self.store, self.name, self.kind)
        child.label_values = tuple(str(v) for v in values)
        return child

    def _add(self, suffix: str, amount: float) -> None:
        key = (self.name + suffix, self.label_values)
        self.store[key] = self.store.get(key, 0.0) + amount

    def inc(self, amount: float = 1) -> None:
        self._add("_total" if self.kind == "counter" else "", amount)

    def set(self, value: float) -> None:
        self.store[(self.name, self.label_values)] = float(value)

    def observe(self, value: float) -> None:
        self._add("_count", 1)
        self._add("_sum", value)


class CollectMetrics:
    def __init__(self, registry: Any = None, *, prometheus: bool = True) -> None:
        self._plain: dict[tuple[str, tuple[str, ...]], float] | None = None
        Counter: Any
        Gauge: Any
        Histogram: Any
        if prometheus or registry is not None:
            import prometheus_client as pc

            self.registry = registry or pc.CollectorRegistry()
            Counter, Gauge, Histogram = pc.Counter, pc.Gauge, pc.Histogram
        else:
            self._plain = {}
            self.registry = None
            Counter, Gauge = self._factory("counter"), self._factory("gauge")
            Histogram = self._factory("hist")
        r = self.registry
        self.poll_duration = Histogram(
            "dyncc_collect_poll_duration_seconds",
            "Time to dump, parse, filter and encode one poll",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.polls = Counter("dyncc_collect_polls", "Polls completed", registry=r)
        self.sockets_seen = Counter("dyncc_collect_sockets_seen", "Sockets returned by the kernel", registry=r)
        self.sockets_filtered = Counter(
            "dyncc_collect_sockets_filtered", "Sockets dropped by a filter", ["reason"], registry=r
        )
        self.sockets_exported = Counter("dyncc_collect_sockets_exported", "Sockets exported", registry=r)
        self.parse_errors = Counter(
            "dyncc_collect_parse_errors", "Malformed netlink data by kind", ["kind"], registry=r
        )
        self.batches = Counter("dyncc_collect_batches", "Batches produced", registry=r)
        self.batch_bytes = Counter("dyncc_collect_batch_bytes", "Serialized batch bytes produced", registry=r)
        self.delivered = Counter("dyncc_collect_batches_delivered", "Batches the sink confirmed", registry=r)
        self.delivery_failures = Counter(
            "dyncc_collect_delivery_failures", "Batches the sink failed to deliver", registry=r
        )
        self.queue_depth = Gauge("dyncc_collect_queue_depth", "Batches waiting for the sink", registry=r)
        self.queue_bytes = Gauge("dyncc_collect_queue_bytes", "Bytes waiting in the send queue", registry=r)
        self.dropped_polls = Counter(
            "dyncc_collect_dropped_polls", "Whole polls dropped because the send queue was full", registry=r
        )
        self.dropped_batches = Counter("dyncc_collect_dropped_batches", "Batches dropped with those polls", registry=r)
        self.overruns = Counter("dyncc_collect_overruns", "Polls that took longer than the interval", registry=r)
        self.poll_timeouts = Counter("dyncc_collect_poll_timeouts", "Polls abandoned at the timeout", registry=r)
        self.netns_errors = Counter("dyncc_collect_netns_errors", "Namespaces that could not be dumped", registry=r)

    def _factory(self, kind: str) -> Any:
        store = self._plain
        assert store is not None

        def make(name: str, _doc: str, labelnames: Any = (), **_kw: Any) -> _Plain:
            return _Plain(store, name, kind)

        return make

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Current value of a sample, e.g. 'dyncc_collect_overruns_total' (for tests and logs)."""
        if self._plain is not None:
            return self._plain.get((name, tuple((labels or {}).values())), 0.0)
        got = self.registry.get_sample_value(name, labels or {})
        return float(got or 0.0)
