"""What the services need from the inference server, as a protocol (pure; no tritonclient).

`triton_client.TritonBackend` is the production implementation; tests substitute a fake with the
same behaviour. Errors cross this boundary as `BackendError(code, message, param)` with the codes
of the model repository's wire protocol (ttscore.contract.tensors): INVALID_ARG, CANCELLED,
UNAVAILABLE (also: Triton unreachable, model not loaded or not ready), INTERNAL, or "" for a
message Triton produced itself; and the gateway's own DEADLINE_EXCEEDED (gateway.deadline).

Health (gateway.monitor): `server_live`, `model_components` (an ensemble's steps), `probe_model`
(a request every python model answers without running, proving its stub is alive) and
`reload_model` (Triton's repository API).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ttscore.contract.tensors import CANCELLED, INTERNAL, INVALID_ARG, UNAVAILABLE, is_keepalive

from .usage import Usage
from .word_timing import Word

__all__ = [
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "ENDPOINT_AFFINITY",
    "INTERNAL",
    "INVALID_ARG",
    "RETRYABLE",
    "UNAVAILABLE",
    "Affinity",
    "BackendError",
    "EndpointStats",
    "InferenceBackend",
    "ProbeResult",
    "SpeechChunk",
]

# Not a model's code: the gateway gave up waiting (request_timeout_s / stall_timeout_s).
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
# Failures of an endpoint rather than of the request, worth another endpoint: before any audio a
# request is retried (gateway.pool), after audio a reproducible one is replayed (gateway.replay).
# INTERNAL is one because a Triton going down can answer it. INVALID_ARG, CANCELLED and the time
# limits are the request's own outcome.
RETRYABLE = frozenset({UNAVAILABLE, INTERNAL})


@dataclass(frozen=True)
class ProbeResult:
    """What one health probe of a model found."""

    status: str  # "ok" | "failed" (answered with an error) | "timeout" | "unreachable" (no server)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class SpeechChunk:
    """One streamed response of speech_generation."""

    audio: np.ndarray  # float32 mono PCM at the model's sample rate
    frames: int
    usage: Usage  # so far; complete on the final chunk
    final: bool
    finish_reason: str = ""  # "stop" | "length" on the final chunk
    # Word timestamps (gateway.word_timing): the words of the generation that just ended, on a chunk of their own
    # after its audio (the gateway's, never Triton's); None on every other chunk.
    words: tuple[Word, ...] | None = None

    @property
    def keepalive(self) -> bool:
        """speech_generation's keep-alive between two distant chunks (ttscore.contract.tensors.keepalive_outputs): it
        restarts the stall clock and carries nothing for the client."""
        return is_keepalive(self.frames, self.final)


class Affinity:
    """Calls made while ENDPOINT_AFFINITY holds one of these go to one Triton endpoint (a WebSocket
    utterance: gateway.streaming.session); a backend over several endpoints records its choice here and
    moves on only when that endpoint can no longer serve."""

    def __init__(self) -> None:
        self.endpoint: str | None = None


ENDPOINT_AFFINITY: ContextVar[Affinity | None] = ContextVar("triton_endpoint_affinity", default=None)


@dataclass(frozen=True)
class EndpointStats:
    """What a backend over several endpoints (gateway.pool) reports per endpoint, for /metrics."""

    endpoint: str  # "address:port"
    up: bool  # in service (selected for new requests)
    requests: dict[str, int] = field(default_factory=dict)  # Triton model -> requests started
    errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (model, error code) -> failures
    outstanding: dict[str, int] = field(default_factory=dict)  # Triton model -> requests in flight


class BackendError(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(f"{code or 'ERROR'}{f' [{param}]' if param else ''}: {message}")
        self.code = code
        self.message = message
        self.param = param


class InferenceBackend(Protocol):
    def stream_speech(
        self, model: str, inputs: dict[str, np.ndarray], request_id: str,
        parameters: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[SpeechChunk, None]:
        """Responses of one decoupled request until its FINAL one. Closing the iterator early
        (client gone, error downstream) must cancel the request on the server. `parameters`: request
        parameters to add (incremental text, ttscore.contract.tensors.TEXT_*_PARAMETER); callers
        pass it only when they have some."""
        ...

    async def infer(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> dict[str, np.ndarray]:
        """One plain (unary) inference: every output tensor of `model` by name. What a family's
        feature models take and give is its gateway adapter's business (gateway.family)."""
        ...

    async def server_ready(self) -> bool: ...

    async def model_ready(self, model: str) -> bool: ...

    async def server_live(self) -> bool:
        """Does the server answer at all (Triton's liveness; readiness drops while a model reloads)?"""
        ...

    async def model_components(self, model: str) -> list[str]:
        """The models that run for `model`: itself, or an ensemble's steps (recursively)."""
        ...

    async def probe_model(self, model: str, timeout_s: float) -> ProbeResult:
        """Send a health probe through the model's stub; never raises."""
        ...

    async def reload_model(self, model: str, timeout_s: float) -> None:
        """Unload and load `model` (a fresh stub process); BackendError when that fails."""
        ...

    async def close(self) -> None: ...
