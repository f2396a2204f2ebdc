"""The aligner's text side: a text cut into the words it times (as qwen-asr 0.0.6's `Qwen3ForceAlignProcessor`
cuts it), each word's place in the original text, the prompt's text part, and the repair of the timestamps the
graph classifies (`fix_timestamp`).

Cutting, per language (`encode_timestamp`): Japanese by nagisa's tokens, Korean by soynlp's `LTokenizer` over
qwen-asr's word list, any other language at whitespace with each CJK ideograph a word of its own; every token keeps
only letters, digits and apostrophes, and a token left empty is dropped. The words are what the reference times,
so they are the reference's strings (nagisa normalises the text, e.g. full-width digits become ASCII).

Offsets: each word's characters are found in the original text in order (through each character's NFKC form, which
is how nagisa sees it), so `char_start`/`char_end` index the text the caller gave, before any normalisation. The
characters no word keeps (punctuation, symbols) are attached to a word so that the words' spans cover the text:
those after the last space before a word lead it ("¿Qué", "(see"), and so do opening marks touching it where there is
no space ("は「はい"); the rest trail the word before ("end.", "你好，"); text before the first word leads it, text
after the last trails it. Words cut from one character (nagisa cuts NFKC's "XII" of "Ⅻ" in two) share its span.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ttscore.contract import qwen3_forced_aligner as spec

# The ideograph blocks qwen-asr treats as one word per character (is_cjk_char).
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF))


@dataclass(frozen=True)
class Word:
    """One timed word: its text (as the reference times it), its start and end in seconds, and the characters of
    the original text it covers, `text_in[char_start:char_end]` (its punctuation included)."""

    text: str
    start: float
    end: float
    char_start: int
    char_end: int


def is_kept(ch: str) -> bool:
    """A character a word keeps: letters, digits (any script) and the apostrophe."""
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _CJK)


def clean(token: str) -> str:
    return "".join(ch for ch in token if is_kept(ch))


def _split_cjk(segment: str) -> list[str]:
    """Each CJK ideograph on its own, the runs between them whole."""
    out: list[str] = []
    run = ""
    for ch in segment:
        if is_cjk(ch):
            if run:
                out.append(run)
                run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.append(run)
    return out


def space_words(text: str) -> list[str]:
    """Any language but Japanese and Korean: whitespace-separated tokens, cleaned, CJK ideographs apart."""
    return [w for seg in text.split() if (c := clean(seg)) for w in _split_cjk(c)]


@contextmanager
def float_environment_kept() -> Iterator[None]:
    """Keep this thread's floating-point environment as it was: nagisa's DyNet library is built to flush subnormals to
    zero, and loading it switches the loading thread to that (every float computation of the thread after it,
    numpy's included, would change)."""
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    env = ctypes.create_string_buffer(256)  # fenv_t (32 bytes on x86-64), with room to spare
    libm.fegetenv(env)
    try:
        yield
    finally:
        libm.fesetenv(env)


@lru_cache(maxsize=1)
def _nagisa() -> Any:
    with float_environment_kept():
        import nagisa  # loads its model once (a few seconds); only Japanese needs it

    return nagisa


def japanese_words(text: str) -> list[str]:
    return [c for w in _nagisa().tagging(text).words if (c := clean(w))]


@lru_cache(maxsize=1)
def _korean_tokenizer() -> Any:
    """soynlp's LTokenizer scored by qwen-asr's Korean word list (its assets/korean_dict_jieba.dict: every word 1.0)."""
    from soynlp.tokenizer import LTokenizer

    return LTokenizer(scores=dict.fromkeys(korean_dictionary(), 1.0))


def korean_dictionary() -> list[str]:
    """The first field of each line of qwen-asr's Korean dictionary (shipped with the qwen-asr package)."""
    import importlib.util

    found = importlib.util.find_spec("qwen_asr")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("Korean word splitting needs qwen-asr's Korean dictionary (pip install qwen-asr==0.0.6 "
                           "--no-deps)")
    path = Path(next(iter(found.submodule_search_locations))) / "inference" / "assets" / "korean_dict_jieba.dict"
    return [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def korean_words(text: str) -> list[str]:
    return [c for w in _korean_tokenizer().tokenize(text) if (c := clean(w))]


def splitter(language: str) -> Callable[[str], list[str]]:
    """The word splitter of `language` (a name, any case: "Japanese", "korean", "English", ...)."""
    lang = language.lower()
    if lang == spec.JAPANESE:
        return japanese_words
    if lang == spec.KOREAN:
        return korean_words
    return space_words


def prompt_text(words: Sequence[str]) -> str:
    """The prompt's text: the audio placeholder, then each word followed by its two timestamp slots (start, end)."""
    slots = spec.TIMESTAMP * 2
    return spec.AUDIO_START + spec.AUDIO_PAD + spec.AUDIO_END + slots.join(words) + slots


def _stream(text: str) -> list[tuple[str, int]]:
    """`text` as its characters' NFKC forms (how nagisa sees it), each with the index of the character it came
    from."""
    return [(c, i) for i, ch in enumerate(text) for c in unicodedata.normalize("NFKC", ch)]


def _match(text: str, stream: list[tuple[str, int]], j: int, ch: str) -> int:
    """How many stream entries from `j` spell `ch`: the whole expansion of an original character that is `ch`
    (a word keeps "ﬁ" as written), one entry that is `ch`, or two that compose to it (a half-width kana and its
    voiced mark); 0 when none."""
    c, i = stream[j]
    if text[i] == ch and (j == 0 or stream[j - 1][1] != i):
        n = 1
        while j + n < len(stream) and stream[j + n][1] == i:
            n += 1
        return n
    if c == ch:
        return 1
    if j + 1 < len(stream) and unicodedata.normalize("NFC", c + stream[j + 1][0]) == ch:
        return 2
    return 0


def spans(text: str, words: Sequence[str]) -> list[tuple[int, int]]:
    """Each word's [start, end) in `text`: its characters found in order, then the characters between words
    attached (see the module's doc). Only characters no word keeps are skipped while a word's next character is
    looked for, so a character that cannot be found costs its own place, never a jump over other words; a word
    none of whose characters is found gets an empty span where the search stands."""
    stream = _stream(text)
    core: list[tuple[int, int]] = []
    k = 0
    for word in words:
        first, last = -1, stream[k][1] if k < len(stream) else len(text)
        for ch in word:
            j = k
            while j < len(stream) and not _match(text, stream, j, ch) and not is_kept(stream[j][0]):
                j += 1
            n = _match(text, stream, j, ch) if j < len(stream) else 0
            if not n:
                continue  # not found where it should be: leave the stream where it is
            first = stream[j][1] if first < 0 else first
            last = stream[j + n - 1][1] + 1
            k = j + n
        core.append((first, last) if first >= 0 else (last, last))
    out: list[tuple[int, int]] = []
    for i, (first, last) in enumerate(core):
        start, end = first, last
        if i == 0:
            if text.strip():
                start = min(start, len(text) - len(text.lstrip()))
        else:
            gap_from = core[i - 1][1]
            lead = _leading(text[gap_from:start])
            prev_start, _ = out[-1]
            out[-1] = (prev_start, gap_from + len(text[gap_from:start - lead].rstrip()))
            start -= lead
        if i == len(core) - 1:
            end = max(end, len(text.rstrip()))
        out.append((start, end))
    return out


def _opening(ch: str) -> bool:
    return unicodedata.category(ch) in ("Ps", "Pi") or ch in "¿¡"


def _leading(gap: str) -> int:
    """How many characters at the end of the text between two words lead the second: all after the gap's last
    space, or without a space the opening marks that touch the word ("「", "(", "¿")."""
    cut = max((j for j, ch in enumerate(gap) if ch.isspace()), default=-1)
    if cut >= 0:
        return len(gap) - cut - 1
    n = 0
    while n < len(gap) and _opening(gap[len(gap) - 1 - n]):
        n += 1
    return n


def fix_timestamp(values: Sequence[float]) -> list[int]:
    """qwen-asr's repair of the slots' times (ms): the longest non-decreasing subsequence is kept (the first one
    its dynamic programme finds), each run of up to two others takes the nearer kept neighbour's value (the left one
    on a tie), a longer run is spread evenly between its kept neighbours (or copies the one it has); then each
    value truncated to an integer. The arithmetic is the reference's, so the results are the same numbers."""
    data = [float(v) for v in values]
    n = len(data)
    if n == 0:
        return []
    best, parent = [1] * n, [-1] * n
    for i in range(1, n):
        for j in range(i):
            if data[j] <= data[i] and best[j] + 1 > best[i]:
                best[i], parent[i] = best[j] + 1, j
    normal = [False] * n
    k = best.index(max(best))
    while k != -1:
        normal[k] = True
        k = parent[k]
    result = list(data)
    i = 0
    while i < n:
        if normal[i]:
            i += 1
            continue
        j = i
        while j < n and not normal[j]:
            j += 1
        left = next((result[m] for m in range(i - 1, -1, -1) if normal[m]), None)
        right = next((result[m] for m in range(j, n) if normal[m]), None)
        if j - i <= 2:
            for m in range(i, j):
                if left is None:
                    result[m] = right  # type: ignore[assignment]  # a run has a kept neighbour on some side
                elif right is None or m - (i - 1) <= j - m:
                    result[m] = left
                else:
                    result[m] = right
        elif left is not None and right is not None:
            step = (right - left) / (j - i + 1)
            for m in range(i, j):
                result[m] = left + step * (m - i + 1)
        elif left is not None or right is not None:
            for m in range(i, j):
                result[m] = left if left is not None else right  # type: ignore[assignment]
        i = j
    return [int(v) for v in result]


def slot_milliseconds(classes: Sequence[int], segment_ms: float) -> list[float]:
    """The slots' classes as milliseconds, in float32 as the reference multiplies them (an int64 tensor times a
    Python float)."""
    import numpy as np

    return [float(v) for v in np.asarray(classes, dtype=np.int64).astype(np.float32) * np.float32(segment_ms)]


def timed_words(text: str, words: Sequence[str], classes: Sequence[int], segment_ms: float) -> list[Word]:
    """Words with their times from the `<timestamp>` slots' classes (two per word: start, end), repaired, in
    seconds rounded to the millisecond as the reference rounds them, and their spans in `text`."""
    if len(classes) != 2 * len(words):
        raise ValueError(f"{len(words)} words need {2 * len(words)} timestamp slots, got {len(classes)}")
    ms = fix_timestamp(slot_milliseconds(classes, segment_ms))
    return [Word(w, round(ms[2 * i] / 1000.0, 3), round(ms[2 * i + 1] / 1000.0, 3), a, b)
            for i, (w, (a, b)) in enumerate(zip(words, spans(text, words), strict=True))]
