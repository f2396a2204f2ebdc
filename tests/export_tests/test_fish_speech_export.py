"""Fish Speech S2 Pro's export of the tiny checkpoint: the manifest (family, the four graphs with their validation
against the torch modules, the exact streaming decoder's state), the tables (served: tests/runtime_tests/test_fish_speech_serving.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny, fish_artifacts)

from ttscore.contract import fish_speech as spec

pytestmark = pytest.mark.export


def test_manifest(fish_artifacts: Path) -> None:
    from ttscore.contract.manifest import read_manifest

    m = read_manifest(fish_artifacts)
    raw = json.loads((fish_artifacts / "manifest.json").read_text())
    assert raw["family"] == spec.FAMILY and m.sample_rate == 44100 and m.samples_per_frame == 2048
    assert set(raw["graphs"]) == set(spec.GRAPH_NAMES)
    for name, g in raw["graphs"].items():
        report = g["validation"]
        for what, err in report["max_abs_error"].items():
            assert err <= report["tolerance"][what], (name, what)
    assert raw["graphs"]["dac_encode"]["validation"]["max_abs_error"]["codes"] == 0.0
    layout = raw["vocoder"]["state_layout"]
    assert layout[0] == ["frames", [1]] and ["post.0.k", [1, 127, 64]] in layout
    assert (m.vocoder_state_size or 0) > 127 * 64
    for table in (spec.EMBEDDINGS, spec.CODEBOOK_EMBEDDINGS, spec.FAST_EMBEDDINGS):
        assert (fish_artifacts / f"{table}.npy").is_file()
    assert (fish_artifacts / "tokenizer" / "tokenizer.json").is_file()


def test_int8_export_is_measured_against_fp32(fish_tiny: Path, tmp_path: Path) -> None:
    """--precision int8: slow_step, fast_step (and dac_stream while its SNR holds) quantized, each with its
    measurement against the fp32 graph; dac_encode stays fp32; the export still synthesizes."""
    import numpy as np
    from fish_speech_loop import synthesize

    from export.exporter import export_checkpoint
    from ttscore.runtime.families.fish_speech.artifacts import FishArtifacts

    out = tmp_path / "int8"
    export_checkpoint(fish_tiny, out, precision="int8")
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["precision"] == "int8"
    for name in ("slow_step", "fast_step"):
        v = raw["graphs"][name]["validation"]
        assert v["quantized"].startswith("int8") and v["vs_fp32"]["snr_db"] > 20, name
    stream = raw["graphs"]["dac_stream"]["validation"]
    assert "snr_db" in stream["vs_fp32"] and (stream["quantized"] is not None) == (stream["vs_fp32"]["snr_db"] >= 30)
    assert "quantized" not in raw["graphs"]["dac_encode"]["validation"]
    art = FishArtifacts(out)
    result, _ = synthesize(art, "Quantized speech.", max_new_tokens=4, seed=1)
    audio = art.decode(result.codes)
    assert audio.shape == (2048 * len(result.codes),) and np.isfinite(audio).all()
