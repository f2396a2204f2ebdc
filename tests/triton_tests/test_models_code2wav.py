"""code2wav/1/model.py under the pb_utils fake with a hand-made code2wav_stream.onnx.

The tiny graph computes pcm[b, f*1920 + k] = codes[b, f, 0] + 0.001 * position[b] and
new_state = state + frames, so every row's output proves it was gathered and scattered right.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakes.artifacts import SPF
from fakes.loader import committed_config, load_model_module, model_args

from ttscore.backend import settings as model_settings
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.models

S = 8  # state_size of the dummy artifacts


@pytest.fixture
def model(fake_pb_utils, dummy_artifacts):
    m = load_model_module("code2wav").TritonPythonModel()
    m.initialize(model_args(committed_config("code2wav", artifacts_dir=str(dummy_artifacts))))
    yield m
    m.finalize()


def make_request(pb, frames: int, rows: int = 1, position: int = 0, first_code: int = 7, state_size: int = S):
    codes = np.zeros((rows, frames, 16), np.int64)
    codes[:, :, 0] = first_code + np.arange(frames)[None]
    return pb.InferenceRequest(
        {
            "codes": codes,
            "state": np.full((rows, state_size), 1.0, np.float32),
            "position": np.full((rows, 1), position, np.int64),
        }
    )


def expected_pcm(frames: int, position: int, first_code: int = 7) -> np.ndarray:
    return np.repeat(first_code + np.arange(frames, dtype=np.float32), SPF) + np.float32(0.001 * position)


def test_mixed_frame_counts_are_grouped_and_scattered(model, fake_pb_utils, monkeypatch):
    calls = []
    run = model.graph.run
    monkeypatch.setattr(model.graph, "run", lambda feeds: calls.append(feeds["codes"].shape) or run(feeds))
    reqs = [
        make_request(fake_pb_utils, frames=2, position=10),
        make_request(fake_pb_utils, frames=3, position=20),
        make_request(fake_pb_utils, frames=2, position=30, rows=2),
        make_request(fake_pb_utils, frames=1, position=40),
    ]
    responses = model.execute(reqs)
    assert len(responses) == 4 and not any(r.has_error() for r in responses)
    assert sorted(calls) == sorted([(3, 2, 16), (1, 3, 16), (1, 1, 16)])  # one run per frame count
    for req, resp, frames, pos in zip(reqs, responses, (2, 3, 2, 1), (10, 20, 30, 40), strict=True):
        out = resp.as_dict()
        rows = req.inputs()[0].as_numpy().shape[0]
        assert out["pcm"].shape == (rows, frames * SPF)
        for row in range(rows):
            np.testing.assert_allclose(out["pcm"][row], expected_pcm(frames, pos), rtol=0, atol=1e-4)
        np.testing.assert_array_equal(out["new_state"], np.full((rows, S), 1.0 + frames, np.float32))


@pytest.mark.parametrize(
    ("mutate", "param"),
    [
        (lambda t: t.update(state=np.zeros((1, S + 1), np.float32)), "state"),
        (lambda t: t.update(codes=np.full((1, 2, 16), -1, np.int64)), "codes"),
        (lambda t: t.update(codes=np.zeros((1, 2, 15), np.int64)), "codes"),
        (lambda t: t.update(position=np.full((1, 1), -3, np.int64)), "position"),
        (lambda t: t.update(state=np.full((1, S), np.nan, np.float32)), "state"),
        (lambda t: t.pop("position"), "position"),
    ],
)
def test_a_bad_request_fails_alone(model, fake_pb_utils, mutate, param):
    good1 = make_request(fake_pb_utils, frames=2, position=1)
    bad_tensors = {t.name(): t.as_numpy() for t in make_request(fake_pb_utils, frames=2).inputs()}
    mutate(bad_tensors)
    bad = fake_pb_utils.InferenceRequest(bad_tensors)
    good2 = make_request(fake_pb_utils, frames=2, position=2)
    responses = model.execute([good1, bad, good2])
    assert [r.has_error() for r in responses] == [False, True, False]
    err = responses[1].error()
    assert err.code() == fake_pb_utils.TritonError.INVALID_ARG
    assert triton_io.parse_error(err.message()).param == param
    np.testing.assert_allclose(responses[2].as_dict()["pcm"][0], expected_pcm(2, 2), atol=1e-4)


def test_a_failing_run_is_retried_per_request(model, fake_pb_utils, monkeypatch):
    run = model.graph.run

    def flaky(feeds):
        if np.any(feeds["position"] == 666):
            raise RuntimeError("onnxruntime exploded")
        return run(feeds)

    monkeypatch.setattr(model.graph, "run", flaky)
    reqs = [make_request(fake_pb_utils, 2, position=p) for p in (1, 666, 3)]
    responses = model.execute(reqs)
    assert [r.has_error() for r in responses] == [False, True, False]
    assert responses[1].error().code() == fake_pb_utils.TritonError.INTERNAL
    assert triton_io.parse_error(responses[1].error().message()).message == triton_io.INTERNAL_MESSAGE
    np.testing.assert_allclose(responses[2].as_dict()["pcm"][0], expected_pcm(2, 3), atol=1e-4)


def test_state_dims_are_checked_against_the_manifest(fake_pb_utils, dummy_artifacts):
    config = committed_config("code2wav", artifacts_dir=str(dummy_artifacts))
    config["input"][1]["dims"] = [S + 1]
    m = load_model_module("code2wav").TritonPythonModel()
    with pytest.raises(model_settings.ModelSettingsError, match="state_size 8"):
        m.initialize(model_args(config))


def test_missing_artifacts_fail_fast(fake_pb_utils, tmp_path):
    m = load_model_module("code2wav").TritonPythonModel()
    with pytest.raises(model_settings.ModelSettingsError, match="does not exist"):
        m.initialize(model_args(committed_config("code2wav", artifacts_dir=str(tmp_path / "missing"))))


def test_manifest_without_graph_fails_fast(fake_pb_utils, tmp_path):
    (tmp_path / "manifest.json").write_text('{"format_version": 1, "graphs": {}, "code2wav": {"state_size": 8}}')
    m = load_model_module("code2wav").TritonPythonModel()
    with pytest.raises(model_settings.ModelSettingsError, match="no graph 'code2wav_stream'"):
        m.initialize(model_args(committed_config("code2wav", artifacts_dir=str(tmp_path))))


def test_unknown_parameter_fails_fast(fake_pb_utils, dummy_artifacts):
    m = load_model_module("code2wav").TritonPythonModel()
    config = committed_config("code2wav", artifacts_dir=str(dummy_artifacts), artifact_dir="/x")
    with pytest.raises(model_settings.ModelSettingsError, match="unknown parameter"):
        m.initialize(model_args(config))
