"""CosyVoice3's text ids (ttscore/runtime/families/cosyvoice3/tokenizer.py, `tokenizers` only) equal
vLLM-Omni 0.30.0's own CosyVoice3Tokenizer (tokenizer.py from the wheel: transformers' AutoTokenizer on
CosyVoice-BlankEN plus its special tokens), for make-tiny's slow Qwen2 files (vocab.json + merges.txt) and
the foreign checkpoint's tokenizer.json."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny, cosyvoice3_foreign)
from vllm_omni_source import require_wheel

pytestmark = pytest.mark.unit

TEXTS = ("Hello world, this is a tiny text to speech model.",
         "You are a helpful assistant.<|endofprompt|>She sells sea shells [breath] by the shore!",
         "numbers 0 1 23 456, it's   spaced\nout\tand <strong>loud</strong> [laughter] café",
         "hello world this is a foreign checkpoint one two three")


def _vllm_omni_tokenizer(tmp_path: Path):
    name = "vllm_omni/model_executor/models/cosyvoice3/tokenizer.py"
    with zipfile.ZipFile(require_wheel()) as zf:
        zf.extract(name, tmp_path)
    spec = importlib.util.spec_from_file_location("cosyvoice3_vllm_omni_tokenizer", tmp_path / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CosyVoice3Tokenizer


@pytest.mark.parametrize("which", ["tiny", "foreign"])
def test_ids_equal_vllm_omni(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    from ttscore.runtime.families.cosyvoice3.tokenizer import CosyVoice3Tokenizer

    root = request.getfixturevalue(f"cosyvoice3_{which}") / "CosyVoice-BlankEN"
    assert (root / "tokenizer.json").is_file() == (which == "foreign")
    ref = _vllm_omni_tokenizer(tmp_path)(str(root))
    ours = CosyVoice3Tokenizer(root)
    for text in TEXTS:
        assert ours.ids(text) == ref.encode(text), text
    assert len(ours.ids("<|endofprompt|>")) == 1
