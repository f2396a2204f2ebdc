"""Voxtral TTS's tekken tokenizer (ttscore/runtime/families/voxtral_tts/tokenizer.py) on a tekken.json
with BPE merges: by hand, and against mistral-common 1.13.1 where it is installed (it is not in the
project's environments: `pip install --no-deps mistral-common==1.13.1 tiktoken pydantic-extra-types
pycountry` into one to run that part)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from export.voxtral_tts.tiny import tekken
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.voxtral_tts.tokenizer import TekkenTokenizer

MERGES = [b"th", b"he", b"the", b" t", b" the", b"at", b" c", b"\xc3\xa7"]
TEXTS = ["the the cat", "Ça va, the theme?", "  the\nthe", "12 thé"]


@pytest.fixture
def merged(tmp_path: Path) -> Path:
    tek = tekken("tiny")
    for i, tok in enumerate(MERGES):
        tek["vocab"].append({"rank": 256 + i, "token_bytes": base64.b64encode(tok).decode(), "token_str": None})
    tek["config"]["num_vocab_tokens"] = 256 + len(MERGES)
    tek["config"]["default_vocab_size"] += len(MERGES)
    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(tek))
    return path


def test_bpe_by_hand(merged: Path) -> None:
    tok = TekkenTokenizer(merged)
    n = tok.n_special
    assert tok.text_ids("the the") == [258 + n, 260 + n]
    assert tok.text_ids("cat") == [ord("c") + n, 261 + n]  # "at" merges, "ca" is no token
    assert tok.text_ids("ç") == [263 + n]
    ids, n_text = tok.prompt("the", "casual_male")
    assert ids == [1, 25, 24, 24, 24, 35, 258 + n, 36, 25] and n_text == 1
    with pytest.raises(InvalidRequest):
        tok.prompt("the", "alice")


def test_bpe_matches_mistral_common(merged: Path) -> None:
    import importlib.util

    import refenv

    if importlib.util.find_spec("mistral_common") is None:
        refenv.missing("mistral-common (requirements-nodeps.txt) is not installed in this environment")
    from mistral_common.protocol.speech.request import SpeechRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    theirs = MistralTokenizer.from_file(str(merged))
    mine = TekkenTokenizer(merged)
    for text in TEXTS:
        want = theirs.encode_speech_request(SpeechRequest(input=text, voice="neutral_female")).tokens
        assert mine.prompt(text, "neutral_female")[0] == want, text
