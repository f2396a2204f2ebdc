"""Voxtral TTS's tiny checkpoint, the foreign checkpoint (one the project did not create: built in the
"main" reference environment by tests/voxtral_tts_foreign.py from vLLM-Omni's own modules) and their
exports, made once per test session (the tests that use them import these fixtures; the directory under
the session's base temp is the cache); `reference`, which runs tests/voxtral_tts_reference.py
(vLLM-Omni 0.30.0's modules from the release wheel around transformers' MistralModel) in the "main"
reference environment, and `reference_with_our_noise`, the reference fed the noise our runtime draws."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from artifacts import export_fixture, tiny_fixture
from vllm_omni_source import foreign_fixture, run_with_wheel

__all__ = ["reference", "reference_with_our_noise", "voxtral_artifacts", "voxtral_foreign",
           "voxtral_foreign_artifacts", "voxtral_tiny"]

REFERENCE = Path(__file__).resolve().parent / "voxtral_tts_reference.py"


voxtral_tiny = tiny_fixture("voxtral_tiny", "voxtral-tiny", "export.voxtral_tts.tiny:make_tiny_voxtral")
voxtral_artifacts = export_fixture("voxtral_artifacts", "voxtral_tiny")
voxtral_foreign = foreign_fixture("voxtral_foreign", "voxtral-foreign", "voxtral_tts")
voxtral_foreign_artifacts = export_fixture("voxtral_foreign_artifacts", "voxtral_foreign")


def reference(checkpoint: Path, requests: list[dict], inputs: dict | None = None) -> dict:
    """tests/voxtral_tts_reference.py in "main"; refenv.missing (skip, or fail under make test) without
    the wheel."""
    return run_with_wheel("voxtral_tts", REFERENCE, str(checkpoint), json.dumps(requests), inputs=inputs)


def reference_with_our_noise(checkpoint: Path, model: Any, requests: list[dict]) -> dict:
    """The reference for `requests` ({"text", "voice", "max_new_tokens", "cfg_alpha", "seed"}), each fed
    the flow-matching noise our runtime draws for it: the request admitted by `model` (an exported
    checkpoint's runtime model), whose sequence holds its noise, row i for frame i (the order the
    runtime consumes it): the codes and audio a served request with that seed must make."""
    from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

    noise: dict[str, np.ndarray] = {}
    for i, req in enumerate(requests):
        seq = model.admit(VoxtralRequest(text=req["text"], voice=req["voice"], max_new_tokens=req["max_new_tokens"],
                                         seed=req["seed"], cfg_alpha=req["cfg_alpha"]))
        assert seq.noise is not None and seq.noise.shape[0] == seq.max_frames
        noise[f"noise_{i}"] = np.asarray(seq.noise)
    return reference(checkpoint, requests, noise)
