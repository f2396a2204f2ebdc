"""CosyVoice3's computations in the project's own torch (float32, ONNX-traceable), parameters loaded from
the checkpoint's `.pt` files by their names (weight norm folded at load: w = g v / |v|).

- `LMStep`: Qwen2 over explicit past K/V (prefill and decode, ragged rows through `attention_mask`):
  rotate-half RoPE, q/k/v biases, grouped K/V, SiLU MLP, final RMSNorm, then `llm_decoder` -> logits over
  the speech rows. The text and speech embeddings are tables (the runtime builds `inputs_embeds`).
- `FlowCond`: token embedding (zeroed past `token_len`) -> PreLookaheadLayer (conv over the token and the
  3 after it, zeros after the end; leaky ReLU; causal conv k=3; residual) -> each token twice (2 mel
  frames per token); the speaker embedding L2-normalised through `spk_embed_affine_layer`.
- `FlowVelocity`: the DiT estimator (sinusoidal time MLP; input projection of [x, cond, mu, spks] plus two
  causal grouped convs with Mish; blocks of AdaLayerNormZero, attention with x-transformers' interleaved
  rotary embedding on the first `dim_head` channels of q and k, the key-padding mask and the chunk mask,
  tanh-GELU feed-forward; final AdaLayerNorm and projection), run on the conditional and unconditional
  (mu, spks and cond zeroed) rows at once: v = (1 + r) v_c - r v_u with the yaml's inference_cfg_rate r;
  over the explicit K/V of earlier frames (none for a whole utterance; a stream's past hops), returning the
  frames' own K/V.
- `HiFT`: the causal HiFT over a whole utterance (finalize=True): f0 predictor (causal convs, the first
  looking 3 frames right), the neural source (harmonics' per-frame phase increments summed, the sines held
  per frame as vLLM-Omni's causal SineGen2 holds them, the fixed sine-noise table as the `sine_noise`
  input), STFT as a conv with a Hann-windowed DFT basis, conv_pre looking 4 frames right, nearest
  upsampling + causal convs, causal downsampling of the source, Snake resblocks, and the inverse STFT as
  a transposed conv (overlap-add) divided by the window envelope.
The Euler loop, sampling and the tables run in numpy (ttscore.runtime.families.cosyvoice3).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from export.blocks import GatedMLP, RMSNorm, apply_rope, cat_past, default_inv_freq
from ttscore.runtime.checkpoint_kit import load_torch_state
from ttscore.runtime.families.cosyvoice3.checkpoint import FLOW, HIFT, LLM, CosyVoice3Info

NEG = -1e9



class Attn(nn.Module):
    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    o_proj: nn.Linear
    heads: int
    kv: int
    hd: int

    def __init__(self, d: int, heads: int, kv: int, hd: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(d, heads * hd)
        self.k_proj = nn.Linear(d, kv * hd)
        self.v_proj = nn.Linear(d, kv * hd)
        self.o_proj = nn.Linear(heads * hd, d, bias=False)
        self.heads, self.kv, self.hd = heads, kv, hd


class Layer(nn.Module):
    self_attn: Attn
    mlp: GatedMLP
    input_layernorm: RMSNorm
    post_attention_layernorm: RMSNorm

    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        lm = info.lm
        self.self_attn = Attn(lm.hidden, lm.heads, lm.kv_heads, lm.head_dim)
        self.mlp = GatedMLP(lm.hidden, lm.intermediate)
        self.input_layernorm = RMSNorm(lm.hidden, lm.rms_eps)
        self.post_attention_layernorm = RMSNorm(lm.hidden, lm.rms_eps)


class LMStep(nn.Module):
    """(inputs_embeds [B, T, D], attention_mask [B, P + T], position_ids [B, T], past K/V) ->
    logits [B, speech_rows] (last position), new K/V [B, KV, T, hd] (rotated)."""

    inv_freq: torch.Tensor

    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        lm = info.lm
        self.layers = nn.ModuleList(Layer(info) for _ in range(lm.layers))
        self.norm = RMSNorm(lm.hidden, lm.rms_eps)
        self.llm_decoder = nn.Linear(lm.hidden, lm.speech_rows, bias=False)
        hd = lm.head_dim
        self.register_buffer("inv_freq", default_inv_freq(lm.rope_theta, hd), persistent=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, _ = x.shape
        freqs = pos[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        p = past[0].shape[2]
        total = p + t
        # key j visible to new position i: valid slot and j <= p + i
        causal = torch.arange(total)[None, :] <= (p + torch.arange(t))[:, None]
        ok = causal[None, None] & (mask[:, None, None, :] > 0)
        bias = torch.where(ok, torch.zeros(()), torch.full((), NEG))
        new: list[torch.Tensor] = []
        h = x
        for i, layer in enumerate(cast("list[Layer]", list(self.layers))):
            a = layer.self_attn
            n = layer.input_layernorm(h)
            q = a.q_proj(n).view(b, t, a.heads, a.hd).transpose(1, 2)
            k = a.k_proj(n).view(b, t, a.kv, a.hd).transpose(1, 2)
            v = a.v_proj(n).view(b, t, a.kv, a.hd).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            new += [k, v]
            kk, vv = cat_past(past, i, k, v, a.heads // a.kv)
            s = torch.matmul(q, kk.transpose(-1, -2)) / math.sqrt(a.hd) + bias
            o = torch.matmul(s.softmax(-1), vv).transpose(1, 2).reshape(b, t, a.heads * a.hd)
            h = h + a.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        last = self.norm(h[:, -1])
        return (self.llm_decoder(last), *new)


# --- flow -----------------------------------------------------------------------------------------
class PreLookahead(nn.Module):
    def __init__(self, mel: int, channels: int, lookahead: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mel, channels, lookahead + 1)
        self.conv2 = nn.Conv1d(channels, mel, 3)
        self.lookahead = lookahead

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, mel]
        y = F.pad(x.transpose(1, 2), (0, self.lookahead))
        y = F.leaky_relu(self.conv1(y))
        y = self.conv2(F.pad(y, (2, 0)))
        return y.transpose(1, 2) + x


class FlowCond(nn.Module):
    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        f = info.flow
        self.input_embedding = nn.Embedding(f.vocab, f.mel)
        self.spk_embed_affine_layer = nn.Linear(f.spk_embed_dim, f.mel)
        self.pre_lookahead_layer = PreLookahead(f.mel, f.lookahead_channels, f.pre_lookahead_len)
        self.ratio = f.token_mel_ratio

    def forward(self, tokens: torch.Tensor, token_len: torch.Tensor, embedding: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        valid = (torch.arange(tokens.shape[1])[None, :] < token_len[:, None]).float()[..., None]
        x = self.input_embedding(torch.clamp(tokens, min=0)) * valid
        h = self.pre_lookahead_layer(x)
        h = h.repeat_interleave(self.ratio, dim=1)
        e = embedding / torch.clamp(embedding.norm(dim=1, keepdim=True), min=1e-12)
        return h.transpose(1, 2), self.spk_embed_affine_layer(e)


class TimeMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.time_mlp = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = 128
        freqs = torch.exp(torch.arange(half).float() * -(math.log(10000) / (half - 1)))
        arg = 1000.0 * t[:, None] * freqs[None, :]
        return self.time_mlp(torch.cat([arg.sin(), arg.cos()], dim=-1))


class ConvPos(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, 31, groups=16), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, 31, groups=16), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, N, dim]
        y = self.conv1(F.pad(x.transpose(1, 2), (30, 0)))
        y = self.conv2(F.pad(y, (30, 0)))
        return y.transpose(1, 2)


class InputEmbed(nn.Module):
    def __init__(self, mel: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(4 * mel, dim)
        self.conv_pos_embed = ConvPos(dim)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor) -> torch.Tensor:
        s = spks[:, None, :].expand(-1, x.shape[1], -1)
        h = self.proj(torch.cat([x, cond, mu, s], dim=-1))
        return self.conv_pos_embed(h) + h


class AdaNorm(nn.Module):
    linear: nn.Linear

    def __init__(self, dim: int, n: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, n * dim)
        self.n = n


class DiTAttention(nn.Module):
    to_q: nn.Linear
    to_k: nn.Linear
    to_v: nn.Linear
    to_out: nn.Sequential
    heads: int
    dim_head: int

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.Sequential(nn.Linear(inner, dim))
        self.heads, self.dim_head = heads, dim_head


class FF(nn.Module):
    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, dim * mult), nn.GELU(approximate="tanh")),
                                nn.Identity(), nn.Linear(dim * mult, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    attn_norm: AdaNorm
    attn: DiTAttention
    ff: FF

    def __init__(self, dim: int, heads: int, dim_head: int, mult: int) -> None:
        super().__init__()
        self.attn_norm = AdaNorm(dim, 6)
        self.attn = DiTAttention(dim, heads, dim_head)
        self.ff = FF(dim, mult)


def _ln(x: torch.Tensor, dim: int) -> torch.Tensor:
    return F.layer_norm(x, (dim,), eps=1e-6)


def _rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """x-transformers' rotate_half: pairs (2i, 2i + 1) -> (-x_{2i+1}, x_{2i})."""
    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).reshape(x.shape)


