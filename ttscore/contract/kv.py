"""The K/V tensors of a decoder step with an explicit past, as every K/V family's graphs name and shape them:
per layer `past_key_<i>` / `past_value_<i>` [batch, kv_heads, past, head_dim] in, `new_key_<i>` /
`new_value_<i>` [batch, kv_heads, tokens, head_dim] out (the new positions only, post-RoPE)."""

from __future__ import annotations

from ttscore.contract.graphs import TensorSpec


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
