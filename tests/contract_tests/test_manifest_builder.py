"""ttscore.contract.manifest.build_manifest: every family's manifest.json through one builder, with
one vocoder state key; manifests written with a family's own key still read."""

from __future__ import annotations

import json

import pytest

from ttscore.contract.errors import ExportError
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.manifest import VOCODER, build_manifest, read_manifest

pytestmark = pytest.mark.unit

SPEC = GraphSpec("vocoder_stream", (TensorSpec("codes", "int64", ("batch", "frames")),),
                 (TensorSpec("pcm", "float32", ("batch", "samples")),))


def _build(tmp_path, **over):
    (tmp_path / SPEC.filename).write_bytes(b"onnx")
    kw = dict(family="toy", variant="base", model_size="tiny", precision="fp32", source={"fingerprint": "f"},
              sizes={}, sample_rate=16000, samples_per_frame=320, vocoder_state_size=6,
              vocoder_state_layout=[("conv", [2, 3])], graphs={"vocoder_stream": SPEC},
              validation={"vocoder_stream": {"max_abs_err": 0.0}}, speakers={"Ann": 1}, languages=["english"])
    return build_manifest(tmp_path, **{**kw, **over})


def test_the_builder_writes_what_the_reader_reads(tmp_path):
    raw = _build(tmp_path, special_ids={"bos": 1})
    assert raw[VOCODER] == {"state_size": 6, "state_layout": [("conv", [2, 3])]} and raw["special_ids"] == {"bos": 1}
    assert raw["graphs"]["vocoder_stream"]["validation"] == {"max_abs_err": 0.0}
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    m = read_manifest(tmp_path)
    assert (m.family, m.sample_rate, m.samples_per_frame, m.vocoder_state_size) == ("toy", 16000, 320, 6)
    assert m.code2wav_state_size == m.vae_decoder_state_size == 6 and m.speakers == {"ann": 1}


def test_the_builder_refuses_an_incomplete_export(tmp_path):
    with pytest.raises(ExportError, match="export produced no vocoder_stream.onnx"):
        build_manifest(tmp_path, family="toy", variant="", model_size="", precision="fp32", source={}, sizes={},
                       sample_rate=1, samples_per_frame=1, vocoder_state_size=1, vocoder_state_layout=[],
                       graphs={"vocoder_stream": SPEC}, validation={})
    with pytest.raises(ExportError, match="lacks vocoder state_size"):
        _build(tmp_path, vocoder_state_size=0)
    with pytest.raises(ExportError, match="not a family's own field"):
        _build(tmp_path, code2wav={"state_size": 6})


@pytest.mark.parametrize("key", ["code2wav", "vae_decoder"])
def test_manifests_with_a_familys_own_vocoder_key_still_read(tmp_path, key):
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1, "family": "x", key: {"state_size": 9}}))
    assert read_manifest(tmp_path).vocoder_state_size == 9
