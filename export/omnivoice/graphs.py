"""The exported OmniVoice graphs as explicit torch wrappers over the reference's modules.

generator: the bidirectional Qwen3 over a whole prompt (no KV cache), the logits of the target
positions only. Embeddings as the reference's `_prepare_embed_inputs` (text embeddings everywhere,
replaced by the sum over codebooks of the offset audio embeddings at audio positions); attention
between the real positions of a row; RoPE positions 0..S-1 (the reference passes none).

codec_decoder: the Higgs Audio v2 tokenizer's decode: RVQ lookup (+ project_out) summed over the 8
codebooks, fc2, the DAC acoustic decoder.

codec_encoder: the Higgs Audio v2 tokenizer's encode of one clip (HuBERT semantic features + DAC
encoder + fc + residual VQ), codes as int64.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from export.blocks import apply_rope, default_inv_freq, masked_attention
from export.omnivoice.codec import decode_codes, encode_codes

NEG = -1e30  # masked attention score (finite: a padded query row that sees only itself stays finite)


def _layer(layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
           heads: int, kv_heads: int, head_dim: int) -> torch.Tensor:
    """One Qwen3 decoder layer over x [B, S, H]; mask [B, 1, S, S] (True = attend)."""
    attn = layer.self_attn
    b, s, _ = x.shape
    h = layer.input_layernorm(x)
    q = attn.q_norm(attn.q_proj(h).view(b, s, heads, head_dim)).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(h).view(b, s, kv_heads, head_dim)).transpose(1, 2)
    v = attn.v_proj(h).view(b, s, kv_heads, head_dim).transpose(1, 2)
    out = masked_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, mask, NEG, heads, kv_heads, head_dim)
    x = x + attn.o_proj(out)
    return x + layer.mlp(layer.post_attention_layernorm(x))


class Generator(nn.Module):
    """(input_ids [B, 8, S], audio_mask [B, S], attention_mask [B, S], target_index [B, T]) ->
    logits [B, 8, T, audio_vocab]."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        cfg = model.config
        llm_cfg = cfg.llm_config
        self.llm: Any = model.llm
        self.audio_embeddings = model.audio_embeddings
        self.audio_heads = model.audio_heads
        self.codebooks = int(cfg.num_audio_codebook)
        self.vocab = int(cfg.audio_vocab_size)
        self.heads = int(llm_cfg.num_attention_heads)
        self.kv_heads = int(llm_cfg.num_key_value_heads)
        self.head_dim = int(getattr(llm_cfg, "head_dim", None) or llm_cfg.hidden_size // llm_cfg.num_attention_heads)
        # Constants of the graph, not weights (export_bound binds only the state dict's tensors).
        self.theta = float(getattr(llm_cfg, "rope_theta", None) or 1000000.0)

    def _offsets(self) -> torch.Tensor:
        return torch.arange(self.codebooks, dtype=torch.long) * self.vocab

    def forward(self, input_ids: torch.Tensor, audio_mask: torch.Tensor, attention_mask: torch.Tensor,
                target_index: torch.Tensor) -> torch.Tensor:
        b, _, s = input_ids.shape
        text = self.llm.embed_tokens(input_ids[:, 0, :])
        shifted = input_ids * audio_mask.unsqueeze(1).to(input_ids.dtype) + self._offsets().view(1, -1, 1)
        audio = self.audio_embeddings(shifted).sum(dim=1)
        x = torch.where(audio_mask.unsqueeze(-1), audio, text)
        valid = attention_mask > 0
        pos = torch.arange(s, dtype=torch.int64)
        eye = pos.unsqueeze(0) == pos.unsqueeze(1)
        mask = ((valid.unsqueeze(1) & valid.unsqueeze(2)) | eye.unsqueeze(0)).unsqueeze(1)
        freqs = pos.float().unsqueeze(1) * default_inv_freq(self.theta, self.head_dim).unsqueeze(0)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().view(1, 1, s, self.head_dim), emb.sin().view(1, 1, s, self.head_dim)
        for layer in self.llm.layers:
            x = _layer(layer, x, cos, sin, mask, self.heads, self.kv_heads, self.head_dim)
        x = self.llm.norm(x)
        t = target_index.shape[1]
        picked = torch.gather(x, 1, target_index.unsqueeze(-1).expand(b, t, x.shape[-1]))
        return self.audio_heads(picked).view(b, t, self.codebooks, self.vocab).permute(0, 2, 1, 3)


class CodecDecoderGraph(nn.Module):
    """codes [B, 8, T] -> audio [B, 1, T * hop]: export.omnivoice.codec.decode_codes over Codec's modules."""

    def __init__(self, codec: Any) -> None:
        super().__init__()
        self.codec = codec.module

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        audio: torch.Tensor = decode_codes(self.codec, codes)
        return audio


class CodecEncoderGraph(nn.Module):
    """audio [N] (24 kHz, N % hop == 0) -> codes [8, N / hop]: export.omnivoice.codec.encode_codes
    over Codec's modules (the 24 -> 16 kHz resample a constant convolution; with N a whole number of
    frames the DAC encoder's frame count equals the semantic one, so its input is never padded)."""

    def __init__(self, codec: Any) -> None:
        super().__init__()
        self.codec = codec.module
        self.config = codec.config_dict

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        codes: torch.Tensor = encode_codes(self.codec, self.config, audio.view(1, 1, -1))[0]
        return codes
