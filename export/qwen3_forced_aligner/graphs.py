"""Qwen3-ForcedAligner's exported computations in the project's own torch (float32, ONNX-traceable), their
parameters named as the checkpoint's tensors (under `thinker.audio_tower.` and `thinker.`).

- `AudioEncoder`: qwen-asr's `Qwen3ASRAudioEncoder` over the chunk layout the runtime computes
  (ttscore.runtime.qwen3_forced_aligner.frontend.chunk_layout): three stride-2 Conv2d + GELU over each padded chunk, `conv_out`,
  the sinusoidal positions of the chunk's frames, the real frames gathered, pre-norm encoder layers whose attention
  stays inside each frame's window, `ln_post`, `proj1`, GELU, `proj2`.
- `Aligner`: the thinker's one pass: token embeddings with each `<|audio_pad|>` replaced by the next audio embedding
  (masked_scatter's order), the Qwen3 stack (q/k RMSNorm, SwiGLU) under a causal mask over each row's real tokens,
  positions counted from each row's first real token (its three mRoPE sections carry the same text position, which
  is plain RoPE), the final norm and the `classify_num` head; the argmax of each position.

tests/export_tests/test_aligner_parity.py proves the exported graphs equal to qwen-asr 0.0.6 through the runtime.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from export.blocks import GatedMLP, RMSNorm, apply_rope, default_inv_freq, masked_attention
from ttscore.runtime.qwen3_forced_aligner.checkpoint import AlignerInfo, TextStack
from ttscore.runtime.qwen3_forced_aligner.checkpoint import AudioEncoder as AudioSizes

NEG = torch.finfo(torch.float32).min


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's positional table [length, channels] (sin half, cos half), in qwen-asr's float arithmetic."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2).float())
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


class EncoderAttention(nn.Module):
    def __init__(self, a: AudioSizes) -> None:
        super().__init__()
        self.heads, self.head_dim = a.heads, a.d_model // a.heads
        self.q_proj = nn.Linear(a.d_model, a.d_model)
        self.k_proj = nn.Linear(a.d_model, a.d_model)
        self.v_proj = nn.Linear(a.d_model, a.d_model)
        self.out_proj = nn.Linear(a.d_model, a.d_model)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(1, m, self.heads, self.head_dim).transpose(1, 2)

        o = masked_attention(heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)), allowed, NEG,
                             self.heads, self.heads, self.head_dim)
        out: torch.Tensor = self.out_proj(o[0])
        return out


class EncoderLayer(nn.Module):
    def __init__(self, a: AudioSizes) -> None:
        super().__init__()
        self.self_attn = EncoderAttention(a)
        self.self_attn_layer_norm = nn.LayerNorm(a.d_model)
        self.fc1 = nn.Linear(a.d_model, a.ffn_dim)
        self.fc2 = nn.Linear(a.ffn_dim, a.d_model)
        self.final_layer_norm = nn.LayerNorm(a.d_model)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), allowed)
        out: torch.Tensor = x + self.fc2(nn.functional.gelu(self.fc1(self.final_layer_norm(x))))
        return out


class AudioEncoder(nn.Module):
    """(chunks [N, mel, C], valid_index [M], window_id [M]) -> audio_embeds [M, output_dim]."""

    positions: torch.Tensor

    def __init__(self, a: AudioSizes) -> None:
        super().__init__()
        ds = a.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, ds, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(ds, ds, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(ds, ds, 3, 2, padding=1)
        self.conv_out = nn.Linear(a.conv_out_features, a.d_model, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(a) for _ in range(a.layers))
        self.ln_post = nn.LayerNorm(a.d_model)
        self.proj1 = nn.Linear(a.d_model, a.d_model)
        self.proj2 = nn.Linear(a.d_model, a.output_dim)
        self.register_buffer("positions", sinusoids(a.max_source_positions, a.d_model), persistent=False)

    def forward(self, chunks: torch.Tensor, valid_index: torch.Tensor, window_id: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.conv2d1(chunks[:, None]))
        x = nn.functional.gelu(self.conv2d2(x))
        x = nn.functional.gelu(self.conv2d3(x))
        n, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(n, t, c * f)) + self.positions[:t][None]
        x = x.reshape(n * t, -1)[valid_index]
        allowed = (window_id[:, None] == window_id[None, :])[None, None]
        for layer in cast("list[EncoderLayer]", list(self.layers)):
            x = layer(x, allowed)
        out: torch.Tensor = self.proj2(nn.functional.gelu(self.proj1(self.ln_post(x))))
        return out


class TextAttention(nn.Module):
    def __init__(self, s: TextStack) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=False)
        self.q_norm = RMSNorm(s.head_dim, s.rms_norm_eps)
        self.k_norm = RMSNorm(s.head_dim, s.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out: torch.Tensor = self.o_proj(masked_attention(q, k, v, allowed, NEG, self.heads, self.kv_heads,
                                                         self.head_dim))
        return out


class TextLayer(nn.Module):
    def __init__(self, s: TextStack) -> None:
        super().__init__()
        self.self_attn = TextAttention(s)
        self.mlp = GatedMLP(s.hidden_size, s.intermediate_size)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class TextModel(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, s: TextStack) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(TextLayer(s) for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.register_buffer("inv_freq", default_inv_freq(s.rope_theta, s.head_dim), persistent=False)


class Aligner(nn.Module):
    """(input_ids [B, T], attention_mask [B, T], audio_embeds [B, A, H]) -> (classes [B, T], logits [B, T, K])."""

    def __init__(self, info: AlignerInfo) -> None:
        super().__init__()
        self.model = TextModel(info.text)
        self.lm_head = nn.Linear(info.text.hidden_size, info.classify_num, bias=False)
        self.audio_token_id = info.audio_token_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, audio_embeds: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        is_audio = input_ids == self.audio_token_id
        order = (torch.cumsum(is_audio.to(torch.int64), dim=1) - 1).clamp(min=0)
        placed = torch.gather(audio_embeds, 1, order[..., None].expand(-1, -1, audio_embeds.shape[-1]))
        x = torch.where(is_audio[..., None], placed, self.model.embed_tokens(input_ids))
        real = attention_mask > 0
        positions = torch.where(real, torch.cumsum(attention_mask, dim=1) - 1, torch.ones_like(attention_mask))
        freqs = positions.float()[..., None] * self.model.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, d]
        cos, sin = emb.cos(), emb.sin()
        t = input_ids.shape[1]
        steps = torch.arange(t, device=input_ids.device)
        allowed = ((steps[None, :] <= steps[:, None])[None] & real[:, None, :])[:, None]  # [B, 1, T, T]
        for layer in cast("list[TextLayer]", list(self.model.layers)):
            x = layer(x, cos, sin, allowed)
        logits: torch.Tensor = self.lm_head(self.model.norm(x))
        return torch.argmax(logits, dim=-1), logits
