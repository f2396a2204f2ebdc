"""Export of the speech-tokenizer decoder (code2wav): an exact streaming graph and a whole-utterance graph.

code2wav_stream.onnx is a pure function ``(codes, state, position) -> (pcm, new_state)``. The flat
per-stream ``state`` packs everything the strictly causal decoder needs from the past:

- every causal conv's left history: ``(kernel - 1) * dilation`` input samples (pre_conv, the
  ConvNeXt depthwise convs, the decoder convs, every residual unit's dilated conv, the final conv);
- every CausalTransConvNet with kernel 2r / stride r: its previous input sample (the output block of
  input t also needs input t - 1); the kernel == stride upsamplers need nothing;
- for each transformer layer the last ``sliding_window - 1`` post-RoPE keys and values.

Zeros are the initial state (the reference pads every conv with zeros; key/value slots at positions
< 0 are masked out), ``position`` is the number of frames the stream has already decoded, so decoding
any chunking gives the reference whole-utterance audio. Rows of a batch may be at different positions.

code2wav.onnx is the reference decoder forward (no chunking) built from the same explicit modules
with an empty past. Both graphs reuse the original modules' weights; only the control flow that does
not export (HF masks / caches) is rewritten, and validation against the reference forward is part of
export.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from export.blocks import apply_rope
from export.tracing import EXPORTER_INLINE, OPSET, check_close, export_inline, ort_session
from ttscore.contract.errors import ExportError
from ttscore.contract.qwen3_tts import code2wav_spec, code2wav_stream_spec

logger = logging.getLogger(__name__)

DEFAULT_OPSET = OPSET
PARITY_ATOL = 1e-4


# --- locating the decoder -----------------------------------------------------------------------


def get_decoder(model: Any) -> Any:
    """The Qwen3TTSTokenizerV2Decoder inside whatever wrapper the caller holds.

    Accepts the decoder itself, Qwen3TTSTokenizerV2Model (``.decoder``), the inference wrapper
    Qwen3TTSTokenizer (``.model``), Qwen3TTSForConditionalGeneration (``.speech_tokenizer``) or
    Qwen3TTSModel (``.model.speech_tokenizer``).
    """
    seen = 0
    obj = model
    while seen < 6:
        seen += 1
        if hasattr(obj, "pre_transformer") and hasattr(obj, "quantizer") and hasattr(obj, "upsample"):
            return obj
        for attr in ("decoder", "speech_tokenizer", "model"):
            nxt = getattr(obj, attr, None)
            if nxt is not None and not isinstance(nxt, (str, int, float)):
                obj = nxt
                break
        else:
            break
    raise ExportError(f"no code2wav decoder found in {type(model).__name__}")


# --- state layout -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StateEntry:
    name: str
    shape: tuple[int, ...]  # per stream, no batch dim
    offset: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def _conv_history(conv: nn.Conv1d) -> int:
    return (conv.kernel_size[0] - 1) * conv.dilation[0]


class _LayoutBuilder:
    def __init__(self) -> None:
        self.entries: list[StateEntry] = []
        self.offset = 0

    def add(self, name: str, shape: tuple[int, ...]) -> None:
        if any(n == name for n in (e.name for e in self.entries)):
            raise ExportError(f"duplicate state entry {name}")
        e = StateEntry(name, tuple(int(s) for s in shape), self.offset)
        self.entries.append(e)
        self.offset += e.size


def _check_decoder(decoder: Any) -> None:
    """The streaming rewrite relies on this exact topology; refuse anything else loudly."""
    cfg = decoder.config
    if tuple(cfg.layer_types) != ("sliding_attention",) * cfg.num_hidden_layers:
        raise ExportError(f"code2wav: unsupported layer types {cfg.layer_types}")
    if cfg.sliding_window is None or cfg.sliding_window < 2:
        raise ExportError(f"code2wav: unsupported sliding_window {cfg.sliding_window}")
    for conv in _causal_convs(decoder):
        if conv.stride != 1:
            raise ExportError("code2wav: strided causal conv is not supported by the streaming rewrite")
    rope_type = getattr(decoder.pre_transformer.rotary_emb, "rope_type", "default")
    if rope_type != "default":
        raise ExportError(f"code2wav: rope type {rope_type!r} is not supported")


def _causal_convs(decoder: Any) -> list[nn.Module]:
    out = [decoder.pre_conv]
    for blocks in decoder.upsample:
        out.append(blocks[1].dwconv)
    out.append(decoder.decoder[0])
    for blk in decoder.decoder[1:-2]:
        for unit in blk.block[2:]:
            out += [unit.conv1, unit.conv2]
    out.append(decoder.decoder[-1])
    return out


def build_state_layout(decoder: Any) -> list[StateEntry]:
    """The flat state's entries in the order the decoder uses them."""
    cfg = decoder.config
    b = _LayoutBuilder()
    pc = decoder.pre_conv.conv
    b.add("pre_conv", (pc.in_channels, _conv_history(pc)))
    attn0 = decoder.pre_transformer.layers[0].self_attn
    kv_heads = cfg.num_key_value_heads
    for i in range(cfg.num_hidden_layers):
        b.add(f"pre_transformer.layers.{i}.key", (kv_heads, cfg.sliding_window - 1, attn0.head_dim))
        b.add(f"pre_transformer.layers.{i}.value", (kv_heads, cfg.sliding_window - 1, attn0.head_dim))
    for i, blocks in enumerate(decoder.upsample):
        tc = blocks[0].conv
        if tc.kernel_size[0] != tc.stride[0]:
            raise ExportError("code2wav: upsample transconv with kernel != stride is not supported")
        dw = blocks[1].dwconv.conv
        b.add(f"upsample.{i}.1.dwconv", (dw.in_channels, _conv_history(dw)))
    c0 = decoder.decoder[0].conv
    b.add("decoder.0", (c0.in_channels, _conv_history(c0)))
    n_blocks = len(decoder.decoder) - 3
    for bi in range(1, 1 + n_blocks):
        blk = decoder.decoder[bi]
        tc = blk.block[1].conv
        if tc.kernel_size[0] != 2 * tc.stride[0] or blk.block[1].right_pad != tc.stride[0]:
            raise ExportError("code2wav: decoder transconv must have kernel == 2 * stride")
        b.add(f"decoder.{bi}.block.1", (tc.in_channels, 1))
        for ui in range(2, len(blk.block)):
            c1 = blk.block[ui].conv1.conv
            b.add(f"decoder.{bi}.block.{ui}.conv1", (c1.in_channels, _conv_history(c1)))
            if _conv_history(blk.block[ui].conv2.conv) != 0:
                raise ExportError("code2wav: residual conv2 must have kernel 1")
    last = decoder.decoder[-1].conv
    b.add(f"decoder.{len(decoder.decoder) - 1}", (last.in_channels, _conv_history(last)))
    return b.entries


