"""Gepard-1.0 export: the graphs are validated against our torch modules during export, and here
against the reference: the backbone graph (prefill, then decode over its own K/V) equals transformers
5.14.1's `Qwen3_5TextModel` + the heads and stop head (ref5) at every position; frame_embed equals
vLLM-Omni's `_audio_frame_embed` composition; codec_stream decoded one frame at a time equals the
whole NanoCodec decode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gepard_fixtures import *  # noqa: F403  (gepard_tiny, gepard_artifacts)
from gepard_fixtures import reference

from ttscore.contract import gepard as spec
from ttscore.contract.manifest import read_manifest

pytestmark = pytest.mark.export

ATOL = 1e-4


def test_manifest_lists_the_graphs_and_tables(gepard_artifacts: Path) -> None:
    m = read_manifest(gepard_artifacts)
    assert m.family == "gepard" and m.sample_rate == 22050 and m.samples_per_frame == 1024
    assert set(m.graphs) == {"backbone", "frame_embed", "codec_stream"}
    for name in m.graphs:
        assert max(m.graphs[name]["validation"]["max_abs_error"].values()) < ATOL, name
    assert (gepard_artifacts / "embed_tokens.npy").is_file() and (gepard_artifacts / "null_prefix.npy").is_file()
    assert (gepard_artifacts / "tokenizer" / "tokenizer.json").is_file()
    assert m.code2wav_state_size is not None and m.code2wav_state_size > 0


@pytest.mark.parity
def test_backbone_graph_equals_qwen3_5_text_model(gepard_tiny: Path, gepard_artifacts: Path) -> None:
    from export.tracing import ort_run, ort_session
    from ttscore.runtime.families.gepard.checkpoint import read_checkpoint

    b = read_checkpoint(gepard_tiny).backbone
    layers, kvh, hd, h = b.num_layers, b.num_kv_heads, b.head_dim, b.hidden_size
    x = np.random.default_rng(0).standard_normal((1, 11, h)).astype(np.float32)
    want = reference(gepard_tiny, "backbone", {"inputs_embeds": x})
    sess = ort_session(gepard_artifacts / "backbone.onnx")
    past = [np.zeros((1, kvh, 0, hd), np.float32) for _ in range(2 * layers)]
    n0 = 6

    def feeds(xs: np.ndarray, start: int, past: list[np.ndarray]) -> dict[str, np.ndarray]:
        f = {"inputs_embeds": xs, "attention_mask": np.ones((1, start + xs.shape[1]), np.int64),
             "position_ids": np.arange(start, start + xs.shape[1], dtype=np.int64)[None]}
        for i in range(layers):
            f[spec.past_key(i)], f[spec.past_value(i)] = past[2 * i], past[2 * i + 1]
        return f

    out = ort_run(sess, feeds(x[:, :n0], 0, past))
    np.testing.assert_allclose(out[0], want["logits"][:, n0 - 1], atol=ATOL)
    np.testing.assert_allclose(out[1], want["stop_prob"][:, n0 - 1], atol=ATOL)
    past = list(out[2:])
    for p in range(n0, x.shape[1]):
        out = ort_run(sess, feeds(x[:, p:p + 1], p, past))
        np.testing.assert_allclose(out[0], want["logits"][:, p], atol=ATOL, err_msg=f"position {p}")
        np.testing.assert_allclose(out[1], want["stop_prob"][:, p], atol=ATOL, err_msg=f"position {p}")
        past = [np.concatenate([a, b], axis=2) for a, b in zip(past, out[2:], strict=True)]
    assert np.abs(want["logits"]).max() > 0.1  # not a degenerate comparison


@pytest.mark.parity
def test_frame_embed_graph_equals_the_talker(gepard_tiny: Path, gepard_artifacts: Path) -> None:
    from export.tracing import ort_run, ort_session

    codes = np.random.default_rng(1).integers(0, np.array(spec.head_levels()), size=(4, 32)).astype(np.int64)
    want = reference(gepard_tiny, "frame_embed", {"codes": codes})["embeds"]
    got = ort_run(ort_session(gepard_artifacts / "frame_embed.onnx"), {"codes": codes})[0]
    np.testing.assert_allclose(got, want, atol=ATOL)


def test_codec_stream_frame_by_frame_equals_the_whole_decode(gepard_tiny: Path, gepard_artifacts: Path) -> None:
    import torch

    from export.gepard.codec import load_codec
    from export.tracing import ort_run, ort_session

    codec = load_codec(gepard_tiny / "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo")
    codes = np.random.default_rng(2).integers(0, np.array(spec.head_levels()), size=(1, 9, 32)).astype(np.int64)
    with torch.inference_mode():
        want = codec(torch.from_numpy(codes).transpose(1, 2)).numpy()
    m = read_manifest(gepard_artifacts)
    assert m.code2wav_state_size is not None
    sess = ort_session(gepard_artifacts / "codec_stream.onnx")
    state = np.zeros((1, m.code2wav_state_size), np.float32)
    pieces = []
    for t in range(codes.shape[1]):
        pcm, state = ort_run(sess, {"codes": codes[:, t:t + 1], "state": state})
        pieces.append(pcm)
    got = np.concatenate(pieces, axis=1)
    assert got.shape == want.shape == (1, 9 * 1024) and np.abs(want).max() > 0.05
    np.testing.assert_allclose(got, want, atol=ATOL)


def test_int8_export_is_measured_against_fp32(gepard_tiny: Path, tmp_path: Path) -> None:
    """--precision int8: backbone and frame_embed (its Gemms rewritten as MatMuls) quantized, each with its SNR
    against the fp32 graph; codec_stream (convolutions only) stays fp32 and the manifest says why; the int8
    export synthesizes offline."""
    import json

    from export.exporter import export_checkpoint
    from export.quantize import quantized_ops
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.gepard.offline import OFFLINE
    from ttscore.runtime.family import SayOptions

    out = tmp_path / "int8"
    export_checkpoint(gepard_tiny, out, precision="int8")
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["precision"] == "int8"
    for name in ("backbone", "frame_embed"):
        v = raw["graphs"][name]["validation"]
        assert v["quantized"].startswith("int8") and v["vs_fp32"]["snr_db"] > 20, name
        assert quantized_ops(out / f"{name}.onnx") == {"MatMulInteger"}, name
    codec = raw["graphs"]["codec_stream"]["validation"]
    assert codec["quantized"] is None and "no constant-weight MatMul" in codec["vs_fp32"]["kept"]
    job = OFFLINE.say(out, SayOptions(text="Quantized speech.", seed=1, max_new_tokens=6))
    events = list(Generator(job.model).synthesize(job.request))
    frames = sum(e.frames for e in events)
    pcm = np.concatenate([e.pcm for e in events])
    assert 1 <= frames <= 6 and pcm.shape == (frames * spec.SAMPLES_PER_FRAME,) and np.isfinite(pcm).all()
