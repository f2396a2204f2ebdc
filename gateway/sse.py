"""Server-Sent Events framing of the OpenAI `speech.audio.*` events (pure).

Each event is an `event:` line naming its type and one JSON `data:` line, then a blank line. With
`word_timestamps`, a `speech.audio.timestamps` event follows each sentence's audio deltas (per chunk,
gateway.word_timing.ChunkRule: more of them between its deltas, each with the words that became final). The
stream ends after `speech.audio.done` or `speech.audio.error` (no `[DONE]` sentinel: OpenAI's
speech stream has none).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from .usage import Usage

DELTA = "speech.audio.delta"
DONE = "speech.audio.done"
ERROR = "speech.audio.error"
TIMESTAMPS = "speech.audio.timestamps"  # word_timestamps: words, after their audio (gateway.word_timing)
MEDIA_TYPE = "text/event-stream"


def event(name: str, data: dict[str, Any]) -> bytes:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n".encode()


def delta(audio: bytes, response_format: str) -> bytes:
    return event(DELTA, {"type": DELTA, "audio": base64.b64encode(audio).decode("ascii"),
                         "response_format": response_format})


def done(usage: Usage, finish_reason: str = "stop") -> bytes:
    """The terminal event: usage, and why the generation ended (ttscore.contract.tensors.FINISH_REASONS)."""
    return event(DONE, {"type": DONE, "usage": usage.as_dict(), "finish_reason": finish_reason})


def timestamps(words: list[dict[str, Any]]) -> bytes:
    """The words of the sentence whose audio was just sent (gateway.word_timing's wire form)."""
    return event(TIMESTAMPS, {"type": TIMESTAMPS, "timestamps": words})


def error(error_body: dict[str, Any]) -> bytes:
    """`error_body` is the API error object: {"message", "type", "param", "code"}."""
    return event(ERROR, {"type": ERROR, "error": error_body})


def parse(stream: bytes | str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of an SSE body (for clients and tests)."""
    text = stream.decode() if isinstance(stream, bytes) else stream
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            out.append((name, json.loads("\n".join(data))))
    return out
