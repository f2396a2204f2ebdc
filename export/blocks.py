"""Torch building blocks the families' export graphs share (export/<family>/graphs.py): traced into their ONNX
graphs, so one definition gives every family the same ops."""

from __future__ import annotations

import torch
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation of the last axis: (x1, x2) -> (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    """x / rms(x) * w, or with `centred` (Gemma, Qwen3.5) x / rms(x) * (1 + w), in the input's dtype."""

    def __init__(self, dim: int, eps: float, centred: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if centred else torch.ones(dim))
        self.eps, self.centred = eps, centred

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (1.0 + self.weight) if self.centred else x * self.weight


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
