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


def test_refuses_int8(cosyvoice3_tiny: Path, tmp_path: Path) -> None:
    from export.exporter import export_checkpoint
    from ttscore.contract.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="fp32 only"):
        export_checkpoint(cosyvoice3_tiny, tmp_path / "x", precision="int8")
