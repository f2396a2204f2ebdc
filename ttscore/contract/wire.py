"""The rows of the public Triton models' tensor tables, and what one family declares of them.

Each family's contract module declares a `FamilyWire`: the speech_generation inputs it takes and the
public Triton models only it has (its voice-features model). ttscore.contract.tensors composes the
families' declarations into the tables (the union of the speech_generation inputs, each row naming
the families that take it); nothing here knows a family. No Triton imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TensorIO:
    name: str
    dtype: str  # Triton dtype without the TYPE_ prefix: BYTES, BOOL, INT32, INT64, FP32
    dims: tuple[int, ...]  # per request, -1 = any length
    optional: bool = False
    doc: str = ""
    families: tuple[str, ...] = ()  # speech_generation inputs (composed table): the model families that take it

    @property
    def config_dtype(self) -> str:
        return f"TYPE_{'STRING' if self.dtype == 'BYTES' else self.dtype}"


def string_input(name: str, doc: str, optional: bool = True) -> TensorIO:
    """A UTF-8 string input, one per request."""
    return TensorIO(name, "BYTES", (1,), optional, doc)


# (inputs, outputs) of one public Triton model.
PublicModel = tuple[tuple[TensorIO, ...], tuple[TensorIO, ...]]


@dataclass(frozen=True)
class FamilyWire:
    """One family's part of the wire contract."""

    family: str  # manifest "family"
    speech_inputs: tuple[TensorIO, ...]  # the speech_generation inputs the family takes
    # Public Triton models only this family has (e.g. its voice features), by model name.
    public_models: Mapping[str, PublicModel] = field(default_factory=dict)


# Rows the families share (each family lists the ones it takes): one definition, one doc.
TEXT = string_input("text", "UTF-8 text to speak (required).", optional=False)
MAX_NEW_TOKENS = TensorIO("max_new_tokens", "INT32", (1,), True, "Frame budget, in the family's frames.")
SEED = TensorIO("seed", "INT64", (1,), True, "Makes sampling reproducible.")
INITIAL_CHUNK_FRAMES = TensorIO("initial_chunk_frames", "INT32", (1,), True, "Frames in the first audio chunk.")
CHUNK_FRAMES = TensorIO("chunk_frames", "INT32", (1,), True, "Frames in every later chunk.")
# Sampling knobs (the Speech API's extra_params of the families that take them).
TEMPERATURE = TensorIO("temperature", "FP32", (1,), True, "Sampling temperature (0: greedy).")
TOP_K = TensorIO("top_k", "INT32", (1,), True, "Top-k sampling (0: off).")
TOP_P = TensorIO("top_p", "FP32", (1,), True, "Nucleus sampling threshold.")


def clip_inputs(rate_doc: str) -> tuple[TensorIO, TensorIO]:
    """A voice-features model's inputs: one reference clip and its sample rate (`rate_doc`: what the model does
    with it)."""
    return (TensorIO("audio", "FP32", (-1,), doc="Reference audio, mono float32 in [-1, 1]."),
            TensorIO("sample_rate", "INT32", (1,), doc=rate_doc))
