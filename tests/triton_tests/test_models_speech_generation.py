"""speech_generation/1/model.py under the recording pb_utils fake with a FakeGenerator.

The protocol under test: EXACTLY ONE response with the FINAL flag per request on every path
(success, invalid argument, internal error, cancel, queue full, shutdown), errors formatted
`CODE [param]: message`, and the generator only touched from the step-loop thread.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fakes.fake_generator import FakeGenerator
from fakes.loader import committed_config, load_model_module, model_args

from ttscore.backend import generation
from ttscore.backend import settings as model_settings
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.models

TIMEOUT = 10.0


class Harness:
    def __init__(self, pb, monkeypatch, artifacts: Path, **params: str) -> None:
        self.pb = pb
        self.generator: FakeGenerator | None = None
        self.step_delay_s = float(params.pop("step_delay_s", "0"))

        def fake_load(settings):
            self.generator = FakeGenerator(max_batch=settings.max_active_requests, step_delay_s=self.step_delay_s)
            return self.generator

        monkeypatch.setattr(generation, "load_generator", fake_load)
        self.module = load_model_module("speech_generation")
        self.model = self.module.TritonPythonModel()
        self.config = committed_config("speech_generation", artifacts_dir=str(artifacts), **params)
        self.model.initialize(model_args(self.config))
        self.requests: list = []

    def request(self, request_id: str = "", **fields):
        tensors = triton_io.request_tensors(**fields)
        req = self.pb.InferenceRequest(tensors, request_id=request_id)
        self.requests.append(req)
        return req

    def raw_request(self, tensors: dict[str, np.ndarray]):
        req = self.pb.InferenceRequest(tensors)
        self.requests.append(req)
        return req

    def execute(self, *requests) -> None:
        assert self.model.execute(list(requests)) is None  # decoupled: execute returns nothing

    def wait(self, *requests) -> None:
        for req in requests:
            assert req.sender.wait_final(TIMEOUT), "no FINAL response"

    def finalize(self) -> None:
        self.model.finalize()

    def assert_protocol(self) -> None:
        for req in self.requests:
            assert req.sender.finals == 1, f"{req.request_id()}: {req.sender.finals} FINAL responses"
            assert req.sender.after_final == 0, "a response was sent after FINAL"
            assert req.sender.sent[-1].final, "FINAL must be the last response"


@pytest.fixture
def harness(fake_pb_utils, monkeypatch, dummy_artifacts):
    made: list[Harness] = []

    def make(**params: str) -> Harness:
        h = Harness(fake_pb_utils, monkeypatch, dummy_artifacts, **params)
        made.append(h)
        return h

    yield make
    for h in made:
        h.finalize()
        h.assert_protocol()


def error_of(req) -> tuple[str, triton_io.WireError]:
    errors = req.sender.errors
    assert len(errors) == 1
    return errors[0].code_name, triton_io.parse_error(errors[0].message())


def test_success_streams_chunks_and_one_final(harness):
    h = harness()
    req = h.request("ok-1", text="hello", max_new_tokens=3, chunk_frames=1)
    h.execute(req)
    h.wait(req)
    chunks = req.sender.chunks
    assert len(chunks) == 3 and req.sender.errors == []
    assert [int(c["frames"][0]) for c in chunks] == [1, 1, 1]
    assert [c["finish_reason"][0] for c in chunks] == [b"", b"", b"length"]
    assert chunks[-1]["usage"].tolist() == [5, 0, 3]
    audio = np.concatenate([c["audio"] for c in chunks])
    assert audio.dtype == np.float32
    np.testing.assert_array_equal(audio, np.repeat(np.arange(3, dtype=np.float32), 4))
    assert [s.final for s in req.sender.sent] == [False, False, True]


def test_chunking_follows_chunk_frames(harness):
    h = harness()
    req = h.request(text="hello", max_new_tokens=5, chunk_frames=2)
    h.execute(req)
    h.wait(req)
    assert [int(c["frames"][0]) for c in req.sender.chunks] == [2, 2, 1]


def test_invalid_request_from_generator(harness):
    h = harness()
    req = h.request(text="invalid")
    h.execute(req)
    h.wait(req)
    code, err = error_of(req)
    assert code == "INVALID_ARG"
    assert (err.code, err.param, err.message) == ("INVALID_ARG", "input", "text is not speakable")


@pytest.mark.parametrize(
    ("tensors", "param"),
    [
        ({}, "text"),
        ({"text": np.array([b"hi"], dtype=object), "temperature": np.array([0.5], dtype=np.float64)}, "temperature"),
        ({"text": np.array([b"hi"], dtype=object), "top_k": np.array([1, 2], dtype=np.int32)}, "top_k"),
        ({"text": np.array([b"\xff\xfe"], dtype=object)}, "text"),
        ({"text": np.array([b"hi"], dtype=object), "top_p": np.array([np.nan], dtype=np.float32)}, "top_p"),
        ({"text": np.array([b"hi"], dtype=object), "ref_codes": np.zeros((2, 3), np.int64)}, "ref_codes"),
        ({"text": np.array([b"hi"], dtype=object), "bogus": np.zeros(1, np.int64)}, "bogus"),
    ],
)
def test_bad_tensors_are_invalid_arg_naming_the_tensor(harness, tensors, param):
    h = harness()
    req = h.raw_request(tensors)
    h.execute(req)
    h.wait(req)
    code, err = error_of(req)
    assert code == "INVALID_ARG" and err.code == "INVALID_ARG" and err.param == param
    assert h.generator is not None and h.generator.submitted == []


def test_internal_error_in_submit_is_generic_and_logged(harness, fake_pb_utils):
    h = harness()
    bad = h.request(text="submit-crash")
    good = h.request(text="fine", max_new_tokens=2)
    h.execute(bad, good)
    h.wait(bad, good)
    code, err = error_of(bad)
    assert code == "INTERNAL" and err.message == triton_io.INTERNAL_MESSAGE
    assert "boom" not in bad.sender.errors[0].message()  # no internals on the wire
    assert any(level == "ERROR" and "boom in submit" in msg for level, msg in fake_pb_utils.Logger.records)
    assert len(good.sender.chunks) == 2 and good.sender.errors == []  # the neighbour is unaffected


def test_step_failure_fails_active_requests_once(harness):
    h = harness()
    a = h.request(text="step-crash")
    b = h.request(text="other", max_new_tokens=50)
    h.execute(a, b)
    h.wait(a, b)
    for req in (a, b):
        assert error_of(req)[0] == "INTERNAL"
    assert h.generator is not None and h.generator.num_active == 0  # KV caches released


def test_cancel_mid_stream(harness):
    h = harness(step_delay_s="0.01")
    req = h.request(text="long", max_new_tokens=10_000)
    h.execute(req)
    deadline = time.monotonic() + TIMEOUT
    while len(req.sender.chunks) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    req.sender.cancel()
    h.wait(req)
    code, err = error_of(req)
    assert code == "CANCELLED" and err.code == "CANCELLED"
    assert h.generator is not None
    assert h.generator.cancelled and h.generator.num_active == 0
    n = len(req.sender.sent)
    time.sleep(0.05)
    assert len(req.sender.sent) == n  # nothing after the FINAL


def test_cancel_while_pending_never_reaches_the_generator(harness):
    h = harness(max_active_requests="1", step_delay_s="0.01")
    first = h.request(text="long", max_new_tokens=30)
    waiting = h.request(text="waiting")
    waiting.sender.cancel()
    h.execute(first, waiting)
    h.wait(first, waiting)
    assert error_of(waiting)[0] == "CANCELLED"
    assert h.generator is not None and len(h.generator.submitted) == 1


def test_queue_full_is_unavailable(harness):
    h = harness(max_active_requests="1", max_pending_requests="1", step_delay_s="0.01")
    reqs = [h.request(text=f"r{i}", max_new_tokens=20) for i in range(5)]
    h.execute(*reqs)
    h.wait(*reqs)
    codes = [error_of(r)[0] if r.sender.errors else "OK" for r in reqs]
    assert codes.count("OK") == 2 and codes.count("UNAVAILABLE") == 3


def test_requests_are_batched_and_bounded(harness):
    h = harness(max_active_requests="3", step_delay_s="0.005")
    reqs = [h.request(text=f"r{i}", max_new_tokens=4 + i) for i in range(7)]
    h.execute(*reqs)
    h.wait(*reqs)
    assert h.generator is not None
    assert h.generator.max_seen_batch == 3  # continuous batching, never above the bound
    for i, r in enumerate(reqs):
        assert sum(int(c["frames"][0]) for c in r.sender.chunks) == 4 + i


def test_generator_runs_on_the_loop_thread_only(harness):
    h = harness()
    req = h.request(text="hello")
    h.execute(req)
    h.wait(req)
    assert h.generator is not None
    assert threading.get_ident() not in h.generator.thread_ids and len(h.generator.thread_ids) == 1


def test_lost_request_gets_internal_final(harness):
    h = harness()
    req = h.request(text="no-final")
    h.execute(req)
    h.wait(req)
    assert error_of(req)[0] == "INTERNAL"


def test_client_gone_releases_the_request(harness):
    h = harness(step_delay_s="0.01")
    req = h.request(text="long", max_new_tokens=10_000)
    req.sender.fail_sends = True
    h.execute(req)
    assert h.generator is not None
    deadline = time.monotonic() + TIMEOUT
    while not h.generator.cancelled and time.monotonic() < deadline:
        time.sleep(0.005)
    assert h.generator.cancelled and h.generator.num_active == 0
    req.sender.fail_sends = False
    h.requests.remove(req)  # its FINAL could not be delivered: nothing to assert on the sender


def test_finalize_fails_in_flight_requests_with_unavailable(harness):
    h = harness(step_delay_s="0.01")
    reqs = [h.request(text=f"r{i}", max_new_tokens=10_000) for i in range(3)]
    h.execute(*reqs)
    time.sleep(0.05)
    h.finalize()
    for r in reqs:
        assert r.sender.finals == 1 and error_of(r)[0] == "UNAVAILABLE"
    late = h.request(text="late")
    h.execute(late)  # after shutdown: still exactly one FINAL
    assert error_of(late)[0] == "UNAVAILABLE"


# --- settings ---------------------------------------------------------------------------------


def _init(fake_pb_utils, monkeypatch, config) -> None:
    monkeypatch.setattr(generation, "load_generator", lambda s: FakeGenerator())
    model = load_model_module("speech_generation").TritonPythonModel()
    model.initialize(model_args(config))


def test_missing_artifacts_fail_fast(fake_pb_utils, monkeypatch, tmp_path):
    config = committed_config("speech_generation", artifacts_dir=str(tmp_path / "nope"))
    with pytest.raises(model_settings.ModelSettingsError, match="artifacts_dir .*nope does not exist"):
        _init(fake_pb_utils, monkeypatch, config)


def test_artifacts_without_manifest_fail_fast(fake_pb_utils, monkeypatch, tmp_path):
    config = committed_config("speech_generation", artifacts_dir=str(tmp_path))
    with pytest.raises(model_settings.ModelSettingsError, match="manifest.json"):
        _init(fake_pb_utils, monkeypatch, config)


def test_not_decoupled_fails_fast(fake_pb_utils, monkeypatch, dummy_artifacts):
    config = committed_config("speech_generation", artifacts_dir=str(dummy_artifacts))
    config["model_transaction_policy"] = {"decoupled": False}
    with pytest.raises(model_settings.ModelSettingsError, match="decoupled"):
        _init(fake_pb_utils, monkeypatch, config)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("max_active_requests", "0", "max_active_requests must be >= 1"),
        ("max_active_requests", "many", "must be an integer"),
        ("max_pending_requests", "-1", "max_pending_requests must be >= 0"),
        ("max_activ_requests", "4", "unknown parameter"),
        ("thread_pool", "global", "thread_pool must be one of shared, session"),
        ("runaway_factor", "-1", "runaway_factor must be a finite number >= 0"),
        ("runaway_min_s", "soon", "runaway_min_s must be a number"),
    ],
)
def test_bad_parameters_fail_fast(fake_pb_utils, monkeypatch, dummy_artifacts, key, value, match):
    config = committed_config("speech_generation", artifacts_dir=str(dummy_artifacts), **{key: value})
    with pytest.raises(model_settings.ModelSettingsError, match=match):
        _init(fake_pb_utils, monkeypatch, config)


def test_settings_parse_typed(dummy_artifacts):
    config = committed_config("speech_generation", artifacts_dir=str(dummy_artifacts), max_active_requests="3")
    s = model_settings.SpeechGenerationSettings.from_model_config(config)
    assert (s.artifacts_dir, s.max_active_requests, s.max_pending_requests) == (dummy_artifacts, 3, 64)
    assert s.thread_pool == "session"  # the committed default
    config = committed_config("speech_generation", artifacts_dir=str(dummy_artifacts), thread_pool="shared")
    assert model_settings.SpeechGenerationSettings.from_model_config(config).thread_pool == "shared"
    from ttscore.contract.rules import DEFAULT_RUNAWAY_FACTOR, DEFAULT_RUNAWAY_MIN_S

    # the committed config's values are the contract's defaults
    assert (s.runaway_factor, s.runaway_min_s) == (DEFAULT_RUNAWAY_FACTOR, DEFAULT_RUNAWAY_MIN_S)
    config = committed_config("speech_generation", artifacts_dir=str(dummy_artifacts), runaway_factor="0",
                              runaway_min_s="2.5")
    s = model_settings.SpeechGenerationSettings.from_model_config(config)
    assert (s.runaway_factor, s.runaway_min_s) == (0.0, 2.5)


# --- metrics (ttscore/backend/triton_metrics.py) through the fake's MetricFamily ---------------------------


def test_metrics_of_a_known_request_reach_pb_utils(harness, fake_pb_utils):
    h = harness()
    ok = h.request(text="hello", max_new_tokens=4)
    bad = h.request(text="invalid")
    h.execute(ok, bad)
    h.wait(ok, bad)
    h.finalize()  # publishes what is left, then releases the metrics
    fam = fake_pb_utils.MetricFamily
    labels = {"model": "speech_generation", "version": "1", "instance": "speech_generation_0"}
    count = {
        o: fam.get("tts_generation_requests_total", outcome=o, **labels).value()
        for o in ("completed", "rejected", "cancelled", "failed")
    }
    assert count == {"completed": 1, "rejected": 1, "cancelled": 0, "failed": 0}
    assert fam.get("tts_generation_batch_size", **labels).observations == [1.0] * 4  # one frame per step
    assert len(fam.get("tts_generation_step_seconds", **labels).observations) == 4
    assert len(fam.get("tts_generation_prefill_seconds", **labels).observations) == 1
    assert fam.get("tts_generation_active_requests", **labels).value() == 0
    assert fam.server_errors == []
