"""Qwen3-TTS per-frame decode over a preallocated KV arena.

A request's life: `admit` (resolve + prompt, no model call) -> `prefill` (its prompt, possibly in
chunks, batched with other joining requests into one talker call; the call that completes a prompt
also samples code0 and runs the code predictor, so the request leaves prefill with its first frame)
-> `step` (one batched talker call, code0 sampling and one code-predictor call per frame) -> `release`.

Each step reads the talker weights once for the whole batch (decoding is memory-bandwidth bound).
The code predictor turns each sampled code0 into the frame's other codebooks, and the sum of their
embeddings (plus the next text embedding) is the next talker input.

KV arena: one buffer per layer and K/V, [rows, kv_heads, capacity, head_dim], a row per request,
left-aligned (a row's valid keys are [0, length)). A decode step feeds `arena[:R]` as the talker's
past (a contiguous view, bound in place through IO binding: no per-step copy of any cache) with an
attention mask marking each row's valid prefix, and writes only the new token's K/V into the arena.
The talker graph attends to past and new keys without concatenating them (export/qwen3_tts/talker.py).
Capacity grows in blocks (one copy per growth, amortised over many steps) and never beyond the
largest active request's plan, prompt + max_new_tokens.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.qwen3_tts.checkpoint import Qwen3TTSInfo
from ttscore.runtime.families.qwen3_tts.prompt import Prompt, Tables, build_prompt
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest, ResolvedRequest, resolve
from ttscore.runtime.families.qwen3_tts.tokenizer import TextTokenizer, assistant_text
from ttscore.runtime.family import Sequence
from ttscore.runtime.onnx import OnnxGraph
from ttscore.runtime.sampling import process_logits_batch, sample

logger = logging.getLogger(__name__)
F32 = npt.NDArray[np.float32]
GROWTH_BLOCK = 16  # positions added at least per capacity growth


@dataclass
class QwenSequence(Sequence):
    req: ResolvedRequest | None = None
    prompt: Prompt | None = None
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    row: int = -1  # KV arena row, -1 before prefill and after release
    length: int = 0  # valid positions in the arena row
    planned: int = 0  # capacity plan: prompt + max_new_tokens
    next_input: F32 | None = None  # [H] the next talker input (last frame's embeddings + text)
    seen: npt.NDArray[np.bool_] | None = None  # [V] codes in the code0 history (repetition penalty)
    n_codes: int = 0  # code0s sampled so far
    # Incremental text (admit_open / extend_text): the text so far, whether it is complete, the
    # text tokens committed (never retokenized afterwards), and the last frame's embedding sum
    # while the sequence waits for the next text token.
    text_open: bool = False
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    instruct_tokens: int = 0  # usage: the instructions' tokens (text_tokens = these + the text's)
    held: F32 | None = None


class KVArena:
    """Per-layer K/V buffers shared by every request of one pipeline (see the module docstring)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.k: list[F32] = []
        self.v: list[F32] = []
        self.owners: list[QwenSequence] = []  # row -> request; rows are kept dense
        self._alloc(0, 0)

    @property
    def bytes_per_position(self) -> int:
        """Arena bytes one request needs per cached position (all layers, K and V, float32)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 4

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    @property
    def capacity(self) -> int:
        return int(self.k[0].shape[2])

    @property
    def rows(self) -> int:
        return len(self.owners)

    def _alloc(self, rows: int, capacity: int) -> None:
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        old_k, old_v = self.k, self.v
        self.k = [np.zeros(shape, np.float32) for _ in range(self.layers)]
        self.v = [np.zeros(shape, np.float32) for _ in range(self.layers)]
        if old_k:
            r = min(rows, old_k[0].shape[0])
            c = min(capacity, old_k[0].shape[2])
            for new, old in zip(self.k + self.v, old_k + old_v, strict=True):
                new[:r, :, :c] = old[:r, :, :c]

    def acquire(self, seq: QwenSequence) -> None:
        if self.rows == self.k[0].shape[0]:
            self._alloc(max(1, 2 * self.rows), self.capacity)
        seq.row = self.rows
        seq.length = 0
        self.owners.append(seq)

    def release(self, seq: QwenSequence) -> None:
        """Free a row; the last row moves into the hole (one copy per departure) to keep rows dense."""
        i = seq.row
        if i < 0 or i >= self.rows or self.owners[i] is not seq:
            return
        last = self.rows - 1
        if i != last:
            moved = self.owners[last]
            n = moved.length
            for buf in self.k + self.v:
                buf[i, :, :n] = buf[last, :, :n]
            self.owners[i] = moved
            moved.row = i
        self.owners.pop()
        seq.row = -1
        # Give memory back once the longest plan has left: the next requests may plan less.
        plan = max((s.planned for s in self.owners), default=0)
        if self.capacity > plan:
            self._alloc(self.k[0].shape[0] if self.owners else 0, plan)

    def reserve(self, needed: int) -> None:
        """Make room for position `needed - 1` in every row: grow by blocks, never past the plan."""
        cap = self.capacity
        if needed <= cap:
            return
        plan = max((s.planned for s in self.owners), default=needed)
        grown = min(max(needed, cap + max(GROWTH_BLOCK, cap // 4)), max(plan, needed))
        self._alloc(self.k[0].shape[0], grown)


@dataclass
class Decoder:
    """What Qwen3-TTS's step reads: the checkpoint's facts, the embedding tables, the tokenizer, the talker
    and code-predictor graphs, the suppressed codec ids and the K/V arena. Qwen3TTSPipeline owns one and
    hands it to the functions below."""

    info: Qwen3TTSInfo
    tables: Tables
    tokenizer: TextTokenizer
    talker: OnnxGraph
    code_predictor: OnnxGraph
    suppressed: npt.NDArray[Any]
    arena: KVArena


def admit(p: Decoder, request: Qwen3TTSRequest) -> QwenSequence:
    """Resolve (InvalidRequest naming the field) and build the prompt; no model call."""
    info = p.info
    req = resolve(request, info)
    prompt = build_prompt(req, info, p.tables, p.tokenizer)
    length = int(prompt.embeds.shape[0])
    return QwenSequence(
        initial_chunk_frames=req.initial_chunk_frames,
        chunk_frames=req.chunk_frames,
        text_tokens=prompt.text_tokens,
        audio_tokens=prompt.audio_tokens,
        # In-context cloning decodes ref_codes ++ codes and cuts the reference part: with an exact
        # streaming vocoder that is the reference frames run through first, their audio dropped.
        vocoder_prefix=req.ref_codes,
        prompt_tokens=length,
        req=req,
        prompt=prompt,
        rng=np.random.default_rng(req.seed),
        planned=length + req.max_new_tokens,
        seen=np.zeros(info.codec_vocab_size, bool),
    )


# --- incremental text ---------------------------------------------------------------------------
#
# In the streaming prompt mode (non_streaming_mode false, no in-context reference) the talker's
# prompt holds the first text token and every generated frame adds the next one (then tts_eos,
# then tts_pad), so the text can arrive while the sequence generates. The text so far is
# tokenized as a whole each time it grows and the tokens are committed up to, not including, the
# last one (more text may still change it: "Hel" + "lo"); `done` commits the rest and tts_eos. With
# text cut at word boundaries the committed tokens are those of the whole text, so the frames equal
# those of the same text sent at once (greedy). A frame that needs a token not committed yet makes
# the sequence wait (`waiting_for_text`) with its embedding held.


def admit_open(p: Decoder, request: Qwen3TTSRequest) -> QwenSequence:
    """Admit a request whose text is a beginning (incremental text); the prompt is built once its
    first text token is committed."""
    if request.non_streaming_mode:
        raise InvalidRequest("incremental text needs the streaming prompt mode (non_streaming_mode false)",
                             "non_streaming_mode")
    req = resolve(dataclasses.replace(request, non_streaming_mode=False), p.info)
    if req.ref_codes is not None:
        raise InvalidRequest("incremental text cannot be used with in-context cloning (ref_text); "
                             "use x_vector_only_mode", "ref_text")
    seq = QwenSequence(
        initial_chunk_frames=req.initial_chunk_frames,
        chunk_frames=req.chunk_frames,
        text_tokens=0,
        req=req,
        rng=np.random.default_rng(req.seed),
        seen=np.zeros(p.info.codec_vocab_size, bool),
        text_open=True,
        waiting_for_text=True,
    )
    extend_text(p, seq, req.text, done=False)
    return seq


def extend_text(p: Decoder, seq: QwenSequence, text: str, done: bool) -> None:
    """Append `text` (done: the text is complete). Raises InvalidRequest for a closed sequence."""
    if not seq.text_open:
        raise InvalidRequest("the request's text is already complete", "text")
    assert seq.req is not None
    seq.text += text
    seq.text_open = not done
    all_ids = p.tokenizer.encode(assistant_text(seq.text))[3:-5]
    now = all_ids if done else all_ids[:-1]
    if now[: len(seq.tokens)] != seq.tokens:
        # The text's tokenization changed across a committed token (text cut inside a word): the
        # committed tokens stay (they may be spoken already); the audio is then not exactly that
        # of the whole text.
        logger.warning("incremental text re-tokenized a committed token; keeping the committed ones")
    seq.tokens += now[len(seq.tokens):] if len(now) > len(seq.tokens) else []
    if done and not all_ids:
        raise InvalidRequest("input text produced no tokens", "input")
    if seq.prompt is None:
        if not seq.tokens:
            return  # still waiting for the first token
        prompt = build_prompt(dataclasses.replace(seq.req, text=seq.text, non_streaming_mode=False), p.info,
                              p.tables, p.tokenizer)
        seq.prompt = prompt
        seq.prompt_tokens = int(prompt.embeds.shape[0])
        seq.planned = seq.prompt_tokens + seq.req.max_new_tokens
        seq.text_tokens = prompt.text_tokens  # the instructions' tokens + the text's so far
        seq.instruct_tokens = prompt.text_tokens - len(all_ids)
        seq.waiting_for_text = False
    T = p.tables.text
    st = p.info.special_text_ids
    rows = [T[seq.tokens[1:]]] + ([T[[st["tts_eos"]]]] if done else [])
    seq.prompt.trailing = np.concatenate(rows, axis=0).astype(np.float32)
    seq.text_tokens = seq.instruct_tokens + len(all_ids)
    if seq.held is not None:
        _feed_text(seq, seq.held)


def _feed_text(a: QwenSequence, embed: F32) -> None:
    """The next talker input: the last frame's embedding sum plus the next text row (tts_pad once
    the text and tts_eos are used), or wait for it when the text is still open."""
    assert a.prompt is not None
    n = a.frames_out - 1
    if n < a.prompt.trailing.shape[0]:
        text = a.prompt.trailing[n]
    elif a.text_open:
        a.held, a.next_input, a.waiting_for_text = embed, None, True
        return
    else:
        text = a.prompt.pad
    a.held, a.waiting_for_text = None, False
    a.next_input = embed + text


def prefill(p: Decoder, work: list[tuple[QwenSequence, int]]) -> None:
    """The next `n` prompt tokens of each sequence in ONE talker call (rows left-padded to the
    longest chunk). Sequences whose prompt completes sample code0 and get their first frame."""
    t = p.info.talker
    arena = p.arena
    for seq, _ in work:
        if seq.row < 0:
            arena.acquire(seq)
    n_rows = len(work)
    chunk = max(n for _, n in work)
    past = max(seq.prefilled for seq, _ in work)
    hidden = p.info.talker.hidden_size
    x = np.zeros((n_rows, chunk, hidden), np.float32)
    mask = np.zeros((n_rows, past + chunk), np.int64)
    pos = np.zeros((n_rows, chunk), np.int64)
    for r, (seq, n) in enumerate(work):
        assert seq.prompt is not None
        lead = chunk - n  # left padding: the last position of every row is a real token
        x[r, lead:] = seq.prompt.embeds[seq.prefilled : seq.prefilled + n]
        mask[r, : seq.prefilled] = 1
        mask[r, past + lead :] = 1
        pos[r, lead:] = seq.prefilled + np.arange(n)
    feeds: dict[str, npt.NDArray[np.generic]] = {"inputs_embeds": x, "attention_mask": mask, "position_ids": pos}
    rows = np.array([seq.row for seq, _ in work])
    for i in range(t.num_layers):
        # Continuation chunks of a long prompt read their own rows (a copy, only on this path).
        feeds[spec.talker_past_key(i)] = np.ascontiguousarray(arena.k[i][rows, :, :past])
        feeds[spec.talker_past_value(i)] = np.ascontiguousarray(arena.v[i][rows, :, :past])
    arena.reserve(max(seq.prefilled + n for seq, n in work))
    out = p.talker.run_bound(feeds)
    for i in range(t.num_layers):
        nk, nv = out[spec.talker_new_key(i)], out[spec.talker_new_value(i)]
        for r, (seq, n) in enumerate(work):
            arena.k[i][seq.row, :, seq.prefilled : seq.prefilled + n] = nk[r, :, chunk - n :]
            arena.v[i][seq.row, :, seq.prefilled : seq.prefilled + n] = nv[r, :, chunk - n :]
    done = []
    for r, (seq, n) in enumerate(work):
        seq.prefilled += n
        seq.length = seq.prefilled
        if seq.prefilled == seq.prompt_tokens:
            done.append(r)
    if done:
        seqs = [work[r][0] for r in done]
        _frame(p, seqs, out["logits"][done], out["hidden"][done])


def step(p: Decoder, batch: list[QwenSequence]) -> None:
    """One frame for every sequence of the batch (prefilled, unfinished): talker, code0, code predictor."""
    t = p.info.talker
    arena = p.arena
    rows = np.array([a.row for a in batch])
    n_rows = int(rows.max()) + 1  # feed the dense prefix arena[:n_rows]: a view, never a copy
    lengths = np.zeros(n_rows, np.int64)
    lengths[rows] = [a.length for a in batch]
    arena.reserve(int(lengths.max()) + 1)
    cap = arena.capacity
    x = np.zeros((n_rows, 1, t.hidden_size), np.float32)
    x[rows, 0] = np.stack([a.next_input for a in batch if a.next_input is not None])
    mask = np.zeros((n_rows, cap + 1), np.int64)
    mask[:, :cap] = np.arange(cap)[None, :] < lengths[:, None]
    mask[:, cap] = 1  # the new token (rows outside the batch compute a throwaway result)
    feeds: dict[str, npt.NDArray[np.generic]] = {
        "inputs_embeds": x,
        "attention_mask": mask,
        "position_ids": lengths[:, None].copy(),
    }
    for i in range(t.num_layers):
        feeds[spec.talker_past_key(i)] = arena.k[i][:n_rows]
        feeds[spec.talker_past_value(i)] = arena.v[i][:n_rows]
    out = p.talker.run_bound(feeds)
    at = lengths[rows]
    for i in range(t.num_layers):
        arena.k[i][rows, :, at] = out[spec.talker_new_key(i)][rows, :, 0]
        arena.v[i][rows, :, at] = out[spec.talker_new_value(i)][rows, :, 0]
    for a in batch:
        a.length += 1
    _frame(p, batch, out["logits"][rows], out["hidden"][rows])


def _frame(p: Decoder, batch: list[QwenSequence], logits: F32, hidden: F32) -> None:
    """Sample code0 from the talker's last logits, run the code predictor on the rows that did not
    stop, append their frames and prepare each row's next talker input."""
    eos = p.info.codec_ids["eos"]
    reqs = [a.req for a in batch if a.req is not None]
    seen = np.stack([a.seen for a in batch if a.seen is not None])
    scores = process_logits_batch(
        logits,
        seen,
        np.array([r.repetition_penalty for r in reqs], np.float32),
        p.suppressed,
        eos,
        np.array([a.n_codes for a in batch]),
    )
    greedy = scores.argmax(-1)
    code0 = np.empty(len(batch), np.int64)
    for row, (a, r) in enumerate(zip(batch, reqs, strict=True)):
        u = float(a.rng.random())  # drawn for greedy rows too: the seed's stream stays the same
        s = r.talker
        code0[row] = sample(scores[row], True, s.temperature, s.top_k, s.top_p, u) if s.do_sample else greedy[row]
        assert a.seen is not None
        a.seen[code0[row]] = True
        a.n_codes += 1
    live = [row for row in range(len(batch)) if code0[row] != eos]
    for row in range(len(batch)):
        if code0[row] == eos:
            batch[row].finished = "stop"
    if not live:
        return
    seqs = [batch[r] for r in live]
    g = p.info.num_code_groups - 1
    noise = np.stack([a.rng.random(g) for a in seqs]).astype(np.float32)
    sub = [a.req.subtalker for a in seqs if a.req is not None]
    cp = p.code_predictor.run(
        {
            "hidden": np.ascontiguousarray(hidden[live], np.float32),
            "code0": code0[live],
            "noise": noise,
            "do_sample": np.array([s.do_sample for s in sub], bool),
            "temperature": np.array([s.temperature for s in sub], np.float32),
            "top_k": np.array([s.top_k for s in sub], np.int64),
            "top_p": np.array([s.top_p for s in sub], np.float32),
        }
    )
    frames = np.concatenate([code0[live, None], cp["codes"].astype(np.int64)], axis=1)
    embed_sum = cp["codec_embed_sum"]
    for i, a in enumerate(seqs):
        assert a.req is not None and a.prompt is not None
        a.pending.append(frames[i])
        a.frames_out += 1
        # A request whose budget is spent needs no further talker step.
        if a.frames_out >= a.req.max_new_tokens:
            a.finished = "length"
            continue
        _feed_text(a, embed_sum[i])
