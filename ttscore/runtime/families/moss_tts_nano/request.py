"""The request MossModel.admit takes (built by `request_from_tensors` from speech_generation's inputs, or by `say`
offline), and its fields resolved against the family's rules (defaults filled in, each checked as the gateway
checks it, so a direct Triton client gets the same message for the same mistake)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.moss_tts_nano import rules


@dataclass(frozen=True)
class MossRequest:
    text: str
    ref_audio_tokens: npt.NDArray[np.int64] | None = None  # the clip's codec codes [frames, 16] (served: moss_codec_encoder)
    ref_audio: npt.NDArray[np.float32] | None = None  # 48 kHz mono samples (offline only: encoded in admit)
    max_new_tokens: int | None = None  # frames per text chunk
    seed: int | None = None
    do_sample: bool | None = None
    text_temperature: float | None = None
    text_top_p: float | None = None
    text_top_k: int | None = None
    audio_temperature: float | None = None
    audio_top_p: float | None = None
    audio_top_k: int | None = None
    audio_repetition_penalty: float | None = None
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None


@dataclass(frozen=True)
class Sampling:
    """A request's sampling, every knob resolved (contract KNOB_DEFAULTS where it gave none)."""

    do_sample: bool
    text_temperature: float
    text_top_p: float
    text_top_k: int
    audio_temperature: float
    audio_top_p: float
    audio_top_k: int
    audio_repetition_penalty: float


def resolve_sampling(request: MossRequest) -> Sampling:
    """The request's knobs checked by the contract's KnobRules (InvalidRequest naming `extra_params`)."""
    values = rules.RULES.request_knobs(request, rules.KNOB_DEFAULTS)
    return Sampling(do_sample=bool(values["do_sample"]), text_temperature=float(values["text_temperature"]),
                    text_top_p=float(values["text_top_p"]), text_top_k=int(values["text_top_k"]),
                    audio_temperature=float(values["audio_temperature"]), audio_top_p=float(values["audio_top_p"]),
                    audio_top_k=int(values["audio_top_k"]),
                    audio_repetition_penalty=float(values["audio_repetition_penalty"]))


def resolve_limits(request: MossRequest) -> tuple[int, int]:
    """(frames per text chunk, seed): the request's, checked, else the defaults (375, 42)."""
    return (rules.RULES.field("max_new_tokens").resolve(request.max_new_tokens),
            rules.RULES.field("seed").resolve(request.seed))


def checked_text(request: MossRequest) -> str:
    if not isinstance(request.text, str) or not request.text.strip():
        raise InvalidRequest("Input text cannot be empty", "input")
    if len(request.text) > rules.MAX_TEXT_CHARS:
        raise InvalidRequest(f"'input' is longer than {rules.MAX_TEXT_CHARS} characters", "input")
    return request.text
