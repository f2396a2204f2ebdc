"""Breeze-TTS-2 test fixtures (a pytest plugin of conftest.py): one tiny checkpoint and its export per
session, and one checkpoint the project did not make (built in ref5 by tests/breeze_tts_2_foreign.py)
and its export, shared by the family's tests; `reference` runs tests/breeze_tts_2_reference.py in
ref5; `run_codes` decodes requests batched with our runtime and returns the codes each made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

REFERENCE = Path(__file__).resolve().parent / "breeze_tts_2_reference.py"
FOREIGN = Path(__file__).resolve().parent / "breeze_tts_2_foreign.py"  # builds a checkpoint in ref5


@pytest.fixture(scope="session")
def breeze_tiny() -> Path:
    from artifacts import STORE

    from export.breeze_tts_2.tiny import make_tiny_breeze

    return STORE.checkpoint("Breeze-TTS-2-tiny", lambda out: make_tiny_breeze(out, seed=0))


def reference(checkpoint: Path, command: str, inputs: dict | None = None, arg: str = "{}") -> dict:
    """tests/breeze_tts_2_reference.py in the family's reference environment."""
    import refenv

    return refenv.run(refenv.env_for("breeze_tts_2"), REFERENCE, inputs or {}, [str(checkpoint), command, arg])


@pytest.fixture(scope="session")
def breeze_export(breeze_tiny: Path) -> Path:
    from artifacts import STORE

    return STORE.export(breeze_tiny)


@pytest.fixture(scope="session")
def breeze_foreign(breeze_tiny: Path) -> Path:
    """A checkpoint built from transformers 5.14.1's own config classes and init (the tiny's codec)."""
    import refenv
    from artifacts import STORE

    from ttscore.runtime.weights import checkpoint_fingerprint

    codec = breeze_tiny / "audio_tokenizer"
    return STORE.checkpoint(
        "Breeze-TTS-2-foreign", lambda out: refenv.run(refenv.env_for("breeze_tts_2"), FOREIGN, {}, [str(out), str(codec)]),
        sources=[FOREIGN], codec=checkpoint_fingerprint(codec))


@pytest.fixture(scope="session")
def breeze_foreign_export(breeze_foreign: Path) -> Path:
    from artifacts import STORE

    return STORE.export(breeze_foreign)


def run_codes(model: Any, requests: list[Any]) -> list[np.ndarray]:
    """admit -> prefill -> step until finished, all requests batched; the frames each made."""
    seqs = [model.admit(r) for r in requests]
    model.prefill([(s, s.prompt_tokens) for s in seqs])
    out: list[list[np.ndarray]] = [[] for _ in seqs]
    while True:
        for i, s in enumerate(seqs):
            out[i] += s.pending
            s.pending = []
        live = [s for s in seqs if s.finished is None]
        if not live:
            break
        model.step(live)
    return [np.array(f, np.int64).reshape(-1, 16) for f in out]
