"""Voxtral TTS's tiny checkpoint and its export, made once per test session (the tests that use them
import these fixtures; the directory under the session's base temp is the cache), and `reference`, which runs tests/voxtral_tts_reference.py (vLLM-Omni 0.30.0's modules from
the release wheel around transformers' MistralModel) in the "main" reference environment."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

__all__ = ["VLLM_OMNI_WHEEL", "reference", "voxtral_artifacts", "voxtral_tiny"]

REFERENCE = Path(__file__).resolve().parent / "voxtral_tts_reference.py"
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
def voxtral_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.voxtral_tts.tiny import make_tiny_voxtral

    out = tmp_path_factory.getbasetemp() / "voxtral_tts" / "voxtral-tiny"
    if not (out / "params.json").is_file():
        make_tiny_voxtral(out, seed=0)
    return out


@pytest.fixture(scope="session")
def voxtral_artifacts(voxtral_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.exporter import export_checkpoint

    out = tmp_path_factory.getbasetemp() / "voxtral_tts" / "artifacts"
    if not (out / "manifest.json").is_file():
        export_checkpoint(voxtral_tiny, out)
    return out


def reference(checkpoint: Path, requests: list[dict], inputs: dict | None = None) -> dict:
    """tests/voxtral_tts_reference.py in "main"; refenv.missing (skip, or fail under make test) without
    the wheel."""
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    return refenv.run(refenv.env_for("voxtral_tts"), REFERENCE, inputs or {},
                      [str(VLLM_OMNI_WHEEL), str(checkpoint), json.dumps(requests)])
