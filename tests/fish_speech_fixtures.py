"""Fish Speech S2 Pro's tiny checkpoint, made once per test session (the directory under the session's base
temp is the cache), and `reference`, which runs tests/fish_speech_reference.py (vLLM-Omni 0.30.0's
fish_speech modules from the release wheel, without vLLM) in the family's reference environment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from artifacts import export_fixture, tiny_fixture
from vllm_omni_source import foreign_fixture, run_with_wheel

__all__ = ["fish_artifacts", "fish_foreign", "fish_foreign_artifacts", "fish_tiny", "reference",
           "reference_with_our_noise"]

REFERENCE = Path(__file__).resolve().parent / "fish_speech_reference.py"


fish_tiny = tiny_fixture("fish_tiny", "fish-tiny", "export.fish_speech.tiny:make_tiny_fish")
fish_artifacts = export_fixture("fish_artifacts", "fish_tiny")
# tests/fish_speech_foreign.py's checkpoint (vLLM-Omni's own classes and init, dimensions unlike make-tiny's)
fish_foreign = foreign_fixture("fish_foreign", "fish-foreign", "fish_speech")
fish_foreign_artifacts = export_fixture("fish_foreign_artifacts", "fish_foreign")


def reference(checkpoint: Path, requests: list[dict], inputs: dict[str, np.ndarray] | None = None) -> dict:
    """tests/fish_speech_reference.py; refenv.missing (skip, or fail under make test) without the wheel."""
    return run_with_wheel("fish_speech", REFERENCE, str(checkpoint), json.dumps(requests), inputs=inputs,
                          timeout_s=600)


def reference_with_our_noise(checkpoint: Path, requests: list[dict], clip: np.ndarray) -> tuple[dict, dict]:
    """`reference` for `requests` ({"text", "max_new_tokens", "seed", ...}; the second is cloned from `clip`,
    its ref_audio_1), each fed the sampling noise our runtime draws for its seed (request_noise); the
    reference's outputs and the inputs it was given."""
    from ttscore.runtime.families.fish_speech.artifacts import request_noise

    inputs: dict[str, np.ndarray] = {"ref_audio_1": clip}
    for i, r in enumerate(requests):
        inputs[f"q_slow_{i}"], inputs[f"q_fast_{i}"] = request_noise(r["seed"], r["max_new_tokens"])
    return reference(checkpoint, requests, inputs), inputs
