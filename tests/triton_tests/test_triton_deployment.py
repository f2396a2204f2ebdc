"""The production deployment (as `triton-tts serve` renders it) on the real tritonserver.

Three tiny checkpoints behind one server: speech_generation_<name> per checkpoint, one shared
code2wav called by BLS (their speech tokenizers are identical), and the voice_features ensemble for
the Base one. Streamed audio must equal the offline pipeline in all four modes, concurrent streams
must each equal their own offline output, a cancelled stream must free its slot for the next
request, and every bad input must be INVALID_ARG naming the field while the server keeps serving.
"""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_inputs import to_inputs

from triton_tts.serve import Served, plan_deployment
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def deployment(triton_server, tiny_custom_voice, tiny_voice_design, tiny_base, tmp_path_factory):
    from ttscore.backend.repository import render_repository
    from ttscore.runtime.families.qwen3_tts.model import read_manifest

    served, pipes = [], {}
    for name, (ckpt, art, pipe) in {"cv": tiny_custom_voice, "vd": tiny_voice_design, "base": tiny_base}.items():
        served.append(Served(name, ckpt, art, read_manifest(art)))
        pipes[name] = pipe
    plan = plan_deployment(served, max_active=4)
    assert plan["shared_code2wav"] and "code2wav" in plan["models"] and "voice_features" in plan["models"]
    plan["settings"]["speech_generation_vd"]["parameters"]["max_active_requests"] = "2"
    # Its requests run to their max_new_tokens (a slot held long), past the runaway guard's budget for their text.
    plan["settings"]["speech_generation_vd"]["parameters"]["runaway_factor"] = "0"
    repo = tmp_path_factory.mktemp("deploy") / "model_repository"
    render_repository(repo, plan["settings"], models=plan["models"], aliases=plan["aliases"])
    server = triton_server(repository=repo)
    return server, pipes


class Stream:
    """One gRPC stream carrying one request; collects responses until the final flag."""

    def __init__(self, url: str, model: str, tensors, rid: str) -> None:
        self.events: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error, time.monotonic())))
        self.client.async_stream_infer(model, to_inputs(tensors), request_id=rid, enable_empty_final_response=True)
        self.chunks: list[np.ndarray] = []
        self.error = None
        self.finish_reason = None
        self.final_at = None

    def next(self, timeout: float = TIMEOUT):
        result, error, at = self.events.get(timeout=timeout)
        if error is not None:
            self.error = error
            self.final_at = at
            return True
        audio = result.as_numpy("audio")
        if audio is not None and audio.size:
            self.chunks.append(audio)
        if result.get_response().parameters["triton_final_response"].bool_param:
            reason = result.as_numpy("finish_reason")
            self.finish_reason = reason[0].decode() if reason is not None else None
            self.final_at = at
            return True
        return False

    def run(self) -> Stream:
        while not self.next():
            pass
        return self

    @property
    def pcm(self) -> np.ndarray:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.float32)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def offline(pipe, **fields) -> np.ndarray:
    return np.concatenate([e.pcm for e in Generator(pipe, max_batch=1).synthesize(Qwen3TTSRequest(**fields))])


def voice_features_via_triton(url: str, wav: np.ndarray, sr: int):
    client = grpcclient.InferenceServerClient(url)
    try:
        res = client.infer(
            "voice_features",
            to_inputs({"audio": wav.astype(np.float32), "sample_rate": np.array([sr], np.int32)}),
        )
        return res.as_numpy("x_vector"), res.as_numpy("ref_codes")
    finally:
        client.close()


def test_four_modes_stream_equal_offline(deployment):
    server, pipes = deployment
    url = server.grpc_url
    t = np.arange(int(1.3 * 16000)) / 16000
    wav = (0.3 * np.sin(2 * np.pi * 180 * t) + 0.02 * np.random.default_rng(0).normal(size=t.size)).astype(np.float32)
    xvec, codes = voice_features_via_triton(url, wav, 16000)
    x_off, c_off = pipes["base"].voice_features(wav, 16000, with_codes=True)
    np.testing.assert_allclose(xvec, x_off, atol=1e-5)
    np.testing.assert_array_equal(codes, c_off)
    cases = {
        "cv": ("speech_generation_cv", dict(text="Custom voice mode.", speaker="eric", language="Chinese", seed=1)),
        "vd": ("speech_generation_vd", dict(text="Voice design mode.", instructions="A bright young voice.", seed=2)),
        "icl": ("speech_generation_base", dict(text="In context cloning.", ref_text="Reference words.",
                                                ref_codes=codes, x_vector=xvec, seed=3)),
        "xvec": ("speech_generation_base", dict(text="Speaker embedding only.", x_vector=xvec, x_vector_only=True, seed=4)),
    }
    for key, (model, fields) in cases.items():
        fields = {**fields, "max_new_tokens": 16, "chunk_frames": 5}
        s = Stream(url, model, triton_io.request_tensors(**fields), key).run()
        s.close()
        assert s.error is None, s.error
        pipe = pipes["base" if model.endswith("base") else key]
        np.testing.assert_allclose(s.pcm, offline(pipe, **fields), atol=1e-5, err_msg=key)


