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
