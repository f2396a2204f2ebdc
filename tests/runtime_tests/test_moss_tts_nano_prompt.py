"""MOSS-TTS-Nano's runtime text side: the voice-clone prompt rows and the long-text chunks against mlx-audio 0.6.2
(tests/moss_tts_nano_prompt_mlx.py in the "mlx" environment) on a SentencePiece model trained here with the
checkpoint's special ids (pad 3, the prompt's specials at 4..9); the chunk rule's own facts (a one-chunk text as
given, the budget, the pauses); a request's fields resolved and refused as the gateway does.

Where mlx-audio differs from vLLM-Omni's remote code (the project follows vLLM-Omni): a text that makes one chunk
is used as given (mlx-audio: whitespace-normalised), and mlx-audio normalises whitespace before the split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.moss_tts_nano import graphs as g
from ttscore.contract.moss_tts_nano import rules
from ttscore.runtime.families.moss_tts_nano import text as chunking
from ttscore.runtime.families.moss_tts_nano.request import MossRequest, resolve_limits, resolve_sampling

pytestmark = pytest.mark.unit

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_user_slot|>",
            "<|audio_assistant_slot|>"]
CORPUS = [
    "user\n", "assistant\n", "<user_inst>\n- Reference(s):\n", "\n</user_inst>",
    "\n- Instruction:\nNone\n- Tokens:\nNone\n- Quality:\nNone\n- Sound Event:\nNone\n- Ambient Sound:\nNone\n"
    "- Language:\nNone\n- Text:\n",
    "Hello, how are you? It is late. Let us go home!", "The quick brown fox jumps over the lazy dog.",
    "你好，今天天气很好。我们去公园散步吧！", "Numbers 1 2 3, symbols & <tags>; quotes \"like this\".",
] * 20
PAD = 16  # the audio pad id of a codebook of 16
LONG = ("The first sentence is long enough to matter, with a clause or two; it goes on and on. Then a short one. "
        "Another sentence follows here, and it carries several commas, clauses, and words, so that the budget "
        "is crossed more than once! \"A quoted line ends here.\" And the very last part has no final mark")
LONG_CJK = "今天天气很好，我们去公园散步吧。" * 8 + "最后一句没有句号"
TEXTS = ["Hello, how are you?", "  Hello,\tworld \n\n  again  ", "你好，今天天气很好。", "hi", LONG, LONG_CJK,
         "word " * 80]


@pytest.fixture(scope="module")
def tokenizer_dir() -> Path:
    from artifacts import STORE

    def train(out: Path) -> None:
        import sentencepiece as spm

        out.mkdir(parents=True)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(CORPUS), model_prefix=str(out / "tokenizer"), vocab_size=360, model_type="bpe",
            byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=3,
            user_defined_symbols=SPECIALS, num_threads=1, minloglevel=2)
        (out / "tokenizer.vocab").unlink()

    return STORE.checkpoint("moss-tokenizer", train, corpus=CORPUS)


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir: Path):
    from ttscore.runtime.families.moss_tts_nano.tokenizer import MossTokenizer

    tok = MossTokenizer(tokenizer_dir)
    assert [tok.sp.id_to_piece(i) for i in range(4, 10)] == SPECIALS  # the checkpoint's ids
    return tok


@pytest.fixture(scope="module")
def mlx(tokenizer_dir: Path) -> dict[str, np.ndarray]:
    import refenv

    codes = np.random.default_rng(0).integers(0, PAD, (5, 16))
    out = refenv.run("mlx", Path(__file__).parents[1] / "moss_tts_nano_prompt_mlx.py",
                     {"texts": np.array(TEXTS, dtype=str), "codes": codes}, [str(tokenizer_dir), str(PAD)])
    out["codes"] = codes
    return out


@pytest.mark.parity
def test_prompt_rows_match_mlx_audio(tokenizer, mlx: dict[str, np.ndarray]) -> None:
    from ttscore.runtime.families.moss_tts_nano.tokenizer import voice_clone_rows

    for i, text in enumerate(TEXTS):
        rows = voice_clone_rows(tokenizer, text, mlx["codes"], PAD)
        assert rows.dtype == np.int64 and np.array_equal(rows, mlx[f"rows_{i}"]), text
        refs = rows[:, 0] == g.AUDIO_USER_SLOT_ID
        assert np.array_equal(rows[refs, 1:], mlx["codes"]) and (rows[~refs, 1:] == PAD).all()


@pytest.mark.parity
def test_text_chunks_match_mlx_audio(tokenizer, mlx: dict[str, np.ndarray]) -> None:
    split = 0
    for i, text in enumerate(TEXTS):
        theirs = [str(c) for c in mlx[f"chunks_{i}"].tolist()]
        ours = chunking.text_chunks(text, tokenizer.count)
        if len(theirs) > 1:
            split += 1
            assert ours == theirs, text
        else:  # one chunk: vLLM-Omni's remote code keeps the text as given; mlx-audio whitespace-normalises it
            assert ours == [text] and theirs == [" ".join(text.split())], text
    assert split >= 3  # LONG, LONG_CJK and the repeated word were split


def test_chunks_keep_to_the_budget(tokenizer) -> None:
    for text in (LONG, LONG_CJK, "word " * 80, "x" * 400):
        chunks = chunking.text_chunks(text, tokenizer.count)
        assert len(chunks) > 1 and all(tokenizer.count(c) <= rules.CHUNK_MAX_TEXT_TOKENS for c in chunks), text
    assert chunking.text_chunks("  Short text\n", tokenizer.count) == ["  Short text\n"]


def test_normalise_and_pauses() -> None:
    assert chunking.normalise("  hello   world\nagain ") == " " * 8 + "Hello world again."
    assert chunking.normalise("one two three four five six") == "One two three four five six."
    assert chunking.normalise("你好") == "你好。" and chunking.normalise("你好！") == "你好！"
    with pytest.raises(ValueError):
        chunking.normalise(" \n ")
    assert chunking.split_at('He said "stop." Then: go! rest', chunking.SENTENCE_MARKS) == \
        ['He said "stop."', "Then: go!", "rest"]
    assert chunking.pause_samples("Four words right here.", 48000) == 19200  # <= 4 words: 0.40 s
    assert chunking.pause_samples("Five words are right here.", 48000) == 11520  # 0.24 s


def test_request_defaults_and_refusals() -> None:
    s = resolve_sampling(MossRequest(text="Hi."))
    assert (s.do_sample, s.text_temperature, s.text_top_p, s.text_top_k) == (True, 1.0, 1.0, 50)
    assert (s.audio_temperature, s.audio_top_p, s.audio_top_k, s.audio_repetition_penalty) == (0.8, 0.95, 25, 1.2)
    assert resolve_limits(MossRequest(text="Hi.")) == (375, 42)
    assert not resolve_sampling(MossRequest(text="Hi.", do_sample=False)).do_sample
    for bad in ({"audio_top_p": 0.0}, {"text_temperature": 0.0}, {"do_sample": 1}):
        with pytest.raises(InvalidRequest) as info:
            resolve_sampling(MossRequest(text="Hi.", **bad))
        assert info.value.param == "extra_params"
    for bad, param in (({"max_new_tokens": 0}, "max_new_tokens"), ({"seed": -1}, "seed")):
        with pytest.raises(InvalidRequest) as info:
            resolve_limits(MossRequest(text="Hi.", **bad))
        assert info.value.param == param


def test_reference_codes_are_checked(tokenizer) -> None:
    from ttscore.runtime.families.moss_tts_nano.tokenizer import voice_clone_rows

    for codes in (np.zeros((0, 16), np.int64), np.zeros((3, 15), np.int64), np.full((3, 16), PAD)):
        with pytest.raises(InvalidRequest) as info:
            voice_clone_rows(tokenizer, "Hi.", codes, PAD)
        assert info.value.param == "ref_audio_tokens"
