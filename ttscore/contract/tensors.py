"""The wire contract of the public Triton models, in one place, with no Triton imports.

- Public tensors of `speech_generation` (the decoupled entry model, one table for every family: the
  union of the families' inputs) and of each family's own public models (its voice features), composed
  from what each family's contract module declares (ttscore.contract.wire): names, Triton dtypes, dims,
  optionality. `model_repository/*/config.pbtxt` is checked
  against these tables by ttscore.backend.repository, `model.py` decodes requests with them, and the gateway
  builds its requests from them.
- Request tensors -> the family request's kwargs (dtype/shape checks name the offending tensor) and
  `ChunkEvent` -> response tensors.
- Error messages on the wire. Triton's gRPC stream carries only an error *message* (the TritonError
  code is not forwarded to stream clients), so every error a model sends is formatted
  `CODE [param]: message` by `format_error` and read back by `parse_error` in the gateway.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import aligner, families, plugins
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.usage import Usage
from ttscore.contract.wire import FamilyWire, PublicModel, TensorIO

__all__ = ["FamilyWire", "TensorIO"]

# --- tensor tables ------------------------------------------------------------------------------

NUMPY_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP32": np.float32,
    "BYTES": np.object_,
}

# Every family's part of the wire (ttscore.contract.wire): the registry's, then external packages'.
FAMILY_WIRES: tuple[FamilyWire, ...] = (
    *families.WIRES,
    *(module.WIRE for module in plugins.layer_modules("contract") if hasattr(module, "WIRE")),
)


def compose_speech_inputs(wires: tuple[FamilyWire, ...]) -> tuple[TensorIO, ...]:
    """The union of the families' speech_generation inputs, in first-declared order, each row naming
    the families that take it. Two families declaring one input must agree on its type; the docs of
    the declarations are joined."""
    rows: dict[str, TensorIO] = {}
    for w in wires:
        for row in w.speech_inputs:
            seen = rows.get(row.name)
            if seen is None:
                rows[row.name] = replace(row, families=(w.family,))
                continue
            if (seen.dtype, seen.dims, seen.optional) != (row.dtype, row.dims, row.optional):
                raise ValueError(
                    f"speech_generation input {row.name!r}: {w.family} declares {row.dtype} {list(row.dims)} "
                    f"optional={row.optional}, {', '.join(seen.families)} {seen.dtype} {list(seen.dims)} "
                    f"optional={seen.optional}"
                )
            doc = seen.doc if row.doc in ("", seen.doc) else f"{seen.doc} / {row.doc}" if seen.doc else row.doc
            rows[row.name] = replace(seen, doc=doc, families=(*seen.families, w.family))
    return tuple(rows.values())


SPEECH_GENERATION = "speech_generation"
# One entry model for every family (one instance per served checkpoint): the table is the union of
# the families' inputs and each row names the families that take it; a request giving an input its
# checkpoint's family does not take is INVALID_ARG naming it (`request_kwargs`).
SPEECH_INPUTS: tuple[TensorIO, ...] = compose_speech_inputs(FAMILY_WIRES)
SPEECH_OUTPUTS: tuple[TensorIO, ...] = (
    TensorIO("audio", "FP32", (-1,), doc="PCM chunk, mono float32, at the model's sample rate (the manifest's)."),
    TensorIO("frames", "INT32", (1,), doc="Frames in this chunk (the family's frames: codec frames or latent patches)."),
    TensorIO("finish_reason", "BYTES", (1,), doc='"" until the final chunk, then "stop" or "length".'),
    TensorIO("usage", "INT32", (3,), doc="Usage so far (ttscore.contract.usage): text, audio, output tokens."),
)

# Why a generation ended, as the Speech API tells it (SSE speech.audio.done, WebSocket audio.done, batch items,
# the X-Finish-Reason header): the final chunk carries "stop" (the model ended it) or "length" (max_new_tokens
# or the runaway guard, ttscore.runtime.engine); "cancelled" (the client's cancel) and "error" (it failed) are
# the gateway's names for a generation that ended without its final chunk.
FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_CANCELLED = "cancelled"
FINISH_ERROR = "error"
FINISH_REASONS = (FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED, FINISH_ERROR)

# Every public model: speech_generation, the forced aligner (word timestamps), then each family's own (its voice
# features).
PUBLIC_MODELS: dict[str, PublicModel] = {SPEECH_GENERATION: (SPEECH_INPUTS, SPEECH_OUTPUTS),
                                         aligner.MODEL: (aligner.INPUTS, aligner.OUTPUTS)}
for _wire in FAMILY_WIRES:
    for _name, _tables in _wire.public_models.items():
        if _name in PUBLIC_MODELS:
            raise ValueError(f"public Triton model {_name!r} is declared twice ({_wire.family})")
        PUBLIC_MODELS[_name] = _tables

# Each input fills the family request's field of the same name (by design); how a scalar decodes.
_SCALAR_KINDS = {"BYTES": "str", "BOOL": "bool", "INT32": "int", "INT64": "int", "FP32": "float"}

# A request carrying this request parameter (true) is a health probe: every python model answers it
# from execute() without running the model (decoupled: an empty FINAL response; others: a response
# with no outputs), or with UNAVAILABLE when it cannot serve. Unlike Triton's model-ready, which
# stays true after a stub process dies, an answer proves the stub is alive and executing.
HEALTH_PROBE_PARAMETER = "tts_health_probe"

# speech_generation's `max_active_requests` default: the generations of one model stepped together. The gateway's
# running bound per model defaults to it (gateway.admission): one more sent to Triton would only wait there, unseen.
MAX_ACTIVE_REQUESTS = 8

# Incremental text (text streamed into a running generation), as request parameters of
# speech_generation so the tensor table stays the same:
# - TEXT_KEY_PARAMETER (a string, unguessable: the gateway draws it per generation) on a speech
#   request: its `text` is a beginning; the request waits for more text (it keeps its slot).
# - TEXT_EXTEND_PARAMETER (that key) on another speech_generation request whose `text` tensor is the
#   text to append, TEXT_DONE_PARAMETER true on the last one: answered with one empty FINAL response
#   once the text is applied (or an INVALID_ARG error: no open request has that key, or the text is
#   already complete). The request of the key must be served by the same model instance (one
#   instance per speech_generation model, as rendered).
TEXT_KEY_PARAMETER = "tts_text_key"
TEXT_EXTEND_PARAMETER = "tts_text_extend"
TEXT_DONE_PARAMETER = "tts_text_done"


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


# --- request tensors -> the family's request -----------------------------------------------------


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


def code_grid(value: Any, groups: int, size: int, name: str, param: str | None = None) -> NDArray[np.int64]:
    """Reference codes as a family takes them: an integer [frames >= 1, groups] grid of codes in [0, size), as
    int64; InvalidRequest naming `param` (default `name`) otherwise. The one check of the runtimes' reference codes
    and the gateway's precomputed voices."""
    codes = np.asarray(value)
    if codes.ndim != 2 or codes.shape[1] != groups or len(codes) == 0 or not np.issubdtype(codes.dtype, np.integer):
        raise InvalidRequest(f"'{name}' must be integer codes [frames >= 1, {groups}], got {codes.dtype} "
                             f"{list(codes.shape)}", param or name)
    if codes.min() < 0 or codes.max() >= size:
        raise InvalidRequest(f"'{name}' must lie in [0, {size})", param or name)
    return codes.astype(np.int64)


