"""GPU path (onnxruntime-gpu CUDA execution provider): the same artifacts give the same codes and
audio as on CPU. Runs only where onnxruntime exposes CUDAExecutionProvider (a GPU host with
onnxruntime-gpu installed, e.g. the docker/Dockerfile.triton image); skipped elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        "CUDAExecutionProvider" not in ort.get_available_providers(), reason="no CUDA execution provider here"
    ),
]


def test_gpu_pipeline_matches_cpu(tiny_custom_voice, monkeypatch):
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline
    from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

    _, art, cpu = tiny_custom_voice
    monkeypatch.setenv("TTS_DEVICE", "gpu")
    gpu = Qwen3TTSPipeline.load(art)
    assert "CUDAExecutionProvider" in gpu.talker.session.get_providers()
    req = Qwen3TTSRequest(text="GPU and CPU agree.", speaker="vivian", max_new_tokens=12, do_sample=False,
                           subtalker_do_sample=False)
    a = list(Generator(cpu).synthesize(req))
    b = list(Generator(gpu).synthesize(req))
    np.testing.assert_array_equal(np.concatenate([e.codes for e in a]), np.concatenate([e.codes for e in b]))
    np.testing.assert_allclose(np.concatenate([e.pcm for e in a]), np.concatenate([e.pcm for e in b]), atol=1e-3)
