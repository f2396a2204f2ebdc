"""Reading GET /metrics back as Prometheus does (its own text parser), for the gateway tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(get: Callable[[str], Any]) -> Samples:
    """`get(path)` -> a response (TestClient.get, or an httpx call against a server)."""
    r = get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; KeyError when the series does not exist."""
    return samples[(name, frozenset(labels.items()))]


def count(samples: Samples, name: str, **labels: str) -> float:
    """A counter's value; 0 when it was never incremented."""
    return samples.get((name, frozenset(labels.items())), 0.0)
