"""The wire contract of the public Triton models, in one place, with no Triton imports.

- Public tensors of `speech_generation` (the decoupled entry model) and `voice_features` (the
  ensemble): names, Triton dtypes, dims, optionality. `model_repository/*/config.pbtxt` is checked
  against these tables by ttscore.backend.repository, `model.py` decodes requests with them, and the gateway
  builds its requests from them.
- Request tensors -> `Qwen3TTSRequest` kwargs (dtype/shape checks name the offending tensor) and
  `ChunkEvent` -> response tensors.
- Error messages on the wire. Triton's gRPC stream carries only an error *message* (the TritonError
  code is not forwarded to stream clients), so every error a model sends is formatted
  `CODE [param]: message` by `format_error` and read back by `parse_error` in the gateway.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import qwen3_tts, voxcpm2
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.qwen3_tts import NUM_CODE_GROUPS
from ttscore.contract.usage import Usage

QWEN = (qwen3_tts.FAMILY,)
VOXCPM2 = (voxcpm2.FAMILY,)
BOTH = QWEN + VOXCPM2

# --- tensor tables ------------------------------------------------------------------------------

NUMPY_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP32": np.float32,
    "BYTES": np.object_,
}


@dataclass(frozen=True)
class TensorIO:
    name: str
    dtype: str  # Triton dtype without the TYPE_ prefix: BYTES, BOOL, INT32, INT64, FP32
    dims: tuple[int, ...]  # per request, -1 = any length
    optional: bool = False
    doc: str = ""
    families: tuple[str, ...] = BOTH  # speech_generation inputs: the model families that take it

    @property
    def config_dtype(self) -> str:
        return f"TYPE_{'STRING' if self.dtype == 'BYTES' else self.dtype}"


def _str(name: str, doc: str, optional: bool = True, families: tuple[str, ...] = QWEN) -> TensorIO:
    return TensorIO(name, "BYTES", (1,), optional, doc, families)


SPEECH_GENERATION = "speech_generation"
# One entry model for every family (one instance per served checkpoint): the table is the union of
# the families' inputs and each row names the families that take it; a request giving an input its
# checkpoint's family does not take is INVALID_ARG naming it (`request_kwargs`).
SPEECH_INPUTS: tuple[TensorIO, ...] = (
    _str("text", "UTF-8 text to speak (required).", optional=False, families=BOTH),
    _str("task_type", "custom_voice, voice_design or base; the checkpoint's variant when absent."),
    _str("speaker", "Preset speaker name (CustomVoice)."),
    _str("language", "Language name or Auto."),
    _str("instructions", "Style / voice description (VoiceDesign, 1.7B CustomVoice)."),
    _str("ref_text", "Transcript of the reference audio (Qwen3-TTS Base ICL; VoxCPM2: continuation prompt).",
         families=BOTH),
    TensorIO("ref_codes", "INT64", (-1, NUM_CODE_GROUPS), True, "Reference codes [T,16] from voice_features.", QWEN),
    TensorIO("x_vector", "FP32", (-1,), True, "Speaker embedding from voice_features (Base).", QWEN),
    TensorIO("ref_patches", "FP32", (-1, -1, -1), True,
             "VoxCPM2 reference latent patches [T, P, D] from audiovae_encoder.", VOXCPM2),
    TensorIO("prompt_patches", "FP32", (-1, -1, -1), True,
             "VoxCPM2 continuation prompt patches [T, P, D] (audiovae_encoder with prompt=true) that ref_text "
             "transcribes; with ref_patches: the reference's ref_continuation mode.", VOXCPM2),
    TensorIO("x_vector_only", "BOOL", (1,), True, "Clone from the x-vector only (no ICL).", QWEN),
    TensorIO("non_streaming_mode", "BOOL", (1,), True, "Whole text in the prompt (model default when absent).", QWEN),
    TensorIO("max_new_tokens", "INT32", (1,), True, "Frame budget (Qwen3-TTS: 12.5 frames/s; VoxCPM2: patches)."),
    TensorIO("seed", "INT64", (1,), True, "Makes sampling (VoxCPM2: the diffusion noise) reproducible."),
    TensorIO("do_sample", "BOOL", (1,), True, "False = greedy.", QWEN),
    TensorIO("temperature", "FP32", (1,), True, "Sampling knobs: default from generation_config.json.", QWEN),
    TensorIO("top_k", "INT32", (1,), True, "", QWEN),
    TensorIO("top_p", "FP32", (1,), True, "", QWEN),
    TensorIO("repetition_penalty", "FP32", (1,), True, "", QWEN),
    TensorIO("subtalker_do_sample", "BOOL", (1,), True, "Code-predictor sampling switch.", QWEN),
    TensorIO("subtalker_temperature", "FP32", (1,), True, "Code-predictor sampling knobs.", QWEN),
    TensorIO("subtalker_top_k", "INT32", (1,), True, "", QWEN),
    TensorIO("subtalker_top_p", "FP32", (1,), True, "", QWEN),
    TensorIO("inference_timesteps", "INT32", (1,), True, "VoxCPM2 flow-matching solver steps per patch.", VOXCPM2),
    TensorIO("initial_chunk_frames", "INT32", (1,), True, "Frames in the first audio chunk."),
    TensorIO("chunk_frames", "INT32", (1,), True, "Frames in every later chunk."),
)
SPEECH_OUTPUTS: tuple[TensorIO, ...] = (
    TensorIO("audio", "FP32", (-1,), doc="PCM chunk, mono float32, the model's rate (Qwen3-TTS 24 kHz, VoxCPM2 48 kHz)."),
    TensorIO("frames", "INT32", (1,), doc="Frames in this chunk (Qwen3-TTS codec frames, VoxCPM2 patches)."),
    TensorIO("finish_reason", "BYTES", (1,), doc='"" until the final chunk, then "stop" or "length".'),
    TensorIO("usage", "INT32", (3,), doc="Usage so far (ttscore.contract.usage): text, audio, output tokens."),
)

VOICE_FEATURES = "voice_features"
VOICE_FEATURES_INPUTS: tuple[TensorIO, ...] = (
    TensorIO("audio", "FP32", (-1,), doc="Reference audio, mono float32 in [-1, 1]."),
    TensorIO("sample_rate", "INT32", (1,), doc="Its sample rate (resampled to 24 kHz)."),
)
VOICE_FEATURES_OUTPUTS: tuple[TensorIO, ...] = (
    TensorIO("x_vector", "FP32", (-1,), doc="Speaker embedding (Base checkpoints)."),
    TensorIO("ref_codes", "INT64", (-1, NUM_CODE_GROUPS), doc="Reference codes for in-context cloning."),
)

# VoxCPM2's voice features: the AudioVAE encoder (one per VoxCPM2 checkpoint).
AUDIOVAE_ENCODER = "audiovae_encoder"
AUDIOVAE_ENCODER_INPUTS: tuple[TensorIO, ...] = (
    TensorIO("audio", "FP32", (-1,), doc="Reference audio, mono float32 in [-1, 1]."),
    TensorIO("sample_rate", "INT32", (1,), doc="Its sample rate (resampled to 16 kHz)."),
    TensorIO("prompt", "BOOL", (1,), True,
             "True: a continuation prompt (the request also sends ref_text), zero-padded on the left; "
             "false/absent: a cloning reference, padded on the right."),
)
AUDIOVAE_ENCODER_OUTPUTS: tuple[TensorIO, ...] = (
    TensorIO("ref_patches", "FP32", (-1, -1, -1), doc="Latent patches [T, P, D] for speech_generation's ref_patches."),
)

PUBLIC_MODELS: dict[str, tuple[tuple[TensorIO, ...], tuple[TensorIO, ...]]] = {
    SPEECH_GENERATION: (SPEECH_INPUTS, SPEECH_OUTPUTS),
    VOICE_FEATURES: (VOICE_FEATURES_INPUTS, VOICE_FEATURES_OUTPUTS),
    AUDIOVAE_ENCODER: (AUDIOVAE_ENCODER_INPUTS, AUDIOVAE_ENCODER_OUTPUTS),
}

# Which Qwen3TTSRequest field each input fills (identical names, by design) and how to decode it.
_SCALAR_KINDS = {"BYTES": "str", "BOOL": "bool", "INT32": "int", "INT64": "int", "FP32": "float"}

# A request carrying this request parameter (true) is a health probe: every python model answers it
# from execute() without running the model (decoupled: an empty FINAL response; others: a response
# with no outputs), or with UNAVAILABLE when it cannot serve. Unlike Triton's model-ready, which
# stays true after a stub process dies, an answer proves the stub is alive and executing.
HEALTH_PROBE_PARAMETER = "tts_health_probe"


# --- errors on the wire -------------------------------------------------------------------------

INVALID_ARG = "INVALID_ARG"
CANCELLED = "CANCELLED"
UNAVAILABLE = "UNAVAILABLE"
INTERNAL = "INTERNAL"
ERROR_CODES = (INVALID_ARG, CANCELLED, UNAVAILABLE, INTERNAL)
INTERNAL_MESSAGE = "internal error"

# Triton may prefix a model's message (an ensemble adds "in ensemble 'name', "), so search.
_ERROR_RE = re.compile(
    r"(?:^|\s)(?P<code>INVALID_ARG|CANCELLED|UNAVAILABLE|INTERNAL)(?: \[(?P<param>[^\]]*)\])?: (?P<message>.*)$",
    re.DOTALL,
)


@dataclass(frozen=True)
class WireError:
    code: str  # one of ERROR_CODES, or "" for a message that a model did not format (Triton core)
    message: str
    param: str | None = None

    def __str__(self) -> str:
        return format_error(self.code, self.message, self.param)


def format_error(code: str, message: str, param: str | None = None) -> str:
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    return f"{code} [{param}]: {message}" if param else f"{code}: {message}"


_CORE_INPUT_RE = re.compile(r"input '(?P<param>[^']+)'")
# Triton's python backend answers this for a model whose stub process died, until the model is
# reloaded (the gateway's health monitor does that): retryable, so UNAVAILABLE, not a server bug.
_STUB_DOWN_RE = re.compile(r"Stub process '[^']*' is not healthy")


def parse_error(text: str) -> WireError:
    """Inverse of format_error. Triton's own request validation (wrong dtype or shape, unknown or
    missing input) names the tensor as `input 'name'` and becomes INVALID_ARG with that param;
    a dead stub is UNAVAILABLE; any other unformatted message (unknown model, server errors) comes
    back with code ""."""
    m = _ERROR_RE.search(text)
    if m is not None:
        return WireError(m.group("code"), m.group("message"), m.group("param") or None)
    core = _CORE_INPUT_RE.search(text)
    if core is not None:
        return WireError(INVALID_ARG, text, core.group("param"))
    if _STUB_DOWN_RE.search(text):
        return WireError(UNAVAILABLE, text, None)
    return WireError("", text, None)


def invalid_request_error(exc: InvalidRequest) -> WireError:
    return WireError(INVALID_ARG, exc.message, exc.param)


# --- request tensors -> Qwen3TTSRequest --------------------------------------------------------


def check_tensor(spec: TensorIO, value: NDArray[Any]) -> None:
    """dtype and shape (per request, -1 = any) of one input, naming the tensor on failure."""
    expected = NUMPY_DTYPES[spec.dtype]
    if spec.dtype == "BYTES":
        ok_dtype = value.dtype == np.object_ or value.dtype.kind in "SU"
    else:
        ok_dtype = value.dtype == expected
    if not ok_dtype:
        raise InvalidRequest(f"input '{spec.name}' must be {spec.dtype}, got {value.dtype}", spec.name)
    if len(value.shape) != len(spec.dims) or any(d not in (-1, s) for d, s in zip(spec.dims, value.shape, strict=True)):
        want = "[" + ",".join(str(d) for d in spec.dims) + "]"
        raise InvalidRequest(f"input '{spec.name}' must have shape {want}, got {list(value.shape)}", spec.name)


def _scalar(spec: TensorIO, value: NDArray[Any]) -> Any:
    item = value.reshape(-1)[0]
    kind = _SCALAR_KINDS[spec.dtype]
    if kind == "str":
        if isinstance(item, str):
            return item
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"input '{spec.name}' is not valid UTF-8", spec.name) from None
    if kind == "bool":
        return bool(item)
    if kind == "int":
        return int(item)
    f = float(item)
    if not math.isfinite(f):
        raise InvalidRequest(f"input '{spec.name}' must be a finite number", spec.name)
    return f


def request_kwargs(tensors: Mapping[str, NDArray[Any]], family: str = qwen3_tts.FAMILY) -> dict[str, Any]:
    """The family's request keyword arguments from the request's input tensors (absent = not passed,
    so the dataclass default / checkpoint default applies). Semantic checks (ranges, task rules)
    belong to the family's runtime; this only decodes and checks the wire types, and refuses an
    input of the table that `family` does not take."""
    known = {t.name for t in SPEECH_INPUTS}
    unknown = sorted(set(tensors) - known)
    if unknown:
        raise InvalidRequest(f"unknown input '{unknown[0]}'", unknown[0])
    taken = {t.name for t in SPEECH_INPUTS if family in t.families}
    foreign = [t.name for t in SPEECH_INPUTS if t.name in tensors and t.name not in taken]
    if foreign:
        raise InvalidRequest(f"input '{foreign[0]}' is not supported by {family} checkpoints", foreign[0])
    kwargs: dict[str, Any] = {}
    for spec in SPEECH_INPUTS:
        if spec.name not in taken:
            continue
        value = tensors.get(spec.name)
        if value is None:
            if not spec.optional:
                raise InvalidRequest(f"input '{spec.name}' is required", spec.name)
            continue
        value = np.asarray(value)
        check_tensor(spec, value)
        # Arrays are copied: in a decoupled model the request (and the shared memory behind its
        # tensors) may be released once execute() returns, long before the generator reads them.
        if spec.name == "ref_codes":
            kwargs[spec.name] = np.array(value, dtype=np.int64, copy=True)
        elif spec.name in ("x_vector", "ref_patches", "prompt_patches"):
            if not np.all(np.isfinite(value)):
                raise InvalidRequest(f"input '{spec.name}' must be finite", spec.name)
            kwargs[spec.name] = np.array(value, dtype=np.float32, copy=True)
        else:
            kwargs[spec.name] = _scalar(spec, value)
    return kwargs


def request_tensors(**fields: Any) -> dict[str, NDArray[Any]]:
    """The inverse, for clients (gateway, tests, perf data): field values -> input arrays.
    None values are left out; unknown names raise KeyError."""
    specs = {t.name: t for t in SPEECH_INPUTS}
    out: dict[str, NDArray[Any]] = {}
    for name, value in fields.items():
        if value is None:
            continue
        spec = specs[name]
        if spec.dtype == "BYTES":
            out[name] = np.array([str(value).encode("utf-8")], dtype=np.object_)
        elif spec.dims == (1,):
            out[name] = np.array([value], dtype=NUMPY_DTYPES[spec.dtype])
        else:
            out[name] = np.asarray(value, dtype=NUMPY_DTYPES[spec.dtype])
    return out


# --- ChunkEvent -> response tensors -------------------------------------------------------------


def chunk_outputs(event: Any) -> dict[str, NDArray[Any]]:
    """Response tensors of one streamed chunk (a ttscore.runtime.engine.ChunkEvent)."""
    usage = event.usage
    reason = event.finish_reason if event.final and event.finish_reason else ""
    return {
        "audio": np.ascontiguousarray(np.asarray(event.pcm, dtype=np.float32).reshape(-1)),
        "frames": np.array([int(event.frames)], dtype=np.int32),
        "finish_reason": np.array([reason.encode("utf-8")], dtype=np.object_),
        "usage": (usage or Usage()).to_tensor(),
    }
