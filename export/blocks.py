"""Torch building blocks the families' export graphs share (export/<family>/graphs.py): traced into their ONNX
graphs, so one definition gives every family the same ops."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from ttscore.runtime.sinc_resample import reduced, sinc_kernel

A = TypeVar("A", bound=nn.Module)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation of the last axis: (x1, x2) -> (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the half-split layout (transformers' apply_rotary_pos_emb): x * cos + rotate_half(x) * sin."""
    return x * cos + rotate_half(x) * sin


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, neg: float, heads: int,
                     kv_heads: int, head_dim: int) -> torch.Tensor:
    """Grouped-query attention with a boolean mask: q [B, heads, T, d], k and v [B, kv_heads, S, d] (each kv head
    expanded to heads / kv_heads query heads), mask broadcast to [B, heads, T, S] (True = attend; a masked score is
    `neg`), scores scaled by 1 / sqrt(d) -> [B, T, heads * d]."""
    b, t, s = q.shape[0], q.shape[2], k.shape[2]
    groups = heads // kv_heads
    kk = k.unsqueeze(2).expand(b, kv_heads, groups, s, head_dim).reshape(b, heads, s, head_dim)
    vv = v.unsqueeze(2).expand(b, kv_heads, groups, s, head_dim).reshape(b, heads, s, head_dim)
    scores = torch.matmul(q, kk.transpose(-1, -2)) * (1.0 / math.sqrt(head_dim))
    scores = torch.where(mask, scores, torch.full_like(scores, neg))
    out = torch.matmul(torch.softmax(scores, dim=-1), vv)
    return out.transpose(1, 2).reshape(b, t, heads * head_dim)


def cat_past(past: Sequence[torch.Tensor], layer: int, k: torch.Tensor, v: torch.Tensor, groups: int = 1
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer `layer`'s keys and values for attention: its past (`past[2 * layer]`, `past[2 * layer + 1]`, [B, H, T, d])
    followed by the new k, v on the time axis, each head repeated `groups` times (grouped queries)."""
    kk = torch.cat([past[2 * layer], k], dim=2)
    vv = torch.cat([past[2 * layer + 1], v], dim=2)
    if groups > 1:
        kk, vv = kk.repeat_interleave(groups, dim=1), vv.repeat_interleave(groups, dim=1)
    return kk, vv


class RMSNorm(nn.Module):
    """x / rms(x) * w, or with `centred` (Gemma, Qwen3.5) x / rms(x) * (1 + w), in the input's dtype."""

    def __init__(self, dim: int, eps: float, centred: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if centred else torch.ones(dim))
        self.eps, self.centred = eps, centred

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (1.0 + self.weight) if self.centred else x * self.weight


def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The Snake activation x + sin(alpha x)^2 / (alpha + 1e-9) (DAC's, BigVGAN's and NeMo's), alpha per channel."""
    return x + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2)


def default_inv_freq(theta: float, head_dim: int) -> torch.Tensor:
    """RoPE's default inverse frequencies theta^(-2i/d), float32 as transformers computes them."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) with Llama/Qwen's parameter names; act is SiLU, or with `gelu` GELU's tanh
    approximation (Gemma)."""

    def __init__(self, dim: int, inner: int, gelu: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, inner, bias=False)
        self.up_proj = nn.Linear(dim, inner, bias=False)
        self.down_proj = nn.Linear(inner, dim, bias=False)
        self.gelu = gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate_proj(x)
        g = nn.functional.gelu(g, approximate="tanh") if self.gelu else nn.functional.silu(g)
        out: torch.Tensor = self.down_proj(g * self.up_proj(x))
        return out


def sinc_resample(x: torch.Tensor, rate_in: int, rate_out: int) -> torch.Tensor:
    """torchaudio.functional.resample's default (see ttscore.runtime.sinc_resample) over
    the last axis of a torch tensor: the kernel as a constant stride-o convolution. The output keeps
    ceil(n * len / o) samples; when len is a multiple of o that is every block but the last."""
    o, n = reduced(rate_in, rate_out)
    kernel, width = sinc_kernel(rate_in, rate_out)
    lead = x.shape[:-1]
    flat = x.reshape(-1, 1, x.shape[-1])
    y = F.conv1d(F.pad(flat, (width, width + o)), torch.from_numpy(kernel)[:, None, :], stride=o)
    y = y.transpose(1, 2).reshape(flat.shape[0], -1)
    if isinstance(x.shape[-1], int) and not torch.jit.is_tracing():
        y = y[:, : -(-n * x.shape[-1] // o)]
    else:  # traced: the input length must be a multiple of o (OmniVoice's codec encoder: whole codec frames)
        y = y[:, :-n]
    return y.reshape(*lead, y.shape[-1])


class SwiGLU(nn.Module):
    """w2(silu(w1(x)) * w3(x)) with Mistral's and Fish Speech's parameter names (`bias`: w2's bias)."""

    def __init__(self, dim: int, hidden: int, bias: bool = False) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=bias)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module, Generic[A]):
    """A pre-norm transformer block's parameters with Mistral's and Fish Speech's names: the family's `attention`
    module, a SwiGLU `feed_forward`, `attention_norm` and `ffn_norm` (RMSNorm), and with `layer_scale`
    per-channel `attention_scale` and `ffn_scale`. The family's stack runs them (its own attention)."""

    attention: A
    feed_forward: SwiGLU
    attention_norm: RMSNorm
    ffn_norm: RMSNorm
    attention_scale: nn.Parameter
    ffn_scale: nn.Parameter

    def __init__(self, dim: int, hidden: int, eps: float, attention: A, bias: bool = False,
                 layer_scale: bool = False) -> None:
        super().__init__()
        self.attention = attention
        self.feed_forward = SwiGLU(dim, hidden, bias)
        self.attention_norm = RMSNorm(dim, eps)
        self.ffn_norm = RMSNorm(dim, eps)
        if layer_scale:
            self.attention_scale = nn.Parameter(torch.ones(dim))
            self.ffn_scale = nn.Parameter(torch.ones(dim))


def past_causal_bias(attention_mask: torch.Tensor, n: int, neg: float) -> torch.Tensor:
    """The additive attention mask [B, 1, n, P + n] of n new positions after a past of P slots: key j is visible
    to new position i when it is a valid slot (`attention_mask` [B, P + n] > 0) and not after i; else `neg`."""
    total = attention_mask.shape[1]
    key_pos = torch.arange(total)[None, :]
    query_pos = (total - n + torch.arange(n))[:, None]
    allowed = (attention_mask[:, None, None, :] > 0) & (key_pos <= query_pos)[None, None]
    return torch.where(allowed, torch.tensor(0.0), torch.tensor(neg))


def split_state(state: torch.Tensor, layout: Iterable[tuple[str, tuple[int, ...]]], batch: int
                ) -> dict[str, torch.Tensor]:
    """A streaming graph's flat state [B, S] as its parts by name, each [B, *shape] (`layout`: (name, shape) in
    the order the state lays them out)."""
    parts, at = {}, 0
    for name, shape in layout:
        size = math.prod(shape)
        parts[name] = state[:, at:at + size].reshape(batch, *shape)
        at += size
    return parts


def join_state(parts: Mapping[str, torch.Tensor], names: Iterable[str], batch: int) -> torch.Tensor:
    """The flat state [B, S] of `parts` (each [B, ...]), laid out in the order of `names`."""
    return torch.cat([parts[name].reshape(batch, -1) for name in names], dim=1)
