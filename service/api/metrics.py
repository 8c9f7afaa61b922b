"""Prometheus metrics. Each app has its own registry, so tests can build many apps."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

__all__ = ["UNMATCHED_ROUTE", "HttpMetrics"]

#: Route label for requests no route matched (keeps label cardinality bounded).
UNMATCHED_ROUTE = "<unmatched>"

# The *_created series only restate process start times; leave them out of the exposition.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class HttpMetrics:
    """Request counts and latencies by method, route template and status."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "privfit_http_requests",
            "HTTP requests handled, by method, route template and status code.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "privfit_http_request_duration_seconds",
            "Time to handle an HTTP request, by method, route template and status code.",
            ("method", "route", "status"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request."""
        labels = {"method": method, "route": route, "status": str(status)}
        self.requests.labels(**labels).inc()
        self.latency.labels(**labels).observe(seconds)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)
