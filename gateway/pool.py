"""Several Triton endpoints behind one InferenceBackend: balancing, failover, health per endpoint.

A Kubernetes Service in front of several Triton pods does not balance long-lived gRPC (HTTP/2)
connections: one pod would take everything. So the gateway balances itself, per request:

- Endpoints. Each configured "host:port" whose host is an IP address is one endpoint; a name is
  resolved (every `resolve_interval_s`) to all its addresses, one endpoint each (a headless Service
  yields one per Triton pod; IPv4 addresses are preferred when a name has both kinds). An address
  that disappears from DNS is retired: it takes no new request and is closed once its requests
  in flight are over. A failed lookup keeps the endpoints the name had. `resolve_interval_s` 0
  hands names to gRPC unresolved (one endpoint per name, as before this module).
- Choice. A request goes to the endpoint with the fewest outstanding requests for its model among
  those serving it (in service, the model ready there and not held broken by that endpoint's health
  monitor); ties go round-robin. Calls made under an `Affinity` (backend.ENDPOINT_AFFINITY: a
  WebSocket utterance) stay on the endpoint chosen first while it serves.
- Out and back in. A request that fails with UNAVAILABLE takes its endpoint out at once; every
  `check_interval_s` each endpoint's readiness (server and models) is asked again, which brings a
  recovered one back in. When no endpoint serves, a request still tries the best one (it fails fast
  with UNAVAILABLE if that is down): a single restarted Triton is used as soon as it answers.
- Retry. A speech request that fails with UNAVAILABLE or INTERNAL before its first chunk was passed
  on is sent once more, to another endpoint that serves; never after a chunk went out (the client
  has audio). Unary calls (voice features, reference patches: no audio) are retried the same way.
  INTERNAL is retried because a Triton going down can answer it (a stub failing as its server dies)
  and a second endpoint costs one attempt; only UNAVAILABLE takes the endpoint out. INVALID_ARG,
  CANCELLED and DEADLINE_EXCEEDED are the request's own outcome: never retried. After audio went
  out, a reproducible request is replayed by the service (gateway.replay) while `serving(model)`.
- Health (gateway.monitor). One HealthMonitor per endpoint, driven by this module's rounds: it
  probes that endpoint's stubs, ends that endpoint's streams when a model breaks there (raised here
  as UNAVAILABLE, so a stream without audio yet is retried elsewhere) and reloads it there.
  `unusable()` is what readiness reports: the models no endpoint can serve, with every endpoint's
  reason (with one endpoint: exactly its monitor's verdicts).

Pure asyncio: the endpoints' backends come from `make_backend(url)` (gateway.triton_client in
production, fakes in tests). `stats()` feeds the per-endpoint series of /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import socket
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .backend import (
    CANCELLED,
    ENDPOINT_AFFINITY,
    RETRYABLE,
    UNAVAILABLE,
    BackendError,
    EndpointStats,
    InferenceBackend,
    ProbeResult,
    SpeechChunk,
)
from .deadline import END, next_within
from .health import InflightStreams
from .monitor import HealthMonitor
from .settings import Settings, split_host_port

T = TypeVar("T")

logger = logging.getLogger(__name__)

RESOLVE_TIMEOUT_S = 5.0
MonitorFactory = Callable[[InferenceBackend, InflightStreams], "HealthMonitor | None"]
Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Target:
    """One configured endpoint: "host:port"."""

    host: str
    port: int

    @property
    def literal(self) -> bool:
        """An IP address: used as it is, never resolved."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def url(self, address: str | None = None) -> str:
        host = address or self.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.url()


async def resolve_addresses(host: str, port: int) -> list[str]:
    """Every address of `host` (IPv4 ones only when it has any), sorted; OSError when none."""
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
    v4 = sorted({str(i[4][0]) for i in infos if i[0] == socket.AF_INET})
    v6 = sorted({str(i[4][0]) for i in infos if i[0] == socket.AF_INET6})
    found = v4 or v6
    if not found:
        raise OSError(f"{host} has no address")
    return found


