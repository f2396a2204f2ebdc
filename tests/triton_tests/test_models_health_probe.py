"""Health probes under the recording pb_utils fake: every model.py answers a request carrying the
`tts_health_probe` parameter without running the model, and exactly one FINAL still goes out per
request on every path (speech_generation: an empty FINAL, or UNAVAILABLE + FINAL when its step loop
is dead or wedged; the batched models: a response with no outputs, in its place in the batch)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fakes.fake_generator import FakeGenerator
from fakes.loader import committed_config, load_model_module, model_args

from ttscore.backend import generation
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.models

PROBE = {triton_io.HEALTH_PROBE_PARAMETER: True}


@pytest.fixture
def speech(fake_pb_utils, monkeypatch, dummy_artifacts):
    generators: list[FakeGenerator] = []

    def fake_load(settings):
        generators.append(FakeGenerator(max_batch=settings.max_active_requests, step_delay_s=0.01))
        return generators[-1]

    monkeypatch.setattr(generation, "load_generator", fake_load)
    model = load_model_module("speech_generation").TritonPythonModel()
    model.initialize(model_args(committed_config(
        "speech_generation", artifacts_dir=str(dummy_artifacts), max_active_requests="1", max_pending_requests="0")))
    model.generator_fake = generators[0]
    yield model
    model.finalize()


def probe_request(pb, **tensors):
    return pb.InferenceRequest(tensors or {"text": np.array([b""], dtype=object)}, parameters=PROBE)


def assert_one_final(*requests) -> None:
    for req in requests:
        assert req.sender.wait_final(5.0), "no FINAL"
        assert req.sender.finals == 1 and req.sender.after_final == 0 and req.sender.sent[-1].final


def test_speech_generation_probe_is_one_empty_final_that_skips_the_generator(speech, fake_pb_utils):
    probe = probe_request(fake_pb_utils)
    speech.execute([probe])
    assert_one_final(probe)
    assert [(s.response, s.final) for s in probe.sender.sent] == [(None, True)]  # flags only: no outputs
    assert speech.generator_fake.submitted == []


def test_speech_generation_probe_is_answered_when_the_queue_is_full(speech, fake_pb_utils):
    busy = fake_pb_utils.InferenceRequest(triton_io.request_tensors(text="long", max_new_tokens=10_000))
    full = fake_pb_utils.InferenceRequest(triton_io.request_tensors(text="one more"))
    probe = probe_request(fake_pb_utils)
    speech.execute([busy])
    deadline = time.monotonic() + 5
    while not busy.sender.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    speech.execute([full, probe])  # max_active 1, max_pending 0: `full` is turned away
    assert_one_final(full, probe)
    assert triton_io.parse_error(full.sender.errors[0].message()).code == triton_io.UNAVAILABLE
    assert probe.sender.errors == []
    busy.sender.cancel()
    assert_one_final(busy)


def test_speech_generation_probe_fails_when_the_step_loop_is_dead_or_wedged(speech, fake_pb_utils):
    scheduler = speech.scheduler
    scheduler._heartbeat = time.monotonic() - scheduler.stuck_after_s - 5  # a step that never returned
    wedged = probe_request(fake_pb_utils)
    speech.execute([wedged])
    assert_one_final(wedged)
    err = triton_io.parse_error(wedged.sender.errors[0].message())
    assert err.code == triton_io.UNAVAILABLE and "has not advanced" in err.message

    running = scheduler._thread
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    scheduler._thread = dead  # the loop thread died
    try:
        gone = probe_request(fake_pb_utils)
        speech.execute([gone])
        assert_one_final(gone)
        assert "step loop is not running" in triton_io.parse_error(gone.sender.errors[0].message()).message
    finally:
        scheduler._thread = running


@pytest.mark.parametrize("params", [{triton_io.HEALTH_PROBE_PARAMETER: "yes"}, {"other": True}])
def test_other_parameters_are_ordinary_requests(speech, fake_pb_utils, params):
    req = fake_pb_utils.InferenceRequest(triton_io.request_tensors(text="hi", max_new_tokens=2), parameters=params)
    speech.execute([req])
    assert_one_final(req)
    assert len(req.sender.chunks) == 2 and speech.generator_fake.submitted


def code2wav_request(pb, frames: int = 2, **kw):
    codes = np.zeros((1, frames, 16), np.int64)
    return pb.InferenceRequest(
        {"codes": codes, "state": np.ones((1, 8), np.float32), "position": np.zeros((1, 1), np.int64)}, **kw)


def test_code2wav_answers_probes_in_place_within_a_batch(fake_pb_utils, dummy_artifacts, monkeypatch):
    model = load_model_module("code2wav").TritonPythonModel()
    model.initialize(model_args(committed_config("code2wav", artifacts_dir=str(dummy_artifacts))))
    runs = []
    run = model.graph.run
    monkeypatch.setattr(model.graph, "run", lambda feeds: runs.append(feeds["codes"].shape) or run(feeds))
    # What the gateway sends: the smallest valid value of each required input.
    probe = code2wav_request(fake_pb_utils, frames=1, parameters=PROBE)
    batch = [code2wav_request(fake_pb_utils), probe, code2wav_request(fake_pb_utils, frames=3)]
    responses = model.execute(batch)
    assert len(responses) == 3 and not any(r.has_error() for r in responses)
    assert responses[1].output_tensors() == []
    assert responses[0].as_dict()["pcm"].shape == (1, 2 * 1920) and responses[2].as_dict()["pcm"].shape == (1, 3 * 1920)
    assert sorted(runs) == [(1, 2, 16), (1, 3, 16)]  # the probe ran nothing
    runs.clear()
    [only] = model.execute([code2wav_request(fake_pb_utils, parameters=PROBE)])
    assert not only.has_error() and only.output_tensors() == [] and runs == []
    model.finalize()


@pytest.mark.parametrize(("name", "tensors"), [
    ("audio_preprocess", {"audio": np.zeros(1, np.float32), "sample_rate": np.zeros(1, np.int32)}),
    ("speaker_encoder", {"mels": np.zeros((1, 128), np.float32)}),
    ("speech_encoder", {"audio": np.zeros(1, np.float32)}),
])
def test_voice_feature_steps_answer_probes(fake_pb_utils, dummy_artifacts, name, tensors):
    model = load_model_module(name).TritonPythonModel()
    model.initialize(model_args(committed_config(name, artifacts_dir=str(dummy_artifacts))))
    # Zeros of minimal size would be rejected (audio_preprocess) or fail (speech_encoder) if they ran.
    [resp] = model.execute([fake_pb_utils.InferenceRequest(tensors, parameters=PROBE)])
    assert not resp.has_error() and resp.output_tensors() == []
    model.finalize()


# --- a model called by BLS dies (the shared code2wav) ---------------------------------------------------


def test_a_dead_bls_callee_fails_active_requests_as_unavailable(speech, fake_pb_utils, monkeypatch):
    from ttscore.contract.errors import UpstreamUnavailable

    gen = speech.generator_fake
    step = gen.step

    def failing_step(emit=None):
        if any(r.request.text == "upstream-down" for r in gen.active.values()):
            raise UpstreamUnavailable("code2wav: Stub process 'code2wav_0_0' is not healthy.")
        return step()

    monkeypatch.setattr(gen, "step", failing_step)
    req = fake_pb_utils.InferenceRequest(triton_io.request_tensors(text="upstream-down", max_new_tokens=5))
    speech.execute([req])
    assert_one_final(req)
    err = triton_io.parse_error(req.sender.errors[0].message())
    assert err.code == triton_io.UNAVAILABLE  # retryable (503), not a 500


@pytest.mark.parametrize(("code", "message", "unavailable"), [
    ("INTERNAL", "Stub process 'code2wav_0_0' is not healthy.", True),
    ("NOT_FOUND", "Request for unknown model: 'code2wav' is not found", True),
    ("UNAVAILABLE", "anything", True),
    ("INVALID_ARG", "INVALID_ARG [state]: input 'state' must have shape [batch, 8]", False),
    ("INTERNAL", "INTERNAL: internal error", False),
])
def test_bls_errors_that_mean_the_callee_is_unavailable(fake_pb_utils, code, message, unavailable):
    from ttscore.backend import glue as triton_glue

    error = fake_pb_utils.TritonError(message, getattr(fake_pb_utils.TritonError, code))
    assert triton_glue._unavailable(error) is unavailable
