"""MOSS-Audio-Tokenizer-Nano as two exact streaming graphs (ttscore.contract.moss_tts_nano.codec): the decoder
(codes -> mono pcm, the family's vocoder) and the encoder (mono 48 kHz reference -> codes), each a torch module
written from the codec's math with every transformer layer's K/V window in an explicit flat state, traced
through export/tracing.py and validated chunk by chunk against one whole run of the same modules.

The math (the remote code's, as mlx-audio 0.6.2 and vLLM-Omni 0.30.0 implement it): the stereo stream is
interleaved (L R L R ...) into one channel; `PatchedPretransform` folds `patch` consecutive samples into
channels (encoder) or unfolds them (decoder); a projected transformer is input_proj -> pre-norm layers
(LayerNorm, causal attention over a sliding window of `context` positions with interleaved-pair RoPE, exact
GELU MLP, LayerScale on both branches) -> output_proj; the quantizer is a residual LFQ (weight-normalised 1x1
projections, L2-normalised nearest codeword). A layer's window is `round(rate * context_duration)` positions
at its rate; a query at position p sees keys p - context + 1 .. p, so a stream keeps the last context - 1 keys
and values of each layer: exact for any chunk length (vLLM-Omni's ring cache of `context` slots drops the
oldest keys of a multi-position chunk's early queries once the window is full; mlx-audio keeps context - 1,
as here).

`export_codec` is what the family's export calls: both graphs into the export folder, their manifest pieces
back (graph specs, validation reports, the vocoder state, the codec's own manifest field).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ttscore.contract.errors import ExportError
from ttscore.contract.graphs import GraphSpec
from ttscore.contract.moss_tts_nano import codec as spec

logger = logging.getLogger(__name__)

PCM_TOLERANCE = 1e-4  # graph vs torch, chunked vs whole (fp32 reordering only)
LAYER_MATMULS = r"/layers\.\d+/"  # the decoder's transformer-layer nodes (Transformer.layers), by traced name
CODE_TOLERANCE = 0.0


# --- the config, checked -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One module of a side: a patch reshape (`patch` > 0) or a projected transformer (`prefix` set)."""

    patch: int = 0
    prefix: str = ""
    d_model: int = 0
    heads: int = 0
    layers: int = 0
    context: int = 0  # attention window in positions
    per_frame: int = 0  # positions of this stage per codec frame
    max_period: float = 10000.0
    layer_scale: bool = True

    @property
    def window(self) -> int:  # keys and values kept per layer between calls
        return self.context - 1

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


@dataclass(frozen=True)
class CodecDims:
    sample_rate: int
    channels: int
    samples_per_frame: int  # per channel
    num_quantizers: int
    codebook_size: int
    encoder: tuple[Stage, ...]
    decoder: tuple[Stage, ...]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)


