"""The forced aligner's checkpoints and exports, made once per test session through the artifact store: the tiny
one (make-tiny --aligner), the foreign one (tests/aligner_foreign.py: qwen-asr 0.0.6's own classes), and
`reference`, qwen-asr's Qwen3ForcedAligner over a checkpoint (in this environment: qwen-asr runs on its
transformers 4.57.3), cached per checkpoint."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

__all__ = ["aligner_artifacts", "aligner_foreign", "aligner_foreign_artifacts", "aligner_tiny", "reference"]

FOREIGN = Path(__file__).resolve().parent / "aligner_foreign.py"


def _need_reference() -> None:
    pytest.importorskip("qwen_asr", reason="qwen-asr 0.0.6 (requirements-nodeps.txt) is the aligner's reference")


@pytest.fixture(scope="session")
def aligner_tiny() -> Path:
    from artifacts import STORE

    from export.qwen3_forced_aligner.tiny import make_tiny_aligner

    return STORE.checkpoint("aligner-tiny", lambda out: make_tiny_aligner(out, seed=0))


@pytest.fixture(scope="session")
def aligner_artifacts(aligner_tiny: Path) -> Path:
    from artifacts import STORE

    return STORE.export(aligner_tiny)


@pytest.fixture(scope="session")
def aligner_foreign() -> Path:
    from aligner_foreign import make
    from artifacts import STORE

    _need_reference()
    return STORE.checkpoint("aligner-foreign", make, sources=[FOREIGN])


@pytest.fixture(scope="session")
def aligner_foreign_artifacts(aligner_foreign: Path) -> Path:
    from artifacts import STORE

    return STORE.export(aligner_foreign)


@lru_cache(maxsize=4)
def reference(checkpoint: Path) -> Any:
    """qwen_asr.Qwen3ForcedAligner over `checkpoint`, float32 on the CPU (its default attention: sdpa)."""
    import torch

    _need_reference()
    from qwen_asr import Qwen3ForcedAligner

    return Qwen3ForcedAligner.from_pretrained(str(checkpoint), dtype=torch.float32)
