"""The health monitor of one Triton endpoint: keeps that endpoint's models serving.

There is one per endpoint, owned by the app's pool (gateway.pool), which drives its rounds (`tick`)
every `health_interval_s` (or `endpoint_check_interval_s` when shorter) and reports its verdicts to
readiness; this is the only health monitor the gateway runs. Each round:
1. Liveness. Triton silent -> every model is unreachable and every stream in flight ends now (the
   gRPC channel reconnects by itself once Triton is back, e.g. restarted by `triton-tts serve`,
   Docker's restart policy or Kubernetes).
2. A health probe through each model's stub (gateway.triton_client): the deployment's models, each
   ensemble expanded into its steps. A failed probe (or repeated timeouts) marks the model broken
   (gateway.health) and ends the streams in flight that need it, with 503 / in-band errors.
3. Broken models are reloaded through Triton's repository API (unload + load: a fresh stub), with
   backoff while reloads fail; readiness stays 503, naming them, until a probe passes again.

Everything goes through Triton's gRPC API, so it works wherever the gateway can reach Triton
(one host, Docker Compose, Kubernetes). With several gateway replicas, each would reload a broken
model; set `health_reload: false` on all but one (they still probe, abort and report).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from .backend import UNAVAILABLE, BackendError, InferenceBackend
from .health import RELOADING, Backoff, HealthBook, InflightStreams

logger = logging.getLogger(__name__)


class HealthMonitor:
    def __init__(
        self,
        backend: InferenceBackend,
        models: Iterable[str],
        inflight: InflightStreams,
        *,
        probe_timeout_s: float = 5.0,
        reload: bool = True,
        reload_timeout_s: float = 300.0,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.models = list(dict.fromkeys(models))  # the deployment's models (ensembles unexpanded)
        self.inflight = inflight
        self.probe_timeout_s = probe_timeout_s
        self.reload_timeout_s = reload_timeout_s
        self.clock = clock
        self.book = HealthBook(backoff=Backoff(1.0, backoff_max_s), reload=reload)
        self.book.track(self.models)
        # Probed model -> the deployment models it serves (an ensemble step serves its ensemble).
        self.owners: dict[str, set[str]] = {m: {m} for m in self.models}
        self._expanded = False
        self._reloads: dict[str, asyncio.Task[None]] = {}

    # --- lifecycle ---------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Cancel the reloads in flight (the endpoint is closing)."""
        tasks = list(self._reloads.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- one round ---------------------------------------------------------------------------------

    async def tick(self) -> None:
        if not await self.backend.server_live():
            self._unreachable("no answer to the liveness check")
            return
        if not self._expanded:
            await self._expand()
        probed = [m for m in self.book.models if self.book.state(m) != RELOADING]
        results = await asyncio.gather(*(self.backend.probe_model(m, self.probe_timeout_s) for m in probed))
        now = self.clock()
        for model, result in zip(probed, results, strict=True):
            if result.status == "unreachable":
                self._unreachable(result.detail)
                return
            if self.book.observe(model, result, now):
                self._abort(self.owners.get(model, {model}), f"model {model} failed: {result.detail}")
        for model in self.book.due_reloads(now):
            self._reload(model)

    async def _expand(self) -> None:
        """Replace each ensemble by its steps (read from Triton: the gateway's config names only the
        ensemble). A model Triton cannot describe is probed as it is (which reports what is wrong),
        and the next round asks again."""
        owners: dict[str, set[str]] = {}
        complete = True
        for model in self.models:
            try:
                parts = await self.backend.model_components(model)
            except BackendError as exc:
                logger.warning("cannot read the steps of %s: %s", model, exc.message)
                parts, complete = [model], False
            for part in parts:
                owners.setdefault(part, set()).add(model)
        self.owners = owners
        self.book.track(owners)
        self._expanded = complete

    def _unreachable(self, detail: str) -> None:
        self._expanded = False  # a restarted Triton may serve another repository: read it again
        if self.book.unreachable(detail):
            logger.error("Triton is unreachable (%s)", detail)
            self._abort(None, "the inference server is unreachable")

    def _abort(self, models: Iterable[str] | None, reason: str) -> None:
        n = self.inflight.abort(models, BackendError(UNAVAILABLE, reason))
        if n:
            logger.warning("ended %d stream(s) in flight: %s", n, reason)

    def _reload(self, model: str) -> None:
        if model in self._reloads:
            return
        self.book.reload_started(model)
        logger.warning("reloading model %s", model)
        self._reloads[model] = asyncio.create_task(self._do_reload(model), name=f"reload-{model}")

    async def _do_reload(self, model: str) -> None:
        started = self.clock()
        error: str | None = None
        try:
            await self.backend.reload_model(model, self.reload_timeout_s)
        except BackendError as exc:
            error = exc.message
        except Exception as exc:
            logger.exception("reloading %s failed", model)
            error = str(exc) or type(exc).__name__
        finally:
            self._reloads.pop(model, None)
        now = self.clock()
        self.book.reload_finished(model, error, now)
        if error is None:
            logger.warning("model %s reloaded in %.1f s", model, now - started)
        else:
            logger.error("reloading model %s failed after %.1f s: %s", model, now - started, error)

    # --- what readiness reports ----------------------------------------------------------------------

    def unusable(self) -> dict[str, str]:
        """Deployment model -> why it cannot serve (naming the failed step of an ensemble)."""
        out: dict[str, str] = {}
        for part, reason in self.book.unusable().items():
            for owner in sorted(self.owners.get(part, {part})):
                out.setdefault(owner, reason if owner == part else f"{part}: {reason}")
        return out