def scalar_input(spec: TensorIO, value: NDArray[Any]) -> Any:
    """One request's scalar input of `spec` (checked against it) as a Python value; InvalidRequest naming it."""
    check_tensor(spec, value)
    return _scalar(spec, value)


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


def request_kwargs(tensors: Mapping[str, NDArray[Any]], family: str | None = None) -> dict[str, Any]:
    """The family's request keyword arguments from the request's input tensors (absent = not passed,
    so the dataclass default / checkpoint default applies). Semantic checks (ranges, task rules)
    belong to the family's runtime; this only decodes and checks the wire types, and refuses an
    input of the table that `family` does not take (None: any input of the table, for clients and fakes)."""
    known = {t.name for t in SPEECH_INPUTS}
    unknown = sorted(set(tensors) - known)
    if unknown:
        raise InvalidRequest(f"unknown input '{unknown[0]}'", unknown[0])
    taken = {t.name for t in SPEECH_INPUTS if family is None or family in t.families}
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
        if spec.dims == (1,):
            kwargs[spec.name] = _scalar(spec, value)
            continue
        # Arrays are copied: in a decoupled model the request (and the shared memory behind its
        # tensors) may be released once execute() returns, long before the generator reads them.
        if spec.dtype == "FP32" and not np.all(np.isfinite(value)):
            raise InvalidRequest(f"input '{spec.name}' must be finite", spec.name)
        kwargs[spec.name] = np.array(value, dtype=NUMPY_DTYPES[spec.dtype], copy=True)
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


def keepalive_outputs() -> dict[str, NDArray[Any]]:
    """A keep-alive response: not final, no audio, no frames. speech_generation sends it to a stream that has
    started while the server is still working on it (ttscore.backend.generation), so the gateway's
    `stall_timeout_s` measures a stalled server, not a slow model; the gateway drops it (`is_keepalive`). A chunk
    of audio always carries at least one frame, so the two cannot be confused."""
    return {
        "audio": np.zeros(0, np.float32),
        "frames": np.array([0], dtype=np.int32),
        "finish_reason": np.array([b""], dtype=np.object_),
        "usage": Usage().to_tensor(),
    }


def is_keepalive(frames: int, final: bool) -> bool:
    """Whether a response is a keep-alive (`keepalive_outputs`): not final and no frames."""
    return not final and frames == 0


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