class Estimator(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        f = info.flow
        self.time_embed = TimeMLP(f.dim)
        self.input_embed = InputEmbed(f.mel, f.dim)
        self.rotary_embed = nn.Module()
        self.rotary_embed.register_buffer("inv_freq", torch.zeros(f.dim_head // 2))
        self.transformer_blocks = nn.ModuleList(DiTBlock(f.dim, f.heads, f.dim_head, f.ff_mult) for _ in range(f.depth))
        self.norm_out = AdaNorm(f.dim, 2)
        self.proj_out = nn.Linear(f.dim, f.mel)
        self.dim = f.dim

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, spks: torch.Tensor,
                cond: torch.Tensor, chunk: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x, mu, cond [B, C + N, mel] (C frames of left context for the position convs, then N frames); mask
        [B, N] (1 = valid frame); t [B]; spks [B, mel]; chunk [B]; `past`: per block the rotated key and value
        [P, B, heads, dim_head] of the P frames before (frame first; all valid; P may be 0) -> (velocity of the N
        frames [B, N, mel], their keys and values [N, B, heads, dim_head]). The N frames are at positions
        P..P+N-1. Each frame attends to the past and to the frames its chunk mask allows: under the chunk mask
        the same values as the whole sequence's rows, since past frames never see later ones (and the chunk mask
        never hides a past frame from a later one, so the past needs no mask)."""
        b = x.shape[0]
        temb = self.time_embed(t)
        h = self.input_embed(x, cond, mu, spks)
        p = past[0].shape[0]
        n = mask.shape[1]
        h = h[:, h.shape[1] - n:]
        pos = p + torch.arange(n)  # [N]
        inv = cast(torch.Tensor, self.rotary_embed.inv_freq)
        fr = pos.float()[:, None] * inv[None, :]
        fr = torch.stack((fr, fr), dim=-1).reshape(n, -1)  # [N, dim_head] interleaved
        cos, sin = fr.cos(), fr.sin()
        rot = fr.shape[-1]
        # among the N frames: key j seen by frame i iff j < (i // chunk + 1) * chunk and j is a valid frame
        seen = pos[None, None, :] < ((pos[None, :, None] // chunk[:, None, None]) + 1) * chunk[:, None, None]  # [B, N, N]
        bias = torch.where(seen & (mask[:, None, :] > 0), torch.zeros(()), torch.full((), float("-inf")))[:, None]
        valid = (mask > 0)[:, :, None]
        new: list[torch.Tensor] = []
        for i, blk in enumerate(cast("list[DiTBlock]", list(self.transformer_blocks))):
            e = blk.attn_norm.linear(F.silu(temb))
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = e.chunk(6, dim=1)
            nrm = _ln(h, self.dim) * (1 + scale_msa[:, None]) + shift_msa[:, None]
            a = blk.attn
            q, k, v = a.to_q(nrm), a.to_k(nrm), a.to_v(nrm)
            q = torch.cat([q[..., :rot] * cos + _rotate_pairs(q[..., :rot]) * sin, q[..., rot:]], dim=-1)
            k = torch.cat([k[..., :rot] * cos + _rotate_pairs(k[..., :rot]) * sin, k[..., rot:]], dim=-1)
            # the scale on q (1/8 at the released dim_head 64: exact) instead of on the [N, P + N] scores
            q = q.view(b, n, a.heads, a.dim_head).transpose(1, 2) * (1.0 / math.sqrt(a.dim_head))
            k = k.view(b, n, a.heads, a.dim_head)
            v = v.view(b, n, a.heads, a.dim_head)
            new += [k.transpose(0, 1), v.transpose(0, 1)]
            k, v = k.transpose(1, 2), v.transpose(1, 2)
            # the past [P, B, heads, dh] read in place (the permutes fold into the MatMuls), scores over the past
            # and over the new keys, one softmax, the two value blocks summed: nothing of size P is copied or
            # masked but the scores and their softmax
            kp, vp = past[2 * i].permute(1, 2, 3, 0), past[2 * i + 1].permute(1, 2, 0, 3)
            s = torch.cat([torch.matmul(q, kp), torch.matmul(q, k.transpose(-1, -2)) + bias], dim=-1)
            w = s.softmax(-1)
            o = torch.matmul(w[..., :p], vp) + torch.matmul(w[..., p:], v)
            o = a.to_out(o.transpose(1, 2).reshape(b, n, -1)) * valid
            h = h + gate_msa[:, None] * o
            ffn = _ln(h, self.dim) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
            h = h + gate_mlp[:, None] * blk.ff(ffn)
        e = self.norm_out.linear(F.silu(temb))
        scale, shift = e.chunk(2, dim=1)
        h = _ln(h, self.dim) * (1 + scale)[:, None] + shift[:, None]
        return self.proj_out(h), new


class FlowDecoder(nn.Module):
    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        self.estimator = Estimator(info)


class FlowVelocity(nn.Module):
    """flow_velocity (ttscore.contract.cosyvoice3.flow_velocity_spec): (x, mask, mu, t, spks, cond, chunk,
    past K/V) -> (the CFG-combined velocity [B, mel, N], per block the frames' key and value)."""

    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        self.decoder = FlowDecoder(info)
        self.cfg = info.flow.cfg_rate

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, spks: torch.Tensor,
                cond: torch.Tensor, chunk: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The estimator on the conditional and unconditional (mu, spks and cond zeroed) rows at once."""
        b = x.shape[0]
        xt, mut, ct = x.transpose(1, 2), mu.transpose(1, 2), cond.transpose(1, 2)
        v, new = self.decoder.estimator(torch.cat([xt, xt]), torch.cat([mask, mask]),
                                        torch.cat([mut, torch.zeros_like(mut)]), torch.cat([t, t]),
                                        torch.cat([spks, torch.zeros_like(spks)]), torch.cat([ct, torch.zeros_like(ct)]),
                                        torch.cat([chunk, chunk]), *past)
        vc, vu = v[:b], v[b:]
        return (((1.0 + self.cfg) * vc - self.cfg * vu).transpose(1, 2), *new)


# --- HiFT -----------------------------------------------------------------------------------------
class Conv(nn.Module):
    """A conv with its (weight-norm folded) weight; `left`/`right` zero padding, optional nearest
    upsampling before and stride."""

    def __init__(self, cin: int, cout: int, k: int, dilation: int = 1, stride: int = 1, left: int = 0,
                 right: int = 0, upsample: int = 1) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cout, cin, k))
        self.bias = nn.Parameter(torch.zeros(cout))
        self.dilation, self.stride, self.left, self.right, self.upsample = dilation, stride, left, right, upsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.upsample > 1:
            x = x.repeat_interleave(self.upsample, dim=2)
        x = F.pad(x, (self.left, self.right))
        return F.conv1d(x, self.weight, self.bias, stride=self.stride, dilation=self.dilation)


class Snake(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha[None, :, None]
        return x + (1.0 / (a + 1e-9)) * torch.pow(torch.sin(x * a), 2)


class ResBlock(nn.Module):
    def __init__(self, ch: int, k: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(Conv(ch, ch, k, dilation=d, left=(k - 1) * d) for d in dilations)
        self.convs2 = nn.ModuleList(Conv(ch, ch, k, left=k - 1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(ch) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(ch) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, self.activations1, self.activations2, strict=True):
            x = c2(a2(c1(a1(x)))) + x
        return x


class F0Predictor(nn.Module):
    def __init__(self, mel: int, c: int) -> None:
        super().__init__()
        convs = [Conv(mel, c, 4, right=3)] + [Conv(c, c, 3, left=2) for _ in range(4)]
        self.condnet = nn.ModuleDict({str(2 * i): m for i, m in enumerate(convs)})
        self.classifier = nn.Linear(c, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:  # [B, mel, F] -> [B, F]
        x = mel
        for i in range(5):
            x = F.elu(self.condnet[str(2 * i)](x))
        return torch.abs(self.classifier(x.transpose(1, 2)).squeeze(-1))


class Source(nn.Module):
    def __init__(self, harmonics: int) -> None:
        super().__init__()
        self.l_linear = nn.Linear(harmonics + 1, 1)


class HiFT(nn.Module):
    """(mel [B, mel, F], sine_noise [B, F * spf, H + 1], phase0 [B, H + 1], skip [B]) -> (pcm [B, F * spf]
    (finalize=True), the source's cumulative phase increments [B, F, H + 1])."""

    window: torch.Tensor
    stft_basis: torch.Tensor
    istft_basis: torch.Tensor

    def __init__(self, info: CosyVoice3Info) -> None:
        super().__init__()
        h = info.hift
        self.h = h
        base, n_fft = h.base_channels, h.n_fft
        self.m_source = Source(h.nb_harmonics)
        self.conv_pre = Conv(h.in_channels, base, h.conv_pre_look_right + 1, right=h.conv_pre_look_right)
        self.ups = nn.ModuleList(Conv(base // 2 ** i, base // 2 ** (i + 1), k, left=k - 1, upsample=u)
                                 for i, (u, k) in enumerate(zip(h.upsample_rates, h.upsample_kernel_sizes, strict=True)))
        rates = [1, *list(h.upsample_rates[::-1][:-1])]
        cum = [math.prod(rates[: j + 1]) for j in range(len(rates))][::-1]
        downs: list[nn.Module] = []
        sres: list[nn.Module] = []
        for i, (u, k, d) in enumerate(zip(cum, h.source_resblock_kernel_sizes, h.source_resblock_dilation_sizes, strict=False)):
            ch = base // 2 ** (i + 1)
            downs.append(Conv(n_fft + 2, ch, 1) if u == 1 else Conv(n_fft + 2, ch, 2 * u, stride=u, left=u - 1))
            sres.append(ResBlock(ch, k, d))
        self.source_downs = nn.ModuleList(downs)
        self.source_resblocks = nn.ModuleList(sres)
        self.resblocks = nn.ModuleList(
            ResBlock(base // 2 ** (i + 1), k, d) for i in range(len(h.upsample_rates))
            for k, d in zip(h.resblock_kernel_sizes, h.resblock_dilation_sizes, strict=True))
        self.conv_post = Conv(base // 2 ** len(h.upsample_rates), n_fft + 2, 7, left=6)
        self.f0_predictor = F0Predictor(h.in_channels, h.f0_cond_channels)
        n = torch.arange(n_fft, dtype=torch.float64)
        window = 0.5 - 0.5 * torch.cos(2 * math.pi * n / n_fft)  # periodic Hann (scipy get_window fftbins=True)
        bins = n_fft // 2 + 1
        kk = torch.arange(bins, dtype=torch.float64)
        ang = 2 * math.pi * kk[:, None] * n[None, :] / n_fft  # [bins, n_fft]
        self.register_buffer("window", window.float(), persistent=False)
        self.register_buffer("stft_basis", torch.cat([window * torch.cos(ang), -window * torch.sin(ang)])[:, None].float(),
                             persistent=False)
        coef = torch.full((bins,), 2.0, dtype=torch.float64)
        coef[0] = 1.0
        coef[-1] = 1.0
        real = coef[:, None] * torch.cos(ang) / n_fft
        imag = -coef[:, None] * torch.sin(ang) / n_fft
        imag[0] = 0.0
        imag[-1] = 0.0
        self.register_buffer("istft_basis", (torch.cat([real, imag]) * window[None, :])[:, None].float(), persistent=False)

    def source(self, f0: torch.Tensor, sine_noise: torch.Tensor, phase0: torch.Tensor, skip: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """f0 [B, F] -> (the merged excitation [B, 1, F * spf], the cumulative phase increments [B, F, H+1]).

        The increments are summed in order from `phase0` (the sum before frame `skip`; frames before `skip`
        add nothing): a window seeded with a whole run's sum before its frame `skip` continues that run's
        float32 running sum exactly."""
        h = self.h
        spf = h.samples_per_frame
        harm = torch.arange(1, h.nb_harmonics + 2).float()
        rad = torch.remainder(f0[:, :, None] * harm[None, None, :] / float(h.sampling_rate), 1.0)  # [B, F, H+1]
        rad = torch.where(torch.arange(f0.shape[1])[None, :, None] >= skip[:, None, None], rad, torch.zeros(()))
        cum = torch.cumsum(torch.cat([phase0[:, None], rad], dim=1), dim=1)[:, 1:]
        phase = cum * 2 * math.pi
        sines = torch.sin((phase * float(spf)).repeat_interleave(spf, dim=1)) * h.nsf_alpha  # [B, L, H+1]
        uv = (f0 > h.nsf_voiced_threshold).float().repeat_interleave(spf, dim=1)[:, :, None]
        amp = uv * h.nsf_sigma + (1 - uv) * h.nsf_alpha / 3
        waves = sines * uv + amp * sine_noise
        return torch.tanh(self.m_source.l_linear(waves)).transpose(1, 2), cum

    def forward(self, mel: torch.Tensor, sine_noise: torch.Tensor, phase0: torch.Tensor, skip: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.h
        n_fft, hop = h.n_fft, h.hop_len
        f0 = self.f0_predictor(mel)
        s, cum = self.source(f0, sine_noise, phase0, skip)  # [B, 1, L]
        spec = F.conv1d(F.pad(s, (n_fft // 2, n_fft // 2), mode="reflect"), self.stft_basis, stride=hop)
        x = self.conv_pre(mel)
        nk = len(h.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, h.lrelu_slope))
            if i == len(self.ups) - 1:
                x = torch.cat([x[:, :, 1:2], x], dim=2)  # ReflectionPad1d((1, 0))
            x = x + self.source_resblocks[i](self.source_downs[i](spec))
            xs = self.resblocks[i * nk](x)
            for j in range(1, nk):
                xs = xs + self.resblocks[i * nk + j](x)
            x = xs / nk
        x = self.conv_post(F.leaky_relu(x))
        bins = n_fft // 2 + 1
        mag = torch.clamp(torch.exp(x[:, :bins]), max=1e2)
        ph = torch.sin(x[:, bins:])
        coeffs = torch.cat([mag * torch.cos(ph), mag * torch.sin(ph)], dim=1)
        frames = coeffs.shape[2]
        wav = F.conv_transpose1d(coeffs, self.istft_basis, stride=hop)  # [B, 1, (frames - 1) hop + n_fft]
        env = F.conv_transpose1d(torch.ones(1, 1, frames), (self.window ** 2)[None, None], stride=hop)
        wav = (wav / env)[:, 0, n_fft // 2: n_fft // 2 + (frames - 1) * hop]
        return torch.clamp(wav, -h.audio_limit, h.audio_limit), cum


# --- loading ----------------------------------------------------------------------------------------
def _fold_weight_norm(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in state.items():
        if k.endswith(".parametrizations.weight.original0"):
            base = k[: -len(".parametrizations.weight.original0")]
            w = state[base + ".parametrizations.weight.original1"].float()
            g = v.float()
            norm = w.reshape(w.shape[0], -1).norm(dim=1).reshape(g.shape)
            out[base + ".weight"] = g * w / norm
        elif not k.endswith(".parametrizations.weight.original1"):
            out[k] = v.float()
    return out


def _hift_name(name: str) -> str:
    from ttscore.runtime.families.cosyvoice3.checkpoint import _hift_name as rename

    return rename(name)


def load_state(src: Path, file: str) -> dict[str, Any]:
    if file == HIFT:
        return _fold_weight_norm(load_torch_state(Path(src) / HIFT, _hift_name))
    return {k: v.float() for k, v in load_torch_state(Path(src) / file).items()}


def load(module: nn.Module, src: Path) -> nn.Module:
    """`module`'s parameters from the checkpoint file that holds them (strict)."""
    if isinstance(module, LMStep):
        state = {k.removeprefix("llm.model.model."): v for k, v in load_state(src, LLM).items()
                 if k.startswith("llm.model.model.") and "embed_tokens" not in k}
        state["llm_decoder.weight"] = load_torch_state(Path(src) / LLM)["llm_decoder.weight"].float()
    elif isinstance(module, FlowCond):
        state = {k: v for k, v in load_state(src, FLOW).items() if not k.startswith("decoder.")}
    elif isinstance(module, FlowVelocity):
        state = {k: v for k, v in load_state(src, FLOW).items() if k.startswith("decoder.")}
    elif isinstance(module, HiFT):
        state = {k.replace("condnet.", "condnet."): v for k, v in load_state(src, HIFT).items()}
    else:
        raise TypeError(type(module).__name__)
    module.load_state_dict(state, strict=True)
    return module.eval()
