"""Voxtral TTS's computations in the project's own torch (float32, ONNX-traceable), their parameters
named as consolidated.safetensors' tensors (loaded as they are: no permutation).

- `LMStep`: the Ministral language model over explicit past K/V (prefill and decode, ragged rows through
  `attention_mask`). RoPE is applied in Mistral's own interleaved layout (pairs (2i, 2i+1) rotated by
  angle i), so wq/wk are used as stored; transformers' `MistralModel` with the conversion script's
  permutation computes the same (tests/export_tests/test_voxtral_tts_graphs.py). Outputs the final-normed
  hidden state of the last position and its semantic code: argmax of
  `acoustic_transformer.semantic_codebook_output` with [EMPTY_AUDIO] and the padding ids masked
  (vLLM-Omni's FlowMatchingAudioTransformer.forward).
- `Velocity`: the flow-matching transformer's guided velocity for one Euler step: conditional and
  unconditional (hidden state zeroed) rows in one batch, 3 tokens each (`input_projection(x)`,
  `time_projection(sinusoid(t))`, `llm_projection(h)`), bidirectional attention without RoPE,
  `v = a * v_cond + (1 - a) * v_uncond`. The time embedding's frequencies are computed as vLLM-Omni's
  TimeEmbedding computes them (its `load_weight` ignores the checkpoint's `inv_freq` buffer).
- `CodecDecoder`: Mistral's codec decoder over a whole utterance: codes (without the +2 offset) ->
  semantic VQ rows (embedding_sum / cluster_usage) and FSQ rescale -> causal conv (replicate pad) ->
  transformer stages (causal sliding-window attention, ALiBi, q/k RMSNorm, layer scale) with causal
  transposed convs between -> output conv (reflect pad) -> 240-sample patches.
The Euler loop, clamping and quantisation run in numpy (ttscore.runtime.families.voxtral_tts).
"""

from __future__ import annotations

import math
from typing import TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from export.blocks import Block, RMSNorm, cat_past, default_inv_freq, past_causal_bias
from ttscore.contract import voxtral_tts as spec
from ttscore.runtime.families.voxtral_tts.checkpoint import VoxtralInfo, codec_blocks

NEG = -1e9  # additive mask value (finite: a fully padded row stays finite)



class Projections(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, bias: bool = False,
                 qk_norm_eps: float | None = None) -> None:
        super().__init__()
        self.wq = nn.Linear(dim, heads * head_dim, bias=bias)
        self.wk = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * head_dim, bias=bias)
        self.wo = nn.Linear(heads * head_dim, dim, bias=bias)
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(heads * head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(kv_heads * head_dim, qk_norm_eps)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, T, D] -> q [B, H, T, hd], k and v [B, KV, T, hd]."""
        b, t, _ = x.shape
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        return (q.view(b, t, self.heads, self.head_dim).transpose(1, 2),
                k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2),
                v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        rep = self.heads // self.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if bias is not None:
            scores = scores + bias
        out = torch.matmul(scores.softmax(-1), v)
        b, _, t, _ = out.shape
        return self.wo(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Mistral's interleaved rotary embedding: x [B, H, T, hd], cos/sin [B, 1, T, hd/2]."""
    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class SemanticHead(nn.Module):
    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        self.semantic_codebook_output = nn.Linear(info.lm.dim, info.semantic_logits, bias=info.fm.use_biases)


