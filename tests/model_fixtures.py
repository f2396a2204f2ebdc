"""Session fixtures: tiny checkpoints of each variant, their exported artifacts, loaded pipelines.

Registered from conftest.py through `pytest_plugins`. Exports are done once per test session; set
TTS_TEST_CACHE to a directory to reuse them across sessions while developing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _root(tmp_path_factory) -> Path:
    cache = os.environ.get("TTS_TEST_CACHE")
    if cache:
        p = Path(cache)
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.getbasetemp() / "models"


def _variant(tmp_path_factory, variant: str, greedy: bool = False):
    from export.exporter import export_checkpoint
    from export.qwen3_tts.tiny import make_tiny
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline

    root = _root(tmp_path_factory)
    tag = f"{variant}{'-greedy' if greedy else ''}"
    ckpt = root / f"ckpt-{tag}"
    art = root / f"art-{tag}"
    if not (ckpt / "model.safetensors").is_file():
        make_tiny(variant, ckpt, seed=0, greedy=greedy)
    try:
        read_manifest(art)
    except Exception:
        export_checkpoint(ckpt, art)
    return ckpt, art, Qwen3TTSPipeline.load(art)


@pytest.fixture(scope="session")
def tiny_custom_voice(tmp_path_factory):
    return _variant(tmp_path_factory, "custom_voice")


@pytest.fixture(scope="session")
def tiny_voice_design(tmp_path_factory):
    return _variant(tmp_path_factory, "voice_design")


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    return _variant(tmp_path_factory, "base")


def _with_reference(t):
    from export.qwen3_tts.reference import load_reference

    ckpt, art, pipe = t
    return ckpt, pipe, load_reference(ckpt)


@pytest.fixture(scope="session")
def custom_voice(tiny_custom_voice):
    return _with_reference(tiny_custom_voice)


@pytest.fixture(scope="session")
def voice_design(tiny_voice_design):
    return _with_reference(tiny_voice_design)


@pytest.fixture(scope="session")
def base(tiny_base):
    return _with_reference(tiny_base)


@pytest.fixture(scope="session")
def tiny_custom_voice_greedy(tmp_path_factory):
    return _variant(tmp_path_factory, "custom_voice", greedy=True)


@pytest.fixture(scope="session")
def tiny_base_greedy(tmp_path_factory):
    return _variant(tmp_path_factory, "base", greedy=True)
