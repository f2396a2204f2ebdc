"""Loading the reference implementation (the `qwen-tts` package) for export and parity checks.

qwen-tts imports `torchaudio` and `sox` at import time for its 25 Hz tokenizer only; neither is
used by the 12 Hz models we serve, torchaudio would drag in another torch build and `sox` wants the
SoX binary. `reference_imports` installs inert stand-ins for exactly those modules while qwen_tts is
first imported (unless they were already imported), then removes them again.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_STUBBED = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "sox")


def _stub(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return mod


@contextlib.contextmanager
def reference_imports() -> Iterator[None]:
    added: list[str] = []
    if "qwen_tts" not in sys.modules:
        for name in _STUBBED:
            if name not in sys.modules:
                sys.modules[name] = _stub(name)
                added.append(name)
    if "torchaudio.compliance" in added:
        sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]  # type: ignore[attr-defined]
    if "torchaudio.compliance.kaldi" in added:
        sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]  # type: ignore[attr-defined]
    try:
        import qwen_tts  # noqa: F401
    finally:
        # qwen_tts keeps its own references; later imports of the real packages are not shadowed.
        for name in added:
            sys.modules.pop(name, None)
    yield


def load_reference(checkpoint: str | Path, **kwargs: Any) -> Any:
    """Qwen3TTSModel.from_pretrained on CPU in float32, eager attention (what export traces)."""
    import torch

    with reference_imports():
        from qwen_tts import Qwen3TTSModel

        kwargs.setdefault("dtype", torch.float32)
        kwargs.setdefault("attn_implementation", "eager")
        kwargs.setdefault("device_map", "cpu")
        model = Qwen3TTSModel.from_pretrained(str(checkpoint), **kwargs)
    model.model.eval()
    return model
