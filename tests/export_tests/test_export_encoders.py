"""Base front ends: speaker encoder and speech (Mimi) encoder export parity, the mel basis, and the
numpy audio front end (ttscore.runtime.audio) against the torch / librosa reference."""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from qwen3_tts_tokenizers import TINY_DECODER, TINY_MIMI, tokenizer_model  # noqa: E402

from export.qwen3_tts.encoders import (  # noqa: E402
    SpeechEncoderGraph,
    export_mel_filters,
    export_speaker_encoder,
    export_speech_encoder,
    mel_filters,
    reference_encode,
    validate_speaker_encoder,
    validate_speech_encoder,
)
from export.qwen3_tts.reference import reference_imports  # noqa: E402
from export.tracing import validation_audio  # noqa: E402
from ttscore.contract.errors import AudioDecodeError, ExportError, InvalidRequest  # noqa: E402
from ttscore.contract.qwen3_tts import MEL_BINS  # noqa: E402
from ttscore.runtime import audio as generic_audio  # noqa: E402
from ttscore.runtime.families.qwen3_tts import audio as ta  # noqa: E402


def tiny_speech_tokenizer(seed: int = 0, **mimi_overrides):
    """Tiny Qwen3TTSTokenizerV2Model whose Mimi codebooks are random (default init leaves them zero,
    which makes every code 0) and whose transformer layer scales are large enough to matter."""
    model = tokenizer_model(seed, {**TINY_MIMI, **mimi_overrides}, TINY_DECODER)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.encoder.modules():
            if type(mod).__name__ == "MimiLayerScale":
                mod.scale.copy_(0.3 + 0.1 * torch.randn(mod.scale.shape, generator=g))
        q = model.encoder.quantizer
        for rvq in (q.semantic_residual_vector_quantizer, q.acoustic_residual_vector_quantizer):
            for i, layer in enumerate(rvq.layers):
                cb = layer.codebook
                usage = torch.rand(cb.cluster_usage.shape, generator=g) + 0.5
                cb.cluster_usage.copy_(usage)
                cb.embed_sum.copy_(
                    torch.randn(cb.embed_sum.shape, generator=g) * 3.0 * 0.8**i * usage[:, None]
                )
                cb._embed = None
    return model


def tiny_speaker_encoder(seed: int = 0):
    with reference_imports():
        from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig
        from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSSpeakerEncoder

    torch.manual_seed(seed)
    cfg = Qwen3TTSSpeakerEncoderConfig(
        mel_dim=MEL_BINS,
        enc_dim=48,
        enc_channels=[32, 32, 32, 32, 96],
        enc_kernel_sizes=[5, 3, 3, 3, 1],
        enc_dilations=[1, 2, 3, 4, 1],
        enc_attention_channels=16,
        enc_res2net_scale=8,
        enc_se_channels=16,
    )
    return Qwen3TTSSpeakerEncoder(cfg).float().eval()


def torch_mel(audio: np.ndarray) -> np.ndarray:
    with reference_imports():
        from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram
    mel = mel_spectrogram(
        torch.from_numpy(audio)[None],
        n_fft=1024,
        num_mels=128,
        sampling_rate=24000,
        hop_size=256,
        win_size=1024,
        fmin=0,
        fmax=12000,
    )
    return mel.transpose(1, 2)[0].numpy()


@pytest.fixture(scope="module")
def speech_tokenizer():
    return tiny_speech_tokenizer()


@pytest.fixture(scope="module")
def speaker_encoder():
    return tiny_speaker_encoder()


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("encoders")


@pytest.fixture(scope="module")
def speaker_report(speaker_encoder, out_dir):
    return export_speaker_encoder(speaker_encoder, out_dir)


@pytest.fixture(scope="module")
def speech_report(speech_tokenizer, out_dir):
    return export_speech_encoder(speech_tokenizer, out_dir)


# --- speaker encoder --------------------------------------------------------------------------