class Endpoint:
    """One Triton server as the pool sees it."""

    def __init__(self, url: str, source: str, backend: InferenceBackend, monitor_factory: MonitorFactory | None
                 ) -> None:
        self.url = url
        self.source = source  # the configured name it came from
        self.backend = backend
        self.inflight = InflightStreams()
        self.monitor = monitor_factory(backend, self.inflight) if monitor_factory is not None else None
        self.reachable: bool | None = None  # last readiness answer; None: not asked yet (counts as in)
        self.down_reason = ""
        self.models_ready: dict[str, bool] = {}
        self.outstanding: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.errors: Counter[tuple[str, str]] = Counter()
        self.retired = False
        self.closed = False

    # --- state -----------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return not self.retired and self.reachable is not False

    def broken(self) -> dict[str, str]:
        return self.monitor.unusable() if self.monitor is not None else {}

    def serves(self, models: Iterable[str]) -> bool:
        if not self.up:
            return False
        broken = self.broken()
        return all(m not in broken and self.models_ready.get(m, True) for m in models)

    def why_not(self, model: str) -> str | None:
        """Why this endpoint cannot serve `model` (None: it can)."""
        if self.retired:
            return "retired (no longer in DNS)"
        if self.reachable is False:
            return self.down_reason or "not ready"
        broken = self.broken()
        if model in broken:
            return broken[model]
        if not self.models_ready.get(model, True):
            return f"model {model} is not ready"
        return None

    def mark(self, reachable: bool, reason: str = "") -> None:
        if reachable != (self.reachable is not False):
            if reachable:
                logger.warning("Triton endpoint %s is back in service", self.url)
            else:
                logger.error("Triton endpoint %s is out of service: %s", self.url, reason)
        self.reachable = reachable
        self.down_reason = "" if reachable else reason

    @property
    def total_outstanding(self) -> int:
        return sum(self.outstanding.values())

    def stats(self) -> EndpointStats:
        return EndpointStats(self.url, self.up, dict(self.requests), dict(self.errors),
                             {m: n for m, n in self.outstanding.items()})


