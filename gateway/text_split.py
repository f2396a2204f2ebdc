"""Incremental text splitter for the streaming-text WebSocket (`split_granularity`).

Rules (spec, "Session Config Parameters"):
- "none": nothing is split; the whole flushed buffer is one unit.
- "sentence": a unit ends after `.!?`, CJK `。！？…`, Indic danda `।॥`, Arabic `؟`.
- "clause": additionally after `,;`, `，；`, `،؛`.
- ASCII marks (`.!?,;`) end a unit only when whitespace or the flush (`input.done`) follows; the
  others end it where they stand. So decimals (3.14), thousands separators (1,000), URLs and
  "e.g.," never split.
- A single `.` after an abbreviation (Mr., Dr., e.g., U.S., Ph.D., ...), an initial (J. R. R.) or a
  leading list number ("1. ") is not a boundary.
- A run of marks and the closing quotes/brackets right after it stay with the unit they close:
  `Wait...`, `Really?!` and `He said "Hello."` are one unit each.
- A unit with no letters or digits (a stray "..." or "!") is not emitted on its own: it is kept as
  the start of the next unit, or dropped at the flush.

Feeding is incremental: each `feed()` returns the units completed so far and keeps the rest; a
decision that depends on the next character (is whitespace next? another closing quote?) waits for
it, so splitting text into chunks never changes the result. Scanning resumes where it stopped, so
feeding token by token stays linear in the text length.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from ttscore.contract.errors import InvalidRequest

Granularity = Literal["none", "sentence", "clause"]
GRANULARITIES: tuple[str, ...] = ("none", "sentence", "clause")

SENTENCE_MARKS = frozenset(".!?" "。！？…" "।॥" "؟")
CLAUSE_MARKS = frozenset(",;" "，；" "،؛")
ASCII_MARKS = frozenset(".!?,;")
# Closing quotes and brackets that stay with the unit they follow. ASCII quotes are ambiguous
# (opening or closing); right after a mark they can only be closing.
CLOSERS = frozenset("\"')]}»›”’」』）］｝】》〉〕〗〙〛＂＇")
OPENERS = frozenset("\"'([{«‹“‘「『（［｛【《〈〔〖〘〚＂＇")

# Lower-case abbreviations (without the final '.') that do not end a sentence. Common words that
# also end sentences ("no", "us", "in") are deliberately absent; so is "etc", which usually does.
ABBREVIATIONS = frozenset(
    ["mr", "mrs", "ms", "mx", "dr", "prof", "sr", "jr", "st", "mt", "ft", "rev", "hon", "gen", "col", "capt", "cpt", "lt", "sgt", "maj", "cmdr", "adm", "gov", "sen", "rep", "pres", "supt", "messrs", "mme", "mlle", "vs", "cf", "viz", "al", "approx", "ca", "est", "dept", "univ", "assn", "bros", "inc", "ltd", "co", "corp", "plc", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "fig", "figs", "eq", "eqs", "vol", "vols", "ch", "chap", "sec", "pp", "p", "para", "art", "ed", "eds", "op", "ave", "blvd", "rd", "hwy"]
)
# Dotted abbreviations: e.g, i.e, U.S, U.S.A, Ph.D, a.m, p.m (letter groups of one or two).
_DOTTED = re.compile(r"^(?:[^\W\d_]{1,2}\.)+[^\W\d_]{1,2}$")
_LIST_NUMBER = re.compile(r"^\d{1,3}$")


def check_granularity(value: str | None, param: str = "split_granularity") -> str:
    granularity = "none" if value is None else str(value).strip().lower()
    if granularity not in GRANULARITIES:
        raise InvalidRequest(f"{param} must be one of 'none', 'sentence', 'clause'; got {value!r}", param)
    return granularity


class TextSplitter:
    """feed(text) -> completed units; flush() -> the rest (at `input.done`). Reusable after flush."""

    def __init__(self, granularity: str = "none") -> None:
        self.granularity = check_granularity(granularity)
        marks = SENTENCE_MARKS | CLAUSE_MARKS if self.granularity == "clause" else SENTENCE_MARKS
        self._marks = marks if self.granularity != "none" else frozenset()
        self._buf = ""  # text not yet emitted; a unit starts at index 0
        self._scan = 0  # where scanning resumes

    @property
    def pending(self) -> str:
        """Text buffered but not yet emitted."""
        return self._buf

    def feed(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        self._buf += text
        return self._split(final=False)

    def flush(self) -> list[str]:
        """End of the utterance: everything buffered is emitted (at most one unit per boundary)."""
        units = self._split(final=True)
        rest = self._buf.strip()
        if _speakable(rest):
            units.append(rest)
        self._buf = ""
        self._scan = 0
        return units

    def reset(self) -> None:
        self._buf = ""
        self._scan = 0

    def _split(self, final: bool) -> list[str]:
        if not self._marks:
            return []
        units: list[str] = []
        buf = self._buf
        n = len(buf)
        start = 0  # start of the current unit in buf
        i = self._scan
        while i < n:
            if buf[i] not in self._marks:
                i += 1
                continue
            j = i
            while j < n and buf[j] in self._marks:
                j += 1
            k = j
            while k < n and buf[k] in CLOSERS:
                k += 1
            if k == n and not final:
                break  # more marks, closers or whitespace may follow: decide when they arrive
            run = buf[i:j]
            if all(c in ASCII_MARKS for c in run):
                if k < n and not buf[k].isspace():
                    i = k
                    continue
                if run == "." and self._keeps_period(buf, start, i):
                    i = k
                    continue
            unit = buf[start:k].strip()
            if _speakable(unit):
                units.append(unit)
                start = k
            # else: marks without words stay as the beginning of the next unit
            i = k
        self._buf = buf[start:]
        self._scan = i - start
        return units

    @staticmethod
    def _keeps_period(buf: str, start: int, i: int) -> bool:
        """True when the '.' at buf[i] ends an abbreviation, an initial or a leading list number."""
        t = i
        while t > start and not buf[t - 1].isspace() and buf[t - 1] not in OPENERS:
            t -= 1
        token = buf[t:i]
        if not token:
            return False
        if len(token) == 1 and token.isalpha() and token.isupper():
            return True  # initial: J. R. R. Tolkien
        if token.lower() in ABBREVIATIONS or _DOTTED.match(token):
            return True
        # "1. First item": a number that is all the unit holds so far is an enumerator.
        return bool(_LIST_NUMBER.match(token)) and not buf[start:t].strip()


def split_text(text: str, granularity: str = "sentence") -> list[str]:
    """All units of a complete text (feed + flush)."""
    splitter = TextSplitter(granularity)
    return splitter.feed(text) + splitter.flush()


def _speakable(unit: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in unit)
