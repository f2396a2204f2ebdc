"""Breeze-TTS-2's exported computations, in the project's own torch (float32, ONNX-traceable).

- `TextEncoder`: T5Gemma2's bidirectional text encoder (Gemma 3 layers: zero-centred RMSNorms
  around attention and MLP, q/k norms, GELU-tanh gated MLP, embeddings x sqrt(H) with the `eoi` row
  replaced, per-layer-type RoPE (linear x8 for full layers), the asymmetric sliding window of
  transformers 5.x: left (w+1)//2 positions incl. itself, right w//2) + `text_encoder_proj`.
- `DecoderStep`: a Qwen3 (q/k norms) or Llama (llama3 RoPE) stack over explicit past K/V:
  prefill (T new positions) and decode (T = 1), ragged batches through `attention_mask`.
- `BackboneStep`: the Qwen3 backbone + the code-0 head of its last position (reserved rows masked).
- `DepthStep`: `inputs_embeds_projector` + the Llama depth decoder (heads are a runtime table).

tests/export_tests/test_breeze_tts_2_export.py proves these equal the Hugging Face reference classes of
transformers 5.14.1 (tests/breeze_tts_2_reference.py, in ref5); export checks each ONNX graph
against them.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from export.blocks import GatedMLP, RMSNorm, apply_rope, cat_past, default_inv_freq
from ttscore.runtime.families.breeze_tts_2.checkpoint import BreezeInfo, Stack


def rope_inv_freq(head_dim: int, params: dict[str, Any]) -> torch.Tensor:
    """inv_freq of a RoPE config: default, linear (divided by `factor`) or llama3 (smoothed bands)."""
    base = float(params.get("rope_theta", 10000.0))
    inv = default_inv_freq(base, head_dim)
    kind = params.get("rope_type", "default")
    if kind == "linear":
        return inv / float(params["factor"])
    if kind == "llama3":
        factor, low, high = float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old = float(params["original_max_position_embeddings"])
        low_wl, high_wl = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        return torch.where(medium, smoothed, scaled)
    if kind != "default":
        raise ValueError(f"unsupported rope_type {kind!r}")
    return inv


def _cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = positions.float()[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, D]
    return emb.cos(), emb.sin()


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    w = torch.matmul(q, k.transpose(2, 3)) * scale + bias
    return torch.matmul(torch.softmax(w, dim=-1), v)


class Attention(nn.Module):
    def __init__(self, s: Stack, qk_norm: bool, centred: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=False)
        if qk_norm:
            self.q_norm = RMSNorm(s.head_dim, s.rms_norm_eps, centred)
            self.k_norm = RMSNorm(s.head_dim, s.rms_norm_eps, centred)
        self.qk_norm = qk_norm

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def out(self, a: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = a.shape
        return self.o_proj(a.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


# --- text encoder ----------------------------------------------------------------------------------


class EncoderLayer(nn.Module):
    def __init__(self, s: Stack) -> None:
        super().__init__()
        self.self_attn = Attention(s, qk_norm=True, centred=True)
        self.mlp = GatedMLP(s.hidden_size, s.intermediate_size, gelu=True)
        self.pre_self_attn_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)
        self.post_self_attn_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)
        self.pre_feedforward_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)
        self.post_feedforward_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)


class _Embedding(nn.Module):
    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(rows, dim))
        self.eoi_embedding = nn.Parameter(torch.zeros(dim))


class TextEncoder(nn.Module):
    """input_ids [B, T], attention_mask [B, T] (1 = token) -> text_encoder_proj(encoder(ids)) [B, T, H]."""

    def __init__(self, info: BreezeInfo) -> None:
        super().__init__()
        t = info.text
        s = t.stack
        self.embed_tokens = _Embedding(t.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(EncoderLayer(s) for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=True)
        self.proj = nn.Linear(s.hidden_size, info.backbone.hidden_size, bias=False)
        self.layer_types = t.layer_types
        self.window = t.sliding_window
        self.scale = t.query_pre_attn_scalar ** -0.5
        self.embed_scale = float(s.hidden_size ** 0.5)
        self.eoi = t.eoi_token_index
        for kind in set(t.layer_types):
            self.register_buffer(f"inv_freq_{kind}", rope_inv_freq(s.head_dim, t.rope[kind]), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens.weight[input_ids] * self.embed_scale
        x = torch.where((input_ids == self.eoi)[..., None], self.embed_tokens.eoi_embedding, x)
        n = input_ids.shape[1]
        pos = torch.arange(n, device=input_ids.device)
        valid = (attention_mask > 0)[:, None, None, :]  # [B, 1, 1, T] keys
        dist = pos[:, None] - pos[None, :]  # q - k
        local = ((dist >= 0) & (dist < (self.window + 1) // 2)) | ((dist < 0) & (-dist < self.window // 2 + 1))
        neg = torch.finfo(torch.float32).min
        bias = {"full_attention": torch.where(valid, 0.0, neg),
                "sliding_attention": torch.where(valid & local[None, None], 0.0, neg)}
        positions = pos[None].expand(input_ids.shape[0], n)
        rope = {kind: _cos_sin(getattr(self, f"inv_freq_{kind}"), positions) for kind in set(self.layer_types)}
        for layer, kind in zip(cast("list[EncoderLayer]", list(self.layers)), self.layer_types, strict=True):
            h = layer.pre_self_attn_layernorm(x)
            q, k, v = layer.self_attn.project(h, *rope[kind])
            h = layer.self_attn.out(_attend(q, k, v, bias[kind], self.scale))
            x = x + layer.post_self_attn_layernorm(h)
            h = layer.mlp(layer.pre_feedforward_layernorm(x))
            x = x + layer.post_feedforward_layernorm(h)
        return self.proj(self.norm(x))


# --- decoder stacks with explicit K/V ----------------------------------------------------------------


class DecoderLayer(nn.Module):
    def __init__(self, s: Stack, qk_norm: bool) -> None:
        super().__init__()
        self.self_attn = Attention(s, qk_norm=qk_norm, centred=False)
        self.mlp = GatedMLP(s.hidden_size, s.intermediate_size)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=False)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=False)


class DecoderStack(nn.Module):
    inv_freq: torch.Tensor

    """`layers.*` + `norm`: (x [B, T, H], attention_mask [B, P + T], position_ids [B, T], past K/V)
    -> (final-norm hidden [B, T, H], new K/V per layer). Past slot j of row b is attended iff
    attention_mask[b, j]; the new positions are valid (where marked) and causal among themselves."""

    def __init__(self, s: Stack, qk_norm: bool, rope: dict[str, Any]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(s, qk_norm) for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps, centred=False)
        self.scale = s.head_dim ** -0.5
        self.register_buffer("inv_freq", rope_inv_freq(s.head_dim, rope), persistent=False)

    def run(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
            past: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        t = x.shape[1]
        total = attention_mask.shape[1]
        p = total - t
        q_pos = torch.arange(t, device=x.device)[:, None] + p
        k_pos = torch.arange(total, device=x.device)[None, :]
        allowed = (attention_mask[:, None, None, :] > 0) & (k_pos <= q_pos)[None, None]
        bias = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
        cos, sin = _cos_sin(self.inv_freq, position_ids)
        new: list[torch.Tensor] = []
        for i, layer in enumerate(cast("list[DecoderLayer]", list(self.layers))):
            h = layer.input_layernorm(x)
            q, k, v = layer.self_attn.project(h, cos, sin)
            new += [k, v]
            kk, vv = cat_past(past, i, k, v)
            x = x + layer.self_attn.out(_attend(q, kk, vv, bias, self.scale))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x), new


class BackboneStep(nn.Module):
    reserved: torch.Tensor

    """The backbone graph: hidden of the new positions, the code-0 logits of the last one, new K/V."""

    def __init__(self, info: BreezeInfo) -> None:
        super().__init__()
        self.stack = DecoderStack(info.backbone, qk_norm=True, rope={"rope_theta": info.backbone_rope_theta})
        self.lm_head = nn.Linear(info.backbone.hidden_size, info.codebook_vocab + 1, bias=False)
        reserved = torch.zeros(info.codebook_vocab + 1, dtype=torch.bool)
        reserved[info.codebook_size:info.codebook_vocab] = True
        self.register_buffer("reserved", reserved, persistent=False)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden, new = self.stack.run(inputs_embeds, attention_mask, position_ids, list(past))
        logits = self.lm_head(hidden[:, -1]).masked_fill(self.reserved, float("-inf"))
        return (hidden, logits, *new)


class DepthStep(nn.Module):
    """The depth decoder graph: audio-space embeddings -> inputs_embeds_projector -> Llama stack."""

    def __init__(self, info: BreezeInfo) -> None:
        super().__init__()
        self.inputs_embeds_projector = nn.Linear(info.audio_embed_size, info.depth.hidden_size, bias=False)
        self.stack = DecoderStack(info.depth, qk_norm=False, rope=info.depth_rope)

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        x = self.inputs_embeds_projector(inputs_embeds)
        total = (past[0].shape[2] if past else 0) + x.shape[1]
        mask = torch.ones(x.shape[0], total, dtype=torch.int64, device=x.device)
        hidden, new = self.stack.run(x, mask, position_ids, list(past))
        return (hidden, *new)


# --- weights ---------------------------------------------------------------------------------------

# Module parameter prefix -> checkpoint tensor prefix.
TEXT_NAMES = (("proj.", "text_encoder_proj."), ("", "text_encoder."))
BACKBONE_NAMES = (("stack.", "backbone_model."), ("lm_head.", "lm_head."))
DEPTH_NAMES = (("inputs_embeds_projector.", "depth_decoder.model.inputs_embeds_projector."),
               ("stack.", "depth_decoder.model."))


def checkpoint_name(param: str, names: tuple[tuple[str, str], ...]) -> str:
    for ours, theirs in names:
        if param.startswith(ours):
            return theirs + param[len(ours):]
    raise KeyError(param)
