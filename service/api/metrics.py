"""Prometheus metrics. Each app has its own registry, so tests can build many apps."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from service.db.job_stats import JobStatistics
from service.domain.ledger.units import EPSILON_UNIT

__all__ = ["JOB_DURATION_BUCKETS", "UNMATCHED_ROUTE", "HttpMetrics", "JobMetrics"]

logger = logging.getLogger(__name__)

#: Upper bounds (seconds) of the job-duration histogram's buckets.
JOB_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

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

    def clear(self) -> None:
        """Forget every request counted so far (the state of a new app)."""
        self.requests.clear()
        self.latency.clear()

    def watch_jobs(self, collector: JobMetrics) -> Callable[[], None]:
        """Add the job figures to the exposition; returns the function that removes them."""
        self.registry.register(collector)
        return lambda: self.registry.unregister(collector)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)


class JobMetrics(Collector):
    """Job and ledger figures read from the database at each scrape (the same on every
    replica, whichever process ran the jobs): queue depth and running jobs by kind, finished
    jobs by kind and final status, run time by kind and mechanism, and the ε charged and
    refunded summed over all datasets (never per dataset)."""

    def __init__(self, read: Callable[[], JobStatistics]) -> None:
        self._read = read

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self._read()
        except Exception:  # an unreachable database must not break the HTTP metrics
            logger.warning("job metrics unavailable", exc_info=True)
            return
        queued = GaugeMetricFamily(
            "privfit_jobs_queued", "Jobs waiting for a worker, by job kind.", labels=["kind"]
        )
        for kind, count in sorted(stats.queued.items()):
            queued.add_metric([kind], count)
        running = GaugeMetricFamily(
            "privfit_jobs_running", "Jobs being run by a worker, by job kind.", labels=["kind"]
        )
        for kind, count in sorted(stats.running.items()):
            running.add_metric([kind], count)
        finished = CounterMetricFamily(
            "privfit_jobs_finished",
            "Jobs that reached a final status (succeeded, failed, cancelled), by job kind.",
            labels=["kind", "status"],
        )
        for (kind, status), count in sorted(stats.finished.items()):
            finished.add_metric([kind, status], count)
        durations = HistogramMetricFamily(
            "privfit_job_duration_seconds",
            "Run time of finished jobs (claimed to finished), by job kind and mechanism.",
            labels=["kind", "mechanism"],
        )
        for entry in stats.durations:
            buckets = [
                (repr(bound), count)
                for bound, count in zip(JOB_DURATION_BUCKETS, entry.cumulative, strict=True)
            ]
            durations.add_metric(
                [entry.kind, entry.mechanism],
                [*buckets, ("+Inf", entry.count)],
                sum_value=entry.total,
            )
        charged = CounterMetricFamily(
            "privfit_epsilon_charged",
            "Privacy budget (ε) ever charged to jobs, summed over all datasets.",
            value=stats.epsilon_charged_units * EPSILON_UNIT,
        )
        refunded = CounterMetricFamily(
            "privfit_epsilon_refunded",
            "Privacy budget (ε) given back by jobs cancelled while queued, over all datasets.",
            value=stats.epsilon_refunded_units * EPSILON_UNIT,
        )
        yield from (queued, running, finished, durations, charged, refunded)
