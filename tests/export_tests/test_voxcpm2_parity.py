"""VoxCPM2 exported pipeline (numpy + onnxruntime, the engine's continuous batching) against the
reference `generate`, `generate_streaming` and the prompt-cache (voice cloning) paths, with the
diffusion noise fed identically (one seeded standard-normal [D, P] draw per patch).

Stated tolerance: max abs audio error <= 1e-4 and latents <= 1e-4 (tiny checkpoint, float32;
measured ~1e-5: float rounding of ONNX Runtime vs PyTorch kernels, amplified by the generation loop).
Same seed -> bit-identical audio; batched == alone within float rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sequences import run_together

from export.voxcpm2.reference import fed_noise, load_reference
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import load_model
from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model
from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

pytestmark = [pytest.mark.parity, pytest.mark.slow]

TOL = 1e-4
TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def ref(voxcpm2_tiny: Path) -> Any:
    return load_reference(voxcpm2_tiny)


@pytest.fixture(scope="module")
def model(voxcpm2_artifacts: Path) -> VoxCPM2Model:
    m = load_model(voxcpm2_artifacts)
    assert isinstance(m, VoxCPM2Model)
    return m


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import soundfile as sf

    t = np.arange(int(16000 * 0.9)) / 16000
    wav = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    path = tmp_path_factory.mktemp("vxref") / "ref.wav"
    sf.write(path, wav, 16000, subtype="FLOAT")
    return path


def noise(model: VoxCPM2Model, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    d, p = model.info.feat_dim, model.info.patch_size
    while True:
        yield rng.standard_normal((d, p), dtype=np.float32)[None]


def ours(model: VoxCPM2Model, req: VoxCPM2Request, policy: str = "fixed") -> tuple[np.ndarray, np.ndarray]:
    gen = Generator(model, max_batch=1, chunk_policy=policy)
    events = list(gen.synthesize(req))
    pcm = np.concatenate([e.pcm for e in events])
    latents = np.concatenate([e.codes for e in events if e.codes is not None and e.frames])
    return pcm, latents


def encode(model: VoxCPM2Model, path: Path, pad: str) -> np.ndarray:
    from ttscore.runtime.audio import load_audio

    wav, sr = load_audio(path.read_bytes())
    return model.encode_reference(wav, sr, pad=pad)


def test_zero_shot_generate(ref: Any, model: VoxCPM2Model) -> None:
    with fed_noise(noise(model, 5)):
        want = ref.generate(TEXT, max_len=14)[0].numpy()
    got, _ = ours(model, VoxCPM2Request(TEXT, seed=5, max_new_tokens=14))
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= TOL


def test_zero_shot_generate_streaming(ref: Any, model: VoxCPM2Model) -> None:
    with fed_noise(noise(model, 8)):
        chunks = [c[0].numpy() for c in ref.generate_streaming(TEXT, max_len=14)]
    want = np.concatenate(chunks)
    got, _ = ours(model, VoxCPM2Request(TEXT, seed=8, max_new_tokens=14, initial_chunk_frames=1, chunk_frames=3))
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= TOL
    # The adaptive schedule changes only chunk boundaries: the audio stays equal up to rounding.
    adaptive, _ = ours(model, VoxCPM2Request(TEXT, seed=8, max_new_tokens=14), policy="adaptive")
    assert float(np.abs(adaptive - got).max()) <= 1e-5


@pytest.mark.parametrize("mode", ["reference", "continuation", "ref_continuation"])
def test_prompt_cache_voice_cloning(ref: Any, model: VoxCPM2Model, ref_wav: Path, mode: str) -> None:
    kwargs: dict[str, Any] = {}
    req = VoxCPM2Request(TEXT, seed=11, max_new_tokens=12)
    if mode in ("reference", "ref_continuation"):
        kwargs["reference_wav_path"] = str(ref_wav)
        req.ref_patches = encode(model, ref_wav, "right")
    if mode in ("continuation", "ref_continuation"):
        kwargs.update(prompt_wav_path=str(ref_wav), prompt_text="This is the prompt.")
        req.prompt_patches = encode(model, ref_wav, "left")
        req.prompt_text = "This is the prompt."
    cache = ref.build_prompt_cache(**kwargs)
    assert cache["mode"] == mode
    for key, mine in (("ref_audio_feat", req.ref_patches), ("audio_feat", req.prompt_patches)):
        if key in cache:
            assert float(np.abs(cache[key].numpy() - mine).max()) <= TOL
    with fed_noise(noise(model, 11)):
        wav, _, feat = ref.generate_with_prompt_cache(TEXT, cache, max_len=12)
    got, latents = ours(model, req)
    assert latents.shape == tuple(feat.shape)
    assert float(np.abs(latents - feat.numpy()).max()) <= TOL
    want = wav[0].numpy()
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= TOL


def test_same_seed_same_audio(model: VoxCPM2Model) -> None:
    a, _ = ours(model, VoxCPM2Request(TEXT, seed=3, max_new_tokens=10))
    b, _ = ours(model, VoxCPM2Request(TEXT, seed=3, max_new_tokens=10))
    c, _ = ours(model, VoxCPM2Request(TEXT, seed=4, max_new_tokens=10))
    assert np.array_equal(a, b)
    assert a.shape != c.shape or not np.array_equal(a, c)


def test_batched_equals_alone(model: VoxCPM2Model, ref_wav: Path) -> None:
    reqs = {
        "a": VoxCPM2Request(TEXT, seed=21, max_new_tokens=12),
        "b": VoxCPM2Request("Streaming speech arrives.", seed=22, max_new_tokens=9, inference_timesteps=6,
                            ref_patches=encode(model, ref_wav, "right")),
    }
    alone = {k: ours(model, r)[0] for k, r in reqs.items()}
    together = run_together(Generator(model, max_batch=2, chunk_policy="fixed"), reqs)
    for k in reqs:
        both = together[k]
        assert both.shape == alone[k].shape
        assert float(np.abs(both - alone[k]).max()) <= 1e-5


def test_say_offline(voxcpm2_artifacts: Path, ref_wav: Path, tmp_path: Path) -> None:
    import soundfile as sf

    from triton_tts.cli import main

    out = tmp_path / "a.wav"
    assert main(["say", "--artifacts", str(voxcpm2_artifacts), TEXT, "-o", str(out), "--seed", "1"]) == 0
    audio, sr = sf.read(out)
    assert sr == 48000 and audio.size > 0 and audio.size % 7680 == 0
    for extra in (["--ref-audio", str(ref_wav)], ["--ref-audio", str(ref_wav), "--ref-text", "The prompt."]):
        assert main(["say", "--artifacts", str(voxcpm2_artifacts), TEXT, "-o", str(out), "--seed", "1", *extra]) == 0
    assert main(["say", "--artifacts", str(voxcpm2_artifacts), TEXT, "-o", str(out), "--voice", "vivian"]) == 2
