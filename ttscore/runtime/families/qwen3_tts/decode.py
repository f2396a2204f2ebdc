"""Qwen3-TTS per-frame decode: prefill, then one batched talker step + code-predictor call per frame.

Each step reads the talker weights once for the whole batch (decoding is memory-bandwidth bound).
The code predictor turns each sampled code0 into the frame's other codebooks, and the sum of their
embeddings (plus the next text embedding) is the next talker input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ttscore.contract import qwen3_tts as spec
from ttscore.runtime.families.qwen3_tts.prompt import Prompt, build_prompt
from ttscore.runtime.families.qwen3_tts.request import ResolvedRequest, SynthesisRequest, resolve
from ttscore.runtime.family import Sequence
from ttscore.runtime.sampling import process_logits, sample

if TYPE_CHECKING:
    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline

F32 = npt.NDArray[np.float32]


class KVCache:
    """One request's talker KV cache: per layer [kv_heads, capacity, head_dim], grown by doubling."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int) -> None:
        self.length = 0
        self.k = [np.empty((kv_heads, capacity, head_dim), np.float32) for _ in range(layers)]
        self.v = [np.empty((kv_heads, capacity, head_dim), np.float32) for _ in range(layers)]

    def append(self, layer: int, k: F32, v: F32) -> None:
        n = k.shape[1]
        cap = self.k[layer].shape[1]
        if self.length + n > cap:
            new_cap = max(cap * 2, self.length + n)
            for buf in (self.k, self.v):
                grown = np.empty((buf[layer].shape[0], new_cap, buf[layer].shape[2]), np.float32)
                grown[:, : self.length] = buf[layer][:, : self.length]
                buf[layer] = grown
        self.k[layer][:, self.length : self.length + n] = k
        self.v[layer][:, self.length : self.length + n] = v


@dataclass
class QwenSequence(Sequence):
    req: ResolvedRequest | None = None
    prompt: Prompt | None = None
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    kv: KVCache | None = None
    logits: F32 | None = None  # [V] talker logits of the last position
    hidden: F32 | None = None  # [H] talker hidden of the last position
    history: list[int] = field(default_factory=list)  # code0 of every frame so far
    code0: int | None = None  # sampled code0 awaiting its code-predictor pass


def admit(p: Pipeline, request: SynthesisRequest) -> QwenSequence:
    """Resolve (InvalidRequest naming the field), build the prompt, prefill, sample the first code0."""
    info = p.info
    req = resolve(request, info)
    prompt = build_prompt(req, info, p.tables, p.tokenizer)
    t = info.talker
    length = prompt.embeds.shape[0]
    kv = KVCache(t.num_layers, t.num_kv_heads, t.head_dim, capacity=length + min(req.max_new_tokens, 256) + 1)
    feeds = {
        "inputs_embeds": prompt.embeds[None],
        "attention_mask": np.ones((1, length), np.int64),
        "position_ids": np.arange(length, dtype=np.int64)[None],
    }
    empty = np.zeros((1, t.num_kv_heads, 0, t.head_dim), np.float32)
    for i in range(t.num_layers):
        feeds[spec.talker_past_key(i)] = empty
        feeds[spec.talker_past_value(i)] = empty
    out = p.talker.run(feeds)
    for i in range(t.num_layers):
        kv.append(i, out[spec.talker_new_key(i)][0], out[spec.talker_new_value(i)][0])
    kv.length = length
    seq = QwenSequence(
        initial_chunk_frames=req.initial_chunk_frames,
        chunk_frames=req.chunk_frames,
        text_tokens=prompt.text_tokens,
        audio_tokens=prompt.audio_tokens,
        # In-context cloning decodes ref_codes ++ codes and cuts the reference part: with an exact
        # streaming vocoder that is the reference frames run through first, their audio dropped.
        vocoder_prefix=req.ref_codes,
        req=req,
        prompt=prompt,
        rng=np.random.default_rng(req.seed),
        kv=kv,
        logits=out["logits"][0],
        hidden=out["hidden"][0],
    )
    _sample_code0(p, seq)
    return seq


