"""What the services need from the inference server, as a protocol (pure; no tritonclient).

`triton_client.TritonBackend` is the production implementation; tests substitute a fake with the
same behaviour. Errors cross this boundary as `BackendError(code, message, param)` with the codes
of the model repository's wire protocol (ttscore.contract.tensors): INVALID_ARG, CANCELLED,
UNAVAILABLE (also: Triton unreachable, model not loaded or not ready), INTERNAL, or "" for a
message Triton produced itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ttscore.contract.tensors import CANCELLED, INTERNAL, INVALID_ARG, UNAVAILABLE

from .usage import Usage

__all__ = [
    "CANCELLED",
    "INTERNAL",
    "INVALID_ARG",
    "UNAVAILABLE",
    "BackendError",
    "InferenceBackend",
    "SpeechChunk",
]


@dataclass(frozen=True)
class SpeechChunk:
    """One streamed response of speech_generation."""

    audio: np.ndarray  # float32 mono PCM at the model's sample rate
    frames: int
    usage: Usage  # so far; complete on the final chunk
    final: bool
    finish_reason: str = ""  # "stop" | "length" on the final chunk


class BackendError(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(f"{code or 'ERROR'}{f' [{param}]' if param else ''}: {message}")
        self.code = code
        self.message = message
        self.param = param


class InferenceBackend(Protocol):
    def stream_speech(
        self, model: str, inputs: dict[str, np.ndarray], request_id: str
    ) -> AsyncGenerator[SpeechChunk, None]:
        """Responses of one decoupled request until its FINAL one. Closing the iterator early
        (client gone, error downstream) must cancel the request on the server."""
        ...

    async def voice_features(
        self, model: str, audio: np.ndarray, sample_rate: int, request_id: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """(x_vector [D] float32, ref_codes [T, 16] int64) of a reference clip."""
        ...

    async def server_ready(self) -> bool: ...

    async def model_ready(self, model: str) -> bool: ...

    async def close(self) -> None: ...
