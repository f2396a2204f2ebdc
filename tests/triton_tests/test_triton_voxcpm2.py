"""VoxCPM2 on the real tritonserver, next to a Qwen3-TTS checkpoint, rendered as `triton-tts serve`
plans it: speech_generation_<name> per checkpoint under the same scheduler, VoxCPM2's streaming
AudioVAE decoder as its own model called by BLS (audiovae_decoder), its encoder as the voice-features
model (audiovae_encoder). Streamed audio must equal the offline engine for zero-shot and both cloning
modes, a VoxCPM2 and a Qwen3-TTS request in flight together must both complete, and bad input must
be INVALID_ARG naming the field while the server keeps serving.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from test_triton_deployment import Stream, to_inputs

from triton_tts.serve import Served, plan_deployment
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES, load_model
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The adaptive chunk schedule (the server's default) rounds differently from the offline fixed one
# by ONNX Runtime kernel rounding only (ttscore.runtime.engine): far below one 16-bit step.
ATOL = 1e-5


@pytest.fixture(scope="module")
def mixed(triton_server, tiny_custom_voice, voxcpm2_tiny, voxcpm2_artifacts, tmp_path_factory):
    from ttscore.backend.repository import render_repository

    cv_ckpt, cv_art, cv_pipe = tiny_custom_voice
    served = [
        Served("cv", cv_ckpt, cv_art, read_manifest(cv_art)),
        Served("vox", voxcpm2_tiny, voxcpm2_artifacts, read_manifest(voxcpm2_artifacts)),
    ]
    plan = plan_deployment(served, max_active=4)
    assert {"audiovae_decoder", "audiovae_encoder"} <= set(plan["models"])
    assert plan["settings"]["speech_generation_vox"]["parameters"]["vocoder"] == "audiovae_decoder"
    repo = tmp_path_factory.mktemp("mixed") / "model_repository"
    render_repository(repo, plan["settings"], models=plan["models"], aliases=plan["aliases"])
    server = triton_server(repository=repo)
    return server, cv_pipe, load_model(voxcpm2_artifacts)


def reference_clip() -> np.ndarray:
    t = np.arange(int(16000 * 0.9)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)


def encode_via_triton(url: str, wav: np.ndarray, sr: int, prompt: bool | None = None) -> np.ndarray:
    tensors = {"audio": wav.astype(np.float32), "sample_rate": np.array([sr], np.int32)}
    if prompt is not None:
        tensors["prompt"] = np.array([prompt])
    client = grpcclient.InferenceServerClient(url)
    try:
        return client.infer("audiovae_encoder", to_inputs(tensors)).as_numpy("ref_patches")
    finally:
        client.close()


def offline(model, **fields) -> np.ndarray:
    # The same tensors -> request mapping as the server (the family's request_from_tensors).
    request = FAMILIES["voxcpm2"].request_from_tensors(triton_io.request_tensors(**fields))
    events = Generator(model, max_batch=1, chunk_policy="fixed").synthesize(request)
    return np.concatenate([e.pcm for e in events])


def test_zero_shot_and_cloned_streams_equal_offline(mixed):
    server, _, vox = mixed
    url = server.grpc_url
    wav = reference_clip()
    ref = encode_via_triton(url, wav, 16000)  # cloning reference: padded on the right
    prompt = encode_via_triton(url, wav, 16000, prompt=True)  # continuation prompt: padded on the left
    np.testing.assert_allclose(ref, vox.encode_reference(wav, 16000, pad="right"), atol=1e-6)
    np.testing.assert_allclose(prompt, vox.encode_reference(wav, 16000, pad="left"), atol=1e-6)
    cases = {
        "zero_shot": dict(text="Hello world, this is a test.", seed=5),
        "reference": dict(text="Cloned from a reference.", ref_patches=ref, seed=6),
        "continuation": dict(text="And continued.", ref_patches=prompt, ref_text="A prompt.", seed=7),
    }
    for key, fields in cases.items():
        fields = {**fields, "max_new_tokens": 8, "chunk_frames": 3}
        s = Stream(url, "speech_generation_vox", triton_io.request_tensors(**fields), key).run()
        s.close()
        assert s.error is None, (key, s.error)
        want = offline(vox, **fields)
        assert s.pcm.shape == want.shape, key
        np.testing.assert_allclose(s.pcm, want, atol=ATOL, err_msg=key)
        assert len(s.chunks) > 1, "the audio must stream in several chunks"


def test_voxcpm2_and_qwen_requests_in_flight_together_both_complete(mixed):
    server, cv_pipe, vox = mixed
    url = server.grpc_url
    q_fields = dict(text="A Qwen request.", speaker="vivian", seed=1, max_new_tokens=12, chunk_frames=2)
    v_fields = dict(text="A VoxCPM2 request.", seed=2, max_new_tokens=6, chunk_frames=1)
    q = Stream(url, "speech_generation_cv", triton_io.request_tensors(**q_fields), "q")
    v = Stream(url, "speech_generation_vox", triton_io.request_tensors(**v_fields), "v")
    assert not q.next() and not v.next()  # both have streamed a first chunk: in flight together
    q.run()
    v.run()
    q.close()
    v.close()
    assert q.error is None and v.error is None
    q_off = np.concatenate([e.pcm for e in Generator(cv_pipe, max_batch=1).synthesize(Qwen3TTSRequest(**q_fields))])
    np.testing.assert_allclose(q.pcm, q_off, atol=ATOL)
    np.testing.assert_allclose(v.pcm, offline(vox, **v_fields), atol=ATOL)


@pytest.mark.parametrize(
    ("model", "fields", "param"),
    [
        ("speech_generation_vox", dict(text="   "), "input"),
        ("speech_generation_vox", dict(text="Hi.", speaker="vivian"), "speaker"),
        ("speech_generation_vox", dict(text="Hi.", language="English"), "language"),
        ("speech_generation_vox", dict(text="Hi.", ref_text="no audio"), "ref_text"),
        ("speech_generation_vox", dict(text="Hi.", ref_patches=np.ones((2, 3, 5), np.float32)), "ref_audio"),
        ("speech_generation_vox", dict(text="Hi.", inference_timesteps=0), "inference_timesteps"),
        ("speech_generation_vox", dict(text="Hi.", max_new_tokens=0), "max_new_tokens"),
        ("speech_generation_cv", dict(text="Hi.", speaker="vivian", ref_patches=np.ones((1, 1, 1), np.float32)),
         "ref_patches"),
        ("audiovae_encoder", None, "audio"),
    ],
)
def test_bad_input_is_invalid_arg_naming_the_field_and_the_server_keeps_serving(mixed, model, fields, param):
    server, _, vox = mixed
    url = server.grpc_url
    if fields is None:  # a 10 ms clip: below the reference bounds
        client = grpcclient.InferenceServerClient(url)
        try:
            with pytest.raises(Exception) as exc:
                client.infer(model, to_inputs({"audio": np.zeros(160, np.float32), "sample_rate": np.array([16000], np.int32)}))
        finally:
            client.close()
        error = triton_io.parse_error(str(exc.value))
    else:
        s = Stream(url, model, triton_io.request_tensors(**fields), "bad").run()
        s.close()
        assert s.error is not None
        error = triton_io.parse_error(str(s.error))
    assert (error.code, error.param) == (triton_io.INVALID_ARG, param), error
    good = dict(text="Still serving.", seed=3, max_new_tokens=4)
    s = Stream(url, "speech_generation_vox", triton_io.request_tensors(**good), "good").run()
    s.close()
    assert s.error is None and s.pcm.size == 4 * vox.info.samples_per_patch