def _sample_code0(p: Pipeline, a: QwenSequence) -> None:
    assert a.req is not None and a.logits is not None
    eos = p.info.codec_ids["eos"]
    scores = process_logits(
        a.logits, np.asarray(a.history, np.int64), a.req.repetition_penalty, p.suppressed, eos, len(a.history)
    )
    s = a.req.talker
    code0 = sample(scores, s.do_sample, s.temperature, s.top_k, s.top_p, float(a.rng.random()))
    a.history.append(code0)
    if code0 == eos:
        a.finished = "stop"
        a.code0 = None
    else:
        a.code0 = code0


def step(p: Pipeline, batch: list[QwenSequence]) -> None:
    """One frame for every sequence of the batch (all unfinished)."""
    g = p.info.num_code_groups - 1
    noise = np.stack([a.rng.random(g) for a in batch]).astype(np.float32)
    sub = [a.req.subtalker for a in batch if a.req is not None]
    cp = p.code_predictor.run(
        {
            "hidden": np.stack([a.hidden for a in batch if a.hidden is not None]).astype(np.float32),
            "code0": np.array([a.code0 for a in batch], np.int64),
            "noise": noise,
            "do_sample": np.array([s.do_sample for s in sub], bool),
            "temperature": np.array([s.temperature for s in sub], np.float32),
            "top_k": np.array([s.top_k for s in sub], np.int64),
            "top_p": np.array([s.top_p for s in sub], np.float32),
        }
    )
    codes, embed_sum = cp["codes"], cp["codec_embed_sum"]
    inputs = np.empty((len(batch), 1, embed_sum.shape[1]), np.float32)
    cont = []
    for row, a in enumerate(batch):
        assert a.req is not None and a.prompt is not None
        a.pending.append(np.concatenate([[a.code0], codes[row]]).astype(np.int64))
        a.frames_out += 1
        n = a.frames_out - 1
        text = a.prompt.trailing[n] if n < a.prompt.trailing.shape[0] else a.prompt.pad
        inputs[row, 0] = embed_sum[row] + text
        # Requests whose budget is spent need no further talker step.
        if a.frames_out >= a.req.max_new_tokens:
            a.finished = "length"
        else:
            cont.append(row)
    if cont:
        _talker_step([batch[r] for r in cont], inputs[cont], p)


def _talker_step(live: list[QwenSequence], inputs: F32, p: Pipeline) -> None:
    t = p.info.talker
    caches = [a.kv for a in live if a.kv is not None]
    past = max(kv.length for kv in caches)
    mask = np.zeros((len(live), past + 1), np.int64)
    mask[:, past] = 1
    feeds: dict[str, npt.NDArray[np.generic]] = {
        "inputs_embeds": inputs,
        "position_ids": np.array([[kv.length] for kv in caches], np.int64),
    }
    for i in range(t.num_layers):
        pk = np.zeros((len(live), t.num_kv_heads, past, t.head_dim), np.float32)
        pv = np.zeros((len(live), t.num_kv_heads, past, t.head_dim), np.float32)
        for row, kv in enumerate(caches):
            n = kv.length
            # Left-pad: each row's cache ends right before the new token.
            pk[row, :, past - n :] = kv.k[i][:, :n]
            pv[row, :, past - n :] = kv.v[i][:, :n]
            if i == 0:
                mask[row, past - n : past] = 1
        feeds[spec.talker_past_key(i)] = pk
        feeds[spec.talker_past_value(i)] = pv
    feeds["attention_mask"] = mask
    out = p.talker.run(feeds)
    for row, a in enumerate(live):
        kv = caches[row]
        for i in range(t.num_layers):
            kv.append(i, out[spec.talker_new_key(i)][row], out[spec.talker_new_value(i)][row])
        kv.length += 1
        a.logits = out["logits"][row]
        a.hidden = out["hidden"][row]
        _sample_code0(p, a)
