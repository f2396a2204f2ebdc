"""The REAL tritonserver 2.51 (from nvidia-pytriton) with the committed model repository.

- tests/data/triton_repo/stream_counter: the bare decoupled contract of this server build
  (N responses + empty final with `triton_final_response`, error + FINAL, client cancellation).
- The rendered repository with dummy artifacts: code2wav (dynamic + ragged batching, per-request
  errors) and the production speech_generation model.py/config with its generator replaced by
  FakeGenerator (tests/data/fake_speech_generation_model.py): real scheduler, real wire format.
"""

from __future__ import annotations

import importlib.util
import queue
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_inputs import to_inputs
from tritonclient.utils import InferenceServerException

from ttscore.backend import triton_server
from ttscore.backend.repository import render_repository
from ttscore.contract import tensors as triton_io

pytestmark = [pytest.mark.integration]

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FAKE_GENERATION_MODEL = TESTS / "data" / "fake_speech_generation_model.py"
HAS_AUDIO = importlib.util.find_spec("ttscore.runtime.audio") is not None
TIMEOUT = 30.0


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter_server(triton_server):
    return triton_server(TESTS / "data" / "triton_repo")


@pytest.fixture(scope="module")
def tts_server(triton_server, dummy_artifacts):
    models = ["code2wav", "speech_generation"]
    if HAS_AUDIO:
        models += ["voice_features", "audio_preprocess", "speaker_encoder", "speech_encoder"]
    return triton_server(
        models=models,
        artifacts_dir=dummy_artifacts,
        settings={"code2wav": {"max_queue_delay_us": 20000}, "speech_generation": {"parameters": {"max_active_requests": "4"}}},
        model_overrides={"speech_generation": FAKE_GENERATION_MODEL},
        env={"TTS_FAKE_STEP_DELAY_S": "0.01", "TTS_FAKE_SPF": "1920"},
    )


