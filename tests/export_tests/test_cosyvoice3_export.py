"""`export` of a CosyVoice3 checkpoint: lm_step, flow_cond, flow_velocity and hift, each checked against
export/cosyvoice3/graphs.py's torch modules while exporting; those modules against the reference's
(vLLM-Omni's flow/HiFT and Qwen2ForCausalLM) module by module."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny, cosyvoice3_artifacts)

pytestmark = pytest.mark.unit


def test_detected_and_exported(cosyvoice3_tiny: Path, cosyvoice3_artifacts: Path) -> None:
    from export.families import family_of
    from ttscore.contract.manifest import read_manifest

    assert family_of(cosyvoice3_tiny).name == "cosyvoice3"
    m = read_manifest(cosyvoice3_artifacts)
    raw = json.loads((cosyvoice3_artifacts / "manifest.json").read_text())
    assert raw["family"] == "cosyvoice3" and m.sample_rate == 24000 and m.samples_per_frame == 960
    assert set(raw["graphs"]) == {"lm_step", "flow_cond", "flow_velocity", "hift"}
    assert raw["vocoder"] == {"state_size": 1, "state_layout": [["hop_stream", 1]]}
    for name, g in raw["graphs"].items():
        for out, err in g["validation"]["max_abs_error"].items():
            assert err <= g["validation"]["tolerance"][out], (name, out, err)
    assert raw["export"], "peak RSS per stage"
    text = np.load(cosyvoice3_artifacts / "text_embedding.npy")
    speech = np.load(cosyvoice3_artifacts / "speech_embedding.npy")
    assert text.shape == (768, 64) and speech.shape == (6761, 64)
    assert {p.name for p in (cosyvoice3_artifacts / "tokenizer").iterdir()} >= {"vocab.json", "merges.txt", "tokenizer_config.json"}


def test_int8_export_is_measured_against_fp32(cosyvoice3_tiny: Path, tmp_path: Path) -> None:
    """--precision int8: lm_step quantized, flow_velocity quantized only at the vocoder's SNR bar, each with
    its measurement against the fp32 graph; flow_cond and hift stay fp32; the export still synthesizes (the
    LM's tokens, then the hop stream)."""
    from export.exporter import export_checkpoint
    from export.quantize import VOCODER_MIN_SNR_DB
    from ttscore.runtime.families.cosyvoice3 import sampling
    from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs, Prompt

    out = tmp_path / "int8"
    export_checkpoint(cosyvoice3_tiny, out, precision="int8")
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["precision"] == "int8"
    lm = raw["graphs"]["lm_step"]["validation"]
    assert lm["quantized"].startswith("int8") and lm["vs_fp32"]["snr_db"] > 20
    flow = raw["graphs"]["flow_velocity"]["validation"]
    assert "snr_db" in flow["vs_fp32"] and (flow["quantized"] is not None) == (flow["vs_fp32"]["snr_db"] >= VOCODER_MIN_SNR_DB)
    for name in ("flow_cond", "hift"):
        assert "quantized" not in raw["graphs"][name]["validation"], name
    g = CosyVoice3Graphs(out)
    rng = np.random.default_rng(1)
    prompt = Prompt(np.array([5, 6, 7]), rng.integers(0, g.speech_token_size, 9),
                    rng.standard_normal((18, g.mel_dim)).astype(np.float32) - 4, rng.standard_normal(192).astype(np.float32))
    toks = g.tokens(prompt, sampling.ras_noise(1, 50, g.speech_token_size + 200), 45, 50)
    audio = np.concatenate(list(g.stream(prompt, toks, sampling.flow_noise(1, g.mel_dim, 2 * (len(toks) + 9)))))
    assert audio.shape == (len(toks) * 2 * g.samples_per_mel,) and np.isfinite(audio).all()
