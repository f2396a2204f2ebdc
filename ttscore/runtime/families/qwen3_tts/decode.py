"""Qwen3-TTS per-frame decode over a preallocated KV arena.

A request's life: `admit` (resolve + prompt, no model call) -> `prefill` (its prompt, possibly in
chunks, batched with other joining requests into one talker call; the call that completes a prompt
also samples code0 and runs the code predictor, so the request leaves prefill with its first frame)
-> `step` (one batched talker call, code0 sampling and one code-predictor call per frame) -> `release`.

Each step reads the talker weights once for the whole batch (decoding is memory-bandwidth bound).
The code predictor turns each sampled code0 into the frame's other codebooks, and the sum of their
embeddings (plus the next text embedding) is the next talker input.

The talker's past is a K/V arena (ttscore.runtime.kv): a row per request, bound in place through IO
binding, a step writing only its new position; its capacity never exceeds the largest active request's plan,
prompt + max_new_tokens. The talker graph attends to past and new keys without concatenating them
(export/qwen3_tts/talker.py).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.qwen3_tts.checkpoint import Qwen3TTSInfo
from ttscore.runtime.families.qwen3_tts.prompt import Prompt, Tables, build_prompt
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest, ResolvedRequest, resolve
from ttscore.runtime.families.qwen3_tts.tokenizer import TextTokenizer, assistant_text
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import KVArena
from ttscore.runtime.onnx import OnnxGraph
from ttscore.runtime.sampling import process_logits_batch, sample

logger = logging.getLogger(__name__)
F32 = npt.NDArray[np.float32]


@dataclass
class QwenSequence(Sequence):
    req: ResolvedRequest | None = None
    prompt: Prompt | None = None
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
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
    for seq, _ in work:
        p.arena.acquire(seq, seq.planned)
    chunk = max(n for _, n in work)
    x = np.zeros((len(work), chunk, p.info.talker.hidden_size), np.float32)
    for r, (seq, n) in enumerate(work):
        assert seq.prompt is not None
        x[r, chunk - n:] = seq.prompt.embeds[seq.prefilled : seq.prefilled + n]  # left-padded
    out = p.arena.run(p.talker, [seq for seq, _ in work], x, [n for _, n in work])
    done = []
    for r, (seq, n) in enumerate(work):
        seq.prefilled += n
        if seq.prefilled == seq.prompt_tokens:
            done.append(r)
    if done:
        seqs = [work[r][0] for r in done]
        _frame(p, seqs, out["logits"][done], out["hidden"][done])


def step(p: Decoder, batch: list[QwenSequence]) -> None:
    """One frame for every sequence of the batch (prefilled, unfinished): talker, code0, code predictor."""
    x = np.stack([a.next_input for a in batch if a.next_input is not None])[:, None]
    out = p.arena.run(p.talker, batch, x)
    _frame(p, batch, out["logits"], out["hidden"])


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
