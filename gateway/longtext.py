"""Long text: one `input` split into segments, generated as consecutive generations, heard as one stream.

Splitting (`split_segments`, pure): an input of at most `limit` characters is one segment, exactly
as sent. A longer one is cut into pieces at paragraph breaks (a blank line), then at sentence ends,
then at clause ends (the WebSocket's splitter, gateway.text_split, with its rules for decimals,
abbreviations and closing quotes), then between words, and only as a last resort inside a word;
consecutive pieces are packed greedily into segments of at most `limit` characters. Every segment is
a contiguous slice of the input with its outer whitespace removed, so nothing is reordered and
nothing but whitespace between segments is lost.

With word timestamps (`split_sentences`), every sentence is a segment of its own, whatever its length, so that
its words (aligned per generation) follow its audio instead of the whole input's.

Seeds (`segment_seed`): segment i of a request with `seed` s is generated with seed s + i (mod
2^63), so segment 0 is what a request with that text alone would give, and a long request equals
its segments requested one by one with seeds s, s+1, ... Without a seed every segment is random.

Generation (`ordered`): up to `lookahead` segments run at once (on Triton they batch together); their
chunks are buffered and handed on strictly in segment order. Closing the stream cancels every
segment still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import Any, TypeVar

from .text_split import split_text

T = TypeVar("T")

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_WORD = re.compile(r"\s*\S+\s*")


def segment_seed(seed: int | None, index: int, seed_max: int) -> int | None:
    """The seed of segment `index` within the family's seed range [0, seed_max]."""
    return None if seed is None else (seed + index) % (seed_max + 1)


def _pieces_by_units(text: str, granularity: str) -> list[str]:
    """Consecutive slices of `text` (joined: `text`), each ending where a splitter unit ends."""
    pieces: list[str] = []
    prev = 0
    for unit in split_text(text, granularity):
        at = text.find(unit, prev)  # units are substrings of the text, in order
        if at < 0:
            continue
        end = at + len(unit)
        pieces.append(text[prev:end])
        prev = end
    if prev < len(text):
        if pieces:
            pieces[-1] += text[prev:]  # trailing whitespace or marks stay with the last unit
        else:
            pieces.append(text[prev:])
    return pieces


def _pieces_by_regex(text: str, pattern: re.Pattern[str]) -> list[str]:
    pieces: list[str] = []
    prev = 0
    for m in pattern.finditer(text):
        if m.end() > prev:
            pieces.append(text[prev:m.end()])
            prev = m.end()
    if prev < len(text):
        pieces.append(text[prev:])
    return pieces


def _split(text: str, limit: int, level: int = 0) -> list[str]:
    """Slices of `text` (joined: `text`) of at most `limit` characters once stripped."""
    if len(text.strip()) <= limit:
        return [text]
    if level == 0:
        pieces = _pieces_by_regex(text, _PARAGRAPH_BREAK)
    elif level == 1:
        pieces = _pieces_by_units(text, "sentence")
    elif level == 2:
        pieces = _pieces_by_units(text, "clause")
    elif level == 3:
        pieces = [m.group(0) for m in _WORD.finditer(text)] if text.strip() else [text]
        if "".join(pieces) != text:  # leading/trailing-only whitespace: keep the text intact
            pieces = [text]
    else:  # one word longer than a segment: cut it
        return [text[i:i + limit] for i in range(0, len(text), limit)]
    if len(pieces) <= 1:
        return _split(text, limit, level + 1)
    return [part for piece in pieces for part in _split(piece, limit, level + 1)]


def split_segments(text: str, limit: int) -> list[str]:
    """The segments of `text`, each at most `limit` characters (see the module docstring)."""
    if len(text) <= limit:
        return [text]
    segments: list[str] = []
    current = ""
    for piece in _split(text, limit):
        if current and len((current + piece).strip()) > limit:
            segments.append(current.strip())
            current = piece.lstrip()
        else:
            current += piece
    if current.strip():
        segments.append(current.strip())
    return [s for s in segments if s]


def split_sentences(text: str, limit: int) -> list[str]:
    """`text` one sentence a segment (the splitter's sentence ends; a sentence longer than `limit` cut as
    `split_segments` cuts), each stripped: the segments of a request whose words are timed per sentence
    (gateway.word_timing), so each sentence's words can follow its audio."""
    out: list[str] = []
    for piece in _pieces_by_units(text, "sentence") if text.strip() else []:
        if len(piece.strip()) > limit:
            out += [part.strip() for part in _split(piece, limit, 2)]
        else:
            out.append(piece.strip())
    return [s for s in out if s]


async def ordered(makers: Sequence[Callable[[], AsyncGenerator[T, None]]], lookahead: int
                  ) -> AsyncGenerator[T, None]:
    """The items of `makers[0]()`, then of `makers[1]()`, ...; up to `lookahead` of them run at
    once, buffering what they produce ahead of their turn. A failure is raised when its segment's
    turn comes (after the audio before it); closing this generator cancels every running one."""
    queues: list[asyncio.Queue[tuple[str, Any]]] = [asyncio.Queue() for _ in makers]
    tasks: list[asyncio.Task[None]] = []

    async def pump(index: int) -> None:
        queue = queues[index]
        try:
            gen = makers[index]()
            async with aclosing(gen):
                async for item in gen:
                    queue.put_nowait(("item", item))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            queue.put_nowait(("error", exc))
            return
        queue.put_nowait(("end", None))

    def start_next() -> None:
        if len(tasks) < len(makers):
            tasks.append(asyncio.ensure_future(pump(len(tasks))))

    try:
        for _ in range(max(1, lookahead)):
            start_next()
        for index in range(len(makers)):
            while True:
                kind, value = await queues[index].get()
                if kind == "item":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    break
            start_next()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


__all__ = ["ordered", "segment_seed", "split_segments", "split_sentences"]
