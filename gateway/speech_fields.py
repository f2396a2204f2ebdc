"""The Speech API's request vocabulary that every family adapter shares (pure): the request fields as the
protocol models typed them, stored voices, the output a request asks for, and the checks every adapter makes
the same way (a text field's length, the family's unsupported fields, the task message, the output plan).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ttscore.contract.rules import FamilyRules

from . import encoding
from .errors import APIError, bad_request

MAX_INSTRUCTIONS_CHARS = 4096
MAX_REF_TEXT_CHARS = 4096
DEFAULT_FORMAT = "wav"
MIN_SPEED, MAX_SPEED = 0.25, 4.0
STREAM_FORMATS = ("audio", "sse")
STREAMABLE_FORMATS = encoding.STREAMABLE_FORMATS
_OFF_WHEN_FALSE = ("word_timestamps",)  # switches whose `false` is the same as leaving them out


@dataclass
class SpeechFields:
    """The request fields of POST /v1/audio/speech (None = not given), as the protocol models typed
    them (gateway.protocol: the single request, batch items over the batch defaults, a WebSocket
    session's config): planning checks what they mean, never their types again."""

    input: str | None = None
    model: str | None = None
    voice: str | None = None
    response_format: str | None = None
    speed: float | None = None
    task_type: str | None = None
    sample_rate: int | None = None
    language: str | None = None
    instructions: str | None = None
    max_new_tokens: int | None = None
    initial_codec_chunk_frames: int | None = None
    non_streaming_mode: bool | None = None
    seed: int | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    stream: bool | None = None
    stream_format: str | None = None
    extra_params: dict[str, Any] | None = None  # a family's own knobs (FamilyRules.extra_params)
    word_timestamps: bool | None = None  # gateway.word_timing

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> SpeechFields:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})



# --- stored voices (uploads / precomputed) ---------------------------------------------------------


FeaturesFn = Callable[[bool], Awaitable[Any]]  # (x_vector_only) -> the voice's cached features
ModelFeaturesFn = Callable[[str, bool], Awaitable[Any]]  # (feature model, prompt) -> its features there


@dataclass(frozen=True)
class StoredVoice:
    """An uploaded or precomputed voice: always a Base voice-cloning input. Which of its parts a
    request uses, and how, is the family adapter's (gateway.family: `reference_features`)."""

    name: str
    ref_text: str | None = None  # stored transcript
    audio: np.ndarray | None = None  # float32 mono reference clip
    sample_rate: int | None = None
    features: FeaturesFn | None = None  # an upload's features, cached per voice (gateway.voices.FeatureCache)
    model_features: ModelFeaturesFn | None = None  # an upload's features through one model, computed at upload
    # Precomputed voices (custom_voice_dir) are made for one family (None: an upload, any family) and
    # may fit only some of its served checkpoints (None: not checked).
    family: str | None = None
    models: tuple[str, ...] | None = None
    precomputed: Any = None  # a precomputed voice's features, as its family's adapter reads them



# --- output ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputSpec:
    format: str  # wav | pcm | flac | mp3 | opus | aac | ulaw | alaw
    sample_rate: int  # of the audio sent to the client
    source_rate: int  # of the model
    speed: float
    stream: str | None  # None (whole clip), "audio" (raw bytes) or "sse" (speech.audio.* events)

    @property
    def media_type(self) -> str:
        return encoding.media_type(self.format, streamed=self.stream == "audio")



def checked_speed(f: SpeechFields) -> float:
    """The request's `speed` (1.0 when omitted) within [MIN_SPEED, MAX_SPEED] (400 naming `speed` otherwise):
    the output's time-stretch, or a family's own speaking rate (OmniVoice's duration estimate)."""
    speed = 1.0 if f.speed is None else f.speed
    if not math.isfinite(speed):
        raise bad_request("'speed' must be a number", "speed")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise bad_request(f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}", "speed")
    return speed


