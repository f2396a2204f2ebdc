"""The ElevenLabs dialect's vocabulary (pure: no FastAPI, no Triton).

- Output formats: ElevenLabs' `output_format` names -> this gateway's (format, sample rate). Raw formats
  are what ElevenLabs sends: `pcm_*` headerless 16-bit little-endian mono, `ulaw_8000` / `alaw_8000`
  headerless G.711, `mp3_*` an MP3 stream (lameenc's CBR at the rate the name gives; the bitrate is the
  encoder's for that rate, gateway.encoding, not the one in the name).
- Request bodies and WebSocket messages as ElevenLabs' SDK and pipecat send them. Unknown body fields are
  ignored (the SDK sends many that have no counterpart here); `voice_settings.stability`,
  `similarity_boost`, `style` and `use_speaker_boost` are accepted and ignored; `speed` is the Speech
  API's `speed` (honoured for whole files, refused when streamed, as there).
- Errors: HTTP `{"detail": {"status": <code>, "message": <text>}}` (a body or query that fails its schema:
  422 with FastAPI's `{"detail": [{"loc", "msg", "type"}]}`, as ElevenLabs' own server answers);
  WebSocket `{"message", "error", "code"}` (code: the close code that follows, 1008 policy violation).
- Alignment: one function (`char_alignment`) turns a sentence's word timestamps into per-character
  times, rendered as the WebSocket's `{chars, charStartTimesMs, charDurationsMs}` or the HTTP
  `{characters, character_start_times_seconds, character_end_times_seconds}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import APIError
from ..speech_fields import SpeechFields
from ..word_timing import Word

# --- output formats --------------------------------------------------------------------------------

_PCM_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
_MP3 = ("22050_32", "24000_48", "44100_32", "44100_64", "44100_96", "44100_128", "44100_192")
OUTPUT_FORMATS: dict[str, tuple[str, int]] = {
    **{f"pcm_{r}": ("pcm", r) for r in _PCM_RATES},
    "ulaw_8000": ("ulaw", 8000),
    "alaw_8000": ("alaw", 8000),
    **{f"mp3_{name}": ("mp3", int(name.split("_")[0])) for name in _MP3},
}
DEFAULT_OUTPUT_FORMAT = "mp3_44100_128"  # ElevenLabs' default
MEDIA_TYPES = {"pcm": "audio/pcm", "ulaw": "audio/basic", "alaw": "audio/x-alaw-basic", "mp3": "audio/mpeg"}
NDJSON = "application/x-ndjson"


def output_format(name: str | None) -> tuple[str, int]:
    """(format, sample rate) of an `output_format` name; 422 naming the query parameter otherwise."""
    chosen = DEFAULT_OUTPUT_FORMAT if name is None else name
    found = OUTPUT_FORMATS.get(chosen)
    if found is None:
        raise validation_error(("query", "output_format"),
                               f"Input should be one of: {', '.join(OUTPUT_FORMATS)}", "enum", chosen)
    return found


# --- errors ----------------------------------------------------------------------------------------

WS_POLICY = 1008  # RFC 6455 policy violation: ElevenLabs closes a socket it refuses with it
WS_INTERNAL = 1011
DIALECT_PREFIXES = ("/v1/text-to-speech/",)
DIALECT_PATHS = frozenset({"/v1/voices"})

# Speech API status -> the `status` code ElevenLabs names a failure of that kind with.
_CODES = {400: "invalid_request", 401: "invalid_api_key", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 413: "payload_too_large", 415: "invalid_request",
          503: "service_unavailable", 504: "timeout", 500: "internal_error"}


def is_dialect_path(path: str) -> bool:
    return path in DIALECT_PATHS or path.startswith(DIALECT_PREFIXES)


class ElevenLabsError(APIError):
    """An error in ElevenLabs' HTTP shape; `type` (metrics' cause) stays the Speech API's kind."""

    code: str = "invalid_request"

    def body(self) -> dict[str, Any]:
        return {"detail": {"status": self.code, "message": self.message}}


class ElevenLabsValidationError(APIError):
    """422 in FastAPI's list shape (what ElevenLabs answers a body or query that fails its schema)."""

    details: tuple[dict[str, Any], ...] = ()

    def body(self) -> dict[str, Any]:
        return {"detail": list(self.details)}


def error(status: int, code: str, message: str, kind: str = "BadRequestError",
          headers: dict[str, str] | None = None) -> ElevenLabsError:
    exc = ElevenLabsError(message, None, status, kind, dict(headers or {}))
    exc.code = code
    return exc


def validation_error(loc: tuple[Any, ...], msg: str, kind: str, got: Any = None) -> ElevenLabsValidationError:
    exc = ElevenLabsValidationError(f"{'.'.join(str(p) for p in loc)}: {msg}", None, 422, "BadRequestError")
    exc.details = ({"loc": list(loc), "msg": msg, "type": kind, **({"input": got} if got is not None else {})},)
    return exc


