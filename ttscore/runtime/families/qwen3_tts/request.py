"""A synthesis request and its resolution against a checkpoint (pure logic, no I/O).

`resolve()` turns user-facing optional fields into one fully specified `ResolvedRequest`, applying
the checkpoint's generation_config defaults and the reference package's per-variant rules, and
raises `InvalidRequest(message, param)` naming the field on anything out of range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.qwen3_tts import MAX_TEXT_CHARS, RULES, VARIANTS
from ttscore.contract.rules import checked_float
from ttscore.runtime.families.qwen3_tts.checkpoint import Qwen3TTSInfo

TASK_TYPES = VARIANTS

# Server bounds for per-request knobs (a request outside them is rejected, never clamped).


@dataclass
class Qwen3TTSRequest:
    text: str
    task_type: str | None = None  # None: the checkpoint's own variant
    speaker: str | None = None
    language: str | None = None  # None / "auto": no language token
    instructions: str | None = None
    ref_text: str | None = None
    ref_codes: NDArray[Any] | None = None  # [T, G] int64 reference codes (Base ICL)
    x_vector: NDArray[Any] | None = None  # [D] float32 speaker embedding (Base)
    x_vector_only: bool = False
    non_streaming_mode: bool | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    do_sample: bool | None = None
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    repetition_penalty: float | None = None
    subtalker_do_sample: bool | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    subtalker_temperature: float | None = None
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None


@dataclass(frozen=True)
class Sampling:
    do_sample: bool
    top_k: int
    top_p: float
    temperature: float


@dataclass
class ResolvedRequest:
    text: str
    task_type: str
    speaker: str | None
    speaker_id: int | None
    language: str  # lower-case, "auto" included
    language_id: int | None  # after the dialect rule
    instructions: str | None  # None when empty or ignored by the checkpoint
    ref_text: str | None
    ref_codes: NDArray[Any] | None  # set only in ICL mode
    x_vector: NDArray[Any] | None
    non_streaming_mode: bool
    max_new_tokens: int
    seed: int | None
    talker: Sampling
    subtalker: Sampling
    repetition_penalty: float
    initial_chunk_frames: int
    chunk_frames: int

    @property
    def icl(self) -> bool:
        return self.ref_codes is not None


def _int(value: object, param: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidRequest(f"{param} must be an integer", param)
    v = int(value)
    if not lo <= v <= hi:
        raise InvalidRequest(f"{param} must be between {lo} and {hi}, got {v}", param)
    return v


def _pick(value: object, default: object) -> object:
    return default if value is None else value


def resolve(req: Qwen3TTSRequest, info: Qwen3TTSInfo) -> ResolvedRequest:
    text = req.text if isinstance(req.text, str) else None
    if text is None or not text.strip():
        raise InvalidRequest("input text must be a non-empty string", "input")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidRequest(f"input text is longer than {MAX_TEXT_CHARS} characters", "input")

    task = req.task_type or info.variant
    if task not in TASK_TYPES:
        raise InvalidRequest(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task!r}", "task_type")
    if task != info.variant:
        raise InvalidRequest(
            f"task_type {task!r} is not served by this {info.variant} checkpoint", "task_type"
        )

    language = (req.language or "auto").strip().lower()
    if language not in info.supported_languages:
        raise InvalidRequest(
            f"unsupported language {req.language!r}; supported: "
            + ", ".join(x.capitalize() for x in info.supported_languages),
            "language",
        )

    speaker: str | None = None
    speaker_id: int | None = None
    if task == "custom_voice":
        if not req.speaker:
            raise InvalidRequest("a speaker (voice) is required for CustomVoice", "voice")
        speaker = req.speaker.strip().lower()
        if speaker not in info.speakers:
            raise InvalidRequest(
                f"unknown voice {req.speaker!r}; available: {', '.join(sorted(info.speakers))}", "voice"
            )
        speaker_id = info.speakers[speaker]
    elif req.speaker:
        # VoiceDesign and Base have no preset speakers; the gateway maps named voices itself.
        raise InvalidRequest(f"preset voice {req.speaker!r} is not available for {task}", "voice")

    language_id = None if language == "auto" else info.languages[language]
    if speaker is not None and language in ("chinese", "auto"):
        dialect = info.speaker_dialects.get(speaker)
        if dialect:
            language_id = info.languages[dialect]

    # As given: neither qwen-tts nor vLLM-Omni strips them (their outer whitespace is tokenized); blank is none.
    instructions = req.instructions if isinstance(req.instructions, str) and req.instructions.strip() else None
    if instructions and not info.instruct_supported:
        instructions = None
    if task == "voice_design" and req.instructions is not None and not isinstance(req.instructions, str):
        raise InvalidRequest("instructions must be a string", "instructions")

    ref_codes = None
    x_vector = None
    ref_text = None
    if task == "base":
        if req.x_vector is None:
            raise InvalidRequest("Base voice cloning needs reference audio (ref_audio) or a voice", "ref_audio")
        x_vector = np.asarray(req.x_vector, dtype=np.float32).reshape(-1)
        if x_vector.shape[0] != info.speaker_embed_dim or not np.all(np.isfinite(x_vector)):
            raise InvalidRequest(
                f"x_vector must hold {info.speaker_embed_dim} finite floats, got {x_vector.shape[0]}", "x_vector"
            )
        if not req.x_vector_only:
            if not req.ref_text or not req.ref_text.strip():
                raise InvalidRequest(
                    "ref_text is required for in-context cloning (or set x_vector_only_mode)", "ref_text"
                )
            if req.ref_codes is None:
                raise InvalidRequest("reference codes are required for in-context cloning", "ref_audio")
            codes = np.asarray(req.ref_codes)
            if (
                codes.ndim != 2
                or codes.shape[1] != info.num_code_groups
                or codes.shape[0] < 1
                or not np.issubdtype(codes.dtype, np.integer)
                or codes.min() < 0
                or codes.max() >= info.codebook_size
            ):
                raise InvalidRequest(
                    f"ref_codes must be integer codes of shape [frames, {info.num_code_groups}] "
                    f"in [0, {info.codebook_size})",
                    "ref_codes",
                )
            ref_codes = codes.astype(np.int64)
            ref_text = req.ref_text
    elif req.ref_codes is not None or req.x_vector is not None or req.ref_text:
        raise InvalidRequest(f"reference audio/text is only used by Base voice cloning, not {task}", "ref_audio")

    gen = info.generation
    non_streaming = req.non_streaming_mode
    if non_streaming is None:
        non_streaming = task != "base"  # reference defaults: Base streaming text, others not
    if not isinstance(non_streaming, bool):
        raise InvalidRequest("non_streaming_mode must be a boolean", "non_streaming_mode")

    max_new = RULES.field("max_new_tokens").resolve(req.max_new_tokens)
    seed = RULES.field("seed").check(req.seed)

    def sampling(prefix: str, ds: object, k: object, p: object, t: object, gprefix: str) -> Sampling:
        do_sample = _pick(ds, gen["subtalker_dosample" if gprefix else "do_sample"])
        if not isinstance(do_sample, (bool, np.bool_)):
            raise InvalidRequest(f"{prefix}do_sample must be a boolean", f"{prefix}do_sample")
        return Sampling(
            do_sample=bool(do_sample),
            top_k=_int(_pick(k, gen[f"{gprefix}top_k"]), f"{prefix}top_k", 0, 1 << 30),
            top_p=checked_float(_pick(p, gen[f"{gprefix}top_p"]), f"{prefix}top_p", 0.0, 1.0, lo_open=True),
            temperature=checked_float(_pick(t, gen[f"{gprefix}temperature"]), f"{prefix}temperature", 0.0, 100.0, lo_open=True),
        )

    talker = sampling("", req.do_sample, req.top_k, req.top_p, req.temperature, "")
    subtalker = sampling(
        "subtalker_", req.subtalker_do_sample, req.subtalker_top_k, req.subtalker_top_p,
        req.subtalker_temperature, "subtalker_",
    )
    rep = checked_float(_pick(req.repetition_penalty, gen["repetition_penalty"]), "repetition_penalty", 0.0, 10.0, lo_open=True)
    initial = RULES.field("initial_codec_chunk_frames").resolve(req.initial_chunk_frames)
    chunk = RULES.field("codec_chunk_frames").resolve(req.chunk_frames)

    return ResolvedRequest(
        text=text,
        task_type=task,
        speaker=speaker,
        speaker_id=speaker_id,
        language=language,
        language_id=language_id,
        instructions=instructions,
        ref_text=ref_text,
        ref_codes=ref_codes,
        x_vector=x_vector,
        non_streaming_mode=non_streaming,
        max_new_tokens=max_new,
        seed=seed,
        talker=talker,
        subtalker=subtalker,
        repetition_penalty=rep,
        initial_chunk_frames=initial,
        chunk_frames=chunk,
    )
