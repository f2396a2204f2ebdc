"""CosyVoice3's tiny checkpoint, made once per test session (the directory under the session's base temp
is the cache), and `reference`, which runs tests/cosyvoice3_reference.py (vLLM-Omni 0.30.0's flow and
HiFT from the release wheel around transformers' Qwen2ForCausalLM) in the "main" reference environment;
`noise_inputs` draws every source of randomness the reference takes as input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from artifacts import export_fixture, tiny_fixture
from vllm_omni_source import foreign_fixture, require_wheel, run_with_wheel

__all__ = ["cosyvoice3_artifacts", "cosyvoice3_foreign", "cosyvoice3_foreign_artifacts",
           "cosyvoice3_tiny", "frontend_reference", "noise_inputs", "reference"]

REFERENCE = Path(__file__).resolve().parent / "cosyvoice3_reference.py"
FRONTEND_REFERENCE = Path(__file__).resolve().parent / "cosyvoice3_frontend_reference.py"
TORCHAUDIO_WHEEL = "torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl"


cosyvoice3_tiny = tiny_fixture("cosyvoice3_tiny", "cosyvoice3-tiny", "export.cosyvoice3.tiny:make_tiny_cosyvoice3")
cosyvoice3_artifacts = export_fixture("cosyvoice3_artifacts", "cosyvoice3_tiny")


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

    require_wheel()
    try:
        import diffusers  # noqa: F401
        import x_transformers  # noqa: F401
    except ImportError as e:
        refenv.missing(f"the CosyVoice3 reference's packages (requirements-nodeps.txt: {e})")


# tests/cosyvoice3_foreign.py's checkpoint (built in "main" from the reference's own modules)
cosyvoice3_foreign = foreign_fixture("cosyvoice3_foreign", "cosyvoice3-foreign", "cosyvoice3", _require_reference)
cosyvoice3_foreign_artifacts = export_fixture("cosyvoice3_foreign_artifacts", "cosyvoice3_foreign")


def frontend_reference(inputs: dict) -> dict:
    """tests/cosyvoice3_frontend_reference.py in "main" (needs both wheels make setup downloads)."""
    import refenv

    ta = require_wheel().parent / TORCHAUDIO_WHEEL
    if not ta.is_file():
        refenv.missing(f"the {TORCHAUDIO_WHEEL} wheel (requirements-ref5-sources.txt; make setup downloads it)")
    return run_with_wheel("cosyvoice3", FRONTEND_REFERENCE, str(ta), inputs=inputs)


def reference(checkpoint: Path, requests: list[dict], inputs: dict) -> dict:
    """tests/cosyvoice3_reference.py in "main"; refenv.missing (skip, or fail under make test) without the
    wheel or the reference's pinned packages."""
    _require_reference()
    return run_with_wheel("cosyvoice3", REFERENCE, str(checkpoint), json.dumps(requests), inputs=inputs)


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
