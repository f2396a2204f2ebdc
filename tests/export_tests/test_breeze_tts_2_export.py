"""Breeze-TTS-2 export: the graphs are validated against our torch modules during export, and here
against the Hugging Face reference classes of transformers 5.14.1 (ref5): the T5Gemma2 text
encoder graph equals `T5Gemma2TextEncoder` + `text_encoder_proj`, past the sliding window and in a
padded batch (the window is asymmetric there: left (w+1)//2 incl. self, right w//2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from breeze_tts_2_fixtures import reference

from ttscore.contract.manifest import read_manifest

pytestmark = pytest.mark.export


def test_manifest_lists_the_graphs_and_tables(breeze_export: Path) -> None:
    m = read_manifest(breeze_export)
    assert m.family == "breeze_tts_2" and m.sample_rate == 24000
    assert set(m.graphs) == {"text_encoder", "backbone", "depth_decoder", "code2wav_stream", "code2wav",
                             "speech_encoder"}
    for name in ("text_encoder", "backbone", "depth_decoder"):
        assert max(m.graphs[name]["validation"]["max_abs_error"].values()) < 1e-4, name
    assert (breeze_export / "audio_embeddings.npy").is_file() and (breeze_export / "depth_heads.npy").is_file()
    assert (breeze_export / "tokenizer" / "tokenizer.json").is_file()


@pytest.mark.parity
def test_text_encoder_graph_equals_t5gemma2(breeze_tiny: Path, breeze_export: Path) -> None:
    from export.tracing import ort_run, ort_session

    rng = np.random.default_rng(0)
    window = 6  # the tiny sliding window: 13 tokens reach past it on both sides
    ids = rng.integers(4, 500, size=(2, window + 7)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    want = reference(breeze_tiny, "text_encoder", {"input_ids": ids, "attention_mask": mask})["embeds"]
    got = ort_run(ort_session(breeze_export / "text_encoder.onnx"), {"input_ids": ids, "attention_mask": mask})[0]
    np.testing.assert_allclose(got[0], want[0], atol=1e-4)
    np.testing.assert_allclose(got[1, :9], want[1, :9], atol=1e-4)
