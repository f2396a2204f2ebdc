"""Voxtral TTS's export of the tiny checkpoint, and its exported graphs run one request at a time
(ttscore/runtime/families/voxtral_tts/generate.py) against the reference (tests/voxtral_tts_reference.py:
vLLM-Omni 0.30.0's modules around transformers' MistralModel), the flow-matching noise fed identically,
for two preset voices: semantic and acoustic codes exactly, audio within 1e-4 (the graphs' float32 against
torch's); the audio streamed in chunks of 1 and 3 frames equals the whole decode within 1e-5."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny, voxtral_artifacts)
from voxtral_tts_fixtures import reference

from ttscore.contract import voxtral_tts as spec
from ttscore.runtime.families.voxtral_tts.flow import frame_noise
from ttscore.runtime.families.voxtral_tts.generate import VoxtralGraphs

pytestmark = [pytest.mark.export, pytest.mark.parity]

CASES = [{"text": "Good morning, how are you?", "voice": "casual_male", "max_new_tokens": 14, "cfg_alpha": 1.2,
          "seed": 7},
         {"text": "Salut", "voice": "neutral_female", "max_new_tokens": 9, "cfg_alpha": 2.0, "seed": 8}]
TOL = 1e-4


def test_manifest(voxtral_artifacts: Path) -> None:
    m = json.loads((voxtral_artifacts / "manifest.json").read_text())
    assert m["family"] == "voxtral_tts"
    assert set(m["graphs"]) == set(spec.GRAPH_NAMES)
    assert m["graphs"]["lm_step"]["validation"]["max_abs_error"]["semantic_code"] == 0.0
    assert m["sample_rate"] == 24000 and m["samples_per_frame"] == 1920
    assert (voxtral_artifacts / "voice_casual_male.npy").is_file()
    assert (voxtral_artifacts / "tokenizer" / "tekken.json").is_file()


def test_graphs_match_reference(voxtral_tiny: Path, voxtral_artifacts: Path) -> None:
    graphs = VoxtralGraphs(voxtral_artifacts)
    n_ac = graphs.sizes["n_acoustic_codebook"]
    noise = {f"noise_{i}": frame_noise(c["seed"], c["max_new_tokens"], n_ac) for i, c in enumerate(CASES)}
    ref = reference(voxtral_tiny, CASES, noise)
    for i, case in enumerate(CASES):
        got = graphs.generate(ref[f"prompt_ids_{i}"], case["voice"], noise[f"noise_{i}"], case["max_new_tokens"],
                              case["cfg_alpha"], chunk_frames=3)
        want = ref[f"codes_{i}"]
        assert len(want) >= 3, "the case must produce frames"
        np.testing.assert_array_equal(got.codes[:, 0], want[:, 0])
        np.testing.assert_array_equal(got.codes, want)
        assert got.stopped == bool(ref[f"stopped_{i}"])
        assert got.pcm.shape == ref[f"audio_{i}"].shape
        np.testing.assert_allclose(got.pcm, ref[f"audio_{i}"], atol=TOL, rtol=0)
        for chunk in (1, 1000):
            np.testing.assert_allclose(graphs.decode(got.codes, chunk), got.pcm, atol=1e-5, rtol=0)


def test_seed_controls_noise(voxtral_artifacts: Path) -> None:
    graphs = VoxtralGraphs(voxtral_artifacts)
    prompt = np.array([1, 25, 24, 24, 24, 35, 112, 36, 25], np.int64)
    n_ac = graphs.sizes["n_acoustic_codebook"]
    a = graphs.generate(prompt, "casual_male", frame_noise(1, 5, n_ac), 5, 1.2)
    b = graphs.generate(prompt, "casual_male", frame_noise(1, 5, n_ac), 5, 1.2)
    c = graphs.generate(prompt, "casual_male", frame_noise(2, 5, n_ac), 5, 1.2)
    np.testing.assert_array_equal(a.codes, b.codes)
    assert not np.array_equal(a.codes[:, 1:], c.codes[:, 1:])


def test_int8_export_is_measured_against_fp32(voxtral_tiny: Path, tmp_path: Path) -> None:
    """--precision int8: lm_step and velocity quantized (codec_stream while its SNR holds), each with its
    measurement against the fp32 graph; the export still synthesizes through the family's offline path, graph
    files under their fp32 names."""
    from sequences import say_offline

    from export.exporter import export_checkpoint
    from export.quantize import INT8_METHOD, VOCODER_MIN_SNR_DB, quantized_ops

    out = tmp_path / "int8"
    export_checkpoint(voxtral_tiny, out, precision="int8")
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["precision"] == "int8"
    for name in ("lm_step", "velocity"):
        v = raw["graphs"][name]["validation"]
        assert v["quantized"] == INT8_METHOD and v["vs_fp32"]["snr_db"] > 20, name
        assert quantized_ops(out / f"{name}.onnx") == {"MatMulInteger"}, name
    assert raw["graphs"]["lm_step"]["validation"]["vs_fp32"]["max_abs_err"]["semantic_code"] == 0.0
    codec = raw["graphs"]["codec_stream"]["validation"]
    kept = codec["vs_fp32"]["snr_db"] >= VOCODER_MIN_SNR_DB
    assert (codec["quantized"] is not None) == kept and bool(quantized_ops(out / "codec_stream.onnx")) == kept
    pcm, frames, _ = say_offline(out, text="Quantized speech.", voice="casual_male", max_new_tokens=6, seed=3)
    assert frames > 0 and pcm.shape == (raw["samples_per_frame"] * frames,) and np.isfinite(pcm).all()
