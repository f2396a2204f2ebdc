"""The real generator behind the real tritonserver: a tiny exported checkpoint (tests/model_fixtures.py).

Streamed audio must equal offline generation for the same seed, code2wav served by Triton must
reproduce the generator's audio chunk by chunk, concurrent requests each end with exactly one
FINAL, and a bad voice is INVALID_ARG naming the field. Base: voice_features (ensemble) equals
Qwen3TTSPipeline.voice_features.
"""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_inputs import to_inputs

from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT = 120.0
FIELDS = dict(text="Hello from Triton.", speaker="vivian", language="English", max_new_tokens=24, seed=7, chunk_frames=5)


@pytest.fixture(scope="module")
def served(triton_server, tiny_custom_voice):
    _, artifacts, pipeline = tiny_custom_voice
    server = triton_server(
        models=["code2wav", "speech_generation"],
        artifacts_dir=artifacts,
        settings={"speech_generation": {"parameters": {"max_active_requests": "4"}}},
    )
    return server, pipeline


def stream(url: str, requests: dict[str, dict]) -> tuple[dict[str, list], list]:
    """Send every request on one gRPC stream; responses per id until each one's final flag."""
    client = grpcclient.InferenceServerClient(url)
    events: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        for rid, fields in requests.items():
            client.async_stream_infer(
                "speech_generation", to_inputs(triton_io.request_tensors(**fields)), request_id=rid,
                enable_empty_final_response=True,
            )
        out: dict[str, list] = {rid: [] for rid in requests}
        errors = []
        open_ids = set(requests)
        while open_ids:
            result, error = events.get(timeout=TIMEOUT)
            if error is not None:
                errors.append(error)
                if len(open_ids) == 1:
                    break
                continue
            rid = result.get_response().id
            out[rid].append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                open_ids.discard(rid)
        return out, errors
    finally:
        client.stop_stream()
        client.close()


def finals(responses: list) -> int:
    return sum(r.get_response().parameters["triton_final_response"].bool_param for r in responses)


def test_streamed_audio_equals_offline_generation(served):
    server, pipeline = served
    offline = list(Generator(pipeline, max_batch=1).synthesize(Qwen3TTSRequest(**FIELDS)))
    out, errors = stream(server.grpc_url, {"one": FIELDS})
    assert errors == []
    got = out["one"]
    assert finals(got) == 1 and got[-1].get_response().parameters["triton_final_response"].bool_param
    # The adaptive chunk schedule follows each run's own timing, so chunk boundaries may differ;
    # the exact streaming vocoder makes the audio the same for any boundaries.
    sizes = [int(r.as_numpy("frames")[0]) for r in got]
    assert sizes[0] == 1 and max(sizes) <= FIELDS["chunk_frames"] and sum(sizes) == sum(e.frames for e in offline)
    assert got[-1].as_numpy("finish_reason")[0].decode() == offline[-1].finish_reason
    u = offline[-1].usage
    assert got[-1].as_numpy("usage").tolist() == [u.text_tokens, u.audio_tokens, u.output_tokens]
    np.testing.assert_allclose(
        np.concatenate([r.as_numpy("audio") for r in got]), np.concatenate([e.pcm for e in offline]), atol=1e-5, rtol=0
    )


def test_concurrent_requests_each_end_with_one_final(served):
    server, _ = served
    requests = {f"c{i}": {**FIELDS, "seed": 100 + i, "max_new_tokens": 10 + 3 * i} for i in range(5)}
    out, errors = stream(server.grpc_url, requests)
    assert errors == []
    for rid, fields in requests.items():
        assert finals(out[rid]) == 1
        frames = sum(int(r.as_numpy("frames")[0]) for r in out[rid])
        assert 1 <= frames <= fields["max_new_tokens"]
        assert sum(r.as_numpy("audio").size for r in out[rid]) == frames * 1920


def test_unknown_voice_is_invalid_arg(served):
    server, _ = served
    _, errors = stream(server.grpc_url, {"bad": {**FIELDS, "speaker": "nobody"}})
    wire = triton_io.parse_error(errors[0].message())
    assert wire.code == "INVALID_ARG" and wire.param == "voice" and "nobody" in wire.message


def test_code2wav_reproduces_the_generator_audio(served):
    server, pipeline = served
    offline = list(Generator(pipeline, max_batch=1).synthesize(Qwen3TTSRequest(**FIELDS)))
    codes = np.concatenate([e.codes for e in offline])
    size = pipeline.vocoder_state_size
    client = grpcclient.InferenceServerClient(server.grpc_url)
    state, position, pcm = np.zeros((1, size), np.float32), 0, []
    for chunk in np.array_split(codes, [1, 4, 11]):  # any chunking gives the same audio
        result = client.infer(
            "code2wav",
            to_inputs({"codes": chunk[None].astype(np.int64), "state": state, "position": np.array([[position]], np.int64)}),
        )
        pcm.append(result.as_numpy("pcm")[0])
        state = result.as_numpy("new_state")
        position += chunk.shape[0]
    client.close()
    np.testing.assert_allclose(np.concatenate(pcm), np.concatenate([e.pcm for e in offline]), atol=1e-4)


def test_voice_features_equal_the_pipeline(triton_server, tiny_base):
    _, artifacts, pipeline = tiny_base
    server = triton_server(
        models=["voice_features", "audio_preprocess", "speaker_encoder", "speech_encoder"], artifacts_dir=artifacts
    )
    sr = 16000
    t = np.arange(int(1.3 * sr)) / sr
    audio = (0.2 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer(
        "voice_features", to_inputs({"audio": audio, "sample_rate": np.array([sr], np.int32)})
    )
    client.close()
    x_vector, codes = pipeline.voice_features(audio, sr, with_codes=True)
    np.testing.assert_allclose(result.as_numpy("x_vector"), x_vector, atol=1e-5)
    np.testing.assert_array_equal(result.as_numpy("ref_codes"), codes)
