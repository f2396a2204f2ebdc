"""The K/V tensors of a decoder step with an explicit past, as every K/V family's graphs name and shape them:
per layer `past_key_<i>` / `past_value_<i>` [batch, kv_heads, past, head_dim] in, `new_key_<i>` /
`new_value_<i>` [batch, kv_heads, tokens, head_dim] out (the new positions only, post-RoPE).

A step's `attention_mask` [batch, P + T] spans its past and its T new positions. A step graph attends over every
past slot it is fed, masked or not, unless its spec says `past_cut_to_mask` (GraphSpec, recorded in its manifest
entry: `cuts_past_to_mask`): such a graph first cuts each past input to the mask's past,
`past[:, :, : attention_mask.shape[1] - T]`, so it may be fed past buffers longer than the mask (a K/V arena's
rows at their whole capacity, bound in place) and attends over exactly the slots and values of a past fed cut to
P. VoxCPM2's LM steps do (ttscore/runtime/kv.py, the `exact` arena)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ttscore.contract.graphs import PAST_CUT_TO_MASK, GraphSpec, TensorSpec


def past_key(i: int) -> str:
    return f"past_key_{i}"


def past_value(i: int) -> str:
    return f"past_value_{i}"


def new_key(i: int) -> str:
    return f"new_key_{i}"


def new_value(i: int) -> str:
    return f"new_value_{i}"


def kv_specs(layers: int, kv_heads: int, head_dim: int, *, new: bool) -> list[TensorSpec]:
    """Every layer's key and value, in order: the past inputs (axis "past") or the new outputs (axis "tokens")."""
    k, v, axis = (new_key, new_value, "tokens") if new else (past_key, past_value, "past")
    return [t for i in range(layers) for t in (
        TensorSpec(k(i), "float32", ("batch", kv_heads, axis, head_dim)),
        TensorSpec(v(i), "float32", ("batch", kv_heads, axis, head_dim)),
    )]


def ragged_step_inputs(dim: int) -> tuple[TensorSpec, ...]:
    """The inputs of a step fed embeddings over a ragged explicit past: `inputs_embeds` [B, T, D] (prefill: T =
    the prompt or a chunk of it; decode: T = 1), `attention_mask` [B, P + T] (each row's valid past slots; the new
    positions are causal among themselves) and `position_ids` [B, T]."""
    return (
        TensorSpec("inputs_embeds", "float32", ("batch", "tokens", dim)),
        TensorSpec("attention_mask", "int64", ("batch", "total")),
        TensorSpec("position_ids", "int64", ("batch", "tokens")),
    )


def lockstep_step_inputs(dim: int) -> tuple[TensorSpec, ...]:
    """The inputs of a step whose rows are all at the same positions (a frame's inner stack over the sequences of
    a batch: no padding, so no `attention_mask`): `inputs_embeds` [B, T, D] and `position_ids` [B, T]."""
    return (
        TensorSpec("inputs_embeds", "float32", ("batch", "tokens", dim)),
        TensorSpec("position_ids", "int64", ("batch", "tokens")),
    )


def step_spec(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], layers: int, kv_heads: int,
              head_dim: int) -> GraphSpec:
    """A decoder step graph with an explicit past: `inputs` then every layer's past K/V in, `outputs` then the
    new K/V out."""
    return GraphSpec(name, (*inputs, *kv_specs(layers, kv_heads, head_dim, new=False)),
                     (*outputs, *kv_specs(layers, kv_heads, head_dim, new=True)))


def cuts_past_to_mask(entry: Mapping[str, Any]) -> bool:
    """Whether the graph of this manifest entry (GraphSpec.to_json) cuts its past to the mask (above)."""
    return entry.get(PAST_CUT_TO_MASK) is True
