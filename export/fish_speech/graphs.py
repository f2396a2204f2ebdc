"""Fish Speech S2 Pro's language-model computations in the project's own torch (float32, ONNX-traceable), their
parameters named as model.safetensors' tensors (loaded as they are).

- `SlowStep`: the Slow AR (Qwen3 layers: fused wqkv, per-head q/k RMSNorm, GPT-J interleaved RoPE whose
  cos/sin table is rounded to bf16 as vLLM-Omni's `load_weights` rounds it, SwiGLU) over explicit past K/V;
  outputs the last position's final-normed hidden state [B, D] and the logits of the ids the Slow AR may
  sample [B, codebook_size + 1]: the semantic ids in order, then `<|im_end|>` (the tied embedding's rows;
  vLLM-Omni masks every other id to -inf).
- `FastStep`: the Fast AR over its own past K/V (position 0 the Slow AR's hidden state, projected when the
  widths differ; position 1 the semantic code's embedding; then each residual code's), outputting the last
  position's logits cut to the 1024 residual codes (vLLM-Omni's `residual_codebook_size`).
Sampling and the embedding sums run in numpy (ttscore.runtime.families.fish_speech).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import torch
from torch import nn

from export.blocks import Block, RMSNorm, cat_past, past_causal_bias
from ttscore.contract import fish_speech as spec
from ttscore.runtime.families.fish_speech.checkpoint import FishConfig, Transformer

NEG = -1e9



class Attention(nn.Module):
    q_norm: RMSNorm
    k_norm: RMSNorm

    def __init__(self, t: Transformer) -> None:
        super().__init__()
        self.wqkv = nn.Linear(t.dim, (t.n_head + 2 * t.n_local_heads) * t.head_dim, bias=False)
        self.wo = nn.Linear(t.n_head * t.head_dim, t.dim, bias=False)
        if t.qk_norm:
            self.q_norm = RMSNorm(t.head_dim, t.norm_eps)
            self.k_norm = RMSNorm(t.head_dim, t.norm_eps)
        self.t = t


def rope_table(head_dim: int, positions: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [positions, head_dim / 2] as vLLM's RotaryEmbedding computes its cache, rounded to bf16."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    freqs = torch.einsum("i,j -> ij", torch.arange(positions, dtype=torch.float), inv_freq)
    return freqs.cos().to(torch.bfloat16).float(), freqs.sin().to(torch.bfloat16).float()


def interleaved_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J interleaved rotation of the last axis (pairs (2i, 2i+1) by angle i): x [..., hd], cos/sin
    broadcasting to [..., hd/2] (the language models' [B, 1, T, hd/2]; the codec's, before the heads' transpose)."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)


class Stack(nn.Module):
    """Fish transformer layers over explicit past K/V (the new positions causal among themselves)."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, t: Transformer, positions: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(t.dim, t.intermediate_size, t.norm_eps, Attention(t))
                                    for _ in range(t.n_layer))
        self.t = t
        cos, sin = rope_table(t.head_dim, positions, t.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def run(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
            past: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        t = self.t
        b, n, _ = x.shape
        cos, sin = self.cos[position_ids][:, None], self.sin[position_ids][:, None]  # [B, 1, T, hd/2]
        bias = past_causal_bias(attention_mask, n, NEG)
        rep = t.n_head // t.n_local_heads
        new: list[torch.Tensor] = []
        for i, layer in enumerate(cast("list[Block[Attention]]", list(self.layers))):
            att = layer.attention
            qkv = att.wqkv(layer.attention_norm(x))
            q, k, v = qkv.split([t.n_head * t.head_dim, t.n_local_heads * t.head_dim, t.n_local_heads * t.head_dim],
                                dim=-1)
            q = q.view(b, n, t.n_head, t.head_dim)
            k = k.view(b, n, t.n_local_heads, t.head_dim)
            if t.qk_norm:
                q, k = att.q_norm(q), att.k_norm(k)
            q = interleaved_rope(q.transpose(1, 2), cos, sin)
            k = interleaved_rope(k.transpose(1, 2), cos, sin)
            v = v.view(b, n, t.n_local_heads, t.head_dim).transpose(1, 2)
            new += [k, v]
            k_all, v_all = cat_past(past, i, k, v, rep)
            scores = torch.matmul(q, k_all.transpose(-1, -2)) * (t.head_dim ** -0.5) + bias
            out = torch.matmul(scores.softmax(-1), v_all).transpose(1, 2).reshape(b, n, t.n_head * t.head_dim)
            h = x + att.wo(out)
            x = h + layer.feed_forward(layer.ffn_norm(h))
        return x, new


class _Model(nn.Module):
    def __init__(self, cfg: FishConfig) -> None:
        super().__init__()
        s = cfg.slow
        self.stack = Stack(s, cfg.max_seq_len)
        self.layers = self.stack.layers
        self.norm = RMSNorm(s.dim, s.norm_eps)


class _TextModel(nn.Module):
    def __init__(self, cfg: FishConfig) -> None:
        super().__init__()
        self.model = _Model(cfg)


class SlowStep(nn.Module):
    """(inputs_embeds [B, T, D], attention_mask [B, P + T], position_ids [B, T], past K/V per layer) ->
    hidden [B, D], logits [B, codebook_size + 1] (semantic ids, then <|im_end|>), new K/V [B, KV, T, hd]."""

    def __init__(self, cfg: FishConfig) -> None:
        super().__init__()
        self.text_model = _TextModel(cfg)
        self.allowed = [*list(range(cfg.semantic_start, cfg.semantic_end + 1)), spec.IM_END_ID]
        # The tied embedding's rows of the allowed ids (set from text_model.model.embeddings by `load`).
        self.head = nn.Parameter(torch.zeros(len(self.allowed), cfg.slow.dim))

    def derive(self, tensor: Callable[[str], torch.Tensor]) -> None:
        self.head.data.copy_(tensor("text_model.model.embeddings.weight")[self.allowed])

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = self.text_model.model
        x, new = m.stack.run(inputs_embeds, attention_mask, position_ids, past)
        hidden = m.norm(x[:, -1])
        logits = hidden @ self.head.T
        return (hidden, logits, *new)


class _AudioDecoder(nn.Module):
    def __init__(self, cfg: FishConfig) -> None:
        super().__init__()
        f = cfg.fast
        self.stack = Stack(f, cfg.num_codebooks + 1)
        self.layers = self.stack.layers
        self.norm = RMSNorm(f.dim, f.norm_eps)
        self.output = nn.Linear(f.dim, f.vocab_size, bias=False)


class FastStep(nn.Module):
    """(inputs_embeds [B, T, Df], position_ids [B, T], past K/V per layer) -> logits [B, 1024] of the last
    position, new K/V. The Fast AR's past is never padded: every row of a batch is at the same step."""

    def __init__(self, cfg: FishConfig) -> None:
        super().__init__()
        self.audio_decoder = _AudioDecoder(cfg)

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = self.audio_decoder
        b, n, _ = inputs_embeds.shape
        mask = torch.ones(b, past[0].shape[2] + n, dtype=torch.int64)
        x, new = a.stack.run(inputs_embeds, mask, position_ids, past)
        logits = a.output(a.norm(x[:, -1]))[:, :spec.RESIDUAL_CODEBOOK_SIZE]
        return (logits, *new)


M = TypeVar("M", bound=nn.Module)


def load(module: M, checkpoint: object) -> M:
    """Every parameter of `module` from model.safetensors' tensor of the same name (the `stack.` alias of
    `layers` aside), as float32; strict."""
    from pathlib import Path

    from safetensors import safe_open

    from ttscore.runtime.families.fish_speech.checkpoint import WEIGHTS

    names = [n for n in module.state_dict() if ".stack." not in n and n != "head"]
    with safe_open(str(Path(str(checkpoint)) / WEIGHTS), framework="pt") as f:
        state = {name: f.get_tensor(name).to(torch.float32) for name in names}
        derive = getattr(module, "derive", None)
        if derive is not None:
            derive(lambda name: f.get_tensor(name).to(torch.float32))
    result = module.load_state_dict(state, strict=False)
    unexpected = [n for n in result.missing_keys if ".stack." not in n and n != "head"]
    if unexpected or result.unexpected_keys:
        raise KeyError(f"not loaded: {unexpected[:8]} {result.unexpected_keys[:8]}")
    module.eval()
    return module
