"""Typed errors shared by export, the offline CLI, Triton models and the gateway.

Each layer maps these to its own wire format in exactly one place: the CLI prints one line and
exits 2, Triton models turn them into TritonError(INVALID_ARG), the gateway into a 400 body.
"""

from __future__ import annotations


class TTSError(Exception):
    """Base class of every expected (user-caused) failure."""


class CheckpointError(TTSError):
    """The directory is not a usable Qwen3-TTS 12 Hz checkpoint."""


class ArtifactError(TTSError):
    """An export artifact directory is missing, stale or corrupt."""


class ExportError(TTSError):
    """Export or its validation against PyTorch failed."""


class InvalidRequest(TTSError):
    """A synthesis request is invalid. `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class AudioDecodeError(InvalidRequest):
    """Reference audio could not be decoded."""


class UpstreamUnavailable(TTSError):
    """A model this one calls (BLS) cannot answer right now, e.g. its stub process died and is being
    replaced: the requests that needed it fail with UNAVAILABLE (retryable), not INTERNAL."""
