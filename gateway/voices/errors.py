"""Typed errors of the voices package. The gateway maps them to the wire in one place.

Client errors subclass ttscore.contract.errors.InvalidRequest (-> 400 with `param`); VoiceNotFound carries
`status = 404` and the spec's DELETE body via `body()`.
"""

from __future__ import annotations

from typing import Any

from ttscore.contract.errors import InvalidRequest


class VoiceNotFound(InvalidRequest):
    """No uploaded voice of that name (DELETE /v1/audio/voices/{name} -> 404)."""

    status = 404

    def __init__(self, name: str, param: str | None = "name") -> None:
        super().__init__(f"Voice '{name}' not found", param)
        self.name = name

    def body(self) -> dict[str, Any]:
        """The spec's 404 body for DELETE of an unknown voice."""
        return {"success": False, "error": self.message}


class UploadTooLarge(InvalidRequest):
    """An upload or fetched reference passed its byte limit; raised before the rest is read."""

    def __init__(self, limit: int, param: str | None = "audio_sample", what: str = "File size") -> None:
        super().__init__(f"{what} exceeds maximum limit of {_human(limit)}", param)
        self.limit = limit


class VoiceSettingsError(ValueError):
    """A voices setting (environment variable) is invalid: the server must not start."""


def _human(n: int) -> str:
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}MB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}KB"
    return f"{n} bytes"
