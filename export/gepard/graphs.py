"""Gepard-1.0's exported computations, in the project's own torch (float32, ONNX-traceable), their
parameters named as the checkpoint's tensors.

- `BackboneStep`: Hugging Face's `Qwen3_5TextModel` with every layer full attention, over explicit past
  K/V (prefill and decode, ragged rows through `attention_mask`): zero-centred RMSNorms `(1 + w)`,
  q/k RMSNorm per head, the output gate (`q_proj` gives query and gate per head; the attention output
  is multiplied by `sigmoid(gate)` before `o_proj`), RoPE over the whole head (`partial_rotary_factor`
  1.0; with text positions Qwen3.5's interleaved mRoPE is plain RoPE), SiLU MLP; then the 32
  `codebook_heads` (concatenated: vLLM-Omni's fused head) and `sigmoid(stop_head)` of the last position.
- `FrameEmbed`: vLLM-Omni's `_audio_frame_embed`: the 32 codes' embeddings concatenated ->
  `audio_embed_proj` (Linear, GELU, Linear, LayerNorm without affine) x `audio_embed_scale`.

tests/export_tests/test_gepard_export.py proves the backbone equal to transformers 5.14.1's
`Qwen3_5TextModel` (ref5); export checks each ONNX graph against these modules.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from export.blocks import GatedMLP, RMSNorm, apply_rope, cat_past, default_inv_freq
from ttscore.runtime.families.gepard.checkpoint import Backbone, GepardInfo


class Attention(nn.Module):
    def __init__(self, s: Backbone) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, 2 * s.num_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=False)
        self.q_norm = RMSNorm(s.head_dim, s.rms_norm_eps, centred=True)
        self.k_norm = RMSNorm(s.head_dim, s.rms_norm_eps, centred=True)


class Layer(nn.Module):
    def __init__(self, s: Backbone) -> None:
        super().__init__()
        self.self_attn = Attention(s)
        self.mlp = GatedMLP(s.hidden_size, s.intermediate_size)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)


class Stack(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, s: Backbone) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(s) for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)
        self.scale = s.head_dim ** -0.5
        inv = default_inv_freq(s.rope_theta, s.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def run(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
            past: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x [B, T, H] after each row's past (slot j of row b valid iff attention_mask[b, j]) ->
        final-norm hidden [B, T, H] and the new K/V per layer."""
        b, t, _ = x.shape
        total = attention_mask.shape[1]
        q_pos = torch.arange(t, device=x.device)[:, None] + (total - t)
        k_pos = torch.arange(total, device=x.device)[None, :]
        allowed = (attention_mask[:, None, None, :] > 0) & (k_pos <= q_pos)[None, None]
        bias = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
        freqs = position_ids.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, D]
        cos, sin = emb.cos(), emb.sin()
        new: list[torch.Tensor] = []
        for i, layer in enumerate(cast("list[Layer]", list(self.layers))):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            qg = a.q_proj(h).view(b, t, a.heads, 2 * a.head_dim)
            q, gate = qg[..., :a.head_dim], qg[..., a.head_dim:].reshape(b, t, a.heads * a.head_dim)
            q = a.q_norm(q).transpose(1, 2)
            k = a.k_norm(a.k_proj(h).view(b, t, a.kv_heads, a.head_dim)).transpose(1, 2)
            v = a.v_proj(h).view(b, t, a.kv_heads, a.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            new += [k, v]
            kk, vv = cat_past(past, i, k, v, a.heads // a.kv_heads)
            w = torch.matmul(q, kk.transpose(2, 3)) * self.scale + bias
            o = torch.matmul(torch.softmax(w, dim=-1), vv).transpose(1, 2).reshape(b, t, a.heads * a.head_dim)
            x = x + a.o_proj(o * torch.sigmoid(gate))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x), new


class BackboneStep(nn.Module):
    """The backbone graph: (inputs_embeds, attention_mask, position_ids, past K/V) -> (logits [B, 216]
    and stop_prob [B] of the last position, new K/V)."""

    def __init__(self, info: GepardInfo) -> None:
        super().__init__()
        h = info.backbone.hidden_size
        self.model = Stack(info.backbone)
        self.codebook_heads = nn.ModuleList(nn.Linear(h, n) for n in info.head_levels)
        self.stop_head = nn.Linear(h, 1)

    def hidden(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               past: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return self.model.run(inputs_embeds, attention_mask, position_ids, past)

    def heads(self, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.cat([head(last) for head in self.codebook_heads], dim=-1)
        return logits, torch.sigmoid(self.stop_head(last))[:, 0]

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden, new = self.hidden(inputs_embeds, attention_mask, position_ids, list(past))
        logits, stop = self.heads(hidden[:, -1])
        return (logits, stop, *new)


class FrameEmbed(nn.Module):
    """codes [B, 32] -> the next step's input [B, H]."""

    def __init__(self, info: GepardInfo) -> None:
        super().__init__()
        h = info.backbone.hidden_size
        self.audio_embeddings = nn.ModuleList(nn.Embedding(n, info.audio_embed_dim) for n in info.head_levels)
        self.audio_embed_proj = nn.Sequential(
            nn.Linear(len(info.head_levels) * info.audio_embed_dim, h), nn.GELU(), nn.Linear(h, h),
            nn.LayerNorm(h, elementwise_affine=False))
        self.audio_embed_scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        parts = [emb(codes[:, i]) for i, emb in enumerate(self.audio_embeddings)]
        out: torch.Tensor = self.audio_embed_proj(torch.cat(parts, dim=-1)) * self.audio_embed_scale
        return out
