"""Breeze-TTS-2 export: the graphs are validated against our torch modules during export, and here
against the Hugging Face reference classes of transformers 5.14.1 (ref5): the T5Gemma2 text
encoder graph equals `T5Gemma2TextEncoder` + `text_encoder_proj`, past the sliding window and in a
padded batch (the window is asymmetric there: left (w+1)//2 incl. self, right w//2)."""

from __future__ import annotations

import json
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


def test_int8_export_is_measured_against_fp32(breeze_tiny: Path, breeze_export: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """--precision int8: text_encoder, backbone and depth_decoder quantized (code2wav_stream while its SNR holds),
    each with its measurement against the fp32 graph; code2wav and speech_encoder stay fp32; the export still
    synthesizes through the family's offline path, graph files under their fp32 names. The codec stage (the
    Qwen3-TTS exporter's, most of an export's time) is the fp32 export's: its graphs and reports copied."""
    import shutil

    from sequences import say_offline

    from export.breeze_tts_2 import exporter
    from export.exporter import export_checkpoint
    from export.quantize import INT8_METHOD, VOCODER_MIN_SNR_DB, quantized_ops

    fp32 = read_manifest(breeze_export).graphs

    def fp32_codec(src: Path, out: Path) -> dict:
        for name in ("code2wav_stream", "code2wav", "speech_encoder"):
            shutil.copy(breeze_export / f"{name}.onnx", out / f"{name}.onnx")
        return {"code2wav": fp32["code2wav"]["validation"], "speech_encoder": fp32["speech_encoder"]["validation"]}

    monkeypatch.setattr(exporter, "_codec_stage", fp32_codec)
    out = tmp_path / "int8"
    export_checkpoint(breeze_tiny, out, precision="int8")
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["precision"] == "int8"
    for name in ("text_encoder", "backbone", "depth_decoder"):
        v = raw["graphs"][name]["validation"]
        assert v["quantized"] == INT8_METHOD and min(v["vs_fp32"]["snr_db_per_output"].values()) > 20, name
        assert quantized_ops(out / f"{name}.onnx") == {"MatMulInteger"}, name
    assert raw["graphs"]["backbone"]["validation"]["vs_fp32"]["max_abs_err"]["logits"] < 1  # masked rows: -inf both
    stream = raw["graphs"]["code2wav_stream"]["validation"]
    kept = stream["vs_fp32"]["snr_db"] >= VOCODER_MIN_SNR_DB
    assert (stream["quantized"] is not None) == kept and bool(quantized_ops(out / "code2wav_stream.onnx")) == kept
    for name in ("code2wav", "speech_encoder"):
        assert "quantized" not in raw["graphs"][name]["validation"] and not quantized_ops(out / f"{name}.onnx"), name
    pcm, frames, _ = say_offline(out, text="Quantized speech.", voice="S3", max_new_tokens=6)
    assert frames > 0 and pcm.shape == (1920 * frames,) and np.isfinite(pcm).all()


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
