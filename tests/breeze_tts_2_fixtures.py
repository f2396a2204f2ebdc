"""Breeze-TTS-2 test fixtures (a pytest plugin of conftest.py): one tiny checkpoint and its export per
session, shared by the family's tests; `reference` runs tests/breeze_tts_2_reference.py in ref5."""

from __future__ import annotations

from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parent / "breeze_tts_2_reference.py"
FOREIGN = Path(__file__).resolve().parent / "breeze_tts_2_foreign.py"  # builds a checkpoint in ref5


@pytest.fixture(scope="session")
def breeze_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.breeze_tts_2.tiny import make_tiny_breeze

    return make_tiny_breeze(tmp_path_factory.mktemp("breeze") / "Breeze-TTS-2-tiny", seed=0)


def reference(checkpoint: Path, command: str, inputs: dict | None = None, arg: str = "{}") -> dict:
    """tests/breeze_tts_2_reference.py in the family's reference environment."""
    import refenv

    return refenv.run(refenv.env_for("breeze_tts_2"), REFERENCE, inputs or {}, [str(checkpoint), command, arg])


@pytest.fixture(scope="session")
def breeze_export(breeze_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.exporter import export_checkpoint

    out = tmp_path_factory.mktemp("breeze-x") / "artifacts"
    export_checkpoint(breeze_tiny, out)
    return out