def test_four_concurrent_streams_each_equal_their_offline_output(deployment):
    server, pipes = deployment
    reqs = {
        "a": dict(text="First of four concurrent streams.", speaker="vivian", seed=11, max_new_tokens=14),
        "b": dict(text="Second one, with another voice.", speaker="ryan", seed=12, max_new_tokens=9, chunk_frames=2),
        "c": dict(text="Third: a dialect speaker.", speaker="eric", language="Chinese", seed=13, max_new_tokens=20),
        "d": dict(text="Fourth and last.", speaker="vivian", seed=14, max_new_tokens=12, do_sample=False),
    }
    streams = {k: Stream(server.grpc_url, "speech_generation_cv", triton_io.request_tensors(**f), k) for k, f in reqs.items()}
    for s in streams.values():
        s.run()
        s.close()
    for k, f in reqs.items():
        assert streams[k].error is None
        np.testing.assert_allclose(streams[k].pcm, offline(pipes["cv"], **f), atol=1e-5, err_msg=k)


def test_cancelled_stream_frees_its_slot(deployment):
    server, pipes = deployment
    url, model = server.grpc_url, "speech_generation_vd"  # max_active_requests = 2
    base = dict(instructions="Calm.", chunk_frames=1)
    # Seeds chosen so that neither a nor b samples EOS early (checked offline: both reach their budget).
    a = Stream(url, model, triton_io.request_tensors(text="This one gets cancelled.", max_new_tokens=400, seed=4, **base), "a")
    b = Stream(url, model, triton_io.request_tensors(text="This one runs long.", max_new_tokens=300, seed=7, **base), "b")
    for _ in range(2):  # both are running
        assert not a.next() and not b.next()
    c_fields = dict(text="Short one, waits for a slot.", max_new_tokens=6, seed=6, **base)
    c = Stream(url, model, triton_io.request_tensors(**c_fields), "c")
    time.sleep(0.5)
    assert c.events.empty(), f"the third request must wait: both slots are taken; got {c.events.queue[0]}"
    a.close(cancel=True)
    c.run()
    c.close()
    b.run()
    b.close()
    assert c.error is None and b.error is None
    assert c.final_at < b.final_at, "the cancelled request's slot was not reused while b was still running"
    np.testing.assert_allclose(c.pcm, offline(pipes["vd"], **c_fields), atol=1e-5)
    assert b.finish_reason == "length" and b.pcm.size == 300 * 1920
    deadline = time.monotonic() + 30
    while "cancelled by the client" not in server.log_tail(2000):
        assert time.monotonic() < deadline, "server never logged the cancellation"
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("model", "fields", "param"),
    [
        ("speech_generation_cv", dict(text="   ", speaker="vivian"), "input"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="nobody"), "voice"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="vivian", language="Klingon"), "language"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="vivian", task_type="base"), "task_type"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="vivian", top_p=1.5), "top_p"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="vivian", temperature=0.0), "temperature"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="vivian", chunk_frames=0), "codec_chunk_frames"),
        ("speech_generation_cv", dict(text="Hi there.", speaker="vivian", max_new_tokens=0), "max_new_tokens"),
        ("speech_generation_base", dict(text="Hi there.", x_vector=np.ones(3, np.float32), x_vector_only=True), "x_vector"),
        ("speech_generation_base", dict(text="Hi there."), "ref_audio"),
    ],
)
def test_bad_inputs_are_invalid_arg_and_the_server_keeps_serving(deployment, model, fields, param):
    server, _ = deployment
    s = Stream(server.grpc_url, model, triton_io.request_tensors(**fields), "bad").run()
    s.close()
    assert s.error is not None
    wire = triton_io.parse_error(s.error.message())
    assert (wire.code, wire.param) == ("INVALID_ARG", param), s.error.message()
    ok = Stream(server.grpc_url, "speech_generation_cv",
                triton_io.request_tensors(text="Still serving.", speaker="vivian", max_new_tokens=3), "ok").run()
    ok.close()
    # unseeded sampling may draw EOS from frame 3 on (2 frames, "stop"); the budget gives 3 frames
    assert ok.error is None, ok.error
    frames = {"length": 3, "stop": 2}[ok.finish_reason]
    assert ok.pcm.size == frames * 1920, (ok.finish_reason, ok.pcm.size)


@pytest.mark.parametrize(
    "tensors",
    [
        {"text": np.array([7], np.int32)},  # wrong dtype
        {"text": np.array([b"a", b"b"], dtype=object)},  # wrong shape
        {"text": np.array([b"Hi."], dtype=object), "ref_codes": np.zeros((3, 5), np.int64)},  # wrong dims
    ],
)
def test_wrong_tensor_dtype_or_shape_is_invalid_arg(deployment, tensors):
    server, _ = deployment
    s = Stream(server.grpc_url, "speech_generation_cv", tensors, "shape").run()
    s.close()
    assert s.error is not None
    assert triton_io.parse_error(s.error.message()).code == "INVALID_ARG", s.error.message()
