"""The forced aligner's pure runtime logic against qwen-asr 0.0.6's Qwen3ForceAlignProcessor: the word lists per
language, the prompt text, `fix_timestamp` on random and hand-made slot sequences; the words' character spans in
the original text (punctuation attached, normalised input), and the log-mel front end and chunk layout against
transformers' WhisperFeatureExtractor and qwen-asr's length rule."""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.runtime.qwen3_forced_aligner import words as W
from ttscore.runtime.qwen3_forced_aligner.frontend import chunk_layout, conv_frames, log_mel

pytestmark = pytest.mark.unit

TEXTS = (
    ("Hello, world! It's 3 o'clock — isn't it?", "English"),
    ("  ¿Qué tal? (see) - ok  ", "Spanish"),
    ("你好，世界。Hi there! 2024年", "Chinese"),
    ("１２３ ｶﾀｶﾅ、今日は「はい」。", "Japanese"),
    ("今日はいい天気ですね。公園に行きましょう！", "Japanese"),
    ("안녕하세요, 세계! 반갑습니다.", "Korean"),
    ("...", "English"),
    ("ﬁne line, cafe\u0301 ½ ok", "English"),  # a ligature kept as written, a decomposed accent, a fraction
    ("ｶﾞｷﾞ、ﬁne", "Japanese"),  # nagisa composes the voiced half-width kana and splits the ligature
)


@pytest.fixture(scope="module")
def processor() -> object:
    mod = pytest.importorskip("qwen_asr.inference.qwen3_forced_aligner")
    return mod.Qwen3ForceAlignProcessor()


@pytest.mark.parametrize(("text", "language"), TEXTS)
def test_words_and_prompt_are_the_references(processor: object, text: str, language: str) -> None:
    want_words, want_prompt = processor.encode_timestamp(text, language)  # type: ignore[attr-defined]
    got = W.splitter(language)(text)
    assert got == want_words
    assert W.prompt_text(got) == want_prompt


def test_fix_timestamp_is_the_references(processor: object) -> None:
    rng = np.random.default_rng(0)
    cases = [[80, 4000, 160, 240], [500, 80, 160], [80, 160, 0, 0, 0, 0, 800, 880], [0, 0], [7], []]
    for _ in range(300):
        n = int(rng.integers(1, 24))
        cases.append(list(rng.integers(0, 40, n) * 80.0))
    for values in cases:
        if not values:
            assert W.fix_timestamp(values) == []
            continue
        want = processor.fix_timestamp(np.asarray(values, dtype=np.float32))  # type: ignore[attr-defined]
        assert W.fix_timestamp(values) == want, values


def test_spans_index_the_original_text() -> None:
    def cut(text: str, language: str) -> list[str]:
        ws = W.splitter(language)(text)
        return [text[a:b] for a, b in W.spans(text, ws)]

    assert cut("Hello, world! It's 3 o'clock.", "English") == ["Hello,", "world!", "It's", "3", "o'clock."]
    assert cut("  ¿Qué tal? (see) - ok  ", "Spanish") == ["¿Qué", "tal?", "(see) -", "ok"]
    assert cut("你好，世界。Hi!", "Chinese") == ["你", "好，", "世", "界。", "Hi!"]
    # nagisa times normalised words (ASCII digits, full-width katakana); the spans still cut the text as given
    assert W.splitter("Japanese")("１２３ ｶﾀｶﾅ") == ["1", "2", "3", "カタカナ"]
    assert cut("１２３ ｶﾀｶﾅ、今日は「はい」。", "Japanese") == ["１", "２", "３", "ｶﾀｶﾅ、", "今日", "は", "「はい」。"]
    assert cut("안녕하세요, 세계!", "Korean") == ["안녕", "하세요,", "세계!"]
    assert cut("ｶﾞｷﾞ、ﬁne", "Japanese") == ["ｶﾞｷﾞ、", "ﬁne"]
    assert cut("ﬁne line, cafe\u0301!", "English") == ["ﬁne", "line,", "cafe\u0301!"]
    # two words of one character (nagisa cuts NFKC's "XII" of "Ⅻ" in two): both cover it
    assert W.splitter("Japanese")("Ⅻ") == ["X", "II"] and W.spans("Ⅻ", ["X", "II"]) == [(0, 1), (0, 1)]


@pytest.mark.parametrize(("text", "language"), TEXTS)
def test_spans_cover_the_text_in_order(text: str, language: str) -> None:
    words = W.splitter(language)(text)
    spans = W.spans(text, words)
    assert len(spans) == len(words)
    ends = [0]
    for a, b in spans:
        assert ends[-1] <= a < b <= len(text)
        assert text[a:b].strip() == text[a:b]  # no space at either end
        ends.append(b)
    if words:  # every letter and digit of the text is inside some word's span
        covered = {i for a, b in spans for i in range(a, b)}
        assert all(i in covered for i, ch in enumerate(text) if W.is_kept(ch))


def test_timed_words_need_two_slots_a_word() -> None:
    with pytest.raises(ValueError, match="timestamp slots"):
        W.timed_words("a b", ["a", "b"], [1, 2, 3], 80.0)
    got = W.timed_words("a, b", ["a", "b"], [1, 3, 2, 4], 80.0)  # 160 ms breaks the order: it takes 240 (left, tie)
    assert [(w.start, w.end, w.char_start, w.char_end) for w in got] == [(0.08, 0.24, 0, 2), (0.24, 0.32, 3, 4)]


@pytest.mark.parametrize("samples", [16000, 16123, 40000, 1234])
def test_log_mel_is_whispers(samples: int) -> None:
    transformers = pytest.importorskip("transformers")
    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    clip = (np.random.default_rng(samples).standard_normal(samples) * 0.1).astype(np.float32)
    want = fe(clip, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
              return_tensors="np")
    got = log_mel(clip, fe.mel_filters)
    assert got.shape == want["input_features"][0].shape and got.shape[1] == int(want["attention_mask"].sum())
    assert np.abs(got - want["input_features"][0]).max() < 1e-4


def test_chunk_layout_counts_what_qwen_asr_counts() -> None:
    """The number of audio embeddings is qwen-asr's _get_feat_extract_output_lengths (for its 100-frame chunks)."""
    def qwen_asr_length(n: int) -> int:
        leave = n % 100
        feat = (leave - 1) // 2 + 1
        return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (n // 100) * 13

    for frames in (1, 7, 99, 100, 101, 250, 800, 1001):
        lay = chunk_layout(np.zeros((8, frames), np.float32), 100, 8)
        assert lay.embeddings == qwen_asr_length(frames), frames
        assert lay.chunks.shape == (-(-frames // 100), 8, min(frames, 100))
        assert lay.window_id.max() == (lay.embeddings - 1) // (conv_frames(min(frames, 100)) * 8)


def test_loading_nagisa_keeps_subnormals() -> None:
    """nagisa's DyNet switches the loading thread to flush subnormals to zero; the runtime loads it with the thread's
    floating-point environment kept (every float computation after it would otherwise change)."""
    from ttscore.runtime.qwen3_forced_aligner import words

    words._nagisa()
    assert 2.2250738585072014e-308 / 3 > 0
