"""Session fixtures: tiny checkpoints of each variant, their exported artifacts, loaded pipelines.

Registered from conftest.py through `pytest_plugins`. Checkpoints and exports come from the tests' artifact
store (tests/artifacts.py): made once, reused while the code that makes them is unchanged.
"""

from __future__ import annotations

import pytest


def _variant(variant: str, greedy: bool = False):
    from artifacts import STORE

    from export.qwen3_tts.tiny import make_tiny
    from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline

    tag = f"{variant}{'-greedy' if greedy else ''}"
    ckpt = STORE.checkpoint(f"ckpt-{tag}", lambda out: make_tiny(variant, out, seed=0, greedy=greedy))
    art = STORE.export(ckpt)
    return ckpt, art, Qwen3TTSPipeline.load(art)


@pytest.fixture(scope="session")
def tiny_custom_voice():
    return _variant("custom_voice")


@pytest.fixture(scope="session")
def tiny_voice_design():
    return _variant("voice_design")


@pytest.fixture(scope="session")
def tiny_base():
    return _variant("base")


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
def tiny_custom_voice_greedy():
    return _variant("custom_voice", greedy=True)


@pytest.fixture(scope="session")
def tiny_base_greedy():
    return _variant("base", greedy=True)