def refuse_other_task(f: SpeechFields, rules: FamilyRules, advice: str | None = None) -> None:
    """400 naming `task_type` when the request names a task the family does not serve; `advice` (after the
    refusal) says what to do instead, by default to use the family's first task or omit it."""
    if f.task_type is not None and f.task_type not in rules.tasks:
        raise bad_request(f"{rules.name} models do not support task_type='{f.task_type}'"
                          + (advice or f". Use task_type='{rules.tasks[0]}' or omit it."), "task_type")


def plan_output(f: SpeechFields, source_rate: int) -> OutputSpec:
    fmt = f.response_format if f.response_format is not None else DEFAULT_FORMAT
    if fmt not in encoding.MEDIA_TYPES:
        raise bad_request(
            f"Invalid response_format '{fmt}'. Supported: {', '.join(encoding.MEDIA_TYPES)}", "response_format"
        )
    speed = checked_speed(f)
    stream_flag = bool(f.stream)
    if f.stream_format is not None and f.stream_format not in STREAM_FORMATS:
        raise bad_request(f"Invalid stream_format '{f.stream_format}'. Supported: audio, sse", "stream_format")
    stream = f.stream_format or ("sse" if stream_flag else None)
    if stream is not None:
        if fmt not in STREAMABLE_FORMATS:
            raise bad_request(
                "Streaming (stream=true, stream_format='audio' or stream_format='sse') requires "
                f"response_format 'pcm', 'wav', 'mp3' or 'opus' (or the telephony 'ulaw' / 'alaw'). Got "
                f"response_format='{fmt}'.",
                "response_format",
            )
        if speed != 1.0:
            raise bad_request(f"Streaming requires speed=1.0 (got {speed}); speed is only applied to whole clips.",
                              "speed")
    rate = encoding.default_rate(fmt, source_rate) if f.sample_rate is None else f.sample_rate
    allowed = encoding.sample_rates(fmt)
    if rate not in allowed:
        raise bad_request(
            f"sample_rate {rate} is not supported for response_format='{fmt}'. Supported: "
            + encoding.describe_rates(fmt),
            "sample_rate",
        )
    return OutputSpec(format=fmt, sample_rate=int(rate), source_rate=source_rate, speed=float(speed), stream=stream)



# --- checks every adapter makes ------------------------------------------------------------------


def text_field(value: str | None, param: str, limit: int, *, required: bool = False,
               empty_message: str | None = None) -> str | None:
    """A text field within its length limit (400 naming it beyond); None when not given."""
    if value is None:
        if required:
            raise bad_request(empty_message or f"Missing required parameter: '{param}'", param)
        return None
    if len(value) > limit:
        raise bad_request(f"'{param}' is too long: {len(value)} characters, the maximum is {limit}", param)
    return value


def refuse_unsupported(f: SpeechFields, rules: FamilyRules) -> None:
    """400 naming the first of the family's unsupported fields (FamilyRules.unsupported) the request set.
    `language: "Auto"` counts as not set for a family that takes "Auto" (FamilyRules.auto_language), and
    `word_timestamps: false` asks for nothing (vLLM-Omni refuses only `true`)."""
    for field in rules.unsupported:
        value = getattr(f, field, None)
        if field in _OFF_WHEN_FALSE and value is False:
            continue
        if field == "language" and rules.auto_language and isinstance(value, str) and value.strip().lower() == "auto":
            continue
        if value is not None:
            raise bad_request(f"'{field}' is not supported by {rules.name} models", field)


def task_mismatch(served_tasks: Sequence[str], task: str, family_name: str) -> APIError:
    """The spec's message for a task no served (or named) checkpoint of a family supports."""
    tasks = list(dict.fromkeys(served_tasks))
    if len(tasks) == 1:
        return bad_request(
            f"{family_name} {tasks[0]} checkpoint does not support task_type='{task}'. "
            f"Use task_type='{tasks[0]}' or load the matching {task} checkpoint."
        )
    listed = " and ".join(tasks)
    options = " or ".join(f"task_type='{t}'" for t in tasks)
    return bad_request(
        f"{family_name} {listed} checkpoints do not support task_type='{task}'. "
        f"Use {options} or load the matching {task} checkpoint."
    )