class Stream:
    """One gRPC bidirectional stream; collects (result, error) per request id."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.events: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))

    def send(self, model: str, tensors: dict[str, np.ndarray], request_id: str) -> None:
        self.client.async_stream_infer(model, to_inputs(tensors), request_id=request_id, enable_empty_final_response=True)

    def next(self, timeout: float = TIMEOUT):
        return self.events.get(timeout=timeout)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def is_final(result) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def collect(stream: Stream, ids: set[str]) -> dict[str, list]:
    """Responses per request id until every id got its final response or an error.

    Errors on a gRPC stream carry no request id, so this is only used with one possible error."""
    out: dict[str, list] = {i: [] for i in ids}
    open_ids = set(ids)
    while open_ids:
        result, error = stream.next()
        if error is not None:
            out.setdefault("error", []).append(error)
            if len(open_ids) == 1:
                open_ids.clear()
            continue
        rid = result.get_response().id
        out[rid].append(result)
        if is_final(result):
            open_ids.discard(rid)
    return out


# --- the decoupled contract of this server build ------------------------------------------------


def test_decoupled_stream_ends_on_the_final_flag(counter_server):
    s = Stream(counter_server.grpc_url)
    try:
        s.send("stream_counter", {"count": np.array([5], np.int32)}, "five")
        got = collect(s, {"five"})["five"]
        assert [is_final(r) for r in got] == [False] * 5 + [True]
        assert [int(r.as_numpy("index")[0]) for r in got[:5]] == list(range(5))
        assert got[-1].as_numpy("index") is None  # the empty final response

        s.send("stream_counter", {"count": np.array([-1], np.int32)}, "bad")
        result, error = s.next()
        assert result is None and isinstance(error, InferenceServerException)
        assert "count must be >= 0" in error.message()
        with pytest.raises(queue.Empty):  # an error + FINAL is the whole answer
            s.next(timeout=0.5)
    finally:
        s.close()


def test_client_cancel_reaches_the_model(counter_server):
    s = Stream(counter_server.grpc_url)
    s.send("stream_counter", {"count": np.array([1000], np.int32), "delay_ms": np.array([20], np.int32)}, "long")
    for _ in range(3):
        result, error = s.next()
        assert error is None
    s.close(cancel=True)
    deadline = time.monotonic() + TIMEOUT
    while "stream_counter: cancelled after" not in counter_server.log_tail(400):
        assert time.monotonic() < deadline, "the model never saw is_cancelled()"
        time.sleep(0.1)


# --- speech_generation (production model.py + FakeGenerator) -------------------------------------


def speech_tensors(**fields) -> dict[str, np.ndarray]:
    return triton_io.request_tensors(**fields)


def test_speech_generation_streams_chunks_then_final(tts_server):
    s = Stream(tts_server.grpc_url)
    try:
        s.send("speech_generation", speech_tensors(text="hello", max_new_tokens=5, chunk_frames=2), "req-1")
        got = collect(s, {"req-1"})["req-1"]
    finally:
        s.close()
    assert [is_final(r) for r in got] == [False, False, True]  # the final chunk carries FINAL
    assert [int(r.as_numpy("frames")[0]) for r in got] == [2, 2, 1]
    assert [r.as_numpy("finish_reason")[0] for r in got] == [b"", b"", b"length"]
    assert got[-1].as_numpy("usage").tolist() == [5, 0, 5]
    audio = np.concatenate([r.as_numpy("audio") for r in got])
    assert audio.dtype == np.float32 and audio.shape == (5 * 1920,)
    np.testing.assert_array_equal(audio[::1920], np.arange(5, dtype=np.float32))


def test_speech_generation_concurrent_requests_on_one_stream(tts_server):
    s = Stream(tts_server.grpc_url)
    ids = {f"c{i}" for i in range(6)}
    try:
        for i, rid in enumerate(sorted(ids)):
            s.send("speech_generation", speech_tensors(text=rid, max_new_tokens=3 + i), rid)
        got = collect(s, ids)
    finally:
        s.close()
    for i, rid in enumerate(sorted(ids)):
        assert sum(is_final(r) for r in got[rid]) == 1 and is_final(got[rid][-1])
        assert sum(int(r.as_numpy("frames")[0]) for r in got[rid]) == 3 + i


@pytest.mark.parametrize(
    ("tensors", "code", "param"),
    [
        (speech_tensors(text="invalid"), "INVALID_ARG", "input"),  # Generator.submit's InvalidRequest
        (speech_tensors(text="submit-crash"), "INTERNAL", None),  # unexpected exception: generic
        ({"text": np.array([1], np.int32)}, "INVALID_ARG", "text"),  # Triton's own dtype check
        ({"text": np.array([b"a", b"b"], dtype=object)}, "INVALID_ARG", "text"),  # shape
        ({"max_new_tokens": np.array([3], np.int32)}, "INVALID_ARG", "text"),  # missing required input
    ],
)
def test_speech_generation_errors(tts_server, tensors, code, param):
    s = Stream(tts_server.grpc_url)
    try:
        s.send("speech_generation", tensors, "err")
        result, error = s.next()
        assert result is None and error is not None
        wire = triton_io.parse_error(error.message())
        assert (wire.code, wire.param) == (code, param), error.message()
        if code == "INTERNAL":
            assert wire.message == triton_io.INTERNAL_MESSAGE
        with pytest.raises(queue.Empty):
            s.next(timeout=0.3)
    finally:
        s.close()


def test_speech_generation_cancel_releases_the_request(tts_server):
    s = Stream(tts_server.grpc_url)
    s.send("speech_generation", speech_tensors(text="long", max_new_tokens=100_000), "to-cancel")
    for _ in range(3):
        result, error = s.next()
        assert error is None and not is_final(result)
    s.close(cancel=True)
    deadline = time.monotonic() + TIMEOUT
    while "request to-cancel cancelled by the client; released" not in tts_server.log_tail(400):
        assert time.monotonic() < deadline, "the scheduler never saw the cancellation"
        time.sleep(0.1)


# --- code2wav -------------------------------------------------------------------------------------


def code2wav_inputs(frames: int, position: int, state_size: int = 8, first_code: int = 3):
    codes = np.zeros((1, frames, 16), np.int64)
    codes[0, :, 0] = first_code + np.arange(frames)
    inputs = [
        grpcclient.InferInput("codes", [1, frames, 16], "INT64"),
        grpcclient.InferInput("state", [1, state_size], "FP32"),
        grpcclient.InferInput("position", [1, 1], "INT64"),
    ]
    inputs[0].set_data_from_numpy(codes)
    inputs[1].set_data_from_numpy(np.ones((1, state_size), np.float32))
    inputs[2].set_data_from_numpy(np.array([[position]], np.int64))
    return inputs


def test_code2wav_batches_mixed_frame_counts_and_isolates_errors(tts_server):
    client = grpcclient.InferenceServerClient(tts_server.grpc_url)
    before = client.get_inference_statistics("code2wav").model_stats[0]
    results: dict[int, object] = {}
    cases = {0: (2, 10, 8), 1: (3, 20, 8), 2: (2, 30, 9), 3: (1, 40, 8), 4: (2, 50, 8)}  # 2: bad state
    for key, (frames, pos, size) in cases.items():
        client.async_infer(
            "code2wav", code2wav_inputs(frames, pos, size), callback=lambda result, error, k=key: results.__setitem__(k, (result, error))
        )
    deadline = time.monotonic() + TIMEOUT
    while len(results) < len(cases):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for key, (frames, pos, _size) in cases.items():
        result, error = results[key]
        if key == 2:
            wire = triton_io.parse_error(error.message())
            assert (wire.code, wire.param) == ("INVALID_ARG", "state")
            continue
        assert error is None, error
        pcm = result.as_numpy("pcm")
        assert pcm.shape == (1, frames * 1920)
        np.testing.assert_allclose(pcm[0, ::1920], 3 + np.arange(frames) + 0.001 * pos, atol=1e-4)
        np.testing.assert_array_equal(result.as_numpy("new_state"), np.full((1, 8), 1.0 + frames, np.float32))
    after = client.get_inference_statistics("code2wav").model_stats[0]
    inferences = after.inference_count - before.inference_count
    executions = after.execution_count - before.execution_count
    assert inferences == len(cases)
    assert executions < inferences, "the dynamic batcher never combined requests"
    client.close()


# --- voice_features ensemble ----------------------------------------------------------------------


@pytest.mark.skipif(not HAS_AUDIO, reason="ttscore.runtime.audio is not available yet")
def test_voice_features_ensemble(tts_server):
    client = grpcclient.InferenceServerClient(tts_server.grpc_url)
    sr = 16000
    audio = (0.1 * np.sin(2 * np.pi * 220 * np.arange(sr) / sr)).astype(np.float32)  # 1 s at 16 kHz
    inputs = [grpcclient.InferInput("audio", [audio.size], "FP32"), grpcclient.InferInput("sample_rate", [1], "INT32")]
    inputs[0].set_data_from_numpy(audio)
    inputs[1].set_data_from_numpy(np.array([sr], np.int32))
    result = client.infer("voice_features", inputs)
    assert result.as_numpy("x_vector").shape == (8,)
    assert result.as_numpy("ref_codes").shape == (13, 16)  # ceil(24000 / 1920) frames
    inputs[0] = grpcclient.InferInput("audio", [100], "FP32")
    inputs[0].set_data_from_numpy(audio[:100])
    with pytest.raises(InferenceServerException) as err:
        client.infer("voice_features", inputs)
    wire = triton_io.parse_error(err.value.message())
    assert (wire.code, wire.param) == ("INVALID_ARG", "audio"), err.value.message()
    client.close()


# --- fixtures' own guarantees -------------------------------------------------------------------


def test_a_model_that_fails_to_load_fails_fast_with_the_log(tmp_path):
    repo = render_repository(tmp_path / "repo", artifacts_dir=tmp_path / "missing", models=["code2wav"])
    server = triton_server.TritonServer(repo, log_file=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises(triton_server.TritonServerError) as err:
        with server:
            pass
    assert time.monotonic() - started < 60
    assert "exited with code" in str(err.value) and "artifacts_dir" in str(err.value)
    assert not server.is_alive()



def test_a_killed_server_leaves_no_shared_memory_behind(tmp_path):
    """SIGKILL leaves the python backend's regions in /dev/shm (RAM until reboot); stop() removes this
    server's own, and only those (a region of another server, same pattern otherwise, stays)."""
    import os
    import signal

    other = triton_server.SHM_DIR / "triton_python_backend_shm_region_not-ours"
    other.write_bytes(b"x")
    server = triton_server.TritonServer(TESTS / "data" / "triton_repo", log_file=tmp_path / "server.log")
    try:
        with server:
            regions = sorted(triton_server.SHM_DIR.glob(f"{server.shm_prefix}*"))
            assert regions, "the server uses its own region prefix"
            os.killpg(server.pid, signal.SIGKILL)
            time.sleep(0.5)
            assert all(r.exists() for r in regions)  # what a killed server leaves
        assert not any(triton_server.SHM_DIR.glob(f"{server.shm_prefix}*"))
        assert other.exists()
    finally:
        other.unlink()