@pytest.mark.export
def test_speaker_encoder_parity(speaker_encoder, speaker_report, out_dir):
    assert speaker_report["embed_dim"] == 48
    assert speaker_report["min_mel_frames"] == 5  # dilation 4, kernel 3: reflect pad 4
    assert speaker_report["validation"]["frame_counts"][0] == 5
    assert speaker_report["validation"]["max_abs_err"] < 1e-4
    from export.tracing import ort_session

    sess = ort_session(out_dir / "speaker_encoder.onnx")
    assert [(i.name, i.shape) for i in sess.get_inputs()] == [("mels", ["batch", "mel_frames", MEL_BINS])]
    assert [(o.name, o.shape) for o in sess.get_outputs()] == [("x_vector", ["batch", 48])]
    # The real front end feeding the graph: log_mel of 1.7 s of audio.
    mels = ta.log_mel(validation_audio(1.7, seed=3), mel_filters())[None]
    with torch.no_grad():
        ref = speaker_encoder(torch.from_numpy(mels)).numpy()
    (got,) = sess.run(None, {"mels": mels})
    assert np.max(np.abs(got - ref)) < 1e-4


@pytest.mark.export
def test_speaker_encoder_wrong_weight_fails(speaker_encoder, speaker_report, out_dir):
    w = speaker_encoder.fc.weight
    saved = w.detach().clone()
    try:
        with torch.no_grad():
            w.add_(0.05)
        with pytest.raises(ExportError, match="max abs error"):
            validate_speaker_encoder(speaker_encoder, out_dir)
    finally:
        with torch.no_grad():
            w.copy_(saved)


@pytest.mark.unit
def test_speaker_encoder_needs_one():
    with pytest.raises(ExportError):
        export_speaker_encoder(object(), "unused")


# --- speech encoder ---------------------------------------------------------------------------