def from_validation(exc: ValidationError, root: str) -> ElevenLabsValidationError:
    """pydantic's errors of a body (`root` "body") or message -> the 422 list."""
    out = ElevenLabsValidationError("Invalid request", None, 422, "BadRequestError")
    out.details = tuple({"loc": [root, *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors())
    first = out.details[0] if out.details else {"loc": [root], "msg": "invalid"}
    out.message = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return out


def dialect_error(exc: APIError) -> APIError:
    """An error raised while serving a dialect path, in the dialect's shape (gateway.app renders it).
    A Speech API 400 that names `voice` is ElevenLabs' 404 voice_not_found; 404 (an unknown model)
    is model_not_found; the rest keep their status (and Retry-After) under ElevenLabs' codes."""
    if isinstance(exc, (ElevenLabsError, ElevenLabsValidationError)):
        return exc
    if exc.status == 400 and exc.param == "voice":
        return error(404, "voice_not_found", exc.message, "NotFoundError")
    if exc.status == 404 and exc.param == "model":
        return error(404, "model_not_found", exc.message, "NotFoundError")
    code = _CODES.get(exc.status, "internal_error" if exc.status >= 500 else "invalid_request")
    if exc.status == 400 and exc.param:
        code = f"invalid_{exc.param.replace('.', '_')}"
    return error(exc.status, code, exc.message, exc.type, exc.headers)


def ws_error(message: str, code: str = "invalid_request", close_code: int = WS_POLICY,
             context_id: str | None = None) -> dict[str, Any]:
    """A WebSocket error message (the socket closes with `close_code` after it, unless it names a context
    of a multi-stream socket, which goes on)."""
    out: dict[str, Any] = {"message": message, "error": code, "code": close_code}
    if context_id is not None:
        out["contextId"] = context_id
    return out


def ws_dialect_error(exc: APIError) -> dict[str, Any]:
    """A refusal before the session started (API key, drain), as the WebSocket's error message."""
    mapped = dialect_error(exc)
    code = mapped.code if isinstance(mapped, ElevenLabsError) else "invalid_request"
    return ws_error(mapped.message, code, WS_POLICY if mapped.status < 500 or mapped.status == 503 else WS_INTERNAL)


# --- requests --------------------------------------------------------------------------------------


class VoiceSettings(BaseModel):
    """`voice_settings`: only `speed` has a counterpart here (the Speech API's `speed`)."""

    model_config = ConfigDict(extra="ignore")
    stability: float | None = None  # accepted, ignored
    similarity_boost: float | None = None  # accepted, ignored
    style: float | None = None  # accepted, ignored
    use_speaker_boost: bool | None = None  # accepted, ignored
    speed: float | None = None


class TextToSpeechBody(BaseModel):
    """POST /v1/text-to-speech/{voice_id}[...]: what is used; other fields ElevenLabs takes are ignored."""

    model_config = ConfigDict(extra="ignore")
    text: str
    model_id: str | None = None
    language_code: str | None = None
    voice_settings: VoiceSettings | None = None
    seed: int | None = Field(None, ge=0)
    previous_text: str | None = None  # accepted, ignored (no cross-request context here)
    next_text: str | None = None  # accepted, ignored
    # This gateway's extension (the Speech API's field; ElevenLabs' SDK sends it through
    # request_options={"additional_body_parameters": ...}): the generation's frame budget.
    max_new_tokens: int | None = Field(None, ge=1)


class GenerationConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")
    chunk_length_schedule: list[float] | None = None


class ClientMessage(BaseModel):
    """Any client message of stream-input / multi-stream-input (which one it is follows from its fields)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    text: str | None = None
    context_id: str | None = None
    voice_settings: VoiceSettings | None = None
    generation_config: GenerationConfig | None = None
    generator_config: GenerationConfig | None = None  # (the single-stream SendText's spelling)
    xi_api_key: str | None = Field(None, alias="xi-api-key")
    xi_api_key_multi: str | None = Field(None, alias="xi_api_key")
    authorization: str | None = None
    try_trigger_generation: bool | None = None
    flush: bool | None = None
    close_context: bool | None = None
    close_socket: bool | None = None

    def api_key(self) -> str | None:
        if self.xi_api_key or self.xi_api_key_multi:
            return self.xi_api_key or self.xi_api_key_multi
        if self.authorization:
            scheme, _, token = self.authorization.strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else self.authorization.strip()
        return None


# ElevenLabs' language codes (ISO 639-1) -> the language names the served families take; any other code
# goes to the family as it is (some take codes), and one it does not know is its 400.
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese", "de": "German", "it": "Italian", "pt": "Portuguese",
                  "es": "Spanish", "ja": "Japanese", "ko": "Korean", "fr": "French", "ru": "Russian"}


def language(code: str | None) -> str | None:
    if code is None or not code.strip():
        return None
    return LANGUAGE_NAMES.get(code.strip().lower(), code)


def speech_fields(text: str, voice_id: str, model_id: str | None, fmt: str, rate: int, *, streamed: bool,
                  voice_settings: VoiceSettings | None = None, language_code: str | None = None,
                  seed: int | None = None, max_new_tokens: int | None = None,
                  word_timestamps: bool = False) -> SpeechFields:
    """The Speech API request the dialect's request means (planned like any other); `word_timestamps`: its
    words timed by the deployment's aligner (what the alignment is made of)."""
    return SpeechFields(input=text, model=model_id, voice=voice_id, response_format=fmt, sample_rate=rate,
                        speed=voice_settings.speed if voice_settings is not None else None,
                        language=language(language_code), seed=seed, max_new_tokens=max_new_tokens,
                        stream_format="audio" if streamed else None, word_timestamps=word_timestamps or None)


# --- voices ----------------------------------------------------------------------------------------


def voice_list(voices: list[str], uploaded: list[dict[str, Any]]) -> dict[str, Any]:
    """GET /v1/voices: every voice a request can name as `voice_id` (presets `premade`, uploaded and
    precomputed ones `cloned`)."""
    cloned = {v["name"]: v for v in uploaded if v.get("name")}
    out: list[dict[str, Any]] = []
    for name in voices:
        extra = cloned.get(name)
        out.append({
            "voice_id": name, "name": name, "category": "cloned" if extra is not None else "premade",
            "labels": {}, "description": (extra or {}).get("speaker_description"), "preview_url": None,
            "available_for_tiers": [], "settings": None,
        })
    return {"voices": out}


# --- alignment -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CharAlignment:
    chars: list[str]
    starts: list[float]  # seconds
    ends: list[float]

    def ws(self, offset_s: float = 0.0) -> dict[str, Any]:
        """The WebSocket's shape, in integer ms from `offset_s` (a start and a duration rounded so that
        start + duration is the rounded end)."""
        starts = [round((s - offset_s) * 1000) for s in self.starts]
        ends = [round((e - offset_s) * 1000) for e in self.ends]
        return {"chars": list(self.chars), "charStartTimesMs": starts,
                "charDurationsMs": [e - s for s, e in zip(starts, ends, strict=True)]}

    def http(self, offset_s: float = 0.0) -> dict[str, Any]:
        return {"characters": list(self.chars),
                "character_start_times_seconds": [round(s - offset_s, 3) for s in self.starts],
                "character_end_times_seconds": [round(e - offset_s, 3) for e in self.ends]}


def char_alignment(text: str, words: Sequence[Word], duration_s: float) -> CharAlignment:
    """Per-character times of `text` spoken in `duration_s` seconds of audio, from its words' timestamps.
    A word's characters share its time evenly; the characters no word covers (spaces, punctuation
    outside words, text before the first word or after the last) share the gap they stand in (before
    the first word: from 0; after the last: to `duration_s`), and the last character holds the silence
    after it, so the characters span the whole audio (a client that advances its clock by an
    alignment's span, as pipecat does, stays in step with the audio). Times never go backwards and stay
    within [0, duration_s]."""
    n = len(text)
    starts: list[float | None] = [None] * n
    ends: list[float | None] = [None] * n
    last = 0.0
    for w in sorted(words, key=lambda w: (w.char_start, w.start)):
        lo, hi = max(0, min(w.char_start, n)), max(0, min(w.char_end, n))
        if hi <= lo:
            continue
        t0 = min(max(w.start, last), duration_s)
        t1 = min(max(w.end, t0), duration_s)
        per = (t1 - t0) / (hi - lo)
        for k, i in enumerate(range(lo, hi)):
            if starts[i] is None:
                starts[i], ends[i] = t0 + k * per, t0 + (k + 1) * per
        last = t1
    # the uncovered runs: each between the end of what precedes it and the start of what follows
    i = 0
    while i < n:
        if starts[i] is not None:
            i += 1
            continue
        j = i
        while j < n and starts[j] is None:
            j += 1
        before = ends[i - 1] if i > 0 else 0.0
        after = starts[j] if j < n else max(duration_s, before or 0.0)
        t0 = float(before or 0.0)
        t1 = max(float(after if after is not None else t0), t0)
        per = (t1 - t0) / (j - i)
        for k in range(i, j):
            starts[k], ends[k] = t0 + (k - i) * per, t0 + (k - i + 1) * per
        i = j
    if n and (ends[-1] or 0.0) < duration_s:
        ends[-1] = duration_s
    return CharAlignment(list(text), [float(s or 0.0) for s in starts], [float(e or 0.0) for e in ends])


def alignment(text: str, words: Sequence[Word] | None, duration_s: float) -> CharAlignment | None:
    """The character alignment of `text` from its words (None: the request was not aligned, no aligner deployed)."""
    return None if words is None else char_alignment(text, words, duration_s)


__all__ = [
    "DEFAULT_OUTPUT_FORMAT", "OUTPUT_FORMATS", "CharAlignment", "ClientMessage", "ElevenLabsError",
    "ElevenLabsValidationError", "TextToSpeechBody", "VoiceSettings", "Word", "alignment", "char_alignment",
    "dialect_error", "error", "from_validation", "is_dialect_path", "output_format", "speech_fields",
    "validation_error", "voice_list", "ws_error",
]
