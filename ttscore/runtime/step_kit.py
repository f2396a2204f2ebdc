"""A family's autoregressive stack over its K/V arena (ttscore.runtime.kv), as the engine drives it: the prompt's
embedding rows prefilled one sequence at a time in the chunks the engine hands out (`prefill_chunks`), then one
step per frame over every decoding sequence at once, fed each one's last frame (`step_frames`); a model's `release`
and `memory` over its arenas (`ArenaModel`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import KVArena, arenas_memory

F32 = npt.NDArray[np.float32]


@dataclass
class PromptSequence(Sequence):
    """A sequence whose prompt is `embeds` [prompt_tokens, H], the decoder stack's input rows, kept until the
    prompt is prefilled."""

    embeds: F32 | None = None


@dataclass
class FrameSequence(PromptSequence):
    """A PromptSequence whose stack is fed back its `last` frame of codes at every step (None: none made yet)."""

    last: npt.NDArray[np.int64] | None = None

    def emit(self, frame: npt.NDArray[np.int64], max_frames: int) -> None:
        """Hand out `frame` (and feed it back at the next step); the sequence ends ("length") at `max_frames`."""
        self.last = frame
        self.pending.append(frame)
        self.frames_out += 1
        if self.frames_out >= max_frames:
            self.finished = "length"


S = TypeVar("S", bound=PromptSequence)
FS = TypeVar("FS", bound=FrameSequence)


def prefill_chunks(arena: KVArena, work: list[tuple[Sequence, int]], kind: type[S], plan: Callable[[S], int],
                   run: Callable[[list[S], F32], None], embed: Callable[[S], F32] | None = None) -> list[S]:
    """Run the next chunk of each `kind` sequence's prompt (`work`: the engine's (sequence, positions) pairs)
    through `run` (the stack over `arena`, one sequence at a time: [1, n, H]). A sequence without `embeds` gets
    them from `embed` at its first chunk (none: it is skipped); its arena row is acquired with `plan(s)` positions
    (the most it may need). Returns the sequences whose prompt this call completed, their `embeds` dropped."""
    done: list[S] = []
    for s, n in work:
        if not isinstance(s, kind):
            continue
        if s.embeds is None and embed is not None:
            s.embeds = embed(s)
        if s.embeds is None:
            continue
        lo, hi = s.prefilled, s.prefilled + n
        arena.acquire(s, plan(s))
        run([s], s.embeds[None, lo:hi])
        s.prefilled = hi
        if hi == s.prompt_tokens:
            s.embeds = None
            done.append(s)
    return done


def step_frames(batch: list[Sequence], kind: type[FS], embed: Callable[[list[npt.NDArray[np.int64]]], F32],
                run: Callable[[list[FS], F32], None], frames: Callable[[list[FS]], None]) -> None:
    """One step for the `kind` sequences of `batch` that still decode and have a last frame: their last frames
    through `embed` ([B, H], in order), `run` (the stack over the arena) at one new position each ([B, 1, H]),
    then `frames` (the next frame of each, or its end)."""
    seqs = [s for s in batch if isinstance(s, kind) and s.finished is None and s.last is not None]
    if not seqs:
        return
    run(seqs, embed([s.last for s in seqs if s.last is not None])[:, None])
    frames(seqs)


class ArenaModel:
    """`release` and `memory` of a model whose `sequence`s hold rows of its K/V arenas (`kv`, or those `arenas`
    returns) and per-sequence decode state (`drops`: the fields freed when a sequence leaves)."""

    sequence: ClassVar[type[Sequence]]
    drops: ClassVar[tuple[str, ...]] = ()
    kv: KVArena

    def arenas(self) -> list[KVArena]:
        return [self.kv]

    def release(self, seq: Sequence) -> None:
        if isinstance(seq, self.sequence):
            for arena in self.arenas():
                arena.release(seq)
            for name in self.drops:
                setattr(seq, name, None)

    def memory(self) -> dict[str, int]:
        return arenas_memory(self.arenas())
