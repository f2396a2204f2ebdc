"""Speech request -> a fully resolved plan: defaults, validation, task inference, routing (pure).

Input is the contract's fields (`SpeechFields`, already type-checked by the protocol models);
output is a `SpeechPlan` naming the served checkpoint, every generation input and the output
format, or an `APIError` (400/404) naming the field. Nothing here talks to Triton, so a request
that fails planning never starts work on the server.

Task inference (spec, "task_type"): an uploaded/precomputed voice always selects Base; otherwise
`ref_audio` or `ref_text` selects Base when `task_type` is omitted; anything else is CustomVoice;
VoiceDesign only when asked for. The checkpoint is then the one `model` names (it must serve that
task) or the first served checkpoint of that task (CustomVoice: the one that has the voice).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from ttscore.contract import families, qwen3_tts, voxcpm2
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.qwen3_tts import TASK_OF_VARIANT, VARIANT_OF_TASK

from . import encoding
from .aliases import DEFAULT_MODEL_ALIASES, effective_voice_aliases
from .errors import APIError, bad_request, from_invalid_request, model_not_found
from .longtext import segment_seed, split_segments
from .settings import DEFAULT_MAX_INPUT_CHARS, DEFAULT_SEGMENT_CHARS, ServedCheckpoint

MAX_INSTRUCTIONS_CHARS = 4096
MAX_REF_TEXT_CHARS = 4096
DEFAULT_VOICE = "vivian"
DEFAULT_FORMAT = "wav"
MIN_SPEED, MAX_SPEED = 0.25, 4.0
TASKS = ("CustomVoice", "VoiceDesign", "Base")
STREAM_FORMATS = ("audio", "sse")
STREAMABLE_FORMATS = ("pcm", "wav")


@dataclass
class SpeechFields:
    """The request fields of POST /v1/audio/speech (None = not given)."""

    input: Any = None
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

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> SpeechFields:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# Fields a batch request may set for all items and an item may override (spec, batch section).
BATCH_DEFAULT_FIELDS = (
    "voice", "response_format", "speed", "task_type", "language", "instructions", "ref_audio", "ref_text",
    "max_new_tokens", "non_streaming_mode", "sample_rate", "x_vector_only_mode", "seed", "initial_codec_chunk_frames",
)


def merge_batch_item(defaults: dict[str, Any], item: dict[str, Any], model: str | None) -> SpeechFields:
    """An item's fields over the batch-level defaults (an item's explicit value wins, None inherits)."""
    merged: dict[str, Any] = {"input": item.get("input"), "model": model}
    for name in BATCH_DEFAULT_FIELDS:
        value = item.get(name)
        merged[name] = defaults.get(name) if value is None else value
    return SpeechFields.from_mapping(merged)


# --- stored voices (uploads / precomputed; the voices issue fills this in) -----------------------


FeaturesFn = Callable[[bool], Awaitable[tuple[np.ndarray, "np.ndarray | None"]]]
PatchesFn = Callable[[str, bool], Awaitable[np.ndarray]]  # VoxCPM2: (audiovae_encoder model, prompt) -> ref_patches


@dataclass(frozen=True)
class StoredVoice:
    """An uploaded or precomputed voice: always a Base voice-cloning input.

    The services take its features from the first of: `features(x_vector_only)` (e.g. the voice
    store's cached computation), precomputed `x_vector` (+ `ref_codes` for in-context cloning), or
    `audio` run through the voice_features model."""

    name: str
    ref_text: str | None = None  # stored transcript; without one the voice clones from its x-vector only
    audio: np.ndarray | None = None  # float32 mono reference clip
    sample_rate: int | None = None
    x_vector: np.ndarray | None = None
    ref_codes: np.ndarray | None = None
    features: FeaturesFn | None = None
    patches: PatchesFn | None = None  # VoxCPM2: its latent patches, computed once (at upload) and cached
    # Precomputed voices (custom_voice_dir) are made for one family (None: an upload, any family) and,
    # VoxCPM2, for the served checkpoints whose AudioVAE made its patches (None: not checked).
    family: str | None = None
    models: tuple[str, ...] | None = None
    ref_patches: np.ndarray | None = None  # VoxCPM2 precomputed: the isolated reference [T, P, D]
    prompt_patches: np.ndarray | None = None  # ... and the continuation prompt `ref_text` transcribes

    @property
    def precomputed_patches(self) -> bool:
        return self.ref_patches is not None or self.prompt_patches is not None


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
    format: str  # wav | pcm | flac | mp3 | opus | aac
    sample_rate: int  # of the audio sent to the client
    source_rate: int  # of the model
    speed: float
    stream: str | None  # None (whole clip), "audio" (raw bytes) or "sse" (speech.audio.* events)

    @property
    def media_type(self) -> str:
        return encoding.MEDIA_TYPES[self.format]


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

    @property
    def family(self) -> str:
        return self.checkpoint.family

    @property
    def needs_voice_features(self) -> bool:
        """Qwen3-TTS Base always clones; VoxCPM2 only with a reference (else its zero-shot voice)."""
        if self.checkpoint.is_qwen:
            return self.task == "Base"
        return self.ref_audio is not None or self.stored_voice is not None

    @property
    def ref_is_prompt(self) -> bool:
        """VoxCPM2: the reference comes with its transcript, so it is a continuation prompt."""
        return self.ref_text is not None

    @property
    def texts(self) -> tuple[str, ...]:
        """The text of each generation, in order."""
        return self.segments or (self.text,)

    def generation_fields(self, segment: int = 0) -> dict[str, Any]:
        """speech_generation inputs (ttscore.contract.tensors names) of one segment, except the
        reference features."""
        if not self.checkpoint.is_qwen:  # VoxCPM2 (ttscore.contract.tensors: the inputs it takes)
            return {
                "text": self.texts[segment],
                "ref_text": self.ref_text,
                "max_new_tokens": self.max_new_tokens,
                "seed": segment_seed(self.seed, segment),
                "initial_chunk_frames": self.initial_chunk_frames,
            }
        return {
            "text": self.texts[segment],
            "task_type": VARIANT_OF_TASK[self.task],
            "speaker": self.speaker,
            "language": self.language,
            "instructions": self.instructions,
            "ref_text": self.ref_text,
            "x_vector_only": True if self.task == "Base" and self.x_vector_only else None,
            "non_streaming_mode": self.non_streaming_mode,
            "max_new_tokens": self.max_new_tokens,
            "seed": segment_seed(self.seed, segment),
            "initial_chunk_frames": self.initial_chunk_frames,
        }


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
        self.voice_aliases: dict[str, str] = effective_voice_aliases(voice_aliases, self.builtin_voices())
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
        """Where a request without `model` and with a preset voice goes: the first CustomVoice checkpoint."""
        return next((c for c in self.checkpoints if c.is_qwen and c.task == "CustomVoice"), self.checkpoints[0])

    def routed_by_task(self) -> list[ServedCheckpoint]:
        """The checkpoints a request without `model` is routed among (by task): the Qwen3-TTS ones
        when any is served (other families answer when `model` names them), else all."""
        qwen = [c for c in self.checkpoints if c.is_qwen]
        return qwen or list(self.checkpoints)

    def builtin_voices(self) -> list[str]:
        return sorted({s for c in self.checkpoints for s in c.speakers})

    def preset_voice(self, name: str) -> str:
        """A voice alias's preset speaker; any other name unchanged (presets are never re-mapped)."""
        return self.voice_aliases.get(name, name)

    def resolve_voice(self, name: str) -> StoredVoice | None:
        """The hook for uploaded/precomputed voices (None: not a stored voice)."""
        return self.voices.resolve_voice(name)


# --- validation helpers ----------------------------------------------------------------------------


def _text(value: Any, param: str, limit: int, *, required: bool, empty_message: str | None = None) -> str | None:
    if value is None:
        if required:
            raise bad_request(empty_message or f"Missing required parameter: '{param}'", param)
        return None
    if not isinstance(value, str):
        raise bad_request(f"'{param}' must be a string", param)
    if len(value) > limit:
        raise bad_request(f"'{param}' is too long: {len(value)} characters, the maximum is {limit}", param)
    return value


def _bool(value: Any, param: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise bad_request(f"'{param}' must be a boolean", param)


def _title(language: str) -> str:
    return "Auto" if language == "auto" else language.title()


def task_mismatch(served_tasks: Sequence[str], task: str) -> APIError:
    """The spec's message for a task no served (or named) checkpoint supports."""
    tasks = list(dict.fromkeys(served_tasks))
    if len(tasks) == 1:
        return bad_request(
            f"Qwen3-TTS {tasks[0]} checkpoint does not support task_type='{task}'. "
            f"Use task_type='{tasks[0]}' or load the matching {task} checkpoint."
        )
    listed = " and ".join(tasks)
    options = " or ".join(f"task_type='{t}'" for t in tasks)
    return bad_request(
        f"Qwen3-TTS {listed} checkpoints do not support task_type='{task}'. "
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
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed):
        raise bad_request("'speed' must be a number", "speed")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise bad_request(f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}", "speed")
    stream_flag = _bool(f.stream, "stream")
    if f.stream_format is not None and f.stream_format not in STREAM_FORMATS:
        raise bad_request(f"Invalid stream_format '{f.stream_format}'. Supported: audio, sse", "stream_format")
    stream = f.stream_format or ("sse" if stream_flag else None)
    if stream is not None:
        if fmt not in STREAMABLE_FORMATS:
            raise bad_request(
                "Streaming (stream=true, stream_format='audio' or stream_format='sse') requires "
                f"response_format='pcm' or 'wav'. Got response_format='{fmt}'.",
                "response_format",
            )
        if speed != 1.0:
            raise bad_request(f"Streaming requires speed=1.0 (got {speed}); speed is only applied to whole clips.",
                              "speed")
    rate = source_rate if f.sample_rate is None else f.sample_rate
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise bad_request("'sample_rate' must be an integer", "sample_rate")
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
    text = _text(f.input, "input", deployment.max_input_chars, required=True,
                 empty_message="Input text cannot be empty")
    if text is None or not text.strip():
        raise bad_request("Input text cannot be empty", "input")

    named: ServedCheckpoint | None = None
    if f.model is not None:
        if not isinstance(f.model, str):
            raise bad_request("'model' must be a string", "model")
        if not deployment.routes_by_default(f.model):
            named = deployment.find_model(f.model)
            if named is None:
                raise model_not_found(f.model)

    if named is None and not deployment.routed_by_task()[0].is_qwen:
        named = deployment.routed_by_task()[0]  # only other families are served: the first one
    if named is not None and not named.is_qwen:
        return _plan_other_family(f, named, text, deployment)

    if f.task_type is not None and f.task_type not in TASKS:
        raise bad_request(f"Invalid task_type '{f.task_type}'. Supported: {', '.join(TASKS)}", "task_type")
    voice = _text(f.voice, "voice", 256, required=False)
    voice = voice.strip().lower() if voice is not None else None
    voice = voice or None
    instructions = _text(f.instructions, "instructions", MAX_INSTRUCTIONS_CHARS, required=False)
    ref_text = _text(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS, required=False)
    ref_audio = _text(f.ref_audio, "ref_audio", 1 << 30, required=False)
    x_vector_only = _bool(f.x_vector_only_mode, "x_vector_only_mode")
    non_streaming_mode = _bool(f.non_streaming_mode, "non_streaming_mode")

    # Task inference (spec): a stored voice always means Base; ref_audio / ref_text infer Base.
    stored = deployment.resolve_voice(voice) if voice is not None else None
    if stored is not None and stored.family not in (None, qwen3_tts.FAMILY):
        name = families.DISPLAY_NAMES.get(stored.family, stored.family)
        raise bad_request(f"Voice '{stored.name}' is a precomputed {name} voice: it cannot be used with Qwen3-TTS "
                          f"models (name a {name} model)", "voice")
    if stored is None and voice is not None:
        voice = deployment.preset_voice(voice)  # an OpenAI voice name -> its preset speaker
    if stored is not None or (f.task_type is None and (ref_audio is not None or ref_text is not None)):
        task = "Base"
    else:
        task = f.task_type or "CustomVoice"

    ckpt = _route(task, voice, named, deployment)
    output = plan_output(f, ckpt.sample_rate)

    language = "auto"
    if f.language is not None:
        lang = _text(f.language, "language", 64, required=False) or ""
        language = lang.strip().lower()
        if language not in ckpt.languages:
            raise bad_request(
                f"Invalid language '{f.language}'. Supported: {', '.join(sorted(_title(x) for x in ckpt.languages))}",
                "language",
            )

    speaker: str | None = None
    if task == "CustomVoice":
        speaker = voice or (DEFAULT_VOICE if DEFAULT_VOICE in ckpt.speakers else ckpt.speakers[0])
        if speaker not in ckpt.speakers:
            raise bad_request(f"Invalid voice '{f.voice}'. Supported: {', '.join(ckpt.speakers)}", "voice")

    rules = qwen3_tts.RULES
    try:
        # Cross-field rules: cloning inputs only make sense for Base (only reachable with an
        # explicit task_type, since they infer Base otherwise); each task's required fields.
        rules.check_task_fields(task, {
            "ref_audio": ref_audio, "ref_text": ref_text, "x_vector_only_mode": x_vector_only or None,
            "instructions": instructions,
        })
        max_new = rules.field("max_new_tokens").resolve(f.max_new_tokens)
        initial = rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
        seed = rules.field("seed").check(f.seed)
    except InvalidRequest as exc:
        raise from_invalid_request(exc) from None

    if task == "Base":
        if stored is None and ref_audio is None:
            raise bad_request("Base task requires 'ref_audio' (or an uploaded voice) for voice cloning", "ref_audio")
        if stored is not None and ref_audio is None:
            ref_text = ref_text if ref_text is not None else stored.ref_text
            if not (ref_text or "").strip():
                x_vector_only = True  # uploaded without a transcript: speaker embedding only (spec)
        if not x_vector_only:
            if not (ref_text or "").strip():
                raise bad_request(
                    "Base task requires non-empty 'ref_text' (transcript of the reference audio) "
                    "unless 'x_vector_only_mode' is enabled",
                    "ref_text",
                )
        else:
            ref_text = None  # x-vector-only cloning takes no transcript
        if ref_audio is not None:
            stored = None  # inline ref_audio overrides an uploaded voice (spec)


    segments = split_segments(text, deployment.segment_chars)
    return SpeechPlan(
        checkpoint=ckpt,
        task=task,
        text=text,
        speaker=speaker,
        language=language,
        instructions=instructions.strip() if instructions and instructions.strip() else None,
        ref_audio=ref_audio if task == "Base" else None,
        ref_text=ref_text if task == "Base" else None,
        x_vector_only=bool(x_vector_only) if task == "Base" else False,
        stored_voice=stored if task == "Base" else None,
        non_streaming_mode=non_streaming_mode,
        max_new_tokens=max_new,
        seed=seed,
        initial_chunk_frames=initial,
        output=output,
        segments=tuple(segments) if len(segments) > 1 else (),
    )


def _route(task: str, voice: str | None, named: ServedCheckpoint | None, deployment: Deployment) -> ServedCheckpoint:
    if named is not None:
        if named.task != task:
            raise task_mismatch([named.task], task)
        return named
    routed = deployment.routed_by_task()
    candidates = [c for c in routed if c.task == task]
    if not candidates:
        raise task_mismatch([c.task for c in routed], task)
    if task == "CustomVoice" and voice is not None:
        for c in candidates:
            if voice in c.speakers:
                return c
    return candidates[0]


def _plan_other_family(f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: Deployment) -> SpeechPlan:
    """A request for a checkpoint of another family than Qwen3-TTS (today VoxCPM2): its FamilyRules
    and unsupported fields (ttscore.contract.families); `voice` is an uploaded/precomputed voice,
    or omitted / "default" for the model's own zero-shot voice; `ref_audio` + optional `ref_text`."""
    name = families.DISPLAY_NAMES.get(ckpt.family, ckpt.family)
    given = {
        "instructions": f.instructions, "x_vector_only_mode": f.x_vector_only_mode,
        "non_streaming_mode": f.non_streaming_mode,
        "language": None if isinstance(f.language, str) and f.language.strip().lower() == "auto" else f.language,
    }
    for field in families.UNSUPPORTED_FIELDS.get(ckpt.family, ()):
        if given.get(field) is not None:
            raise bad_request(f"'{field}' is not supported by {name} models", field)
    rules = ckpt.rules
    if f.task_type is not None and f.task_type not in rules.tasks:
        raise bad_request(
            f"{name} models do not support task_type='{f.task_type}'. Use task_type='{rules.tasks[0]}' or omit it.",
            "task_type",
        )
    voice = _text(f.voice, "voice", 256, required=False)
    voice = (voice or "").strip().lower() or None
    ref_text = _text(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS, required=False)
    ref_text = ref_text if ref_text and ref_text.strip() else None
    ref_audio = _text(f.ref_audio, "ref_audio", 1 << 30, required=False)
    stored: StoredVoice | None = None
    if voice is not None and voice != voxcpm2.ZERO_SHOT_VOICE:
        stored = deployment.resolve_voice(voice)
        if stored is None:
            raise bad_request(
                f"Invalid voice '{f.voice}' for {name}: use an uploaded voice, or omit 'voice' "
                f"(or '{voxcpm2.ZERO_SHOT_VOICE}') for the model's own voice", "voice")
    if stored is not None and stored.family not in (None, ckpt.family):
        made = families.DISPLAY_NAMES.get(stored.family, stored.family)
        raise bad_request(f"Voice '{stored.name}' is a precomputed {made} voice: it cannot be used with {name} "
                          f"model `{ckpt.name}`", "voice")
    if stored is not None and stored.models is not None and ckpt.name not in stored.models:
        raise bad_request(f"Voice '{stored.name}' was precomputed with another {name} checkpoint "
                          f"(it fits {', '.join(stored.models)}), not `{ckpt.name}`", "voice")
    if ref_audio is not None:
        stored = None  # inline ref_audio overrides an uploaded voice (spec)
    elif stored is not None and stored.precomputed_patches:
        if ref_text is not None:  # its patches are padded for the mode it was made with
            raise bad_request(f"Voice '{stored.name}' is precomputed with its own prompt mode and transcript: "
                              "omit 'ref_text' (or give 'ref_audio' with it)", "ref_text")
        ref_text = stored.ref_text.strip() if stored.ref_text and stored.ref_text.strip() else None
    elif stored is not None and ref_text is None:
        ref_text = stored.ref_text.strip() if stored.ref_text and stored.ref_text.strip() else None
    elif stored is None and ref_text is not None:
        raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
    output = plan_output(f, ckpt.sample_rate)
    try:
        max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
        initial = rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
        seed = rules.field("seed").check(f.seed)
    except InvalidRequest as exc:
        raise from_invalid_request(exc) from None
    segments = split_segments(text, deployment.segment_chars)
    return SpeechPlan(
        checkpoint=ckpt, task=rules.tasks[0], text=text, speaker=None, language="auto", instructions=None,
        ref_audio=ref_audio, ref_text=ref_text, x_vector_only=False, stored_voice=stored,
        non_streaming_mode=None, max_new_tokens=max_new, seed=seed, initial_chunk_frames=initial, output=output,
        segments=tuple(segments) if len(segments) > 1 else (),
    )


__all__ = [
    "BATCH_DEFAULT_FIELDS",
    "TASK_OF_VARIANT",
    "Deployment",
    "NoStoredVoices",
    "OutputSpec",
    "SpeechFields",
    "SpeechPlan",
    "StoredVoice",
    "VoiceResolver",
    "merge_batch_item",
    "plan_output",
    "plan_speech",
    "task_mismatch",
]
