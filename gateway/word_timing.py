"""Word timestamps (`word_timestamps: true`, issue 40): the forced aligner's words of each sentence placed on
the audio the client hears and in the text the client sent (pure: numpy, no Triton, no FastAPI).

The gateway aligns each generation's audio (a whole input, a long input's segment, a WebSocket sentence or
incremental utterance) with that generation's text through the Triton model `forced_aligner`
(ttscore.contract.aligner), once its audio is complete (gateway.services), and per chunk before that when the
deployment asks (below). Its words then become:
- times: clamped into the sentence's audio and made monotonic (the aligner does not bound them by the clip:
  qwen-asr does not either), then shifted by the audio heard before the sentence (earlier segments, earlier
  sentences of a WebSocket utterance), and divided by `speed` for a whole file whose tempo was changed;
- characters: offsets into the request's original `input` (the sentence's own offsets plus where the sentence
  starts in it, `text_offsets`), each word's trailing punctuation included (the aligner's spans).

Words before their sentence's end (`word_timestamps_chunk_s` > 0 in the gateway's settings; `ChunkRule`,
`settled`): while a generation runs, its audio so far is aligned against its text (the text received so far for an
incremental one) after `chunk_s` of audio and again each time the audio has doubled; the words whose end lies at
least `margin_s` before the audio so far, and not sent yet, go out at once (in text order: up to the first that is
not final); at the generation's end one alignment of its whole audio gives the rest. Guarantees: a word sent is
never changed nor sent again; times stay monotonic across the partial and final alignments (an unsent word starts
no earlier than the last sent one ends); each word's times are those of the alignment that sent it, so a word sent
early equals the aligner's answer on the audio received up to that alignment and the text, and NOT necessarily
its answer on the sentence's whole audio: the aligner's encoder and classifier attend to the whole clip and its
log-mel is scaled by the clip's maximum, so a longer clip can move an early word (measured on random weights only,
perf/README.md: of the words a partial alignment called final, 0-13 of 17 kept their times in the whole clip's; a
trained checkpoint's agreement is unmeasured here). Hence opt-in; off, every word comes from its sentence's one
alignment. The margin rule trusts the aligner to put words not spoken yet at the clip's end (random weights do not).

On the wire every word is `{"word", "start", "end", "start_ms", "end_ms", "char_start", "char_end"}`: seconds
and vLLM-Omni's milliseconds of the same times (`as_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ttscore.contract import aligner as contract

ENABLE_HINT = "start the server with `triton-tts serve --aligner CKPT` (a forced-aligner checkpoint)"
DEFAULT_LANGUAGE = "English"  # "Auto": words cut at spaces, CJK characters on their own (the aligner's default rule)


@dataclass(frozen=True)
class Word:
    word: str
    start: float  # seconds
    end: float
    char_start: int  # code points into the request's `input`
    char_end: int  # one past the word's last character

    def as_wire(self) -> dict[str, Any]:
        return {"word": self.word, "start": round(self.start, 6), "end": round(self.end, 6),
                "start_ms": round(self.start * 1000), "end_ms": round(self.end * 1000),
                "char_start": self.char_start, "char_end": self.char_end}


def as_wire(words: Sequence[Word]) -> list[dict[str, Any]]:
    return [w.as_wire() for w in words]


def text_offsets(original: str, texts: Sequence[str]) -> tuple[int, ...]:
    """Where each of `texts` starts in `original`: they are its consecutive slices, outer whitespace stripped
    (gateway.longtext, gateway.text_split). A text not found as it is (a family that rewrote it) starts where the
    previous one ended."""
    out: list[int] = []
    at = 0
    for text in texts:
        found = original.find(text, at)
        start = at if found < 0 else found
        out.append(start)
        at = start + len(text) if found >= 0 else at
    return tuple(out)


def aligner_language(language: str | None) -> str:
    """The aligner's `language` for a plan's (lower-case, "auto" included)."""
    if not language or language.strip().lower() == "auto":
        return DEFAULT_LANGUAGE
    return language


def aligner_inputs(audio: np.ndarray, sample_rate: int, text: str, language: str) -> dict[str, np.ndarray]:
    """The forced_aligner request of one sentence (ttscore.contract.aligner.INPUTS)."""
    return {
        "audio": np.ascontiguousarray(audio, dtype=np.float32).reshape(-1),
        "sample_rate": np.array([sample_rate], dtype=np.int32),
        "text": np.array([text.encode("utf-8")], dtype=np.object_),
        "language": np.array([language.encode("utf-8")], dtype=np.object_),
    }


def _strings(values: np.ndarray) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(values).reshape(-1)]


def sentence_words(outputs: Mapping[str, np.ndarray], duration: float, char_offset: int) -> tuple[Word, ...]:
    """The aligner's outputs (ttscore.contract.aligner.OUTPUTS) of one sentence whose audio lasts `duration`
    seconds and whose text starts at `char_offset` of the input: times clamped into [0, duration] and
    non-decreasing (each start at or after the previous word's end, each end at or after its start)."""
    names = [row.name for row in contract.OUTPUTS]
    missing = [n for n in names if n not in outputs]
    if missing:
        raise ValueError(f"forced_aligner answered without {', '.join(missing)}")
    texts = _strings(outputs["word_text"])
    starts = np.asarray(outputs["word_start"], dtype=np.float64).reshape(-1)
    ends = np.asarray(outputs["word_end"], dtype=np.float64).reshape(-1)
    cs = np.asarray(outputs["char_start"]).reshape(-1)
    ce = np.asarray(outputs["char_end"]).reshape(-1)
    if not len(texts) == starts.size == ends.size == cs.size == ce.size:
        raise ValueError("forced_aligner answered outputs of different lengths")
    words: list[Word] = []
    floor = 0.0
    for text, s, e, c0, c1 in zip(texts, starts, ends, cs, ce, strict=True):
        start = min(max(float(s) if np.isfinite(s) else floor, floor), duration)
        end = min(max(float(e) if np.isfinite(e) else start, start), duration)
        words.append(Word(text, start, end, char_offset + int(c0), char_offset + int(c1)))
        floor = end
    return tuple(words)


@dataclass(frozen=True)
class ChunkRule:
    """When a running generation's audio is aligned (`word_timestamps_chunk_s`, `word_timestamps_margin_s`)."""

    chunk_s: float = 0.0  # the first partial alignment after this much audio; 0: words per generation only
    margin_s: float = 0.5  # a word is final once its end lies this far before the audio so far

    @property
    def per_chunk(self) -> bool:
        return self.chunk_s > 0

    def due(self, heard_s: float, aligned_s: float) -> bool:
        """Align the audio so far (`heard_s` seconds; the last partial alignment took `aligned_s`)? After `chunk_s`,
        then each time the audio has doubled: an alignment costs about its clip's length times a constant (perf/
        README.md: 0.14-0.18 s per audio second at real size on 2 vCPUs), so the partial alignments of a clip cost
        less than two alignments of the whole clip."""
        return self.per_chunk and heard_s >= max(self.chunk_s, 2.0 * aligned_s) and heard_s > self.margin_s


def settled(aligned: Sequence[Word], sent: Sequence[Word], heard_s: float, margin_s: float, complete: bool,
            open_text: bool = False) -> tuple[Word, ...]:
    """The words of `aligned` (one alignment of the generation's first `heard_s` seconds, on the timeline of
    `sent`, the words already sent) to send now: those after the last sent word (by char offset), in order, up to
    the first that is not final. With `complete` (the generation's whole audio) every one of them is; otherwise a
    word is final when its end lies at least `margin_s` before `heard_s` and, with `open_text` (the text may grow),
    it is not the text's last word (it may continue). Each start is raised to the last sent end (and each end to
    its start): the sent words are never revisited."""
    after = sent[-1].char_end if sent else -1
    floor = sent[-1].end if sent else 0.0
    rest = [w for w in aligned if w.char_start >= after]
    if not complete:
        limit = heard_s - margin_s
        count = 0
        for w in rest[:-1] if open_text else rest:
            if w.end > limit:
                break
            count += 1
        rest = rest[:count]
    out: list[Word] = []
    for w in rest:
        start = max(w.start, floor)
        end = max(w.end, start)
        out.append(replace(w, start=start, end=end))
        floor = end
    return tuple(out)


@dataclass
class GrowingText:
    """An incremental generation's text (the WebSocket's incremental mode): what reached the model so far, and
    whether it is complete. Its words' char offsets index `text`."""

    text: str = ""
    done: bool = False


def shifted(words: Sequence[Word], seconds: float) -> tuple[Word, ...]:
    """`words` placed `seconds` later (the audio heard before their sentence)."""
    return tuple(replace(w, start=w.start + seconds, end=w.end + seconds) for w in words)


def at_speed(words: Sequence[Word], speed: float) -> tuple[Word, ...]:
    """`words` of the model's timeline on the timeline of the audio played at `speed` (pitch kept)."""
    if speed == 1.0:
        return tuple(words)
    return tuple(replace(w, start=w.start / speed, end=w.end / speed) for w in words)


__all__ = ["ENABLE_HINT", "ChunkRule", "GrowingText", "Word", "aligner_inputs", "aligner_language", "as_wire",
           "at_speed", "sentence_words", "settled", "shifted", "text_offsets"]
