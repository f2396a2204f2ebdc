"""VoxCPM2 with a startup LoRA adapter merged (`--lora`) and batched prefill on the real tritonserver:
rendered as `triton-tts serve` plans it, four requests in flight together each stream the audio the
offline engine makes for that request alone from the same merged artifacts (which
tests/export_tests/test_voxcpm2_lora.py checks against the reference's own LoRA)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from test_triton_deployment import Stream

from triton_tts.serve import Served, plan_deployment
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES, load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ATOL = 1e-5  # as tests/triton_tests/test_triton_voxcpm2.py (adaptive vs fixed chunks, batched vs alone)


@pytest.fixture(scope="module")
def lora_server(triton_server, voxcpm2_tiny, voxcpm2_lora_artifacts, tmp_path_factory):
    from ttscore.backend.repository import render_repository

    manifest = read_manifest(voxcpm2_lora_artifacts)
    assert manifest.adapter is not None
    served = [Served("vox", voxcpm2_tiny, voxcpm2_lora_artifacts, manifest)]
    plan = plan_deployment(served, max_active=4)
    repo = tmp_path_factory.mktemp("vxlora") / "model_repository"
    render_repository(repo, plan["settings"], models=plan["models"], aliases=plan["aliases"])
    return triton_server(repository=repo), load_model(voxcpm2_lora_artifacts)


def offline(model, **fields) -> np.ndarray:
    request = FAMILIES["voxcpm2"].request_from_tensors(triton_io.request_tensors(**fields))
    return np.concatenate([e.pcm for e in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(request)])


def test_four_lora_requests_together_each_equal_offline_alone(lora_server):
    server, model = lora_server
    texts = ("Hello world, this is a test.", "Short one.", "A somewhat longer sentence for the third request.",
             "Streaming speech arrives.")
    cases = {f"r{i}": dict(text=t, seed=50 + i, max_new_tokens=8, chunk_frames=3) for i, t in enumerate(texts)}
    streams = {k: Stream(server.grpc_url, "speech_generation", triton_io.request_tensors(**f), k)
               for k, f in cases.items()}
    threads = [threading.Thread(target=s.run) for s in streams.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for key, s in streams.items():
        s.close()
        assert s.error is None, (key, s.error)
        want = offline(model, **cases[key])
        assert s.pcm.shape == want.shape, key
        np.testing.assert_allclose(s.pcm, want, atol=ATOL, err_msg=key)
