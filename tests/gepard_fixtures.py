"""Gepard-1.0's tiny checkpoint and its export, made once per test session (the tests that use them
import these fixtures; the directory under the session's base temp is the cache), and `reference`,
which runs tests/gepard_reference.py in the family's reference environment (ref5)."""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["gepard_artifacts", "gepard_tiny", "reference"]

REFERENCE = Path(__file__).resolve().parent / "gepard_reference.py"


@pytest.fixture(scope="session")
def gepard_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.gepard.tiny import make_tiny_gepard

    out = tmp_path_factory.getbasetemp() / "gepard" / "gepard-tiny"
    if not (out / "gepard_config.json").is_file():
        make_tiny_gepard(out, seed=0)
    return out


@pytest.fixture(scope="session")
def gepard_artifacts(gepard_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.exporter import export_checkpoint

    out = tmp_path_factory.getbasetemp() / "gepard" / "artifacts"
    if not (out / "manifest.json").is_file():
        export_checkpoint(gepard_tiny, out)
    return out


def reference(checkpoint: Path, command: str, inputs: dict | None = None, arg: str = "{}") -> dict:
    """tests/gepard_reference.py in ref5."""
    import refenv

    return refenv.run(refenv.env_for("gepard"), REFERENCE, inputs or {}, [str(checkpoint), command, arg])
