"""OmniVoice's tiny checkpoint and its export, made once per test session (the tests that use them
import these fixtures; the directory under the session's base temp is the cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["omnivoice_artifacts", "omnivoice_tiny"]


@pytest.fixture(scope="session")
def omnivoice_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.omnivoice.tiny import make_tiny_omnivoice

    out = tmp_path_factory.getbasetemp() / "omnivoice" / "OmniVoice-tiny"
    if not (out / "config.json").is_file():
        make_tiny_omnivoice(out, seed=0)
    return out


@pytest.fixture(scope="session")
def omnivoice_artifacts(omnivoice_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.exporter import export_checkpoint

    out = tmp_path_factory.getbasetemp() / "omnivoice" / "artifacts"
    if not (out / "manifest.json").is_file():
        export_checkpoint(omnivoice_tiny, out)
    return out
