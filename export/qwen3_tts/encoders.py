"""Export of the Base (voice cloning) front ends: speaker encoder, speech encoder and the mel basis.

- speaker_encoder.onnx: log-mel [B, mel_frames, 128] -> x-vector [B, D] (the ECAPA-TDNN exported as is).
- speech_encoder.onnx: 24 kHz audio [B, samples] -> codes [B, frames, 16], the reference
  ``Qwen3TTSTokenizerV2Model.encode`` (Mimi encoder, first ``encoder_valid_num_quantizers`` codebooks,
  frames = ceil(samples / 1920)). Mimi keeps conv stride/kernel as int64 tensors and computes the
  padding with ``torch.ceil`` on tensors, and its transformer builds HF masks; neither exports, so the
  graph is an explicit re-implementation over the original modules' weights: padding from Python
  ints (symbolic in the length), a plain causal mask, and ``torch.cdist``'s own formulation of the
  codebook search. No module is patched.
- mel_filters.npy: the librosa slaney mel basis the reference speaker front end uses.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from export.blocks import apply_rope
from export.qwen3_tts.code2wav import DEFAULT_OPSET, PARITY_ATOL
from export.tracing import EXPORTER_INLINE, check_close, export_inline, ort_session, validation_audio
from ttscore.contract.errors import ExportError
from ttscore.contract.qwen3_tts import (
    MEL_BINS,
    MEL_FILTERS,
    MEL_FMAX,
    MEL_FMIN,
    MEL_N_FFT,
    speaker_encoder_spec,
    speech_encoder_spec,
)

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000


# --- mel basis --------------------------------------------------------------------------------


def mel_filters() -> np.ndarray:
    """[MEL_BINS, MEL_N_FFT // 2 + 1] float32, exactly the reference's librosa_mel_fn call."""
    import librosa

    return np.asarray(
        librosa.filters.mel(sr=SAMPLE_RATE, n_fft=MEL_N_FFT, n_mels=MEL_BINS, fmin=MEL_FMIN, fmax=MEL_FMAX),
        dtype=np.float32,
    )


def export_mel_filters(out_dir: Path) -> dict[str, Any]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    basis = mel_filters()
    path = out_dir / f"{MEL_FILTERS}.npy"
    np.save(path, basis)
    return {"file": path.name, "shape": list(basis.shape), "dtype": str(basis.dtype)}


# --- speaker encoder --------------------------------------------------------------------------


def get_speaker_encoder(model: Any) -> Any:
    """Qwen3TTSSpeakerEncoder from itself, Qwen3TTSForConditionalGeneration or Qwen3TTSModel."""
    obj = model
    for _ in range(3):
        if hasattr(obj, "asp") and hasattr(obj, "mfa") and hasattr(obj, "blocks"):
            return obj
        nxt = getattr(obj, "speaker_encoder", None)
        if nxt is None:
            nxt = getattr(obj, "model", None)
        if nxt is None:
            break
        obj = nxt
    raise ExportError(f"no speaker encoder in {type(model).__name__} (only Base checkpoints have one)")


class _SpeakerEncoderGraph(nn.Module):
    """Qwen3TTSSpeakerEncoder.forward with the attentive statistics pooling written out.

    The reference pooling builds an all-ones length mask via ``len(tensor)`` / ``expand``, which the
    exporter bakes to the example batch size; for an unpadded batch the mask is all ones, so the
    same arithmetic is done on ``ones_like`` (same op order, bit-identical in PyTorch)."""

    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.encoder = encoder

    @staticmethod
    def _stats(x: torch.Tensor, m: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (m * x).sum(2)
        std = torch.sqrt((m * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(eps))
        return mean, std

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        asp = self.encoder.asp
        t = x.shape[-1]
        mask = torch.ones_like(x[:, :1, :])
        total = mask.sum(dim=2, keepdim=True)
        mean, std = self._stats(x, mask / total, asp.eps)
        mean = mean.unsqueeze(2).expand(-1, -1, t)
        std = std.unsqueeze(2).expand(-1, -1, t)
        attention = torch.cat([x, mean, std], dim=1)
        attention = asp.conv(asp.tanh(asp.tdnn(attention)))
        attention = F.softmax(attention, dim=2)
        mean, std = self._stats(x, attention, asp.eps)
        return torch.cat((mean, std), dim=1).unsqueeze(2)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        enc = self.encoder
        h = mels.transpose(1, 2)
        outs = []
        for layer in enc.blocks:
            h = layer(h)
            outs.append(h)
        h = enc.mfa(torch.cat(outs[1:], dim=1))
        h = enc.fc(self._pool(h))
        return h.squeeze(-1)


def speaker_embed_dim(encoder: Any) -> int:
    return int(encoder.fc.out_channels)


def speaker_min_mel_frames(encoder: Any) -> int:
    """Fewest mel frames the encoder accepts: every 'same' conv reflect-pads, which needs pad < frames."""
    pads = [
        max(m._reversed_padding_repeated_twice, default=0)
        for m in encoder.modules()
        if isinstance(m, nn.Conv1d) and m.padding_mode == "reflect"
    ]
    return int(max(pads, default=0)) + 1


def validate_speaker_encoder(
    encoder: Any,
    out_dir: Path,
    *,
    frame_counts: tuple[int, ...] = (23, 100, 377),
    atol: float = PARITY_ATOL,
) -> dict[str, Any]:
    sess = ort_session(Path(out_dir) / speaker_encoder_spec(MEL_BINS, speaker_embed_dim(encoder)).filename)
    frame_counts = (speaker_min_mel_frames(encoder), *frame_counts)
    rng = np.random.default_rng(0)
    worst = 0.0
    for i, frames in enumerate(frame_counts):
        batch = 2 if i % 2 == 0 else 1
        # Log-mel-like values: the real front end yields roughly [-11.5, 3].
        mels = (rng.standard_normal((batch, frames, MEL_BINS)) * 2.0 - 5.0).astype(np.float32)
        with torch.no_grad():
            ref = encoder(torch.from_numpy(mels)).float().numpy()
        try:
            (got,) = sess.run(None, {"mels": mels})
        except Exception as exc:
            raise ExportError(f"speaker_encoder graph failed to run on {frames} frames: {exc}") from exc
        worst = max(worst, check_close(f"speaker_encoder validation ({frames} frames)", got, ref, atol))
    return {"frame_counts": list(frame_counts), "max_abs_err": worst, "atol": atol}


def export_speaker_encoder(
    tts_model_or_speaker_encoder: Any,
    out_dir: Path,
    *,
    opset: int = DEFAULT_OPSET,
    validate: bool = True,
) -> dict[str, Any]:
    """Write speaker_encoder.onnx (mels [B, mel_frames, 128] -> x_vector [B, D]) and validate it."""
    out_dir = Path(out_dir)
    encoder = get_speaker_encoder(tts_model_or_speaker_encoder)
    if next(encoder.parameters()).dtype != torch.float32:
        raise ExportError("speaker encoder export needs float32 weights")
    encoder.eval()
    mel_dim = int(encoder.blocks[0].conv.in_channels)
    if mel_dim != MEL_BINS:
        raise ExportError(f"speaker encoder expects {mel_dim} mel bins, the front end makes {MEL_BINS}")
    spec = speaker_encoder_spec(MEL_BINS, speaker_embed_dim(encoder))
    example = torch.randn(2, 64, MEL_BINS) - 5.0
    t0 = time.perf_counter()
    export_inline(_SpeakerEncoderGraph(encoder).eval(), (example,), spec, out_dir, opset=opset)
    report: dict[str, Any] = {
        "file": spec.filename,
        "graph": spec.to_json(),
        "exporter": EXPORTER_INLINE,
        "embed_dim": speaker_embed_dim(encoder),
        "min_mel_frames": speaker_min_mel_frames(encoder),
        "export_seconds": round(time.perf_counter() - t0, 1),
    }
    if validate:
        report["validation"] = validate_speaker_encoder(encoder, out_dir)
    return report


# --- speech encoder (Mimi) --------------------------------------------------------------------


def get_speech_tokenizer(model: Any) -> Any:
    """Qwen3TTSTokenizerV2Model from itself, Qwen3TTSTokenizer, Qwen3TTSForConditionalGeneration or
    Qwen3TTSModel."""
    obj = model
    for _ in range(4):
        if hasattr(obj, "encoder_valid_num_quantizers") and hasattr(obj, "encoder"):
            return obj
        nxt = getattr(obj, "speech_tokenizer", None)
        if nxt is None:
            nxt = getattr(obj, "model", None)
        if nxt is None:
            break
        obj = nxt
    raise ExportError(f"no 12 Hz speech tokenizer in {type(model).__name__}")


def _conv_ints(module: Any) -> tuple[nn.Conv1d, int, int, int]:
    """(conv, effective kernel, stride, padding_total) of a MimiConv1d as Python ints."""
    conv = module.conv
    k = (int(conv.kernel_size[0]) - 1) * int(conv.dilation[0]) + 1
    s = int(conv.stride[0])
    return conv, k, s, k - s


class _MimiConv(nn.Module):
    """MimiConv1d.forward (no streaming cache) with the padding computed from Python ints."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.conv, self.k, self.s, self.pad_total = _conv_ints(module)
        self.causal = bool(module.causal)
        self.pad_mode = str(module.pad_mode)
        if self.pad_mode not in ("constant", "replicate", "reflect"):
            raise ExportError(f"speech encoder: unsupported conv pad mode {self.pad_mode!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        # Reference: n_frames = ceil((L - k + pad_total) / s + 1) - 1, ideal = n_frames * s + k - pad_total.
        # pad_total = k - s, so ideal = ceil(L / s) * s. Only non-negative integer division here: ONNX
        # integer Div truncates, Python's // floors.
        extra = (length + self.s - 1) // self.s * self.s - length
        if self.causal:
            pads = (self.pad_total, extra)
        else:
            right = self.pad_total // 2
            pads = (self.pad_total - right, right + extra)
        if self.pad_mode == "constant":
            x = F.pad(x, pads, mode="constant", value=0.0)
        else:
            x = F.pad(x, pads, mode=self.pad_mode)
        return self.conv(x)


class _MimiResnet(nn.Module):
    def __init__(self, module: Any) -> None:
        super().__init__()
        self.block = nn.ModuleList([_wrap_encoder_layer(m) for m in module.block])
        sc = module.shortcut
        self.shortcut = _MimiConv(sc) if hasattr(sc, "conv") else sc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.shortcut(x)
        h = x
        for layer in self.block:
            h = layer(h)
        return residual + h


def _wrap_encoder_layer(m: Any) -> Any:
    name = type(m).__name__
    if name == "MimiConv1d":
        return _MimiConv(m)
    if name == "MimiResnetBlock":
        return _MimiResnet(m)
    if isinstance(m, (nn.ELU, nn.Identity)):
        return m
    raise ExportError(f"speech encoder: unexpected encoder layer {name}")


class SpeechEncoderGraph(nn.Module):
    """audio [B, L] float32 (24 kHz) -> codes [B, ceil(L / 1920), n_q] int64."""

    codebooks: torch.Tensor
    codebooks_padded: torch.Tensor

    def __init__(self, tokenizer: Any) -> None:
        super().__init__()
        mimi = tokenizer.encoder
        cfg = mimi.config
        self.num_quantizers = int(tokenizer.encoder_valid_num_quantizers)
        if not 1 <= self.num_quantizers <= int(cfg.num_quantizers):
            raise ExportError(
                f"speech encoder: {self.num_quantizers} valid quantizers of {cfg.num_quantizers}"
            )
        if mimi.downsample is None:
            raise ExportError("speech encoder: Mimi without a downsample conv is not supported")
        rope_type = getattr(mimi.encoder_transformer.layers[0].self_attn.rotary_emb, "rope_type", "default")
        if rope_type != "default":
            raise ExportError(f"speech encoder: rope type {rope_type!r} is not supported")
        self.layers = nn.ModuleList([_wrap_encoder_layer(m) for m in mimi.encoder.layers])
        self.transformer = mimi.encoder_transformer
        self.downsample = _MimiConv(mimi.downsample)
        self.quantizer = mimi.quantizer
        n_sem = int(self.quantizer.num_semantic_quantizers)
        self.plan: list[tuple[Any, int]] = [
            (self.quantizer.semantic_residual_vector_quantizer, min(n_sem, self.num_quantizers))
        ]
        if self.num_quantizers > n_sem:
            self.plan.append((self.quantizer.acoustic_residual_vector_quantizer, self.num_quantizers - n_sem))
        tables = []
        for rvq, n in self.plan:
            for layer in rvq.layers[:n]:
                cb = layer.codebook
                with torch.no_grad():
                    tables.append(cb.embed_sum / cb.cluster_usage.clamp(min=cb.epsilon)[:, None])
        self.register_buffer("codebooks", torch.stack(tables).float().detach().clone(), persistent=False)
        # torch.cdist(x, y) with more than 25 codebook entries computes sqrt(clamp(|x|^2 - 2 x.y + |y|^2, 0))
        # as one matmul of padded operands; mirrored here so near-ties resolve as in the reference.
        norms = self.codebooks.pow(2).sum(-1, keepdim=True)
        self.register_buffer(
            "codebooks_padded",
            torch.cat([self.codebooks, torch.ones_like(norms), norms], dim=-1).detach().clone(),
            persistent=False,
        )

    def _transformer(self, h: torch.Tensor) -> torch.Tensor:
        """MimiTransformerModel on a whole utterance: plain causal attention (transformers 4.57's
        create_causal_mask ignores the config's sliding_window; validated against the reference)."""
        bsz, t = h.shape[0], h.shape[1]
        pos = torch.arange(t, dtype=torch.int64)
        allowed = pos[None, :] <= pos[:, None]
        mask = torch.where(allowed, 0.0, torch.finfo(h.dtype).min).to(h.dtype)[None, None]
        for layer in self.transformer.layers:
            attn = layer.self_attn
            rot = attn.rotary_emb
            freqs = pos.float()[:, None] * rot.inv_freq.float()[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = (emb.cos() * rot.attention_scaling).to(h.dtype)[None, None]
            sin = (emb.sin() * rot.attention_scaling).to(h.dtype)[None, None]
            residual = h
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(bsz, t, attn.num_heads, attn.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(bsz, t, attn.num_key_value_heads, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(bsz, t, attn.num_key_value_heads, attn.head_dim).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if attn.num_key_value_groups > 1:
                k = k.repeat_interleave(attn.num_key_value_groups, dim=1)
                v = v.repeat_interleave(attn.num_key_value_groups, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) * attn.scaling + mask
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            o = torch.matmul(probs, v).transpose(1, 2).reshape(bsz, t, -1)
            h = residual + layer.self_attn_layer_scale(attn.o_proj(o))
            residual = h
            h = residual + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(h)))
        return h

    def _quantize(self, emb: torch.Tensor) -> torch.Tensor:
        """MimiSplitResidualVectorQuantizer.encode for the first num_quantizers codebooks -> [B, T, n_q]."""
        codes = []
        gi = 0
        for rvq, n in self.plan:
            residual = rvq.input_proj(emb) if rvq.input_proj is not None else emb
            for _ in range(n):
                x = residual.permute(0, 2, 1).float()  # [B, T, D]
                x_norm = x.pow(2).sum(-1, keepdim=True)
                x_pad = torch.cat([x * -2.0, x_norm, torch.ones_like(x_norm)], dim=-1)
                d2 = torch.matmul(x_pad, self.codebooks_padded[gi].transpose(0, 1))  # [B, T, K]
                idx = d2.clamp(min=0.0).sqrt().argmin(dim=-1)
                quantized = F.embedding(idx, self.codebooks[gi]).permute(0, 2, 1)
                residual = residual - quantized
                codes.append(idx)
                gi += 1
        return torch.stack(codes, dim=-1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        h = audio[:, None, :]
        for layer in self.layers:
            h = layer(h)
        h = self._transformer(h.transpose(1, 2)).transpose(1, 2)
        h = self.downsample(h)
        return self._quantize(h)



def reference_encode(tokenizer: Any, audio: np.ndarray) -> np.ndarray:
    """The reference Qwen3TTSTokenizerV2Model.encode on one unbatched waveform -> codes [frames, n_q]."""
    x = torch.from_numpy(np.asarray(audio, np.float32))[None]
    with torch.no_grad():
        out = tokenizer.encode(x, torch.ones_like(x, dtype=torch.long), return_dict=True)
    return out.audio_codes[0].numpy().astype(np.int64)


def validate_speech_encoder(
    tokenizer: Any, out_dir: Path, *, seconds: tuple[float, ...] = (0.5, 1.3, 3.0)
) -> dict[str, Any]:
    """Codes must equal the reference encode exactly, for unpadded lengths and zero-padded to 1920."""
    sess = ort_session(
        Path(out_dir) / speech_encoder_spec(int(tokenizer.encoder_valid_num_quantizers)).filename
    )
    spf = int(tokenizer.encode_downsample_rate)
    checked = []
    padded_vs_unpadded_mismatch = 0
    for i, sec in enumerate(seconds):
        audio = validation_audio(sec, seed=i)
        padded = np.pad(audio, (0, (-len(audio)) % spf))
        for what, x in (("unpadded", audio), ("padded", padded)):
            ref = reference_encode(tokenizer, x)
            try:
                (got,) = sess.run(None, {"audio": x[None]})
            except Exception as exc:
                raise ExportError(f"speech_encoder graph failed to run on {len(x)} samples: {exc}") from exc
            if got.shape[1:] != ref.shape or not np.array_equal(got[0], ref):
                diff = int(np.sum(got[0] != ref)) if got.shape[1:] == ref.shape else -1
                raise ExportError(
                    f"speech_encoder validation ({sec} s {what}, {len(x)} samples): codes {got.shape} differ "
                    f"from reference {ref.shape} ({diff} codes)"
                )
            checked.append(len(x))
            if what == "padded":
                unpadded = reference_encode(tokenizer, audio)
                padded_vs_unpadded_mismatch += int(np.sum(unpadded != ref))
    # A batch of two rows of equal length == each row encoded alone.
    audio2 = np.stack([validation_audio(1.0, seed=7), validation_audio(1.0, seed=8)])
    try:
        (got2,) = sess.run(None, {"audio": audio2})
    except Exception as exc:
        raise ExportError(f"speech_encoder graph failed to run on a batch of 2: {exc}") from exc
    for r in range(2):
        if not np.array_equal(got2[r], reference_encode(tokenizer, audio2[r])):
            raise ExportError("speech_encoder validation: batched rows differ from the reference")
    return {
        "lengths": checked,
        "codes_identical": True,
        # Informational: how many codes of the reference itself change when the caller zero-pads.
        "reference_padded_vs_unpadded_code_diffs": padded_vs_unpadded_mismatch,
    }


def export_speech_encoder(
    speech_tokenizer_model: Any,
    out_dir: Path,
    *,
    opset: int = DEFAULT_OPSET,
    validate: bool = True,
) -> dict[str, Any]:
    """Write speech_encoder.onnx (audio [B, samples] -> codes [B, frames, n_q]) and validate it."""
    out_dir = Path(out_dir)
    tokenizer = get_speech_tokenizer(speech_tokenizer_model)
    if next(tokenizer.encoder.parameters()).dtype != torch.float32:
        raise ExportError("speech encoder export needs float32 weights")
    tokenizer.eval()
    spf = int(tokenizer.encode_downsample_rate)
    n_q = int(tokenizer.encoder_valid_num_quantizers)
    spec = speech_encoder_spec(n_q)
    graph = SpeechEncoderGraph(tokenizer).eval()
    example = torch.from_numpy(np.stack([validation_audio(0.9, 1), validation_audio(0.9, 2)]))
    t0 = time.perf_counter()
    export_inline(graph, (example,), spec, out_dir, opset=opset)
    report: dict[str, Any] = {
        "file": spec.filename,
        "graph": spec.to_json(),
        "exporter": EXPORTER_INLINE,
        "num_groups": n_q,
        "samples_per_frame": spf,
        "sample_rate": int(tokenizer.input_sample_rate),
        "export_seconds": round(time.perf_counter() - t0, 1),
    }
    if validate:
        report["validation"] = validate_speech_encoder(tokenizer, out_dir)
    return report
