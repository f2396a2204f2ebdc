"""The forced aligner against its reference, qwen-asr 0.0.6's Qwen3ForcedAligner: on a checkpoint the project did
not make (tests/aligner_foreign.py) and on make-tiny's (which qwen-asr loads as it loads the release), the same clip
and text give the same class in every `<timestamp>` slot and the same repaired word timestamps, in English, Chinese,
Japanese and Korean; the export's validation against the torch port is in its manifest; and a clip longer than an
attention window shows which attention the default follows (the reference's whole-clip attention)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny, aligner_artifacts, aligner_foreign, ...)
from aligner_fixtures import reference

from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.contract.errors import ExportError
from ttscore.contract.manifest import read_manifest

pytestmark = pytest.mark.export

CASES = (
    ("Hello, world! It's 3 o'clock, and the quick brown fox jumps.", "English", 2.3),
    ("今天天气很好，我们去公园散步吧。", "Chinese", 1.7),
    ("今日はいい天気ですね。公園に行きましょう！", "Japanese", 3.4),
    ("안녕하세요, 세계! 반갑습니다.", "Korean", 1.2),
)


def _clip(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * spec.SAMPLE_RATE)) * 0.1).astype(np.float32)


def reference_slots(ref: Any, clip: np.ndarray, text: str, language: str) -> list[int]:
    """The classes the reference's align() reads: argmax of the thinker's logits at its `<timestamp>` slots."""
    import torch

    words, prompt = ref.aligner_processor.encode_timestamp(text, language)
    inputs = ref.processor(text=[prompt], audio=[clip], return_tensors="pt", padding=True)
    with torch.inference_mode():
        classes = ref.model.thinker(**inputs).logits.argmax(dim=-1)[0]
    return [int(c) for c in classes[inputs["input_ids"][0] == ref.timestamp_token_id]]


def _parity(checkpoint: Path, artifacts: Path) -> None:
    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    ref = reference(checkpoint)
    ours = ForcedAligner(artifacts)
    varied = False
    for i, (text, language, seconds) in enumerate(CASES):
        clip = _clip(seconds, i)
        got = ours.alignment(clip, text, language)
        assert got.classes == reference_slots(ref, clip, text, language), language
        want = [(w.text, w.start_time, w.end_time) for w in ref.align(audio=(clip, spec.SAMPLE_RATE), text=text,
                                                                      language=language)[0]]
        assert [(w.text, w.start, w.end) for w in got.words] == want, language
        varied |= len(set(got.classes)) > 2 and got.classes != sorted(got.classes)  # the repair had work to do
    assert varied


def test_foreign_checkpoint_matches_qwen_asr(aligner_foreign: Path, aligner_foreign_artifacts: Path) -> None:
    _parity(aligner_foreign, aligner_foreign_artifacts)


def test_tiny_checkpoint_loads_in_qwen_asr_and_matches(aligner_tiny: Path, aligner_artifacts: Path) -> None:
    _parity(aligner_tiny, aligner_artifacts)


def test_long_clip_attention(aligner_foreign: Path, aligner_foreign_artifacts: Path) -> None:
    """The foreign checkpoint's windows are 2 chunks (2 s): over a 5 s clip the default (whole-clip attention, the
    reference's sdpa) matches the reference's audio features; windowed attention (flash attention's) does not."""
    import torch

    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    ref = reference(aligner_foreign)
    clip = _clip(5.0, 9)
    inputs = ref.processor(text=["<|audio_start|><|audio_pad|><|audio_end|>"], audio=[clip], return_tensors="pt",
                           padding=True)
    with torch.inference_mode():
        want = ref.model.thinker.get_audio_features(inputs["input_features"],
                                                    feature_attention_mask=inputs["feature_attention_mask"]).numpy()
    whole = ForcedAligner(aligner_foreign_artifacts).audio_embeddings(clip)
    windowed = ForcedAligner(aligner_foreign_artifacts, windowed_attention=True).audio_embeddings(clip)
    assert whole.shape == want.shape == windowed.shape
    assert np.abs(whole - want).max() < 1e-4
    assert np.abs(windowed - want).max() > 1e-3


def test_manifest_records_the_validation(aligner_foreign_artifacts: Path) -> None:
    m = read_manifest(aligner_foreign_artifacts)
    assert m.family == spec.COMPONENT and m.sample_rate == spec.SAMPLE_RATE and m.precision == "fp32"
    assert set(m.graphs) == {"audio_encoder", "aligner"}
    enc = m.graphs["audio_encoder"]["validation"]
    assert enc["max_abs_error"]["audio_embeds"] <= enc["tolerance"]["audio_embeds"]
    cls = m.graphs["aligner"]["validation"]["max_abs_error"]
    assert cls["classes"] == 0.0 and cls["logits"] < 1e-3
    assert (aligner_foreign_artifacts / f"{spec.MEL_FILTERS}.npy").is_file()
    assert sorted(p.name for p in (aligner_foreign_artifacts / "tokenizer").iterdir()) == [
        "merges.txt", "tokenizer_config.json", "vocab.json"]


def test_export_refuses_quantization(aligner_tiny: Path, tmp_path: Path) -> None:
    from export.exporter import export_checkpoint

    with pytest.raises(ExportError, match="fp32 only"):
        export_checkpoint(aligner_tiny, tmp_path / "out", precision="int8")
    assert not (tmp_path / "out").exists()