class LMStep(nn.Module):
    inv_freq: torch.Tensor
    acoustic_transformer: SemanticHead

    """(inputs_embeds [B, T, D], attention_mask [B, P + T], position_ids [B, T], past K/V per layer) ->
    hidden [B, D] (last position, final norm), semantic_code [B], new K/V [B, KV, T, hd] (rotated)."""

    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        lm = info.lm
        self.layers = nn.ModuleList(
            Block(lm.dim, lm.hidden_dim, lm.norm_eps, Projections(lm.dim, lm.n_heads, lm.n_kv_heads, lm.head_dim))
            for _ in range(lm.n_layers))
        self.norm = RMSNorm(lm.dim, lm.norm_eps)
        self.acoustic_transformer = SemanticHead(info)
        inv = default_inv_freq(lm.rope_theta, lm.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.semantic_end = spec.NUM_AUDIO_SPECIAL + info.semantic_codebook_size

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = inputs_embeds
        t = x.shape[1]
        angles = position_ids.float()[:, None, :, None] * self.inv_freq  # [B, 1, T, hd/2]
        cos, sin = angles.cos(), angles.sin()
        bias = past_causal_bias(attention_mask, t, NEG)
        new: list[torch.Tensor] = []
        for i, layer in enumerate(cast("list[Block[Projections]]", list(self.layers))):
            att = layer.attention
            q, k, v = att.qkv(layer.attention_norm(x))
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            new += [k, v]
            k_all, v_all = cat_past(past, i, k, v)
            h = x + att.attend(q, k_all, v_all, bias)
            x = h + layer.feed_forward(layer.ffn_norm(h))
        hidden = self.norm(x[:, -1])
        logits = self.acoustic_transformer.semantic_codebook_output(hidden)
        ids = torch.arange(logits.shape[-1])
        masked = (ids == spec.EMPTY_AUDIO) | (ids >= self.semantic_end)
        logits = torch.where(masked[None], torch.tensor(float("-inf")), logits)
        return (hidden, logits.argmax(-1), *new)


class FlowTransformer(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        fm = info.fm
        d = fm.dim
        self.input_projection = nn.Linear(info.n_acoustic_codebook, d, bias=False)
        self.time_projection = nn.Linear(d, d, bias=False)
        self.llm_projection = nn.Linear(info.lm.dim, d, bias=False)
        self.acoustic_codebook_output = nn.Linear(d, info.n_acoustic_codebook, bias=False)
        self.layers = nn.ModuleList(
            Block(d, fm.hidden_dim, fm.norm_eps, Projections(d, fm.n_heads, fm.n_kv_heads, fm.head_dim, fm.use_biases),
                  fm.use_biases)
            for _ in range(fm.n_layers))
        self.norm = RMSNorm(d, fm.norm_eps)
        half = d // 2
        inv = torch.exp(-math.log(10000.0) * torch.arange(half).float() / half)  # vLLM-Omni's TimeEmbedding
        self.register_buffer("inv_freq", inv, persistent=False)


class Velocity(nn.Module):
    acoustic_transformer: FlowTransformer

    """(x [B, n_acoustic], t [B], hidden [B, D], cfg_alpha [B]) -> the guided velocity [B, n_acoustic]."""

    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        self.acoustic_transformer = FlowTransformer(info)

    def forward(self, x: torch.Tensor, t: torch.Tensor, hidden: torch.Tensor,
                cfg_alpha: torch.Tensor) -> torch.Tensor:
        m = self.acoustic_transformer
        b = x.shape[0]
        assert isinstance(m, FlowTransformer)
        emb = t[:, None] * m.inv_freq[None]
        t_proj = m.time_projection(torch.cat((emb.cos(), emb.sin()), dim=-1))
        llm = m.llm_projection(torch.cat([hidden, torch.zeros_like(hidden)], dim=0))
        xx = torch.cat([x, x], dim=0)
        h = torch.stack([m.input_projection(xx), torch.cat([t_proj, t_proj], dim=0), llm], dim=1)  # [2B, 3, D]
        for layer in cast("list[Block[Projections]]", list(m.layers)):
            att = layer.attention
            q, k, v = att.qkv(layer.attention_norm(h))
            h = h + att.attend(q, k, v, None)
            h = h + layer.feed_forward(layer.ffn_norm(h))
        v_all = m.acoustic_codebook_output(m.norm(h)[:, 0])
        a = cfg_alpha[:, None]
        return a * v_all[:b] + (1 - a) * v_all[b:]


class WeightNormConv(nn.Module):
    """A weight-normed conv's parameters as torch's parametrization stores them (dim 0)."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.original0 = nn.Parameter(torch.ones(shape[0], 1, 1))
        self.original1 = nn.Parameter(torch.ones(shape))

    def weight(self) -> torch.Tensor:
        v = self.original1
        return self.original0 * v / v.pow(2).sum(dim=(1, 2), keepdim=True).sqrt()


class ConvHolder(nn.Module):
    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.conv = nn.Module()
        self.conv.parametrizations = nn.Module()  # type: ignore[assignment]
        self.conv.parametrizations.weight = WeightNormConv(shape)  # type: ignore[union-attr]

    def weight(self) -> torch.Tensor:
        return self.conv.parametrizations.weight.weight()  # type: ignore[union-attr,operator,no-any-return]


class CodecTransformer(nn.Module):
    slopes: torch.Tensor

    def __init__(self, info: VoxtralInfo, n_layers: int, window: int) -> None:
        super().__init__()
        c = info.codec
        self.layers = nn.ModuleList(
            Block(c.dim, c.hidden_dim, c.norm_eps,
                  Projections(c.dim, c.n_heads, c.n_kv_heads, c.head_dim, False, c.qk_norm_eps), c.use_biases,
                  c.layer_scale)
            for _ in range(n_layers))
        # in the codec only wo and w2 carry the bias flag
        for layer in cast("list[Block[Projections]]", list(self.layers)):
            if c.use_biases:
                layer.attention.wo = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=True)
        self.window = window
        self.register_buffer("slopes", _alibi_slopes(c.n_heads), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        pos = torch.arange(s)
        rel = pos[None, :] - pos[:, None]  # j - i
        bias = self.slopes[:, None, None] * rel[None].float()
        bias = torch.where(((rel > 0) | (rel < -self.window))[None], torch.tensor(float("-inf")), bias)[None]
        for layer in cast("list[Block[Projections]]", list(self.layers)):
            att = layer.attention
            q, k, v = att.qkv(layer.attention_norm(x))
            r = att.attend(q, k, v, bias)
            h = x + (layer.attention_scale * r if hasattr(layer, "attention_scale") else r)
            r = layer.feed_forward(layer.ffn_norm(h))
            x = h + (layer.ffn_scale * r if hasattr(layer, "ffn_scale") else r)
        return x


def _alibi_slopes(n: int) -> torch.Tensor:
    def power_of_2(m: int) -> list[float]:
        r = 2.0 ** (-8.0 / m)
        return [r**i for i in range(m)]

    if math.log2(n).is_integer():
        return torch.tensor(power_of_2(n), dtype=torch.float32)
    m = 2 ** math.floor(math.log2(n))
    return torch.tensor(power_of_2(m) + power_of_2(2 * m)[::2][: n - m], dtype=torch.float32)


class _Codebook(nn.Module):
    cluster_usage: torch.Tensor
    embedding_sum: torch.Tensor


class Quantizer(nn.Module):
    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        self.semantic_codebook = _Codebook()
        self.semantic_codebook.register_buffer("cluster_usage", torch.ones(info.semantic_codebook_size))
        self.semantic_codebook.register_buffer(
            "embedding_sum", torch.zeros(info.semantic_codebook_size, info.codec.semantic_dim))


class CodecBody(nn.Module):
    quantizer: Quantizer

    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        c = info.codec
        latent = c.semantic_dim + c.acoustic_dim
        self.kinds: list[tuple[str, int, int]] = []
        blocks: list[nn.Module] = []
        for kind, k, stride, window in codec_blocks(info):
            if kind == "transformer":
                blocks.append(CodecTransformer(info, k, window))
                self.kinds.append((kind, 0, 0))
            else:
                blocks.append(ConvHolder((c.dim, latent if kind == "conv" else c.dim, k)))
                self.kinds.append((kind, k, stride))
        self.decoder_blocks = nn.ModuleList(blocks)
        self.quantizer = Quantizer(info)
        self.output_proj = ConvHolder((c.patch_size, c.dim, c.patch_kernel))


class CodecDecoder(nn.Module):
    audio_tokenizer: CodecBody

    """codes [B, 1 + n_acoustic, T] (the semantic code first; codebook ids without the +2 offset) ->
    audio [B, T * samples_per_frame]."""

    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__()
        self.audio_tokenizer = CodecBody(info)
        self.levels = info.acoustic_codebook_size
        self.patch = info.codec.patch_size
        self.kernel = info.codec.patch_kernel

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        body = self.audio_tokenizer
        sc = cast("_Codebook", body.quantizer.semantic_codebook)
        table = sc.embedding_sum / sc.cluster_usage.clamp(min=1e-5)[:, None]
        semantic = F.embedding(codes[:, 0], table).transpose(1, 2)  # [B, sdim, T]
        acoustic = codes[:, 1:].float() * 2 / (self.levels - 1) - 1
        x = torch.cat([semantic, acoustic], dim=1)  # [B, latent, T]
        for (kind, k, stride), block in zip(body.kinds, body.decoder_blocks, strict=True):
            if kind == "conv":
                x = F.conv1d(F.pad(x, (k - 1, 0), mode="replicate"), cast(ConvHolder, block).weight())
            elif kind == "convT":
                y = F.conv_transpose1d(x, cast(ConvHolder, block).weight(), stride=stride)
                x = y[..., : y.shape[-1] - (k - stride)]
            else:
                x = block(x.transpose(1, 2)).transpose(1, 2)
        x = F.conv1d(F.pad(x, (self.kernel - 1, 0), mode="reflect"), cast(ConvHolder, body.output_proj).weight())
        return x.transpose(1, 2).reshape(x.shape[0], -1)  # [B, patch, T'] -> [B, T' * patch]


M = TypeVar("M", bound=nn.Module)


def load(module: M, checkpoint: object) -> M:
    """Every parameter and persistent buffer of `module` from consolidated.safetensors' tensor of the same
    name, as float32 (strict: a name the file lacks is a KeyError)."""
    from pathlib import Path

    from safetensors import safe_open

    from ttscore.runtime.families.voxtral_tts.checkpoint import WEIGHTS

    with safe_open(str(Path(str(checkpoint)) / WEIGHTS), framework="pt") as f:
        state = {name: f.get_tensor(name).to(torch.float32) for name in module.state_dict()}
    module.load_state_dict(state, strict=True)
    module.eval()
    return module


class CodecStream(CodecDecoder):
    """The codec as an exact streaming decoder: (codes [B, 1 + n_acoustic, T], state [B, S]) ->
    (pcm [B, T * samples_per_frame], new_state). A zero state starts an utterance; chunks decoded one
    after another equal one whole `CodecDecoder` decode. The state holds, flattened in `layout` order:
    the frames seen (one float), the first conv's input history (its replicate padding at the start), each
    attention layer's last `window` keys and values (ALiBi needs no positions), each transposed conv's
    overlap carry, and the output conv's input history (reflect padding on the first chunk)."""

    def __init__(self, info: VoxtralInfo) -> None:
        super().__init__(info)
        c = info.codec
        latent = c.semantic_dim + c.acoustic_dim
        self.layout: list[tuple[str, tuple[int, ...]]] = [("frames_seen", (1,))]
        factor = 1
        for j, (kind, k, stride) in enumerate(self.audio_tokenizer.kinds):
            if kind == "conv":
                self.layout.append((f"conv{j}", (latent, k - 1)))
            elif kind == "convT":
                self.layout.append((f"convT{j}", (c.dim, k - stride)))
                factor *= stride
            else:
                block = cast(CodecTransformer, self.audio_tokenizer.decoder_blocks[j])
                for li in range(len(block.layers)):
                    for kv in ("k", "v"):
                        self.layout.append((f"attn{j}.{li}.{kv}", (c.n_kv_heads, block.window, c.head_dim)))
        self.layout.append(("output_proj", (c.dim, c.patch_kernel - 1)))
        self.sizes = [math.prod(shape) for _, shape in self.layout]

    @property
    def state_size(self) -> int:
        return sum(self.sizes)

    def forward(self, codes: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        body = self.audio_tokenizer
        b, t = codes.shape[0], codes.shape[2]
        parts = list(torch.split(state, self.sizes, dim=1))
        pieces = {name: p.reshape(b, *shape) for (name, shape), p in zip(self.layout, parts, strict=True)}
        seen = pieces["frames_seen"][:, 0]  # [B]
        first = (seen == 0)[:, None, None]
        new: dict[str, torch.Tensor] = {"frames_seen": torch.clamp(seen + t, max=1e6)[:, None]}
        sc = cast("_Codebook", body.quantizer.semantic_codebook)
        table = sc.embedding_sum / sc.cluster_usage.clamp(min=1e-5)[:, None]
        semantic = F.embedding(codes[:, 0], table).transpose(1, 2)
        acoustic = codes[:, 1:].float() * 2 / (self.levels - 1) - 1
        x = torch.cat([semantic, acoustic], dim=1)
        factor = 1
        for j, ((kind, k, stride), block) in enumerate(zip(body.kinds, body.decoder_blocks, strict=True)):
            if kind == "conv":
                hist = torch.where(first, x[..., :1].expand(-1, -1, k - 1), pieces[f"conv{j}"])
                xp = torch.cat([hist, x], dim=-1)
                new[f"conv{j}"] = xp[..., xp.shape[-1] - (k - 1):]
                x = F.conv1d(xp, cast(ConvHolder, block).weight())
            elif kind == "convT":
                y = F.conv_transpose1d(x, cast(ConvHolder, block).weight(), stride=stride)
                n = x.shape[-1] * stride
                carry = torch.where(first, torch.zeros_like(pieces[f"convT{j}"]), pieces[f"convT{j}"])
                y = torch.cat([y[..., : k - stride] + carry, y[..., k - stride:]], dim=-1)
                new[f"convT{j}"] = y[..., n:]
                x = y[..., :n]
                factor *= stride
            else:
                x = self._attend_stream(cast(CodecTransformer, block), j, x, seen * factor, pieces, new)
        kp = self.kernel
        hist = pieces["output_proj"]
        xp = torch.where(first, F.pad(x, (kp - 1, 0), mode="reflect"), torch.cat([hist, x], dim=-1))
        new["output_proj"] = xp[..., xp.shape[-1] - (kp - 1):]
        x = F.conv1d(xp, cast(ConvHolder, body.output_proj).weight())
        pcm = x.transpose(1, 2).reshape(b, -1)
        return pcm, torch.cat([new[name].reshape(b, -1) for name, _ in self.layout], dim=1)

    @staticmethod
    def _attend_stream(block: CodecTransformer, j: int, x: torch.Tensor, processed: torch.Tensor,
                       pieces: dict[str, torch.Tensor], new: dict[str, torch.Tensor]) -> torch.Tensor:
        h = x.transpose(1, 2)  # [B, L, D]
        n = h.shape[1]
        w = block.window
        kk = torch.arange(w + n)
        rel = kk[None, :] - (w + torch.arange(n))[:, None]  # key - query, cache slots first
        alibi = block.slopes[None, :, None, None] * rel[None, None].float()  # [1, H, L, W + L]
        stale = kk[None, :] < (w - processed)[:, None]  # [B, W + L]: cache slots never filled
        masked = (rel > 0)[None, None] | (rel < -w)[None, None] | stale[:, None, None, :]
        bias = torch.where(masked, torch.tensor(float("-inf")), alibi)
        for li, layer in enumerate(cast("list[Block[Projections]]", list(block.layers))):
            att = layer.attention
            q, k, v = att.qkv(layer.attention_norm(h))
            k_all = torch.cat([pieces[f"attn{j}.{li}.k"], k], dim=2)
            v_all = torch.cat([pieces[f"attn{j}.{li}.v"], v], dim=2)
            new[f"attn{j}.{li}.k"] = k_all[:, :, k_all.shape[2] - w:]
            new[f"attn{j}.{li}.v"] = v_all[:, :, v_all.shape[2] - w:]
            r = att.attend(q, k_all, v_all, bias)
            hh = h + (layer.attention_scale * r if hasattr(layer, "attention_scale") else r)
            r = layer.feed_forward(layer.ffn_norm(hh))
            h = hh + (layer.ffn_scale * r if hasattr(layer, "ffn_scale") else r)
        return h.transpose(1, 2)
