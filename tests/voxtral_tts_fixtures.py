"""Voxtral TTS's tiny checkpoint, the foreign checkpoint (one the project did not create: built in the
"main" reference environment by tests/voxtral_tts_foreign.py from vLLM-Omni's own modules) and their
exports, made once per test session (the tests that use them import these fixtures; the directory under
the session's base temp is the cache); `reference`, which runs tests/voxtral_tts_reference.py
(vLLM-Omni 0.30.0's modules from the release wheel around transformers' MistralModel) in the "main"
reference environment, and `reference_with_our_noise`, the reference fed the noise our runtime draws."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

__all__ = ["VLLM_OMNI_WHEEL", "reference", "reference_with_our_noise", "voxtral_artifacts", "voxtral_foreign",
           "voxtral_foreign_artifacts", "voxtral_tiny"]

REFERENCE = Path(__file__).resolve().parent / "voxtral_tts_reference.py"
FOREIGN = Path(__file__).resolve().parent / "voxtral_tts_foreign.py"
WHEEL = "vllm_omni-0.30.0-py3-none-any.whl"


def vllm_omni_wheel() -> Path | None:
    """The vllm-omni 0.30.0 wheel `make setup` downloads beside ref5 (or VOXTRAL_VLLM_OMNI_WHEEL)."""
    import refenv

    given = os.environ.get("VOXTRAL_VLLM_OMNI_WHEEL")
    places = [Path(given)] if given else []
    with contextlib.suppress(refenv.RefEnvError):
        places.append(refenv.python("ref5").parents[1] / "wheels" / WHEEL)
    return next((p for p in places if p.is_file()), None)


VLLM_OMNI_WHEEL = vllm_omni_wheel()


@pytest.fixture(scope="session")
def voxtral_tiny() -> Path:
    from artifacts import STORE

    from export.voxtral_tts.tiny import make_tiny_voxtral

    return STORE.checkpoint("voxtral-tiny", lambda out: make_tiny_voxtral(out, seed=0))


@pytest.fixture(scope="session")
def voxtral_artifacts(voxtral_tiny: Path) -> Path:
    from artifacts import STORE

    return STORE.export(voxtral_tiny)


@pytest.fixture(scope="session")
def voxtral_foreign() -> Path:
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    from artifacts import STORE

    return STORE.checkpoint(
        "voxtral-foreign", lambda out: refenv.run(refenv.env_for("voxtral_tts"), FOREIGN, {},
                                                  [str(VLLM_OMNI_WHEEL), str(out)]),
        sources=[FOREIGN])


@pytest.fixture(scope="session")
def voxtral_foreign_artifacts(voxtral_foreign: Path) -> Path:
    from artifacts import STORE

    return STORE.export(voxtral_foreign)


def reference(checkpoint: Path, requests: list[dict], inputs: dict | None = None) -> dict:
    """tests/voxtral_tts_reference.py in "main"; refenv.missing (skip, or fail under make test) without
    the wheel."""
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    return refenv.run(refenv.env_for("voxtral_tts"), REFERENCE, inputs or {},
                      [str(VLLM_OMNI_WHEEL), str(checkpoint), json.dumps(requests)])


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
