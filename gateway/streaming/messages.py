"""The WebSocket session's client messages (pure): a frame parsed into its protocol model, or the reason
it is refused (a non-fatal `error` message); and an accepted session.config with what was worked out
from it once."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import errors
from ..family import SpeechPlan
from ..protocol import CLIENT_MESSAGES, SessionConfig
from ..speech_fields import SpeechFields
from ..text_split import TextSplitter

MESSAGE_TYPES = ", ".join(CLIENT_MESSAGES)
INCREMENTAL = "incremental"


def parse_message(raw: str | bytes, max_config_bytes: int, max_text_bytes: int) -> BaseModel | str:
    """A client message, or the reason it is rejected (session.config may take `max_config_bytes`, any
    other message `max_text_bytes`)."""
    if isinstance(raw, bytes):
        return "Binary messages are not accepted; send JSON text messages"
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > max_config_bytes:
        return f"Message too large ({size} bytes; at most {max_config_bytes})"
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return f"Invalid JSON message: {exc}"
    if not isinstance(data, dict):
        return "Messages must be JSON objects with a 'type'"
    kind = data.get("type")
    model = CLIENT_MESSAGES.get(kind) if isinstance(kind, str) else None
    if model is None:
        return f"Unknown message type {kind!r}; expected one of: {MESSAGE_TYPES}"
    if kind != "session.config" and size > max_text_bytes:
        return f"{kind} message too large ({size} bytes; at most {max_text_bytes})"
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details: list[dict[str, Any]] = [dict(e) for e in exc.errors()]
        return f"Invalid {kind}: {errors.validation_error(details).message}"


class SessionSetup:
    """An accepted session.config, with what was worked out from it once."""

    def __init__(self, message: SessionConfig, probe: SpeechPlan, features: Any | None, mode: str) -> None:
        self.message = message
        self.format = probe.output.format
        self.sample_rate = probe.output.sample_rate
        self.features = features  # inline ref_audio: computed once per config
        self.mode = mode  # the split_granularity in effect (incremental may fall back to sentence)

    def splitter(self) -> TextSplitter:
        """A fresh splitter of the mode in effect (incremental text is not split)."""
        return TextSplitter("none" if self.mode == INCREMENTAL else self.mode)

    def open_fields(self, text: str) -> SpeechFields:
        """An incremental generation's fields: always streamed (raw frames; pcm unless the config
        names a streamable format) in the streaming prompt mode."""
        fields = self.message.speech_fields(text)
        return replace(fields, non_streaming_mode=False, stream_format="audio", stream=None,
                       response_format=fields.response_format if self.message.stream_audio
                       else (self.message.response_format or "pcm"))


__all__ = ["INCREMENTAL", "MESSAGE_TYPES", "SessionSetup", "parse_message"]