def _stages(side: str, modules: Sequence[Mapping[str, Any]], rate: float, frame_rate: float, default_ctx: float,
            down: bool) -> tuple[tuple[Stage, ...], float]:
    out: list[Stage] = []
    for i, m in enumerate(modules):
        kind = m.get("module_type")
        if kind == "PatchedPretransform":
            p = int(m["patch_size"])
            out.append(Stage(patch=p))
            rate = rate / p if down else rate * p
            continue
        if kind != "Transformer":
            raise ExportError(f"codec {side}.{i}: unsupported module_type {kind!r}")
        for key, want in (("causal", True), ("norm", "layer_norm"), ("positional_embedding", "rope"),
                          ("gating", "none")):
            if m.get(key, want) != want:
                raise ExportError(f"codec {side}.{i}: {key}={m.get(key)!r} is not supported (only {want!r})")
        context = round(rate * float(m.get("context_duration", default_ctx)))
        per_frame = rate / frame_rate
        if context < 2 or per_frame != int(per_frame):
            raise ExportError(f"codec {side}.{i}: window {context} positions, {per_frame} positions per frame")
        d, h = int(m["d_model"]), int(m["num_heads"])
        if d % h or (d // h) % 2:
            raise ExportError(f"codec {side}.{i}: d_model {d} / {h} heads needs an even head dimension")
        out.append(Stage(prefix=f"{side}.{i}", d_model=d, heads=h, layers=int(m["num_layers"]), context=context,
                         per_frame=int(per_frame), max_period=float(m.get("max_period", 10000)),
                         layer_scale=m.get("layer_scale") is not None))
    return tuple(out), rate


def codec_dims(config: Mapping[str, Any]) -> CodecDims:
    """The stages of a codec config; ExportError for anything these graphs do not implement."""
    sr, hop = int(config.get("sampling_rate", config.get("sample_rate", 0))), int(config["downsample_rate"])
    ch = int(config.get("number_channels", 1))
    if not config.get("enable_channel_interleave", True) and ch > 1:
        raise ExportError("codec: only the interleaved channel layout is supported")
    q = config["quantizer_kwargs"]
    if str(q.get("quantizer_type", config.get("quantizer_type", "rlfq"))) not in ("rlfq", "random_prefix_rlfq"):
        raise ExportError(f"codec: quantizer {q.get('quantizer_type')!r} is not supported (only rlfq)")
    frame_rate = sr / hop
    ctx = float(config.get("causal_transformer_context_duration", 10.0))
    enc, rate = _stages("encoder", config["encoder_kwargs"], float(sr * ch), frame_rate, ctx, True)
    if abs(rate - frame_rate) > 1e-9:
        raise ExportError(f"codec: the encoder ends at {rate} positions/s, not the frame rate {frame_rate}")
    dec, rate = _stages("decoder", config["decoder_kwargs"], frame_rate, frame_rate, ctx, False)
    if abs(rate - sr * ch) > 1e-6:
        raise ExportError(f"codec: the decoder ends at {rate} positions/s, not {sr * ch}")
    return CodecDims(sr, ch, hop, int(q["num_quantizers"]), int(q["codebook_size"]), enc, dec, dict(config))


def state_layout(stages: Sequence[Stage]) -> list[tuple[str, tuple[int, ...]]]:
    """The flat state's entries in order: key then value of every layer of every transformer stage, each a ring
    [heads, window, head_dim] whose slot p mod window holds position p's (RoPE-rotated) key or value (head-major:
    the decoder gathers each head's filled slots straight into the [B, H, n, hd] its attention multiplies, no
    transpose)."""
    out: list[tuple[str, tuple[int, ...]]] = []
    for s in stages:
        if s.patch:
            continue
        for layer in range(s.layers):
            for kv in ("key", "value"):
                out.append((f"{s.prefix}.layers.{layer}.{kv}", (s.heads, s.window, s.head_dim)))
    return out


def state_size(stages: Sequence[Stage]) -> int:
    return int(sum(np.prod(shape) for _, shape in state_layout(stages)))


# --- modules -------------------------------------------------------------------------------------------


def _t(w: Mapping[str, np.ndarray], name: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(w[name], dtype=np.float32))


def _wn_linear(w: Mapping[str, np.ndarray], prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight-normalised 1x1 conv as (weight [out, in], bias): g * v / ||v|| per output channel."""
    g, v = _t(w, f"{prefix}.parametrizations.weight.original0"), _t(w, f"{prefix}.parametrizations.weight.original1")
    weight = g * v / torch.sqrt(torch.sum(v * v, dim=(1, 2), keepdim=True))
    return weight[:, :, 0].contiguous(), _t(w, f"{prefix}.bias")


def attention_bias(qpos: torch.Tensor, ring_pos: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A stage's additive attention masks, computed once for its layers: for the ring's keys [B, 1, T, W] (a slot
    is seen when written, ring_pos >= 0, and within `context` of the query) and for the chunk's own [B, 1, T, T]
    (causal, within `context`): 0 where seen, the float32 minimum elsewhere. Added to the scores, a masked key's
    weight is exp(min - max) = 0 exactly, as a Where to the minimum gave, but in one broadcast Add per scores tensor
    (ONNX Runtime's Where over [B, H, T, W] scores was 18% of a decoder call)."""
    old_ok = (ring_pos[:, None, :] >= 0) & (qpos[:, :, None] - ring_pos[:, None, :] < context)
    delta = qpos[:, :, None] - qpos[:, None, :]
    new_ok = (delta >= 0) & (delta < context)
    zero, low = torch.zeros((), dtype=torch.float32), torch.full((), torch.finfo(torch.float32).min)
    return torch.where(old_ok, zero, low)[:, None], torch.where(new_ok, zero, low)[:, None]


class Layer(nn.Module):
    freqs: torch.Tensor

    def __init__(self, w: Mapping[str, np.ndarray], p: str, s: Stage) -> None:
        super().__init__()
        d = s.d_model
        self.in_proj = nn.Parameter(_t(w, f"{p}.self_attn.in_projs.0.weight"), requires_grad=False)
        self.out_proj = nn.Parameter(_t(w, f"{p}.self_attn.out_projs.0.weight"), requires_grad=False)
        self.norm1 = nn.LayerNorm(d, eps=1e-5)
        self.norm2 = nn.LayerNorm(d, eps=1e-5)
        with torch.no_grad():
            for i in (1, 2):
                getattr(self, f"norm{i}").weight.copy_(_t(w, f"{p}.norm{i}.weight"))
                getattr(self, f"norm{i}").bias.copy_(_t(w, f"{p}.norm{i}.bias"))
        self.linear1 = nn.Parameter(_t(w, f"{p}.linear1.weight"), requires_grad=False)
        self.linear2 = nn.Parameter(_t(w, f"{p}.linear2.weight"), requires_grad=False)
        ones = torch.ones(d)
        self.scale1 = nn.Parameter(_t(w, f"{p}.layer_scale_1.scale") if s.layer_scale else ones, requires_grad=False)
        self.scale2 = nn.Parameter(_t(w, f"{p}.layer_scale_2.scale") if s.layer_scale else ones.clone(),
                                   requires_grad=False)
        self.heads, self.head_dim = s.heads, s.head_dim
        half = s.head_dim // 2
        freqs = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(s.max_period) * 2.0 / s.head_dim))
        self.register_buffer("freqs", freqs, persistent=False)

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, h, t, d = x.shape
        pairs = x.reshape(b, h, t, d // 2, 2)
        re, im = pairs[..., 0], pairs[..., 1]
        return torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1).reshape(b, h, t, d)

    def forward(self, x: torch.Tensor, qpos: torch.Tensor, bias_old: torch.Tensor, bias_new: torch.Tensor,
                past_k: torch.Tensor, past_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, D] at positions qpos [B, T]; the ring's keys/values [B, H, W, hd], masked by `bias_old` [B, 1,
        T, W] and the chunk's own by `bias_new` [B, 1, T, T] (`attention_bias`). Returns (x, this chunk's keys,
        values [B, H, T, hd], RoPE applied)."""
        b, t, d = x.shape
        h = self.norm1(x)
        qkv = F.linear(h, self.in_proj).reshape(b, t, 3, self.heads, self.head_dim)
        q = qkv[:, :, 0].permute(0, 2, 1, 3)
        k = qkv[:, :, 1].permute(0, 2, 1, 3)
        v = qkv[:, :, 2].permute(0, 2, 1, 3)
        phase = qpos.to(torch.float32)[:, None, :, None] * self.freqs
        cos, sin = torch.cos(phase), torch.sin(phase)
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        # one softmax over [ring, chunk] keys, computed in its two parts (no copy of the ring into a key list)
        qs = q * (self.head_dim ** -0.5)
        s_old = torch.matmul(qs, past_k.permute(0, 1, 3, 2)) + bias_old
        s_new = torch.matmul(qs, k.permute(0, 1, 3, 2)) + bias_new
        top = torch.maximum(s_old.amax(dim=-1, keepdim=True), s_new.amax(dim=-1, keepdim=True))
        e_old, e_new = torch.exp(s_old - top), torch.exp(s_new - top)
        attn = (torch.matmul(e_old, past_v) + torch.matmul(e_new, v)) / (e_old.sum(dim=-1, keepdim=True)
                                                                          + e_new.sum(dim=-1, keepdim=True))
        attn = attn.permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + self.scale1 * F.linear(attn, self.out_proj)
        x = x + self.scale2 * F.linear(F.gelu(F.linear(self.norm2(x), self.linear1)), self.linear2)
        return x, k, v


class Transformer(nn.Module):
    """A projected transformer over [B, C, T] with its layers' K/V windows passed in and out."""

    def __init__(self, w: Mapping[str, np.ndarray], s: Stage, trim: bool = False) -> None:
        super().__init__()
        self.stage = s
        self.trim = trim
        self.input_proj = nn.Parameter(_t(w, f"{s.prefix}.input_proj.weight"), requires_grad=False)
        self.output_proj = nn.Parameter(_t(w, f"{s.prefix}.output_proj.weight"), requires_grad=False)
        self.layers = nn.ModuleList(Layer(w, f"{s.prefix}.transformer.layers.{i}", s) for i in range(s.layers))

    def forward(self, x: torch.Tensor, frame0: torch.Tensor, fetch: Callable[[torch.Tensor | None], list[torch.Tensor]]
                ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """x [B, T, C] -> (y [B, T, C'], each layer's new keys and values [B, H, T, hd], the ring slot [B, T] each
        new position is written to, and which new position each writes: the last one landing on that slot, so
        that positions overwritten within the chunk write the same values as the one that stays). `fetch(slots)`:
        each layer's ring keys and values [B, H, n, hd] at those slots (None: all)."""
        s = self.stage
        x = F.linear(x, self.input_proj)
        t = x.shape[1]
        w = s.window
        start = frame0 * s.per_frame  # [B] this chunk's first position
        steps = torch.arange(t, dtype=torch.int64)
        qpos = start[:, None] + steps[None, :]
        # slot j of the ring holds the latest position p < start with p = j (mod w); < 0: never written
        j = torch.arange(w, dtype=torch.int64)[None, :]
        last = start[:, None] - 1
        ring_pos = last - torch.remainder(last - j, w)
        if self.trim:
            # Before the ring wraps, a row's filled slots are [0, start): attend over the slots some row of the
            # batch has filled (all w once any row has wrapped), not over the whole empty window. The slots left
            # out are masked for every row, so their weights were exact zeros: the same softmax.
            # >= 1 slot (the softmax takes a max over it); a 0-d tensor, not an int, so the trace keeps it dynamic
            used = torch.arange(cast(int, torch.clamp(start.max(), min=1, max=w)), dtype=torch.int64)
            ring_pos = ring_pos.index_select(1, used)
            past = fetch(used)
        else:
            past = fetch(None)
        writer = steps + w * torch.div(torch.flip(steps, [0]), w, rounding_mode="floor")
        slots = torch.remainder(start[:, None] + steps[None, :], w)
        bias_old, bias_new = attention_bias(qpos, ring_pos, s.context)
        new: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, qpos, bias_old, bias_new, past[2 * i], past[2 * i + 1])
            new += [k, v]
        return F.linear(x, self.output_proj), new, slots, writer


