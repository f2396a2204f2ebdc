"""The forced aligner's make-tiny checkpoint: the release's layout and config schema (what qwen-asr reads:
test_aligner_parity.py loads it there), the same bytes from `triton-tts make-tiny --aligner`, and the checkpoint
reader refusing what is not an aligner checkpoint, by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny)

from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.qwen3_forced_aligner.checkpoint import is_aligner, read_checkpoint

pytestmark = pytest.mark.export


def test_layout_and_config(aligner_tiny: Path) -> None:
    assert sorted(p.name for p in aligner_tiny.iterdir()) == [
        "config.json", "generation_config.json", "merges.txt", "model.safetensors", "preprocessor_config.json",
        "tokenizer_config.json", "vocab.json"]
    cfg = json.loads((aligner_tiny / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_asr" and cfg["thinker_config"]["model_type"] == "qwen3_forced_aligner"
    assert cfg["timestamp_segment_time"] == 80
    tok = json.loads((aligner_tiny / "tokenizer_config.json").read_text())
    added = {v["content"]: int(k) for k, v in tok["added_tokens_decoder"].items()}
    assert added[spec.TIMESTAMP] == cfg["timestamp_token_id"]
    assert added[spec.AUDIO_PAD] == cfg["thinker_config"]["audio_token_id"]
    pre = json.loads((aligner_tiny / "preprocessor_config.json").read_text())
    assert pre["feature_extractor_type"] == "WhisperFeatureExtractor" and pre["feature_size"] == 128
    info = read_checkpoint(aligner_tiny)
    assert info.classify_num == 64 and info.audio.chunk_frames == 100


def test_cli_writes_the_same_checkpoint(aligner_tiny: Path, tmp_path: Path) -> None:
    from triton_tts.cli import main

    assert main(["make-tiny", "--aligner", "--out", str(tmp_path / "a")]) == 0
    for p in aligner_tiny.iterdir():
        assert (tmp_path / "a" / p.name).read_bytes() == p.read_bytes(), p.name


def test_reader_refuses_by_name(aligner_tiny: Path, tmp_path: Path) -> None:
    bad = tmp_path / "asr"
    shutil.copytree(aligner_tiny, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["thinker_config"]["model_type"] = "qwen3_asr_thinker"  # a transcription checkpoint
    (bad / "config.json").write_text(json.dumps(cfg))
    assert not is_aligner(bad)
    with pytest.raises(CheckpointError, match="not the forced aligner"):
        read_checkpoint(bad)
    (bad / "preprocessor_config.json").unlink()
    with pytest.raises(CheckpointError, match="preprocessor_config.json"):
        read_checkpoint(bad)


def test_reader_names_missing_tensors(aligner_tiny: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "cut"
    shutil.copytree(aligner_tiny, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    del tensors["thinker.lm_head.weight"]
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="lm_head"):
        read_checkpoint(bad)


def test_real_size_is_the_releases_shape() -> None:
    """--size real: the release's dimensions."""
    import math

    from export.qwen3_forced_aligner.tiny import model_config
    from ttscore.runtime.qwen3_forced_aligner.checkpoint import parse_config, tensor_shapes

    cfg = model_config("real")
    info = parse_config(cfg)
    assert (info.classify_num, info.audio.layers, info.text.num_layers, info.text.hidden_size) == (5000, 24, 28, 1024)
    assert cfg["timestamp_segment_time"] == 80 and info.audio.n_window_infer // info.audio.chunk_frames == 8
    params = sum(math.prod(s) for s in tensor_shapes(info).values())
    assert 0.85e9 < params < 0.95e9, params  # encoder, 28-layer stack, 152064 x 1024 embedding, 5000-class head


def test_the_entry_resolves() -> None:
    from export.families import ALIGNER, FAMILIES

    assert ALIGNER.name not in FAMILIES  # no speech family
    for call in (ALIGNER.detect, ALIGNER.check, ALIGNER.export, ALIGNER.make_tiny):
        from ttscore.runtime.family import resolve

        resolve(call.target)  # type: ignore[attr-defined]