@pytest.mark.export
def test_speech_encoder_codes_identical(speech_tokenizer, speech_report, out_dir):
    v = speech_report["validation"]
    assert v["codes_identical"]
    from export.tracing import ort_session

    sess = ort_session(out_dir / "speech_encoder.onnx")
    assert [(i.name, i.shape) for i in sess.get_inputs()] == [("audio", ["batch", "samples"])]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [("codes", "tensor(int64)")]
    for sec, seed in ((0.5, 11), (1.3, 12), (3.0, 13)):
        audio = validation_audio(sec, seed=seed)
        for x in (audio, ta.pad_to_frames(audio)):
            ref = reference_encode(speech_tokenizer, x)
            (got,) = sess.run(None, {"audio": x[None]})
            assert got.shape == (1, -(-len(audio) // 1920), 16)
            np.testing.assert_array_equal(got[0], ref)
            assert len(np.unique(ref)) > 50  # codebooks are really searched


@pytest.mark.export
def test_speech_encoder_padding_changes_only_last_frame(speech_tokenizer):
    """Documents a reference property the runtime must know: zero-padding to 1920 alters the last
    frame's codes (Mimi pads internally per conv layer), so unpadded audio is the exact reference."""
    audio = validation_audio(1.3, seed=5)  # 31200 samples, not a multiple of 1920
    a = reference_encode(speech_tokenizer, audio)
    b = reference_encode(speech_tokenizer, ta.pad_to_frames(audio))
    np.testing.assert_array_equal(a[:-1], b[:-1])


@pytest.mark.export
def test_speech_encoder_sliding_window_is_not_applied(out_dir, tmp_path):
    """transformers 4.57 encodes with a plain causal mask even when the Mimi config sets a window."""
    tok = tiny_speech_tokenizer(seed=1, sliding_window=5)
    graph = SpeechEncoderGraph(tok).eval()
    audio = validation_audio(2.0, seed=9)
    with torch.no_grad():
        got = graph(torch.from_numpy(audio)[None])[0].numpy()
    np.testing.assert_array_equal(got, reference_encode(tok, audio))


@pytest.mark.export
def test_speech_encoder_wrong_weight_and_corrupt_graph_fail(
    speech_tokenizer, speech_report, out_dir, tmp_path
):
    cb = speech_tokenizer.encoder.quantizer.semantic_residual_vector_quantizer.layers[0].codebook
    saved = cb.embed_sum.detach().clone()
    try:
        with torch.no_grad():
            cb.embed_sum.copy_(torch.roll(saved, 1, dims=0))
        cb._embed = None
        with pytest.raises(ExportError, match="differ"):
            validate_speech_encoder(speech_tokenizer, out_dir, seconds=(1.0,))
    finally:
        with torch.no_grad():
            cb.embed_sum.copy_(saved)
        cb._embed = None
    shutil.copy(out_dir / "speech_encoder.onnx", tmp_path / "speech_encoder.onnx")
    (tmp_path / "speech_encoder.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(ExportError):
        validate_speech_encoder(speech_tokenizer, tmp_path, seconds=(1.0,))


# --- mel basis and numpy front end ------------------------------------------------------------


@pytest.mark.export
def test_mel_filters_file(tmp_path):
    import librosa

    info = export_mel_filters(tmp_path)
    basis = np.load(tmp_path / info["file"])
    assert basis.dtype == np.float32 and basis.shape == (128, 513)
    np.testing.assert_array_equal(
        basis, librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000).astype(np.float32)
    )


@pytest.mark.unit
@pytest.mark.parametrize("n", [385, 1000, 24000, 60001])
def test_log_mel_matches_torch_reference(n):
    audio = validation_audio(n / 24000 + 1e-3, seed=n)[:n]
    if n == 60001:
        audio[20000:40000] = 0.0  # silence exercises the 1e-9 floor and the 1e-5 clamp
    ref = torch_mel(audio)
    got = ta.log_mel(audio, mel_filters())
    assert got.shape == ref.shape == (1 + (n + 768 - 1024) // 256, 128)
    assert got.dtype == np.float32
    assert np.max(np.abs(got - ref)) < 1e-4


@pytest.mark.unit
def test_log_mel_rejects_too_short():
    with pytest.raises(InvalidRequest) as ei:
        ta.log_mel(np.zeros(384, np.float32), mel_filters())
    assert ei.value.param == "ref_audio"


@pytest.mark.unit
@pytest.mark.parametrize("sr", [8000, 16000, 22050, 44100, 48000])
def test_resample_matches_librosa(sr):
    import librosa

    audio = (0.1 * np.random.default_rng(sr).standard_normal(sr + 7)).astype(np.float32)
    ref = librosa.resample(audio, orig_sr=sr, target_sr=24000)
    got = generic_audio.resample(audio, sr, 24000)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)
    assert generic_audio.resample(audio, 24000, 24000) is audio


@pytest.mark.unit
def test_load_audio_mono_mix_and_errors():
    import soundfile as sf

    rng = np.random.default_rng(0)
    stereo = (0.1 * rng.standard_normal((1600, 2))).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, stereo, 16000, format="FLAC", subtype="PCM_24")
    audio, sr = generic_audio.load_audio(buf.getvalue())
    ref, _ = sf.read(io.BytesIO(buf.getvalue()), dtype="float32")
    assert sr == 16000 and audio.dtype == np.float32 and audio.shape == (1600,)
    np.testing.assert_allclose(audio, ref.mean(axis=-1), atol=1e-7)
    for bad in (b"", b"RIFF....WAVEfmt garbage", bytes(1000)):
        with pytest.raises(AudioDecodeError) as ei:
            generic_audio.load_audio(bad)
        assert ei.value.param == "ref_audio"


@pytest.mark.unit
def test_pad_to_frames():
    assert ta.pad_to_frames(np.ones(1920, np.float32)).shape == (1920,)
    x = ta.pad_to_frames(np.ones(1921, np.float32))
    assert x.shape == (3840,) and x[1920:].sum() == 1.0
    assert ta.pad_to_frames(np.ones((2, 5)), 4).shape == (2, 8)
