"""Fish Speech S2 Pro's tiny checkpoint, made once per test session (the directory under the session's base
temp is the cache), and `reference`, which runs tests/fish_speech_reference.py (vLLM-Omni 0.30.0's
fish_speech modules from the release wheel, without vLLM) in the family's reference environment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from voxtral_tts_fixtures import VLLM_OMNI_WHEEL, WHEEL

__all__ = ["VLLM_OMNI_WHEEL", "WHEEL", "fish_artifacts", "fish_foreign", "fish_foreign_artifacts", "fish_tiny", "reference"]

REFERENCE = Path(__file__).resolve().parent / "fish_speech_reference.py"
FOREIGN = Path(__file__).resolve().parent / "fish_speech_foreign.py"


@pytest.fixture(scope="session")
def fish_tiny() -> Path:
    from artifacts import STORE

    from export.fish_speech.tiny import make_tiny_fish

    return STORE.checkpoint("fish-tiny", lambda out: make_tiny_fish(out, seed=0))


@pytest.fixture(scope="session")
def fish_artifacts(fish_tiny: Path) -> Path:
    from artifacts import STORE

    return STORE.export(fish_tiny)


@pytest.fixture(scope="session")
def fish_foreign() -> Path:
    """tests/fish_speech_foreign.py's checkpoint (vLLM-Omni's own classes and init, dimensions unlike make-tiny's)."""
    import refenv
    from artifacts import STORE

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    return STORE.checkpoint(
        "fish-foreign", lambda out: refenv.run(refenv.env_for("fish_speech"), FOREIGN, {},
                                               [str(VLLM_OMNI_WHEEL), str(out)]),
        sources=[FOREIGN])


@pytest.fixture(scope="session")
def fish_foreign_artifacts(fish_foreign: Path) -> Path:
    from artifacts import STORE

    return STORE.export(fish_foreign)


def reference(checkpoint: Path, requests: list[dict], inputs: dict[str, np.ndarray] | None = None) -> dict:
    """tests/fish_speech_reference.py; refenv.missing (skip, or fail under make test) without the wheel."""
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    return refenv.run(refenv.env_for("fish_speech"), REFERENCE, inputs or {},
                      [str(VLLM_OMNI_WHEEL), str(checkpoint), json.dumps(requests)], timeout_s=600)
