"""Breeze-TTS-2 test fixtures (a pytest plugin of conftest.py): one tiny checkpoint and its export per
session, and one checkpoint the project did not make (built in ref5 by tests/breeze_tts_2_foreign.py)
and its export, shared by the family's tests; `reference` runs tests/breeze_tts_2_reference.py in
ref5; `run_codes` decodes requests batched with our runtime and returns the codes each made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from artifacts import export_fixture, tiny_fixture
from sequences import run_to_the_end

REFERENCE = Path(__file__).resolve().parent / "breeze_tts_2_reference.py"
FOREIGN = Path(__file__).resolve().parent / "breeze_tts_2_foreign.py"  # builds a checkpoint in ref5


breeze_tiny = tiny_fixture("breeze_tiny", "Breeze-TTS-2-tiny", "export.breeze_tts_2.tiny:make_tiny_breeze")
breeze_export = export_fixture("breeze_export", "breeze_tiny")
breeze_foreign_export = export_fixture("breeze_foreign_export", "breeze_foreign")


def reference(checkpoint: Path, command: str, inputs: dict | None = None, arg: str = "{}") -> dict:
    """tests/breeze_tts_2_reference.py in the family's reference environment."""
    import refenv

    return refenv.run(refenv.env_for("breeze_tts_2"), REFERENCE, inputs or {}, [str(checkpoint), command, arg])


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


def run_codes(model: Any, requests: list[Any]) -> list[np.ndarray]:
    """admit -> prefill -> step until finished, all requests batched; the frames each made."""
    return run_to_the_end(model, [model.admit(r) for r in requests], 16)