# --- the explicit decoder --------------------------------------------------------------------


class _DecoderCore(nn.Module):
    """The reference decoder forward, rewritten with explicit state in/out.

    ``past`` maps state entry names to [B, *shape] tensors; the returned dict holds the new ones.
    """

    codebooks: torch.Tensor

    def __init__(self, decoder: Any) -> None:
        super().__init__()
        _check_decoder(decoder)
        self.decoder = decoder
        cfg = decoder.config
        self.window = int(cfg.sliding_window)
        self.num_quantizers = int(cfg.num_quantizers)
        self.num_heads = int(cfg.num_attention_heads)
        self.num_kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = int(decoder.pre_transformer.layers[0].self_attn.head_dim)
        self.layout = build_state_layout(decoder)
        self.samples_per_frame = int(np.prod(list(cfg.upsample_rates) + list(cfg.upsampling_ratios)))
        # Dequantization tables exactly as EuclideanCodebook.decode computes them on every call
        # (embedding_sum / clamp(cluster_usage)); precomputed so the graph does one Gather per group.
        q = decoder.quantizer
        self.n_semantic = int(q.n_q_semantic)
        tables = []
        for rvq in (q.rvq_first, q.rvq_rest):
            for layer in rvq.vq.layers:
                cb = layer._codebook
                with torch.no_grad():
                    tables.append(cb.embedding_sum / cb.cluster_usage.clamp(min=cb.epsilon)[:, None])
        if len(tables) != self.num_quantizers:
            raise ExportError(f"code2wav: {len(tables)} codebooks for {self.num_quantizers} quantizers")
        self.register_buffer("codebooks", torch.stack(tables).detach().clone(), persistent=False)

    @staticmethod
    def _conv(conv: nn.Conv1d, x: torch.Tensor, hist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal stride-1 conv over [history, x]; returns (output for x, new history)."""
        n = hist.shape[-1]
        if n == 0:
            return conv(x), hist
        xx = torch.cat([hist, x], dim=-1)
        return conv(xx), xx[..., xx.shape[-1] - n :]

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        rot = self.decoder.pre_transformer.rotary_emb
        inv_freq = rot.inv_freq.float()
        freqs = positions.float()[:, :, None] * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * rot.attention_scaling
        sin = emb.sin() * rot.attention_scaling
        return cos.to(dtype), sin.to(dtype)

    def _transformer(
        self,
        h: torch.Tensor,
        position: torch.Tensor,
        past: dict[str, torch.Tensor],
        new: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        tm = self.decoder.pre_transformer
        bsz, t = h.shape[0], h.shape[1]
        n_past = int(past["pre_transformer.layers.0.key"].shape[2])  # window - 1 (stream) or 0 (offline)
        w1 = self.window - 1
        steps = torch.arange(t, device=h.device, dtype=torch.int64)
        qpos = position[:, None] + steps[None, :]  # [B, T] absolute positions of the chunk
        if n_past:
            past_pos = qpos[:, :1] - n_past + torch.arange(n_past, dtype=torch.int64)[None, :]
            kpos = torch.cat([past_pos, qpos], dim=1)
        else:
            kpos = qpos
        # HF sliding window (transformers 4.57 masking_utils): kv <= q and kv > q - window; slots of a
        # stream's past at positions < 0 do not exist.
        allowed = (
            (kpos[:, None, :] <= qpos[:, :, None])
            & (kpos[:, None, :] > qpos[:, :, None] - self.window)
            & (kpos[:, None, :] >= 0)
        )
        mask = torch.where(allowed, 0.0, torch.finfo(h.dtype).min).to(h.dtype)[:, None, :, :]
        cos, sin = self._rope(qpos, h.dtype)
        cos, sin = cos[:, None], sin[:, None]
        n_rep = self.num_heads // self.num_kv_heads

        h = tm.input_proj(h)
        for i, layer in enumerate(tm.layers):
            attn = layer.self_attn
            residual = h
            x = layer.input_layernorm(h)
            q = attn.q_norm(attn.q_proj(x).view(bsz, t, -1, self.head_dim)).transpose(1, 2)
            k = attn.k_norm(attn.k_proj(x).view(bsz, t, -1, self.head_dim)).transpose(1, 2)
            v = attn.v_proj(x).view(bsz, t, -1, self.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            kname, vname = f"pre_transformer.layers.{i}.key", f"pre_transformer.layers.{i}.value"
            if n_past:
                k_all = torch.cat([past[kname], k], dim=2)
                v_all = torch.cat([past[vname], v], dim=2)
                n_all = k_all.shape[2]
                new[kname] = k_all[:, :, n_all - w1 :]
                new[vname] = v_all[:, :, n_all - w1 :]
            else:
                k_all, v_all = k, v
            if n_rep > 1:
                k_all = k_all.repeat_interleave(n_rep, dim=1)
                v_all = v_all.repeat_interleave(n_rep, dim=1)
            scores = torch.matmul(q, k_all.transpose(2, 3)) * attn.scaling + mask
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            o = torch.matmul(probs, v_all).transpose(1, 2).reshape(bsz, t, -1)
            h = residual + layer.self_attn_layer_scale(attn.o_proj(o))
            residual = h
            h = residual + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(h)))
        h = tm.norm(h)
        return tm.output_proj(h)

    def _dequantize(self, codes: torch.Tensor) -> torch.Tensor:
        """SplitResidualVectorQuantizer.decode on codes [B, T, G] (same op order per group)."""
        q = self.decoder.quantizer
        out = None
        for rvq, groups in (
            (q.rvq_first, range(self.n_semantic)),
            (q.rvq_rest, range(self.n_semantic, self.num_quantizers)),
        ):
            acc = None
            for gi, layer in zip(groups, rvq.vq.layers, strict=True):
                e = layer.project_out(F.embedding(codes[:, :, gi], self.codebooks[gi])).transpose(1, 2)
                acc = e if acc is None else acc + e
            part = rvq.output_proj(acc)
            out = part if out is None else out + part
        assert out is not None
        return out

    def forward(
        self, codes: torch.Tensor, past: dict[str, torch.Tensor], position: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        dec = self.decoder
        new: dict[str, torch.Tensor] = {}
        hidden = self._dequantize(codes)  # [B, codebook_dim, T]
        hidden, new["pre_conv"] = self._conv(dec.pre_conv.conv, hidden, past["pre_conv"])
        hidden = self._transformer(hidden.transpose(1, 2), position, past, new).permute(0, 2, 1)
        for i, (up, cnx) in enumerate(dec.upsample):
            hidden = up(hidden)  # kernel == stride: no overlap between frames
            name = f"upsample.{i}.1.dwconv"
            residual = hidden
            x, new[name] = self._conv(cnx.dwconv.conv, hidden, past[name])
            x = cnx.norm(x.permute(0, 2, 1))
            x = cnx.pwconv2(cnx.act(cnx.pwconv1(x)))
            hidden = residual + (cnx.gamma * x).permute(0, 2, 1)
        wav, new["decoder.0"] = self._conv(dec.decoder[0].conv, hidden, past["decoder.0"])
        last = len(dec.decoder) - 1
        for bi in range(1, last - 1):
            blk = dec.decoder[bi].block
            wav = blk[0](wav)  # SnakeBeta
            name = f"decoder.{bi}.block.1"
            tconv = blk[1].conv
            r = tconv.stride[0]
            xx = torch.cat([past[name], wav], dim=-1)
            new[name] = xx[..., xx.shape[-1] - 1 :]
            y = tconv(xx)  # ((N + 1) - 1) * r + 2r samples; the first r belong to the previous chunk
            wav = y[..., r : r + wav.shape[-1] * r]
            for ui in range(2, len(blk)):
                unit = blk[ui]
                name = f"decoder.{bi}.block.{ui}.conv1"
                res = wav
                x = unit.act1(wav)
                x, new[name] = self._conv(unit.conv1.conv, x, past[name])
                x = unit.conv2.conv(unit.act2(x))
                wav = x + res
        wav = dec.decoder[last - 1](wav)  # SnakeBeta
        wav, new[f"decoder.{last}"] = self._conv(dec.decoder[last].conv, wav, past[f"decoder.{last}"])
        return wav.clamp(min=-1, max=1).squeeze(1), new


class Code2WavStream(nn.Module):
    """(codes [B,T,G] int64, state [B,S] float32, position [B] int64) -> (pcm [B,T*spf], new_state [B,S])."""

    def __init__(self, decoder: Any) -> None:
        super().__init__()
        self.core = _DecoderCore(decoder)
        self.layout = self.core.layout
        self.state_size = sum(e.size for e in self.layout)

    def forward(
        self, codes: torch.Tensor, state: torch.Tensor, position: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bsz = state.shape[0]
        past = {e.name: state[:, e.offset : e.offset + e.size].reshape(bsz, *e.shape) for e in self.layout}
        pcm, new = self.core(codes, past, position)
        new_state = torch.cat([new[e.name].reshape(bsz, e.size) for e in self.layout], dim=1)
        return pcm, new_state


class Code2WavOffline(nn.Module):
    """codes [B,T,G] int64 -> pcm [B,T*spf]: the reference forward (zero history, position 0)."""

    def __init__(self, decoder: Any) -> None:
        super().__init__()
        self.core = _DecoderCore(decoder)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        bsz = codes.shape[0]
        past = {}
        for e in self.core.layout:
            if e.name.endswith((".key", ".value")):
                # No past keys at all: with position 0 the window never reaches before the utterance.
                past[e.name] = codes.new_zeros((bsz, e.shape[0], 0, e.shape[2]), dtype=torch.float32)
            else:
                past[e.name] = codes.new_zeros((bsz, *e.shape), dtype=torch.float32)
        position = codes.new_zeros((bsz,))
        pcm, _ = self.core(codes, past, position)
        return pcm


# --- export + validation --------------------------------------------------------------------------


def _example_codes(decoder: Any, batch: int, frames: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    cfg = decoder.config
    return torch.randint(0, int(cfg.codebook_size), (batch, frames, int(cfg.num_quantizers)), generator=g)


def reference_decode(decoder: Any, codes: np.ndarray | torch.Tensor) -> np.ndarray:
    """The reference decoder forward (no chunking) on codes [B, T, G] -> pcm [B, T * spf]."""
    c = torch.as_tensor(codes, dtype=torch.int64)
    with torch.no_grad():
        return decoder(c.transpose(1, 2)).squeeze(1).float().numpy()


def stream_decode(
    sess: Any, codes: np.ndarray, chunks: Sequence[int], *, state: np.ndarray | None = None, position: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Decode codes [B, T, G] chunk by chunk with the streaming graph; returns (pcm, final state)."""
    bsz, total = codes.shape[0], codes.shape[1]
    state_size = int(sess.get_inputs()[1].shape[1])
    st = np.zeros((bsz, state_size), np.float32) if state is None else state
    outs = []
    pos, i = 0, 0
    while pos < total:
        n = min(int(chunks[i % len(chunks)]), total - pos)
        i += 1
        pcm, st = sess.run(
            None,
            {
                "codes": np.ascontiguousarray(codes[:, pos : pos + n]),
                "state": st,
                "position": np.full((bsz,), position + pos, np.int64),
            },
        )
        outs.append(pcm)
        pos += n
    return np.concatenate(outs, axis=1), st


def validate_code2wav(
    decoder: Any,
    out_dir: Path,
    *,
    frames: int = 100,
    atol: float = PARITY_ATOL,
    seed: int = 0,
) -> dict[str, Any]:
    """ONNX (offline, streaming at several chunkings, batched rows at different positions) vs the
    reference decoder forward. Raises ExportError when any error exceeds `atol`."""
    out_dir = Path(out_dir)
    spf = _samples_per_frame(decoder)
    window = int(decoder.config.sliding_window)
    if frames <= window:
        raise ExportError(f"validation needs more than {window} frames to exercise the sliding window")
    off_sess = ort_session(out_dir / code2wav_spec(int(decoder.config.num_quantizers)).filename)
    st_sess = ort_session(out_dir / "code2wav_stream.onnx")
    report: dict[str, Any] = {"frames": frames, "atol": atol}

    def _check(what: str, got: np.ndarray, want: np.ndarray) -> float:
        return check_close(f"code2wav validation ({what})", got, want, atol)

    def _run(what: str, fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # a graph that cannot run is a failed export
            raise ExportError(f"code2wav validation ({what}): graph failed to run: {exc}") from exc

    # Offline graph, batch of 2 and two lengths (dynamic frames).
    codes = _example_codes(decoder, 2, frames, seed).numpy()
    ref = reference_decode(decoder, codes)
    if float(np.std(ref)) < 1e-3:
        logger.warning("code2wav validation signal is nearly silent (std %.2g)", float(np.std(ref)))
    short = codes[:1, :7]
    (off,) = _run("offline", lambda: off_sess.run(None, {"codes": codes}))
    (off_short,) = _run("offline 7 frames", lambda: off_sess.run(None, {"codes": short}))
    report["offline_max_abs_err"] = max(
        _check("offline", off, ref), _check("offline 7 frames", off_short, reference_decode(decoder, short))
    )
    if off.shape[1] != frames * spf:
        raise ExportError(
            f"code2wav offline: {off.shape[1]} samples for {frames} frames, expected {frames * spf}"
        )

    # Streaming: several chunkings, 1-frame chunks included, well past the sliding window.
    stream_errs = {}
    for chunks in ([1, 1, 3, 7, 1, 2, 1, 13], [5], [1], [frames]):
        pcm, _ = _run(f"stream chunks {chunks}", lambda c=chunks: stream_decode(st_sess, codes, c))
        stream_errs[",".join(map(str, chunks))] = _check(f"stream chunks {chunks}", pcm, ref)
    report["stream_max_abs_err"] = stream_errs

    # A batch of 3 rows at different positions equals each row decoded on its own.
    starts = [0, 11, window + 5]
    n_new = 6
    seqs = _example_codes(decoder, 3, max(starts) + n_new, seed + 1).numpy()
    states, refs = [], []
    for row, p in enumerate(starts):
        if p:
            _, st = _run("batched rows", lambda r=row, p=p: stream_decode(st_sess, seqs[r : r + 1, :p], [7]))
        else:
            st = np.zeros((1, int(st_sess.get_inputs()[1].shape[1])), np.float32)
        states.append(st)
        refs.append(reference_decode(decoder, seqs[row : row + 1, : p + n_new])[:, p * spf :])
    batch_codes = np.concatenate([seqs[r : r + 1, p : p + n_new] for r, p in enumerate(starts)], axis=0)
    feed = {"codes": batch_codes, "state": np.concatenate(states, 0), "position": np.array(starts, np.int64)}
    pcm, _ = _run("batched rows", lambda: st_sess.run(None, feed))
    report["batched_rows_max_abs_err"] = max(
        _check(f"batched row {r} at position {p}", pcm[r : r + 1], refs[r]) for r, p in enumerate(starts)
    )
    return report


def _samples_per_frame(decoder: Any) -> int:
    cfg = decoder.config
    return int(np.prod(list(cfg.upsample_rates) + list(cfg.upsampling_ratios)))


def export_code2wav(
    speech_tokenizer_model: Any,
    out_dir: Path,
    *,
    opset: int = DEFAULT_OPSET,
    validate: bool = True,
    validate_frames: int = 100,
) -> dict[str, Any]:
    """Write code2wav_stream.onnx and code2wav.onnx to `out_dir`, validate them, return the manifest part."""
    out_dir = Path(out_dir)
    decoder = get_decoder(speech_tokenizer_model)
    if next(decoder.parameters()).dtype != torch.float32:
        raise ExportError("code2wav export needs the decoder in float32")
    decoder.eval()
    cfg = decoder.config
    groups = int(cfg.num_quantizers)
    spf = _samples_per_frame(decoder)
    stream = Code2WavStream(decoder).eval()
    offline = Code2WavOffline(decoder).eval()
    s_spec = code2wav_stream_spec(groups, stream.state_size, spf)
    o_spec = code2wav_spec(groups)

    # Example inputs: batch 2 and 3 frames so neither axis specializes to 1.
    ex_codes = _example_codes(decoder, 2, 3, 0)
    ex_state = torch.zeros(2, stream.state_size)
    ex_pos = torch.tensor([0, 5], dtype=torch.int64)
    t0 = time.perf_counter()
    export_inline(stream, (ex_codes, ex_state, ex_pos), s_spec, out_dir, opset=opset)
    export_inline(offline, (ex_codes,), o_spec, out_dir, opset=opset)
    export_s = time.perf_counter() - t0

    report: dict[str, Any] = {
        "files": [s_spec.filename, o_spec.filename],
        "graphs": {s_spec.name: s_spec.to_json(), o_spec.name: o_spec.to_json()},
        "opset": opset,
        "exporter": EXPORTER_INLINE,
        "num_groups": groups,
        "samples_per_frame": spf,
        "sample_rate": int(getattr(speech_tokenizer_model, "output_sample_rate", 24000)),
        "sliding_window": int(cfg.sliding_window),
        "state_size": stream.state_size,
        "state_layout": [(e.name, list(e.shape)) for e in stream.layout],
        "export_seconds": round(export_s, 1),
    }
    if validate:
        t0 = time.perf_counter()
        report["validation"] = validate_code2wav(decoder, out_dir, frames=validate_frames)
        report["validation"]["seconds"] = round(time.perf_counter() - t0, 1)
    return report


# --- timing ---------------------------------------------------------------------------------------

REAL_DECODER_DIMS: dict[str, Any] = {
    "latent_dim": 1024,
    "codebook_dim": 512,
    "codebook_size": 2048,
    "decoder_dim": 1536,
    "hidden_size": 512,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 64,
    "intermediate_size": 1024,
    "num_hidden_layers": 8,
    "num_quantizers": 16,
    "sliding_window": 72,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
}


def benchmark_code2wav(
    out_dir: Path,
    *,
    threads: int = 2,
    chunk_sizes: Sequence[int] = (1, 25),
    context: int = 72,
    repeats: int = 3,
) -> dict[str, Any]:
    """ms per decoded frame: the exact streaming graph vs re-decoding `context` frames every chunk.

    Uses graphs already exported to `out_dir` (the offline graph stands in for "decode left context +
    chunk, drop the context"). Each figure is the best of `repeats` runs after one warm-up run."""
    stream = ort_session(Path(out_dir) / "code2wav_stream.onnx", threads=threads)
    offline = ort_session(Path(out_dir) / "code2wav.onnx", threads=threads)
    state_size = int(stream.get_inputs()[1].shape[1])
    groups = int(stream.get_inputs()[0].shape[2])
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {
        "threads": threads,
        "context_frames": context,
        "stream_ms_per_frame": {},
        "redecode_ms_per_frame": {},
    }
    for n in chunk_sizes:
        codes = rng.integers(0, 2048, (1, n, groups), dtype=np.int64)
        feed = {
            "codes": codes,
            "state": np.zeros((1, state_size), np.float32),
            "position": np.array([200], np.int64),
        }
        stream.run(None, feed)
        best = min(_timed(lambda f=feed: stream.run(None, f)) for _ in range(repeats))
        result["stream_ms_per_frame"][n] = round(1000 * best / n, 2)
        ctx_codes = rng.integers(0, 2048, (1, context + n, groups), dtype=np.int64)
        offline.run(None, {"codes": ctx_codes})
        best = min(_timed(lambda c=ctx_codes: offline.run(None, {"codes": c})) for _ in range(repeats))
        result["redecode_ms_per_frame"][n] = round(1000 * best / n, 2)
    return result


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _main() -> None:  # pragma: no cover - manual timing tool
    import argparse
    import json
    import tempfile

    ap = argparse.ArgumentParser(description="time code2wav at the real decoder dims (random weights)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from export.qwen3_tts.reference import reference_imports

    with reference_imports():
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2DecoderConfig,
        )
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder

    torch.manual_seed(0)
    cfg = Qwen3TTSTokenizerV2DecoderConfig(**REAL_DECODER_DIMS)
    cfg._attn_implementation = "eager"
    decoder = Qwen3TTSTokenizerV2Decoder(cfg).float().eval()
    out = args.out or Path(tempfile.mkdtemp(prefix="code2wav_bench_"))
    report = export_code2wav(decoder, out, validate=False)
    report.pop("graphs")
    report.pop("state_layout")
    report["timing"] = benchmark_code2wav(out, threads=args.threads)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":  # pragma: no cover
    _main()
