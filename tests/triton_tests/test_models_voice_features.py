"""voice_features stages (audio_preprocess, speaker_encoder, speech_encoder) under the pb_utils fake."""

from __future__ import annotations

import numpy as np
import pytest
from fakes.artifacts import SPF
from fakes.loader import committed_config, load_model_module, model_args

from ttscore.backend import settings as model_settings
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.models


def load(model: str, artifacts) -> object:
    m = load_model_module(model).TritonPythonModel()
    m.initialize(model_args(committed_config(model, artifacts_dir=str(artifacts))))
    return m


def tone(seconds: float, sr: int) -> np.ndarray:
    return (0.1 * np.sin(2 * np.pi * 220 * np.arange(int(seconds * sr)) / sr)).astype(np.float32)


def test_audio_preprocess_resamples_and_computes_mels(fake_pb_utils, dummy_artifacts):
    m = load("audio_preprocess", dummy_artifacts)
    ok = fake_pb_utils.InferenceRequest({"audio": tone(1.0, 16000), "sample_rate": np.array([16000], np.int32)})
    short = fake_pb_utils.InferenceRequest({"audio": tone(0.01, 16000), "sample_rate": np.array([16000], np.int32)})
    bad_rate = fake_pb_utils.InferenceRequest({"audio": tone(1.0, 16000), "sample_rate": np.array([0], np.int32)})
    responses = m.execute([ok, short, bad_rate])
    assert [r.has_error() for r in responses] == [False, True, True]
    out = responses[0].as_dict()
    # 1 s at 16 kHz -> 24000 samples at 24 kHz, unpadded (the speech encoder takes any length)
    assert out["audio_24k"].dtype == np.float32 and out["audio_24k"].size == 24000
    assert out["mels"].ndim == 2 and out["mels"].shape[1] == 128 and out["mels"].dtype == np.float32
    for resp, param in zip(responses[1:], ("audio", "sample_rate"), strict=True):
        assert resp.error().code() == fake_pb_utils.TritonError.INVALID_ARG
        assert triton_io.parse_error(resp.error().message()).param == param


def test_speaker_encoder(fake_pb_utils, dummy_artifacts):
    m = load("speaker_encoder", dummy_artifacts)
    [resp] = m.execute([fake_pb_utils.InferenceRequest({"mels": np.ones((20, 128), np.float32)})])
    assert resp.as_dict()["x_vector"].shape == (8,)


def test_speech_encoder_returns_ceil_frames_and_fails_per_request(fake_pb_utils, dummy_artifacts):
    m = load("speech_encoder", dummy_artifacts)
    # (the real graph's ceil(samples / 1920) frames for any length is tested in test_export_encoders)
    good = fake_pb_utils.InferenceRequest({"audio": np.full(3 * SPF, 0.01, np.float32)})
    empty = fake_pb_utils.InferenceRequest({"audio": np.zeros(0, np.float32)})
    responses = m.execute([good, empty])
    assert responses[0].as_dict()["codes"].shape == (3, 16)
    assert responses[1].error().code() == fake_pb_utils.TritonError.INTERNAL


def test_missing_mel_filters_fail_fast(fake_pb_utils, dummy_artifacts, tmp_path):
    (tmp_path / "manifest.json").write_text((dummy_artifacts / "manifest.json").read_text())
    m = load_model_module("audio_preprocess").TritonPythonModel()
    with pytest.raises(model_settings.ModelSettingsError, match="mel_filters.npy"):
        m.initialize(model_args(committed_config("audio_preprocess", artifacts_dir=str(tmp_path))))