# The patches over channels-last x [B, T, C] (the stages run channels-last: a patch then swaps its two innermost
# axes (p, C) or (C, p), which ONNX Runtime's Transpose does ~100x faster than the channels-first form's (p, T)).


def _patch_down(x: torch.Tensor, p: int) -> torch.Tensor:
    """[B, T, C] -> [B, T / p, C * p]: channel c * p + i of position t is channel c of position t * p + i."""
    b, _, c = x.shape
    return x.reshape(b, -1, p, c).permute(0, 1, 3, 2).reshape(b, -1, c * p)


def _patch_up(x: torch.Tensor, p: int) -> torch.Tensor:
    """[B, T, C * p] -> [B, T * p, C], the inverse."""
    b, _, cp = x.shape
    return x.reshape(b, -1, cp // p, p).permute(0, 1, 3, 2).reshape(b, -1, cp // p)


class _Stream(nn.Module):
    """A side's stages with the flat state split and joined."""

    def __init__(self, w: Mapping[str, np.ndarray], stages: Sequence[Stage], trim: bool = False) -> None:
        super().__init__()
        self.stages = tuple(stages)
        # The trimmed side reads and writes its rings in blocks of this many floats (every head dimension a
        # multiple of it), one head's slot being head_dim / row_width consecutive blocks.
        self.row_width = math.gcd(*(s.head_dim for s in stages if not s.patch)) if trim else 0
        self.blocks = nn.ModuleList(Transformer(w, s, trim) for s in stages if not s.patch)
        self.layout = state_layout(stages)
        self.state_size = state_size(stages)
        sizes = [int(np.prod(shape)) for _, shape in self.layout]
        self.state_offsets = [int(o) for o in np.cumsum([0, *sizes[:-1]])]

    def _split(self, state: torch.Tensor) -> list[torch.Tensor]:
        """Every ring whole, [B, H, W, hd]."""
        out, a = [], 0
        for _, (h, w, hd) in self.layout:
            n = w * h * hd
            out.append(state[:, a:a + n].reshape(-1, h, w, hd))
            a += n
        return out

    def _blocks(self, at: int, slots: torch.Tensor) -> torch.Tensor:
        """Ring `at`'s blocks (of `row_width` floats) holding `slots` ([n] or [B, n]), every head's: [.., H, n, hd /
        row_width], counted from the start of a stream's state."""
        _, (h, w, hd) = self.layout[at]
        per = hd // self.row_width
        start = self.state_offsets[at] // self.row_width
        heads = torch.arange(h, dtype=torch.int64)[:, None, None] * (w * per)
        within = torch.arange(per, dtype=torch.int64)
        return start + heads + slots.unsqueeze(-1) * per + within  # [.., H, n, per]

    def _fetch(self, state: torch.Tensor, past: list[torch.Tensor] | None, at: int, n: int,
               rows: torch.Tensor | None) -> Callable[[torch.Tensor | None], list[torch.Tensor]]:
        """Rings at..at+n-1 at some slots, [B, H, n, hd]: gathered as blocks of the flat state (only those slots
        are copied; with `rows`, of those rows of the arena `state`), or from `past`, the split state."""
        def fetch(slots: torch.Tensor | None) -> list[torch.Tensor]:
            if past is not None:
                return past[at:at + n]
            assert slots is not None
            per_row = self.state_size // self.row_width
            b = state.shape[0] if rows is None else rows.shape[0]
            base = torch.arange(b, dtype=torch.int64) * per_row if rows is None else rows * per_row
            blocks = state.reshape(-1, self.row_width)
            out = []
            for i in range(n):
                _, (h, _, hd) = self.layout[at + i]
                where = base[:, None, None, None] + self._blocks(at + i, slots)[None]  # [B, H, n, per]
                out.append(blocks.index_select(0, where.reshape(-1)).reshape(b, h, -1, hd))
            return out
        return fetch

    def run(self, x: torch.Tensor, state: torch.Tensor, frame0: torch.Tensor, down: bool,
            rows: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """The side's stages over x [B, T, C] (channels-last, as it returns it). Without `rows`: (x, the new state), the old one with each layer's new keys
        and values written into their ring slots (one scatter: the state is copied once, not rebuilt). With `rows`
        (a trimmed side; `state` the arena [R, S], `rows` [B] each batch row's): (x, state_index [B, U],
        state_values [B, U, W]), the W-wide blocks (one position's keys or values of one layer) to write in place,
        nothing copied (ttscore.contract.graphs.arena_vocoder_spec)."""
        past = None if self.row_width else self._split(state)
        index: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        blocks = iter(self.blocks)
        at = 0
        b = x.shape[0]
        for s in self.stages:
            if s.patch:
                x = _patch_down(x, s.patch) if down else _patch_up(x, s.patch)
                continue
            n = 2 * s.layers
            x, kv, slots, writer = next(blocks)(x, frame0, self._fetch(state, past, at, n, rows))
            if rows is not None:
                for i, t in enumerate(kv):  # [B, H, T, hd] -> blocks [B, H, T, per]
                    index.append(self._blocks(at + i, slots[:, None, :]).reshape(b, -1))
                    values.append(t.index_select(2, writer).reshape(b, -1, self.row_width))
                at += n
                continue
            heads = torch.arange(s.heads, dtype=torch.int64)[None, :, None, None]
            dims = torch.arange(s.head_dim, dtype=torch.int64)[None, None, None, :]
            rel = ((heads * s.window + slots[:, None, :, None]) * s.head_dim + dims)  # [B, H, T, hd]
            for i, t in enumerate(kv):
                index.append((self.state_offsets[at + i] + rel).reshape(b, -1))
                values.append(t.index_select(2, writer).reshape(b, -1))
            at += n
        if rows is not None:
            return x, torch.cat(index, dim=1), torch.cat(values, dim=1)
        return x, state.scatter(1, torch.cat(index, dim=1), torch.cat(values, dim=1))


class DecoderStream(_Stream):
    """(codes [B, T, nq] int64, state arena [R, S], row [B], position [B] frames done) -> (pcm [B, T * spf],
    state_index, state_values: what to write into the rows, `write_updates`); `mono` False: pcm [B, channels,
    T * spf] instead of the mean of the channels."""

    tables: torch.Tensor
    offsets: torch.Tensor

    def __init__(self, config: Mapping[str, Any], w: Mapping[str, np.ndarray], mono: bool = True) -> None:
        d = codec_dims(config)
        super().__init__(w, d.decoder, trim=True)
        self.dims, self.mono = d, mono
        q = config["quantizer_kwargs"]
        rvq, cd = int(q["rvq_dim"]), int(q["codebook_dim"])
        tables = []
        for k in range(d.num_quantizers):
            cb = _t(w, f"quantizer.quantizers.{k}.codebook.weight")
            if rvq != cd:
                wt, bias = _wn_linear(w, f"quantizer.quantizers.{k}.out_proj")
                cb = cb @ wt.T + bias
            tables.append(cb)
        # every quantizer's dequantised rows, one table: code c of quantizer k is row k * codebook_size + c
        self.register_buffer("tables", torch.cat(tables).contiguous(), persistent=False)
        self.register_buffer("offsets", torch.arange(d.num_quantizers, dtype=torch.int64) * d.codebook_size,
                             persistent=False)
        if rvq != int(q["output_dim"]):
            out_w, out_b = _wn_linear(w, "quantizer.output_proj")
        else:
            out_w, out_b = torch.eye(rvq), torch.zeros(rvq)
        self.out_w = nn.Parameter(out_w, requires_grad=False)
        self.out_b = nn.Parameter(out_b, requires_grad=False)

    def forward(self, codes: torch.Tensor, state: torch.Tensor, row: torch.Tensor, position: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b = codes.shape[0]
        embedded = F.embedding(codes + self.offsets, self.tables).sum(dim=2)  # [B, T, rvq]
        x = F.linear(embedded, self.out_w, self.out_b)
        x, index, values = self.run(x, state, position, down=False, rows=row)
        ch = self.dims.channels
        audio = x.permute(0, 2, 1).reshape(b, -1, ch)  # the interleaved stream: [B, samples, channels]
        pcm = audio.mean(dim=2) if self.mono else audio.permute(0, 2, 1)
        return pcm, index, values


class EncoderStream(_Stream):
    """(audio [B, T * spf] mono at the codec rate, state [B, S], position [B] frames done) -> (codes [B, T, nq]
    int64, new_state). The mono clip is repeated to the codec's channels (interleaved)."""

    books_n: torch.Tensor
    books_sq: torch.Tensor

    def __init__(self, config: Mapping[str, Any], w: Mapping[str, np.ndarray]) -> None:
        d = codec_dims(config)
        super().__init__(w, d.encoder)
        self.dims = d
        q = config["quantizer_kwargs"]
        inp, rvq, cd = int(q["input_dim"]), int(q["rvq_dim"]), int(q["codebook_dim"])
        if inp != rvq:
            in_w, in_b = _wn_linear(w, "quantizer.input_proj")
        else:
            in_w, in_b = torch.eye(rvq), torch.zeros(rvq)
        self.in_w = nn.Parameter(in_w, requires_grad=False)
        self.in_b = nn.Parameter(in_b, requires_grad=False)
        self.has_proj = rvq != cd
        qin_w, qin_b, qout_w, qout_b, books = [], [], [], [], []
        for k in range(d.num_quantizers):
            p = f"quantizer.quantizers.{k}"
            if self.has_proj:
                a, b = _wn_linear(w, f"{p}.in_proj")
                c, e = _wn_linear(w, f"{p}.out_proj")
                qin_w.append(a)
                qin_b.append(b)
                qout_w.append(c)
                qout_b.append(e)
            books.append(_t(w, f"{p}.codebook.weight"))
        if self.has_proj:
            self.qin_w = nn.Parameter(torch.stack(qin_w), requires_grad=False)
            self.qin_b = nn.Parameter(torch.stack(qin_b), requires_grad=False)
            self.qout_w = nn.Parameter(torch.stack(qout_w), requires_grad=False)
            self.qout_b = nn.Parameter(torch.stack(qout_b), requires_grad=False)
        self.books = nn.Parameter(torch.stack(books), requires_grad=False)
        normed = self.books / torch.clamp(torch.sqrt(torch.sum(self.books ** 2, dim=-1, keepdim=True)), min=1e-12)
        self.register_buffer("books_n", normed.detach().clone(), persistent=False)
        self.register_buffer("books_sq", torch.sum(normed ** 2, dim=-1).detach().clone(), persistent=False)

    def forward(self, audio: torch.Tensor, state: torch.Tensor, position: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        b = audio.shape[0]
        ch = self.dims.channels
        x = audio[:, :, None].expand(b, audio.shape[1], ch).reshape(b, -1, 1)
        x, new_state = self.run(x, state, position, down=True)  # the encoder carries its state through
        res = F.linear(x, self.in_w, self.in_b)  # [B, T, rvq]
        codes = []
        for k in range(self.dims.num_quantizers):
            e = F.linear(res, self.qin_w[k], self.qin_b[k]) if self.has_proj else res
            e = e / torch.clamp(torch.sqrt(torch.sum(e * e, dim=-1, keepdim=True)), min=1e-12)
            dist = torch.sum(e * e, dim=-1, keepdim=True) - 2.0 * torch.matmul(e, self.books_n[k].T) + self.books_sq[k]
            idx = torch.argmax(-dist, dim=-1)
            zq = F.embedding(idx, self.books[k])
            if self.has_proj:
                zq = F.linear(zq, self.qout_w[k], self.qout_b[k])
            res = res - zq
            codes.append(idx)
        return torch.stack(codes, dim=-1), new_state


# --- running them (tests, validation) ------------------------------------------------------------------


def decode(module: DecoderStream, codes: np.ndarray, chunks: Sequence[int] | None = None) -> np.ndarray:
    """codes [B, T, nq] through the torch decoder from a zero state (row r of a [B, S] arena), whole or in
    `chunks` of frames."""
    from ttscore.runtime.vocoder import write_updates

    b, t = codes.shape[:2]
    arena = np.zeros((b, module.state_size), np.float32)
    rows = np.arange(b, dtype=np.int64)
    out, at = [], 0
    with torch.inference_mode():
        for n in (chunks or [t]):
            pcm, index, values = module(torch.from_numpy(codes[:, at:at + n]), torch.from_numpy(arena),
                                        torch.from_numpy(rows), torch.full((b,), at, dtype=torch.int64))
            write_updates(arena, rows, index.numpy(), values.numpy())
            out.append(pcm.numpy())
            at += n
    return np.concatenate(out, axis=-1)


def encode(module: EncoderStream, audio: np.ndarray, chunks: Sequence[int] | None = None) -> np.ndarray:
    """audio [B, samples] (a whole number of frames) through the torch encoder, whole or in `chunks` of frames."""
    spf = module.dims.samples_per_frame
    b, t = audio.shape[0], audio.shape[1] // spf
    state = torch.zeros(b, module.state_size)
    out, at = [], 0
    with torch.inference_mode():
        for n in (chunks or [t]):
            codes, state = module(torch.from_numpy(np.ascontiguousarray(audio[:, at * spf:(at + n) * spf])), state,
                                  torch.full((b,), at, dtype=torch.int64))
            out.append(codes.numpy())
            at += n
    return np.concatenate(out, axis=1)


def window_frames(stages: Sequence[Stage]) -> int:
    """Frames after which every transformer's window is full (a stream longer than this crosses all of them)."""
    return max(-(-s.context // s.per_frame) for s in stages if not s.patch)


def run_chunks(session: Any, first: str, data: np.ndarray, chunks: Sequence[int], size: int, per: int) -> np.ndarray:
    """A streaming graph over `data` [B, frames * per, ...] in `chunks` of frames from a zero state (the decoder:
    rows 0..B-1 of an arena, its updates written back); the first outputs joined along the frames' axis."""
    from export.tracing import ort_run
    from ttscore.runtime.vocoder import write_updates

    b = data.shape[0]
    state = np.zeros((b, size), np.float32)
    arena = "row" in {i.name for i in session.get_inputs()}
    rows = np.arange(b, dtype=np.int64)
    out, at = [], 0
    for n in chunks:
        feeds = {first: np.ascontiguousarray(data[:, at * per:(at + n) * per]), "state": state,
                 "position": np.full((b,), at, np.int64)}
        if arena:
            got, index, values = ort_run(session, {**feeds, "row": rows})
            write_updates(state, rows, index, values)
        else:
            got, state = ort_run(session, feeds)
        out.append(got)
        at += n
    return np.concatenate(out, axis=1)


# --- export ----------------------------------------------------------------------------------------------


@dataclass
class CodecExport:
    """What the family's export puts into its manifest for the codec."""

    graphs: dict[str, GraphSpec]
    validation: dict[str, dict[str, Any]]
    vocoder_state_size: int
    vocoder_state_layout: list[list[Any]]
    sample_rate: int
    samples_per_frame: int
    fields: dict[str, Any]  # the manifest's own field `codec` (spec.MANIFEST_FIELD): {"codec": {...}}


def _chunks(total: int, window: int) -> list[int]:
    """1, 2, then a chunk ending past the window, then the rest."""
    head = [1, 2]
    mid = max(1, window - 1)
    rest = total - sum(head) - mid
    return [*head, mid, *([rest] if rest > 0 else [])]


def export_codec(checkpoint: Path, out_dir: Path, precision: str = "fp32", *, seed: int = 0) -> CodecExport:
    """Export the codec of a MOSS-TTS-Nano checkpoint (found by the runtime's checkpoint.codec_dir) into `out_dir`:
    `moss_codec_decoder.onnx` (the vocoder) and `moss_codec_encoder.onnx`, each validated in several chunkings
    across every attention window against one whole run of the torch modules. `precision` int8/int4 quantizes
    the decoder's MatMuls when its SNR holds (export.quantize); the encoder stays fp32 (its output is argmax
    codes). ExportError / CheckpointError on failure."""
    from export.moss_tts_nano.tiny_codec import load_codec
    from export.quantize import compare_outputs, quantize_graph
    from export.tracing import ErrorTracker, export_inline, ort_session, torch_threads
    from ttscore.runtime.families.moss_tts_nano import checkpoint as lm_checkpoint

    codec_dir = lm_checkpoint.codec_dir(Path(checkpoint))
    config, weights = load_codec(codec_dir)
    dims = codec_dims(config)
    if dims.channels != spec.CHANNELS or dims.sample_rate != spec.SAMPLE_RATE:
        raise ExportError(f"codec {codec_dir}: {dims.sample_rate} Hz x {dims.channels} channels, not "
                          f"{spec.SAMPLE_RATE} x {spec.CHANNELS}")
    out_dir = Path(out_dir)
    spf, nq = dims.samples_per_frame, dims.num_quantizers
    rng = np.random.default_rng(seed)
    reports: dict[str, dict[str, Any]] = {}

    # decoder: two rows over a window-crossing length, whole torch decode vs the graph in chunks
    dwin = window_frames(dims.decoder)
    frames = dwin + 4
    codes = rng.integers(0, dims.codebook_size, (2, frames, nq)).astype(np.int64)
    with torch_threads():
        dec = DecoderStream(config, weights).eval()
        dspec = spec.decoder_spec(dec.state_size, nq)
        want = decode(dec, codes)
        with torch.inference_mode():
            dpath = export_inline(dec, (torch.from_numpy(codes[:, :2]), torch.zeros(3, dec.state_size),
                                        torch.tensor([2, 0]), torch.zeros(2, dtype=torch.int64)), dspec, out_dir)
        layout = [[name, list(shape)] for name, shape in dec.layout]
        dsize = dec.state_size
        del dec
    sess = ort_session(dpath)
    tr = ErrorTracker()
    for chunks in ([frames], _chunks(frames, dwin), [1] * frames):
        tr.add("pcm", run_chunks(sess, "codes", codes, chunks, dsize, 1), want, "chunks " + "+".join(map(str, chunks)))
    reports[dspec.name] = tr.finish(dspec.name, dpath, {"pcm": PCM_TOLERANCE})
    del sess

    # encoder: a clip over a window-crossing length, whole torch encode vs the graph in chunks
    ewin = window_frames(dims.encoder)
    eframes = ewin + 3
    t = np.arange(eframes * spf) / dims.sample_rate
    audio = np.stack([0.4 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.shape),
                      0.3 * np.sin(2 * np.pi * 523 * t) * np.cos(2 * np.pi * 3 * t)]).astype(np.float32)
    with torch_threads():
        enc = EncoderStream(config, weights).eval()
        espec = spec.encoder_spec(enc.state_size, nq)
        ewant = encode(enc, audio)
        with torch.inference_mode():
            epath = export_inline(enc, (torch.from_numpy(audio[:, :2 * spf]), torch.zeros(2, enc.state_size),
                                        torch.zeros(2, dtype=torch.int64)), espec, out_dir)
        esize, elayout = enc.state_size, [[name, list(shape)] for name, shape in enc.layout]
        del enc
    sess = ort_session(epath)
    tr = ErrorTracker()
    for chunks in ([eframes], _chunks(eframes, ewin)):
        got = run_chunks(sess, "audio", audio, chunks, esize, spf)
        tr.add("codes", got.astype(np.float64), ewant.astype(np.float64), "chunks " + "+".join(map(str, chunks)))
    reports[espec.name] = tr.finish(espec.name, epath, {"codes": CODE_TOLERANCE})
    del sess

    if precision != "fp32":
        feeds = [{"codes": codes[:, :3], "state": np.zeros((2, dsize), np.float32), "row": np.arange(2),
                  "position": np.zeros(2, np.int64)}]
        # int8: the transformer layers' MatMuls (46 dB SNR on random weights at real size); the stages' input and
        # output projections stay fp32 (quantized too, the pcm fell to 27 dB, below the audio bar)
        q = quantize_graph(dpath, precision, lambda a, b: compare_outputs(a, b, feeds), audio=True,
                           only=(LAYER_MATMULS, "the transformer layers' MatMuls") if precision == "int8" else None)
        reports[dspec.name].update(q)
        reports[espec.name].update({"quantized": None, "vs_fp32": {"kept": "fp32 (argmax codes)"}})

    fields = {spec.MANIFEST_FIELD: {
        "sample_rate": dims.sample_rate, "channels": dims.channels, "samples_per_frame": spf,
        "num_quantizers": nq, "codebook_size": dims.codebook_size,
        "encoder_state_size": esize, "encoder_state_layout": elayout,
        "decoder_windows": [s.context for s in dims.decoder if not s.patch],
        "encoder_windows": [s.context for s in dims.encoder if not s.patch],
        "source": str(codec_dir),
        "sha256": lm_checkpoint.codec_sha256(codec_dir),  # precomputed voices' codes are checked against it
    }}
    return CodecExport({dspec.name: dspec, espec.name: espec}, reports, dsize, layout, dims.sample_rate, spf, fields)
