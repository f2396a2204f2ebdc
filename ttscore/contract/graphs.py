"""How an exported graph's tensors are declared: names, dtypes and dimensions, once per graph.

Each family declares its graphs with these (ttscore.contract.qwen3_tts); export names its ONNX
inputs/outputs and dynamic axes from them, the manifest records them, the runtime feeds sessions by
these names, and the Triton configs are checked against them. A dimension is an int (fixed) or a
str (symbolic, dynamic).
"""

from __future__ import annotations

from dataclasses import dataclass

Dim = int | str
# A decoder step that cuts its past inputs to what `attention_mask` spans (ttscore.contract.kv) says so in its
# manifest entry under this key.
PAST_CUT_TO_MASK = "past_cut_to_mask"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name: float32, int64, bool
    dims: tuple[Dim, ...]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims)}

    @property
    def dynamic_axes(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.dims) if isinstance(d, str)}


@dataclass(frozen=True)
class GraphSpec:
    name: str  # also the artifact file stem: <name>.onnx
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    past_cut_to_mask: bool = False  # a decoder step that cuts its past to the mask (ttscore.contract.kv)

    @property
    def filename(self) -> str:
        return f"{self.name}.onnx"

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        return {t.name: t.dynamic_axes for t in (*self.inputs, *self.outputs) if t.dynamic_axes}

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.filename,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            **({PAST_CUT_TO_MASK: True} if self.past_cut_to_mask else {}),
        }


# The outputs of a vocoder whose state stays in the caller's arena (`arena_vocoder_spec`).
STATE_INDEX, STATE_VALUES = "state_index", "state_values"


def arena_vocoder_spec(name: str, frames: TensorSpec, state_size: int, *extra: TensorSpec) -> GraphSpec:
    """An exact streaming vocoder whose state is not copied through the graph: `state` is the caller's arena
    [rows, S] (every stream's state, one row each; zeros start an utterance), `row` [B] the arena row of each batch
    row; the graph reads the parts of its rows it needs and returns, besides `pcm` [B, samples], what changes:
    `state_values` [B, U, W] to be written at `state_index` [B, U] of the row viewed as [S / W, W] (W-wide blocks;
    a block named twice gets the same values). The caller writes them in place (ttscore.runtime.vocoder
    .ArenaVocoder), so a call costs what it computes, not a copy of every stream's state (MOSS-TTS-Nano's codec:
    46 MB a stream)."""
    return GraphSpec(
        name,
        (frames, TensorSpec("state", "float32", ("rows", state_size)), TensorSpec("row", "int64", ("batch",)),
         *extra),
        (TensorSpec("pcm", "float32", ("batch", "samples")), TensorSpec(STATE_INDEX, "int64", ("batch", "updates")),
         TensorSpec(STATE_VALUES, "float32", ("batch", "updates", "width"))),
    )


def streaming_vocoder_spec(name: str, frames: TensorSpec, state_size: int, *extra: TensorSpec) -> GraphSpec:
    """An exact streaming vocoder graph: one chunk of `frames` + `state` [B, S] (zeros start an utterance; each
    row at its own frame count) and any `extra` inputs -> `pcm` [B, samples] + `new_state` [B, S]. Chunks decoded
    one after another equal one whole decode."""
    return GraphSpec(
        name,
        (frames, TensorSpec("state", "float32", ("batch", state_size)), *extra),
        (TensorSpec("pcm", "float32", ("batch", "samples")), TensorSpec("new_state", "float32", ("batch", state_size))),
    )
