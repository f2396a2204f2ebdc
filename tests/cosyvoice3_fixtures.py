"""CosyVoice3's tiny checkpoint, made once per test session (the directory under the session's base temp
is the cache), and `reference`, which runs tests/cosyvoice3_reference.py (vLLM-Omni 0.30.0's flow and
HiFT from the release wheel around transformers' Qwen2ForCausalLM) in the "main" reference environment;
`noise_inputs` draws every source of randomness the reference takes as input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from voxtral_tts_fixtures import VLLM_OMNI_WHEEL, WHEEL

__all__ = ["VLLM_OMNI_WHEEL", "cosyvoice3_artifacts", "cosyvoice3_foreign", "cosyvoice3_foreign_artifacts",
           "cosyvoice3_tiny", "frontend_reference", "noise_inputs", "reference"]

REFERENCE = Path(__file__).resolve().parent / "cosyvoice3_reference.py"
FOREIGN = Path(__file__).resolve().parent / "cosyvoice3_foreign.py"
FRONTEND_REFERENCE = Path(__file__).resolve().parent / "cosyvoice3_frontend_reference.py"
TORCHAUDIO_WHEEL = "torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl"


@pytest.fixture(scope="session")
def cosyvoice3_tiny() -> Path:
    from artifacts import STORE

    from export.cosyvoice3.tiny import make_tiny_cosyvoice3

    return STORE.checkpoint("cosyvoice3-tiny", lambda out: make_tiny_cosyvoice3(out, seed=0))


@pytest.fixture(scope="session")
def cosyvoice3_artifacts(cosyvoice3_tiny: Path) -> Path:
    from artifacts import STORE

    return STORE.export(cosyvoice3_tiny)


@pytest.fixture(scope="session")
def cosyvoice3_foreign() -> Path:
    """tests/cosyvoice3_foreign.py's checkpoint (built in "main" from the reference's own modules)."""
    import refenv
    from artifacts import STORE

    _require_reference()
    return STORE.checkpoint(
        "cosyvoice3-foreign", lambda out: refenv.run(refenv.env_for("cosyvoice3"), FOREIGN, {},
                                                     [str(VLLM_OMNI_WHEEL), str(out)]),
        sources=[FOREIGN])


@pytest.fixture(scope="session")
def cosyvoice3_foreign_artifacts(cosyvoice3_foreign: Path) -> Path:
    from artifacts import STORE

    return STORE.export(cosyvoice3_foreign)


def noise_inputs(seed: int, speech_rows: int, steps: int, mel_frames: int, requests: int = 1,
                 table: int = 24000) -> dict[str, np.ndarray]:
    """The HiFT noise tables and, per request, RAS noise [steps, 2, speech_rows] (Exp(1)) and flow noise
    [80, mel_frames] (N(0, 1))."""
    rng = np.random.default_rng(seed)
    out = {"hift_rand_ini": rng.random(9).astype(np.float32),
           "hift_sine_noise": rng.random((table, 9)).astype(np.float32),
           "hift_uv_noise": rng.random(table).astype(np.float32)}
    out["hift_rand_ini"][0] = 0.0  # the fundamental's initial phase is 0 (SineGen2)
    for i in range(requests):
        out[f"ras_noise_{i}"] = np.maximum(rng.exponential(size=(steps, 2, speech_rows)), 1e-30).astype(np.float32)
        out[f"flow_noise_{i}"] = rng.standard_normal((80, mel_frames)).astype(np.float32)
    return out


def _require_reference() -> None:
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    try:
        import diffusers  # noqa: F401
        import x_transformers  # noqa: F401
    except ImportError as e:
        refenv.missing(f"the CosyVoice3 reference's packages (requirements-nodeps.txt: {e})")


def frontend_reference(inputs: dict) -> dict:
    """tests/cosyvoice3_frontend_reference.py in "main" (needs both wheels make setup downloads)."""
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    ta = VLLM_OMNI_WHEEL.parent / TORCHAUDIO_WHEEL
    if not ta.is_file():
        refenv.missing(f"the {TORCHAUDIO_WHEEL} wheel (requirements-ref5-sources.txt; make setup downloads it)")
    return refenv.run(refenv.env_for("cosyvoice3"), FRONTEND_REFERENCE, inputs, [str(VLLM_OMNI_WHEEL), str(ta)])


def reference(checkpoint: Path, requests: list[dict], inputs: dict) -> dict:
    """tests/cosyvoice3_reference.py in "main"; refenv.missing (skip, or fail under make test) without the
    wheel or the reference's pinned packages."""
    import refenv

    _require_reference()
    return refenv.run(refenv.env_for("cosyvoice3"), REFERENCE, inputs,
                      [str(VLLM_OMNI_WHEEL), str(checkpoint), json.dumps(requests)])


def reference_with_our_noise(checkpoint: Path, model, cases: list[dict]) -> dict:
    """The reference (tests/cosyvoice3_reference.py) on `checkpoint` for each case (text, ref_text, ref_audio
    (samples, rate), seed, max_new_tokens), fed what our runtime admits for it: the prompt ids, the clip's
    features from our front-end (what prompt_encoder sends), the RAS and flow noise of the seed, its min/max
    tokens, and the served mask (upstream's chunk mask). Returns tokens_i, mel_i, audio_i."""
    from ttscore.runtime.families.cosyvoice3 import sampling
    from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request

    g = model.g
    inputs = {"hift_rand_ini": np.zeros(g.harmonics + 1, np.float32),
              "hift_sine_noise": sampling.sine_table(g.sample_rate, g.harmonics),
              "hift_uv_noise": np.zeros(1, np.float32)}
    reqs = []
    for i, c in enumerate(cases):
        seq = model.admit(CosyVoice3Request(text=c["text"], ref_text=c["ref_text"], ref_audio=c["ref_audio"],
                                            seed=c["seed"], max_new_tokens=c.get("max_new_tokens")))
        cond = seq.vocoder_prefix[0, 0]
        p = cond.prompt
        inputs.update({f"prompt_tokens_{i}": p.speech_tokens, f"prompt_feat_{i}": p.feat,
                       f"embedding_{i}": p.embedding, f"ras_noise_{i}": seq.ras, f"flow_noise_{i}": cond.flow_noise})
        reqs.append({"text_ids": [int(t) for t in p.text_ids], "max_new_tokens": seq.max_len,
                     "min_new_tokens": seq.min_len, "chunk_mask": True})
    return reference(checkpoint, reqs, inputs)
