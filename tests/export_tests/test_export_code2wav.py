"""code2wav export: exact streaming == offline == reference decoder forward, on a tiny random decoder
with the real sliding window (72), rates (1920 samples per frame) and 16 codebooks."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from qwen3_tts_tokenizers import TINY_DECODER, TINY_MIMI, tokenizer_model  # noqa: E402

from export.qwen3_tts.code2wav import (  # noqa: E402
    Code2WavStream,
    build_state_layout,
    export_code2wav,
    get_decoder,
    reference_decode,
    stream_decode,
    validate_code2wav,
)
from export.qwen3_tts.reference import reference_imports  # noqa: E402
from export.tracing import ort_session  # noqa: E402
from ttscore.contract.errors import ExportError  # noqa: E402

DECODER = {**TINY_DECODER, "codebook_size": 2048, "num_quantizers": 16, "sliding_window": 72,
           "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "rms_norm_eps": 1e-5}
SPF = 1920
WINDOW = 72


def tiny_tokenizer(seed: int = 0, gain: float = 0.4):
    """Qwen3TTSTokenizerV2Model with a tiny decoder whose weights make a non-silent, unclipped signal.

    Default init leaves the RVQ codebooks at zero (silence) and conv weights too small to matter, so
    every conv/linear gets fan-in scaled noise and codebooks, SnakeBeta and layer scales are randomized."""
    with reference_imports():
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
            EuclideanCodebook,
            Qwen3TTSTokenizerV2DecoderLayerScale,
            SnakeBeta,
        )

    model = tokenizer_model(seed, TINY_MIMI, DECODER)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.decoder.modules():
            if isinstance(mod, (torch.nn.Conv1d, torch.nn.ConvTranspose1d, torch.nn.Linear)):
                w = mod.weight
                fan_in = w.shape[1] * (w.shape[2] if w.dim() == 3 else 1)
                if isinstance(mod, torch.nn.ConvTranspose1d):
                    fan_in = w.shape[0] * w.shape[2] // max(1, mod.stride[0])
                w.copy_(torch.randn(w.shape, generator=g) * (gain / fan_in) ** 0.5)
                if mod.bias is not None:
                    mod.bias.copy_(0.05 * torch.randn(mod.bias.shape, generator=g))
            if isinstance(mod, EuclideanCodebook):
                mod.embedding_sum.copy_(torch.randn(mod.embedding_sum.shape, generator=g))
                mod.cluster_usage.copy_(torch.rand(mod.cluster_usage.shape, generator=g) + 0.5)
            if isinstance(mod, SnakeBeta):
                mod.alpha.copy_(0.3 * torch.randn(mod.alpha.shape, generator=g))
                mod.beta.copy_(0.3 * torch.randn(mod.beta.shape, generator=g))
            if isinstance(mod, Qwen3TTSTokenizerV2DecoderLayerScale):
                mod.scale.copy_(0.5 + 0.2 * torch.randn(mod.scale.shape, generator=g))
            if isinstance(getattr(mod, "gamma", None), torch.nn.Parameter):
                mod.gamma.copy_(0.3 * torch.randn(mod.gamma.shape, generator=g))
    return model


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def exported(tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("code2wav")
    report = export_code2wav(tokenizer, out)
    return out, report


@pytest.fixture(scope="module")
def sessions(exported):
    out, _ = exported
    return ort_session(out / "code2wav_stream.onnx"), ort_session(out / "code2wav.onnx")


def _codes(batch: int, frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2048, (batch, frames, 16), dtype=np.int64)


@pytest.mark.unit
def test_state_layout_covers_every_history(tokenizer):
    layout = build_state_layout(tokenizer.decoder)
    names = [e.name for e in layout]
    assert len(names) == len(set(names))
    offsets = [e.offset for e in layout]
    sizes = [e.size for e in layout]
    assert offsets == list(np.cumsum([0, *sizes[:-1]]))
    kv = [e for e in layout if e.name.endswith((".key", ".value"))]
    assert len(kv) == 2 * 2 and all(e.shape == (2, WINDOW - 1, 16) for e in kv)
    # 4 decoder blocks: one transconv overlap sample + residual convs with dilations 1, 3, 9 (kernel 7)
    convs = {e.name: e.shape for e in layout}
    assert convs["pre_conv"] == (32, 2)
    assert convs["decoder.1.block.1"] == (96, 1)
    assert [convs[f"decoder.1.block.{u}.conv1"][1] for u in (2, 3, 4)] == [6, 18, 54]
    assert convs["decoder.6"] == (6, 6)
    assert Code2WavStream(tokenizer.decoder).state_size == sum(sizes)


@pytest.mark.unit
def test_get_decoder_rejects_other_objects():
    with pytest.raises(ExportError):
        get_decoder(object())


@pytest.mark.export
def test_export_report(exported):
    out, report = exported
    assert (out / "code2wav_stream.onnx").is_file() and (out / "code2wav.onnx").is_file()
    assert report["samples_per_frame"] == SPF and report["sliding_window"] == WINDOW
    assert report["state_size"] == sum(int(np.prod(s)) for _, s in report["state_layout"])
    v = report["validation"]
    assert v["offline_max_abs_err"] < 1e-4
    assert max(v["stream_max_abs_err"].values()) < 1e-4
    assert v["batched_rows_max_abs_err"] < 1e-4
    g = report["graphs"]["code2wav_stream"]
    assert [t["name"] for t in g["inputs"]] == ["codes", "state", "position"]
    assert g["inputs"][1]["dims"] == ["batch", report["state_size"]]


@pytest.mark.export
def test_graph_io_matches_spec(exported, sessions):
    _, report = exported
    stream, offline = sessions
    assert [(i.name, i.shape) for i in stream.get_inputs()] == [
        ("codes", ["batch", "frames", 16]),
        ("state", ["batch", report["state_size"]]),
        ("position", ["batch"]),
    ]
    assert [(o.name, o.shape) for o in stream.get_outputs()] == [
        ("pcm", ["batch", "samples"]),
        ("new_state", ["batch", report["state_size"]]),
    ]
    assert [(i.name, i.type) for i in offline.get_inputs()] == [("codes", "tensor(int64)")]
    assert [o.name for o in offline.get_outputs()] == ["pcm"]


@pytest.mark.export
@pytest.mark.parametrize("chunks", [[1, 1, 3, 7, 1], [1], [25], [2, 71, 1, 1]])
def test_streaming_equals_offline_and_reference(tokenizer, sessions, chunks):
    stream, offline = sessions
    codes = _codes(1, 110, seed=sum(chunks))
    ref = reference_decode(tokenizer.decoder, codes)
    assert ref.std() > 0.02 and np.mean(np.abs(ref) >= 1.0) < 0.01  # a real, mostly unclipped signal
    (off,) = offline.run(None, {"codes": codes})
    pcm, state = stream_decode(stream, codes, chunks)
    assert pcm.shape == (1, 110 * SPF)
    assert np.max(np.abs(off - ref)) < 1e-4
    assert np.max(np.abs(pcm - ref)) < 1e-4
    assert np.max(np.abs(pcm - off)) < 1e-4
    assert np.any(state != 0)


@pytest.mark.export
def test_batched_rows_at_different_positions(tokenizer, sessions):
    stream, _ = sessions
    starts = [0, 40, 90]  # one row fresh, one inside the window, one past it
    n = 4
    seqs = _codes(3, max(starts) + n, seed=3)
    states, singles = [], []
    for r, p in enumerate(starts):
        row = seqs[r : r + 1]
        if p:
            _, st = stream_decode(stream, row[:, :p], [9, 1])
        else:
            st = np.zeros((1, stream.get_inputs()[1].shape[1]), np.float32)
        states.append(st)
        single, _ = stream.run(None, {"codes": row[:, p : p + n], "state": st, "position": np.array([p])})
        singles.append(single)
        ref = reference_decode(tokenizer.decoder, row[:, : p + n])[:, p * SPF :]
        assert np.max(np.abs(single - ref)) < 1e-4
    pcm, new_state = stream.run(
        None,
        {
            "codes": np.concatenate([seqs[r : r + 1, p : p + n] for r, p in enumerate(starts)]),
            "state": np.concatenate(states),
            "position": np.array(starts, np.int64),
        },
    )
    for r in range(3):
        assert np.max(np.abs(pcm[r] - singles[r][0])) < 1e-5
    assert new_state.shape == (3, stream.get_inputs()[1].shape[1])


@pytest.mark.export
def test_wrong_weight_fails_validation(tokenizer, exported):
    out, _ = exported
    w = tokenizer.decoder.decoder[0].conv.weight
    saved = w.detach().clone()
    try:
        with torch.no_grad():
            w.mul_(1.01)
        with pytest.raises(ExportError, match="max abs error"):
            validate_code2wav(tokenizer.decoder, out, frames=WINDOW + 2)
    finally:
        with torch.no_grad():
            w.copy_(saved)


@pytest.mark.export
def test_corrupted_graph_fails_validation(tokenizer, exported, tmp_path):
    out, _ = exported
    for name in ("code2wav.onnx", "code2wav_stream.onnx"):
        shutil.copy(out / name, tmp_path / name)
    data = (tmp_path / "code2wav_stream.onnx").read_bytes()
    (tmp_path / "code2wav_stream.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ExportError):
        validate_code2wav(tokenizer.decoder, tmp_path)


@pytest.mark.export
def test_wrong_weight_inside_graph_fails_validation(tokenizer, exported, tmp_path):
    import onnx
    from onnx import numpy_helper

    out, _ = exported
    shutil.copy(out / "code2wav.onnx", tmp_path / "code2wav.onnx")
    model = onnx.load(str(out / "code2wav_stream.onnx"))
    conv_w = next(
        t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 3
    )
    arr = numpy_helper.to_array(conv_w).copy()
    arr.flat[0] += 0.5
    conv_w.CopyFrom(numpy_helper.from_array(arr, conv_w.name))
    onnx.save(model, str(tmp_path / "code2wav_stream.onnx"))
    with pytest.raises(ExportError, match="stream"):
        validate_code2wav(tokenizer.decoder, tmp_path, frames=WINDOW + 2)


@pytest.mark.export
def test_validation_needs_frames_past_the_window(tokenizer, exported):
    out, _ = exported
    with pytest.raises(ExportError, match="sliding window"):
        validate_code2wav(tokenizer.decoder, Path(out), frames=WINDOW)


def test_quantized_vocoder_is_measured_and_kept_only_within_tolerance(exported, tmp_path, monkeypatch):
    import shutil

    from export import quantize
    from export.qwen3_tts import exporter

    out, _ = exported
    path = tmp_path / "code2wav_stream.onnx"
    for suffix in ("", ".data"):  # the graph and its external weights, if any
        if (out / f"code2wav_stream.onnx{suffix}").exists():
            shutil.copy2(out / f"code2wav_stream.onnx{suffix}", tmp_path / f"code2wav_stream.onnx{suffix}")
    original = path.read_bytes()
    monkeypatch.setattr(quantize, "VOCODER_MIN_SNR_DB", 1000.0)  # no quantized vocoder is that close
    rep = exporter._quantize(None, path, "code2wav_stream", "int8")
    assert rep["quantized"] is None and rep["vs_fp32"]["kept"].startswith("fp32")
    assert path.read_bytes() == original and not list(tmp_path.glob("*.int8*"))
    monkeypatch.setattr(quantize, "VOCODER_MIN_SNR_DB", -1000.0)
    rep = exporter._quantize(None, path, "code2wav_stream", "int8")
    assert rep["quantized"].startswith("int8") and np.isfinite(rep["vs_fp32"]["snr_db"])
    assert path.read_bytes() != original