@pytest.mark.slow
def test_perf_analyzer_streaming_against_speech_generation(tts_server, tmp_path):
    data = tmp_path / "prompts.json"
    data.write_text('{"data": [{"text": ["perf"], "max_new_tokens": [8]}, {"text": ["perf2"], "max_new_tokens": [5]}]}')
    out = tmp_path / "perf"
    proc = subprocess.run(
        [sys.executable, "-m", "triton_tts.bench.perf_analyzer", "speech", "--url", tts_server.grpc_url,
         "--input-data", str(data), "--concurrency", "1:2:1", "--out", str(out),
         "--requests-per-window", "4", "--stability-percentage", "100", "--max-trials", "3"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    import json

    rows = json.loads((out / "summary.json").read_text())["speech_generation"]
    assert [r["concurrency"] for r in rows] == [1, 2]
    for r in rows:
        assert r["requests"] > 0 and r["ttfa_ms"]["p50"] is not None and r["audio_seconds"] > 0
    assert (out / "speech_generation.csv").is_file()


@pytest.mark.slow
def test_perf_analyzer_code2wav_batch_sweep(tts_server, tmp_path):
    scenario = tmp_path / "c2w.json"
    scenario.write_text('{"frames": [2]}')
    out = tmp_path / "perf"
    proc = subprocess.run(
        [sys.executable, "-m", "triton_tts.bench.perf_analyzer", "code2wav", "--url", tts_server.grpc_url,
         "--scenario", str(scenario), "--state-size", "8", "--batch-sizes", "1,4", "--concurrency", "1:2:1",
         "--out", str(out), "--requests-per-window", "20", "--stability-percentage", "100", "--max-trials", "3"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    import json

    rows = json.loads((out / "summary.json").read_text())["code2wav"]
    # perf_analyzer drops a (batch, concurrency) point whose latency never stabilised within
    # --max-trials on a loaded machine; the concurrency-1 points of both batch sizes must be there.
    got = {(r["batch_size"], r["concurrency"]) for r in rows}
    assert {(1, 1), (4, 1)} <= got <= {(1, 1), (1, 2), (4, 1), (4, 2)}
    assert all(r["inferences_per_second"] > 0 for r in rows)
