"""Speech request -> a fully resolved plan: defaults, validation, task inference, routing (pure).

Input is the contract's fields (`SpeechFields`, already type-checked by the protocol models);
output is a `SpeechPlan` naming the served checkpoint, every generation input and the output
format, or an `APIError` (400/404) naming the field. Nothing here talks to Triton, so a request
that fails planning never starts work on the server.

What differs between families (which fields a family takes, its voices, defaults and task
routing) is its adapter's (gateway.family, gateway.families): `plan_speech` checks the input text
and `model`, then hands the request to the adapter of the checkpoint `model` names, or, without
`model`, of the first served family that routes requests by task.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.rules import FamilyRules

from . import encoding
from .aliases import DEFAULT_MODEL_ALIASES, effective_voice_aliases
from .errors import APIError, bad_request, from_invalid_request, model_not_found
from .family import default_voice_aliases
from .settings import DEFAULT_MAX_INPUT_CHARS, DEFAULT_SEGMENT_CHARS

if TYPE_CHECKING:
    from .checkpoints import ServedCheckpoint

MAX_INSTRUCTIONS_CHARS = 4096
MAX_REF_TEXT_CHARS = 4096
DEFAULT_FORMAT = "wav"
MIN_SPEED, MAX_SPEED = 0.25, 4.0
STREAM_FORMATS = ("audio", "sse")
STREAMABLE_FORMATS = encoding.STREAMABLE_FORMATS


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


class VoiceResolver(Protocol):
    def resolve_voice(self, name: str) -> StoredVoice | None: ...

    def uploaded_voices(self) -> list[dict[str, Any]]: ...


class NoStoredVoices:
    """Until voice upload exists: no stored voices."""

    def resolve_voice(self, name: str) -> StoredVoice | None:
        return None

    def uploaded_voices(self) -> list[dict[str, Any]]:
        return []


# --- the plan ------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class SpeechPlan:
    checkpoint: ServedCheckpoint
    task: str  # CustomVoice | VoiceDesign | Base
    text: str
    speaker: str | None
    language: str  # lower-case, "auto" included
    instructions: str | None
    ref_audio: str | None  # the locator as sent (Base, unless a stored voice supplies it)
    ref_text: str | None  # only for in-context cloning
    x_vector_only: bool
    stored_voice: StoredVoice | None
    non_streaming_mode: bool | None
    max_new_tokens: int | None  # None: the family's own cap (VoxCPM2)
    seed: int | None
    initial_chunk_frames: int | None
    output: OutputSpec
    segments: tuple[str, ...] = ()  # long text (gateway.longtext); empty: `text` is one generation
    seed_drawn: bool = False  # `seed` is the gateway's (see reproducible_plan), not the client's
    knobs: Mapping[str, int | float] = dataclass_field(default_factory=dict)  # extra_params, checked (FamilyRules.knobs)

    @property
    def family(self) -> str:
        return self.checkpoint.family

    @property
    def needs_voice_features(self) -> bool:
        """Does the generation take reference features (the family's adapter says)?"""
        return self.checkpoint.adapter.needs_reference(self)

    @property
    def texts(self) -> tuple[str, ...]:
        """The text of each generation, in order."""
        return self.segments or (self.text,)

    def generation_fields(self, segment: int = 0) -> dict[str, Any]:
        """speech_generation inputs (ttscore.contract.tensors names) of one segment, except the
        reference features."""
        return self.checkpoint.adapter.generation_fields(self, segment)

    def generation_inputs(self, segment: int, features: Any) -> dict[str, np.ndarray]:
        """The request tensors of one segment, reference features included."""
        return self.checkpoint.adapter.generation_inputs(self, segment, features)


class Deployment:
    """The served checkpoints, in deployment order, the stored-voice hook, the OpenAI aliases
    (gateway.aliases) and the input limits (gateway.longtext)."""

    def __init__(self, checkpoints: Sequence[ServedCheckpoint], voices: VoiceResolver | None = None, *,
                 model_aliases: Mapping[str, str | None] | None = None,
                 voice_aliases: Mapping[str, str] | None = None,
                 max_input_chars: int = DEFAULT_MAX_INPUT_CHARS, segment_chars: int = DEFAULT_SEGMENT_CHARS) -> None:
        if not checkpoints:
            raise ValueError("a deployment needs at least one checkpoint")
        self.checkpoints = tuple(checkpoints)
        self.voices: VoiceResolver = voices or NoStoredVoices()
        self.model_aliases: dict[str, str | None] = dict(DEFAULT_MODEL_ALIASES if model_aliases is None
                                                         else model_aliases)
        defaults = default_voice_aliases(dict.fromkeys(c.adapter for c in self.checkpoints))
        self.voice_aliases: dict[str, str] = effective_voice_aliases(voice_aliases, self.builtin_voices(), defaults)
        self.max_input_chars = max_input_chars
        self.segment_chars = segment_chars

    def find_model(self, model: str) -> ServedCheckpoint | None:
        """The checkpoint `model` names: its id, one of its aliases, or a model alias pinned to it."""
        target = self.model_aliases.get(model) if model in self.model_aliases else model
        if target is None:
            return None
        for ckpt in self.checkpoints:
            if ckpt.answers_to(target):
                return ckpt
        return None

    def routes_by_default(self, model: str) -> bool:
        """`model` is an alias with no target: the request is routed as if it named no model."""
        return model in self.model_aliases and self.model_aliases[model] is None

    def knows_model(self, model: str) -> bool:
        return self.routes_by_default(model) or self.find_model(model) is not None

    def default_model(self) -> ServedCheckpoint:
        """Where a request without `model` and with a preset voice goes: the first checkpoint of the
        default task of a family routed by task (e.g. the first CustomVoice checkpoint)."""
        return next((c for c in self.routed_by_task() if c.adapter.routes_by_task and c.task == c.adapter.default_task),
                    self.checkpoints[0])

    def routed_by_task(self) -> list[ServedCheckpoint]:
        """The checkpoints a request without `model` is routed among (by task): those of the families
        that route by task when any is served (other families answer when `model` names them), else all."""
        routed = [c for c in self.checkpoints if c.adapter.routes_by_task]
        return routed or list(self.checkpoints)

    def builtin_voices(self) -> list[str]:
        return sorted({s for c in self.checkpoints for s in c.speakers})

    def preset_voice(self, name: str) -> str:
        """A voice alias's preset speaker; any other name unchanged (presets are never re-mapped)."""
        return self.voice_aliases.get(name, name)

    def resolve_voice(self, name: str) -> StoredVoice | None:
        """The hook for uploaded/precomputed voices (None: not a stored voice)."""
        return self.voices.resolve_voice(name)


# --- validation helpers ----------------------------------------------------------------------------


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
    `language: "Auto"` counts as not set for a family that takes "Auto" (FamilyRules.auto_language)."""
    for field in rules.unsupported:
        value = getattr(f, field, None)
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


# --- output ------------------------------------------------------------------------------------


def plan_output(f: SpeechFields, source_rate: int) -> OutputSpec:
    fmt = f.response_format if f.response_format is not None else DEFAULT_FORMAT
    if fmt not in encoding.MEDIA_TYPES:
        raise bad_request(
            f"Invalid response_format '{fmt}'. Supported: {', '.join(encoding.MEDIA_TYPES)}", "response_format"
        )
    speed = 1.0 if f.speed is None else f.speed
    if not math.isfinite(speed):
        raise bad_request("'speed' must be a number", "speed")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise bad_request(f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}", "speed")
    stream_flag = bool(f.stream)
    if f.stream_format is not None and f.stream_format not in STREAM_FORMATS:
        raise bad_request(f"Invalid stream_format '{f.stream_format}'. Supported: audio, sse", "stream_format")
    stream = f.stream_format or ("sse" if stream_flag else None)
    if stream is not None:
        if fmt not in STREAMABLE_FORMATS:
            raise bad_request(
                "Streaming (stream=true, stream_format='audio' or stream_format='sse') requires "
                f"response_format='pcm' or 'wav' (or the telephony 'ulaw' / 'alaw'). Got response_format='{fmt}'.",
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


# --- the planner -------------------------------------------------------------------------------


def plan_speech(f: SpeechFields, deployment: Deployment) -> SpeechPlan:
    """Validate and route one request. Raises APIError (400/404) naming the field."""
    text = text_field(f.input, "input", deployment.max_input_chars, required=True,
                      empty_message="Input text cannot be empty")
    if text is None or not text.strip():
        raise bad_request("Input text cannot be empty", "input")

    named: ServedCheckpoint | None = None
    if f.model is not None and not deployment.routes_by_default(f.model):
        named = deployment.find_model(f.model)
        if named is None:
            raise model_not_found(f.model)

    first = deployment.routed_by_task()[0]
    if named is None and not first.adapter.routes_by_task:
        named = first  # only families that answer when named are served: the first one
    rules = (named or first).adapter.rules
    try:
        rules.knobs(f.extra_params)  # keys and values; the adapter takes the checked values again
    except InvalidRequest as exc:
        raise from_invalid_request(exc) from None
    return reproducible_plan((named or first).adapter.plan(f, named, text, deployment))


# A drawn seed stays a safe integer everywhere a client may send it back (JSON numbers in JavaScript).
DRAWN_SEED_MAX = 2**31 - 1


def reproducible_plan(plan: SpeechPlan) -> SpeechPlan:
    """The plan, given a seed the gateway draws when its family needs one to be reproducible and
    the client gave none (FamilyRules.draws_seed): such a request was random anyway, and now it can
    be replayed (gateway.replay). A client's seed, a family's default seed and greedy families are
    left as they are, so their audio does not change."""
    rules = plan.checkpoint.rules
    if plan.seed is not None or not rules.draws_seed:
        return plan
    return replace(plan, seed=rules.field("seed").draw(DRAWN_SEED_MAX), seed_drawn=True)


__all__ = [
    "Deployment",
    "NoStoredVoices",
    "OutputSpec",
    "SpeechFields",
    "SpeechPlan",
    "StoredVoice",
    "VoiceResolver",
    "plan_output",
    "plan_speech",
    "reproducible_plan",
    "task_mismatch",
    "text_field",
]