class TritonPool:
    """InferenceBackend over several Triton endpoints (see the module docstring)."""

    def __init__(
        self,
        targets: Sequence[Target],
        make_backend: Callable[[str], InferenceBackend],
        *,
        models: Sequence[str] = (),
        stream_models: Sequence[str] = (),
        monitor_factory: MonitorFactory | None = None,
        check_interval_s: float = 2.0,
        resolve_interval_s: float = 5.0,
        resolver: Resolver = resolve_addresses,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`models`: what readiness needs (checked on every endpoint each round); `stream_models`:
        models every speech stream also runs on (a shared code2wav), so an endpoint serves a speech
        model only when those work there too."""
        if not targets:
            raise ValueError("a pool needs at least one Triton endpoint")
        self.targets = list(targets)
        self.make_backend = make_backend
        self.models = list(dict.fromkeys(models))
        self.stream_models = tuple(stream_models)
        self.monitor_factory = monitor_factory
        self.check_interval_s = check_interval_s
        self.resolve_interval_s = resolve_interval_s
        self.resolver = resolver
        self.clock = clock
        self.endpoints: dict[str, Endpoint] = {}
        self._by_target: dict[Target, list[str]] = {}
        self._retired: list[Endpoint] = []
        self._turn = itertools.count()
        self.retries: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None
        for target in self.targets:  # addresses are known now; names once start() resolved them
            if target.literal or resolve_interval_s == 0:
                self._set_addresses(target, [target.url()])

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Resolve the names once, then keep resolving and checking in the background."""
        await self.resolve()
        self._task = asyncio.create_task(self._run(), name="triton-pool")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for ep in [*self.endpoints.values(), *self._retired]:
            await self._close(ep)

    async def _close(self, ep: Endpoint) -> None:
        if ep.closed:
            return
        ep.closed = True
        if ep.monitor is not None:
            await ep.monitor.stop()
        with contextlib.suppress(Exception):
            await ep.backend.close()

    async def _run(self) -> None:
        next_resolve = self.clock() + self.resolve_interval_s
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                if self.resolve_interval_s > 0 and (self.clock() >= next_resolve or not self.endpoints):
                    await self.resolve()
                    next_resolve = self.clock() + self.resolve_interval_s
                await self.check()
            except Exception:  # the pool must outlive any one bad round
                logger.exception("Triton endpoint round failed")

    # --- endpoints from DNS --------------------------------------------------------------------------

    async def resolve(self) -> None:
        for target in self.targets:
            if target.literal or self.resolve_interval_s == 0:
                continue
            try:
                addresses = await self.resolver(target.host, target.port)
            except (OSError, asyncio.TimeoutError) as exc:
                if self._by_target.get(target) is not None or not self.endpoints:
                    logger.warning("cannot resolve Triton endpoint %s (%s); keeping %s", target, exc,
                                   ", ".join(self._by_target.get(target) or []) or "none")
                continue
            self._set_addresses(target, [target.url(a) for a in addresses])
        await self._reap()

    def _set_addresses(self, target: Target, urls: list[str]) -> None:
        old = self._by_target.get(target, [])
        if old == urls:
            return
        self._by_target[target] = urls
        wanted = {u for us in self._by_target.values() for u in us}
        for url in urls:
            if url not in self.endpoints:
                self.endpoints[url] = Endpoint(url, str(target), self.make_backend(url), self.monitor_factory)
                logger.info("Triton endpoint %s added (from %s)", url, target)
        for url in [u for u in old if u not in wanted]:
            ep = self.endpoints.pop(url)
            ep.retired = True
            self._retired.append(ep)
            logger.warning("Triton endpoint %s retired (no longer an address of %s)", url, target)

    async def _reap(self) -> None:
        for ep in [e for e in self._retired if e.total_outstanding == 0]:
            self._retired.remove(ep)
            await self._close(ep)

    # --- checks ----------------------------------------------------------------------------------

    async def check(self) -> None:
        """One round: every endpoint's health monitor, then its readiness."""
        await asyncio.gather(*(self._check(ep) for ep in list(self.endpoints.values())))
        await self._reap()

    async def _check(self, ep: Endpoint) -> None:
        if ep.monitor is not None:
            try:
                await ep.monitor.tick()
            except Exception:
                logger.exception("health round of %s failed", ep.url)
        await self._check_ready(ep, self.models)

    async def _check_ready(self, ep: Endpoint, models: Sequence[str]) -> bool:
        ready = await ep.backend.server_ready()
        ep.mark(ready, "Triton is unreachable or not ready")
        if ready:
            answers = await asyncio.gather(*(ep.backend.model_ready(m) for m in models))
            ep.models_ready.update(zip(models, answers, strict=True))
        return ready

    # --- choosing ----------------------------------------------------------------------------------

    def _pick(self, model: str, needs: tuple[str, ...], tried: set[str], retry: bool) -> Endpoint | None:
        live = [ep for ep in self.endpoints.values() if ep.url not in tried]
        serving = [ep for ep in live if ep.serves(needs)]
        affinity = ENDPOINT_AFFINITY.get()
        if affinity is not None and affinity.endpoint is not None:
            for ep in serving:
                if ep.url == affinity.endpoint:
                    return ep
        if not serving:
            if retry or not live:
                return None
            # Nothing serves: the best of the rest (a single Triton that just restarted answers).
            serving = sorted(live, key=lambda e: (not e.up, bool(e.broken().keys() & set(needs))))[:1]
        turn = next(self._turn)
        n = len(serving)
        order = {ep.url: (i - turn) % n for i, ep in enumerate(serving)}
        chosen = min(serving, key=lambda e: (e.outstanding[model], e.total_outstanding, order[e.url]))
        if affinity is not None:
            affinity.endpoint = chosen.url
        return chosen

    def serving(self, model: str) -> bool:
        """Does an endpoint serve speech model `model` now (what a replay needs: gateway.replay)?"""
        needs = (model, *self.stream_models)
        return any(ep.serves(needs) for ep in self.endpoints.values())

    def _can_retry(self, needs: tuple[str, ...], tried: set[str]) -> bool:
        return any(ep.serves(needs) for ep in self.endpoints.values() if ep.url not in tried)

    def _no_endpoint(self, model: str) -> BackendError:
        reasons = "; ".join(f"{ep.url}: {ep.why_not(model) or 'busy'}" for ep in self.endpoints.values())
        return BackendError(UNAVAILABLE, f"no Triton endpoint can serve {model} now ({reasons or 'none known'})")

    def _failed(self, ep: Endpoint, model: str, exc: BackendError) -> None:
        if exc.code == CANCELLED:
            return
        ep.errors[(model, exc.code or "ERROR")] += 1
        if exc.code == UNAVAILABLE:
            ep.mark(False, f"a request failed: {exc.message}")

    # --- InferenceBackend --------------------------------------------------------------------------

    async def stream_speech(self, model: str, inputs: dict[str, np.ndarray], request_id: str,
                            parameters: Mapping[str, Any] | None = None) -> AsyncGenerator[SpeechChunk, None]:
        needs = (model, *self.stream_models)
        tried: set[str] = set()
        while True:
            retry = bool(tried)
            ep = self._pick(model, needs, tried, retry)
            if ep is None:
                raise self._no_endpoint(model)
            tried.add(ep.url)
            started = False
            ep.outstanding[model] += 1
            ep.requests[model] += 1
            try:
                with ep.inflight.open(needs) as ticket:
                    stream = (ep.backend.stream_speech(model, inputs, request_id) if parameters is None
                              else ep.backend.stream_speech(model, inputs, request_id, parameters))
                    async with aclosing(stream):
                        while True:
                            chunk = await next_within(stream, None, ticket.aborted)
                            if chunk is END:
                                return
                            started = True
                            yield chunk
            except BackendError as exc:
                self._failed(ep, model, exc)
                if started or exc.code not in RETRYABLE or not self._can_retry(needs, tried):
                    raise
                self.retries[model] += 1
                logger.warning("request %s failed on %s before any audio (%s); retrying on another endpoint",
                               request_id, ep.url, exc.message)
            finally:
                ep.outstanding[model] -= 1

    async def infer(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> dict[str, np.ndarray]:
        return await self._unary(model, request_id, "inference", lambda b: b.infer(model, inputs, request_id))

    async def _unary(self, model: str, request_id: str, what: str,
                     call: Callable[[InferenceBackend], Awaitable[T]]) -> T:
        """One unary call on the least-loaded endpoint serving `model`, retried once elsewhere on
        a RETRYABLE error (a unary call has sent nothing to the client yet)."""
        tried: set[str] = set()
        while True:
            retry = bool(tried)
            ep = self._pick(model, (model,), tried, retry)
            if ep is None:
                raise self._no_endpoint(model)
            tried.add(ep.url)
            ep.outstanding[model] += 1
            ep.requests[model] += 1
            try:
                return await call(ep.backend)
            except BackendError as exc:
                self._failed(ep, model, exc)
                if exc.code not in RETRYABLE or not self._can_retry((model,), tried):
                    raise
                self.retries[model] += 1
                logger.warning("%s %s failed on %s (%s); retrying on another endpoint",
                               what, request_id, ep.url, exc.message)
            finally:
                ep.outstanding[model] -= 1

    async def server_ready(self) -> bool:
        """Asks every endpoint now (updating who is in service): is at least one ready?"""
        endpoints = list(self.endpoints.values())
        answers = await asyncio.gather(*(self._check_ready(ep, ()) for ep in endpoints))
        return any(answers)

    async def model_ready(self, model: str) -> bool:
        endpoints = [ep for ep in self.endpoints.values() if ep.up]
        answers = await asyncio.gather(*(ep.backend.model_ready(model) for ep in endpoints))
        for ep, ok in zip(endpoints, answers, strict=True):
            ep.models_ready[model] = ok
        return any(ep.serves((model,)) for ep in endpoints)

    async def server_live(self) -> bool:
        answers = await asyncio.gather(*(ep.backend.server_live() for ep in self.endpoints.values()))
        return any(answers)

    async def model_components(self, model: str) -> list[str]:
        error: BackendError | None = None
        for ep in sorted(self.endpoints.values(), key=lambda e: not e.up):
            try:
                return await ep.backend.model_components(model)
            except BackendError as exc:
                error = exc
        raise error or self._no_endpoint(model)

    async def probe_model(self, model: str, timeout_s: float) -> ProbeResult:
        """OK when the model answers on at least one endpoint (else the first endpoint's finding)."""
        results = await asyncio.gather(*(ep.backend.probe_model(model, timeout_s) for ep in self.endpoints.values()))
        return next((r for r in results if r.ok), results[0] if results else ProbeResult("unreachable", "no endpoint"))

    async def reload_model(self, model: str, timeout_s: float) -> None:
        """Reload `model` on every endpoint in service."""
        await asyncio.gather(*(ep.backend.reload_model(model, timeout_s) for ep in self.endpoints.values() if ep.up))

    # --- what readiness and metrics report -----------------------------------------------------------

    def unusable(self) -> dict[str, str]:
        """Model -> why no endpoint can serve it, over the models some endpoint's monitor holds
        broken. One endpoint: its monitor's verdicts as they are."""
        endpoints = list(self.endpoints.values())
        if len(endpoints) == 1:
            return endpoints[0].broken()
        out: dict[str, str] = {}
        broken = {m for ep in endpoints for m in ep.broken()}
        for model in sorted(broken):
            if any(ep.serves((model,)) for ep in endpoints):
                continue
            out[model] = "; ".join(f"{ep.url}: {ep.why_not(model) or 'not serving'}" for ep in endpoints)
        return out

    def endpoint_status(self) -> dict[str, dict[str, Any]]:
        """/ready's `endpoints`: address -> whether it is in service, why not, requests in flight."""
        out: dict[str, dict[str, Any]] = {}
        for ep in self.endpoints.values():
            why = None if ep.up else (ep.down_reason or "not ready")
            broken = ep.broken()
            if why is None and broken:
                why = "; ".join(f"{m}: {r}" for m, r in sorted(broken.items()))
            out[ep.url] = {"serving": ep.up and not broken, "reason": why, "outstanding": ep.total_outstanding}
        return out

    def stats(self) -> list[EndpointStats]:
        return [ep.stats() for ep in self.endpoints.values()]


def pool_from_settings(settings: Settings, make_backend: Callable[[str], InferenceBackend]) -> TritonPool:
    """The production pool of the gateway's settings (health monitors as the settings say)."""
    targets = [Target(*split_host_port(url)) for url in settings.endpoints()]
    models = settings.triton_models()
    factory: MonitorFactory | None = None
    if settings.health_interval_s > 0:
        def factory(backend: InferenceBackend, inflight: InflightStreams) -> HealthMonitor | None:
            return HealthMonitor(
                backend, models, inflight, probe_timeout_s=settings.health_probe_timeout_s, reload=settings.health_reload,
                reload_timeout_s=settings.health_reload_timeout_s, backoff_max_s=settings.health_backoff_max_s,
            )
    # The health monitor's own interval is the round of each endpoint here.
    interval = min(settings.endpoint_check_interval_s, settings.health_interval_s or settings.endpoint_check_interval_s)
    return TritonPool(targets, make_backend, models=models, stream_models=tuple(settings.readiness_models),
                      monitor_factory=factory, check_interval_s=interval,
                      resolve_interval_s=settings.triton_resolve_interval_s)
