"""The continuous-batching frame loop (numpy + ONNX Runtime).

Every `step()` advances ALL active requests by one codec frame with one batched talker decode and
one batched code-predictor call, so weights are read once per step for the whole batch. Requests
join (`submit`, which runs their prefill) and leave (finish or `cancel`) between steps. Audio is
decoded by the exact streaming vocoder as soon as a request has `initial_chunk_frames` frames, then
every `chunk_frames`, and on finish.

Protocol: every submitted request yields exactly one ChunkEvent with final=True, unless cancelled
(cancel() removes it silently; the caller owns reporting that).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.qwen3_tts.prompt import Prompt, build_prompt
from ttscore.runtime.families.qwen3_tts.request import ResolvedRequest, SynthesisRequest, resolve
from ttscore.runtime.sampling import process_logits, sample, suppress_mask

logger = logging.getLogger(__name__)


@dataclass
class Usage:
    input_text_tokens: int = 0
    input_audio_tokens: int = 0
    output_tokens: int = 0


@dataclass
class ChunkEvent:
    req_id: str
    pcm: np.ndarray  # float32, 1-D, model sample rate
    frames: int  # codec frames in this chunk
    final: bool
    finish_reason: str | None  # "stop" | "length" on the final event
    usage: Usage
    codes: np.ndarray | None = None  # [frames, G] codec frames of this chunk


class Vocoder(Protocol):
    def new_stream(self) -> Any: ...

    def decode(self, items: list[tuple[Any, np.ndarray]]) -> list[np.ndarray]: ...


class _KV:
    """One request's talker KV cache: per layer [kv_heads, capacity, head_dim], grown by doubling."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int) -> None:
        self.length = 0
        self.k = [np.empty((kv_heads, capacity, head_dim), np.float32) for _ in range(layers)]
        self.v = [np.empty((kv_heads, capacity, head_dim), np.float32) for _ in range(layers)]

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
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
class _Active:
    req_id: str
    req: ResolvedRequest
    prompt: Prompt
    rng: np.random.Generator
    kv: _KV
    logits: np.ndarray  # [V] talker logits of the last position
    hidden: np.ndarray  # [H] talker hidden of the last position
    vocoder: Any
    history: list[int] = field(default_factory=list)  # code0 of every frame so far
    pending: list[np.ndarray] = field(default_factory=list)  # frames not yet vocoded
    frames_out: int = 0
    chunks_out: int = 0
    finished: str | None = None
    code0: int | None = None  # sampled code0 awaiting its code-predictor pass


class Generator:
    def __init__(self, pipeline: Any, *, max_batch: int = 8, vocoder: Vocoder | None = None) -> None:
        self.p = pipeline
        self.info = pipeline.info
        self.max_batch = max_batch
        chosen = vocoder or pipeline.vocoder
        if chosen is None:
            raise ValueError("the pipeline was loaded without a vocoder: pass one")
        self.vocoder: Vocoder = chosen
        t = self.info.talker
        self._layers, self._kvh, self._hd = t.num_layers, t.num_kv_heads, t.head_dim
        self._eos = self.info.codec_ids["eos"]
        self._suppressed = suppress_mask(self.info.codec_vocab_size, self._eos)
        self._active: dict[str, _Active] = {}

    @property
    def num_active(self) -> int:
        return len(self._active)

    # --- joining --------------------------------------------------------------------------------

    def submit(self, req_id: str, request: SynthesisRequest) -> None:
        """Validate, build the prompt and prefill. Raises InvalidRequest naming the bad field."""
        if req_id in self._active:
            raise InvalidRequest(f"request id {req_id!r} is already active", "request_id")
        if len(self._active) >= self.max_batch:
            # The caller (Triton's scheduler) admits at most max_batch requests; this is its bug.
            raise RuntimeError(f"generator already holds max_batch={self.max_batch} requests")
        req = resolve(request, self.info)
        prompt = build_prompt(req, self.info, self.p.tables, self.p.tokenizer)
        rng = np.random.default_rng(req.seed)
        L = prompt.embeds.shape[0]
        kv = _KV(self._layers, self._kvh, self._hd, capacity=L + min(req.max_new_tokens, 256) + 1)
        feeds = {
            "inputs_embeds": prompt.embeds[None],
            "attention_mask": np.ones((1, L), np.int64),
            "position_ids": np.arange(L, dtype=np.int64)[None],
        }
        empty = np.zeros((1, self._kvh, 0, self._hd), np.float32)
        for i in range(self._layers):
            feeds[spec.talker_past_key(i)] = empty
            feeds[spec.talker_past_value(i)] = empty
        out = self.p.talker.run(feeds)
        for i in range(self._layers):
            kv.append(i, out[spec.talker_new_key(i)][0], out[spec.talker_new_value(i)][0])
        kv.length = L
        stream = self.vocoder.new_stream()
        if req.ref_codes is not None:
            # In-context cloning decodes ref_codes ++ codes and cuts the reference part: with an exact
            # streaming vocoder that is the reference frames run through first, their audio dropped.
            self.vocoder.decode([(stream, req.ref_codes)])
        act = _Active(
            req_id=req_id,
            req=req,
            prompt=prompt,
            rng=rng,
            kv=kv,
            logits=out["logits"][0],
            hidden=out["hidden"][0],
            vocoder=stream,
        )
        self._sample_code0(act)
        self._active[req_id] = act

    def cancel(self, req_id: str) -> bool:
        """Drop a request now; its KV cache and batch slot are freed before the next step."""
        return self._active.pop(req_id, None) is not None

    # --- the step -------------------------------------------------------------------------------

    def _sample_code0(self, a: _Active) -> None:
        n = len(a.history)
        scores = process_logits(
            a.logits, np.asarray(a.history, np.int64), a.req.repetition_penalty, self._suppressed, self._eos, n
        )
        s = a.req.talker
        u = float(a.rng.random())
        code0 = sample(scores, s.do_sample, s.temperature, s.top_k, s.top_p, u)
        a.history.append(code0)
        if code0 == self._eos:
            a.finished = "stop"
            a.code0 = None
        else:
            a.code0 = code0

    def step(self) -> list[ChunkEvent]:
        """Advance every active request by one frame; return the audio chunks that became ready."""
        events: list[ChunkEvent] = []
        running = [a for a in self._active.values() if a.finished is None]
        if running:
            self._frame(running)
        events += self._vocode([a for a in self._active.values()])
        for ev in events:
            if ev.final:
                self._active.pop(ev.req_id, None)
        return events

    def _frame(self, batch: list[_Active]) -> None:
        B = len(batch)
        g = self.info.num_code_groups - 1
        noise = np.stack([a.rng.random(g) for a in batch]).astype(np.float32)
        sub = [a.req.subtalker for a in batch]
        cp = self.p.code_predictor.run(
            {
                "hidden": np.stack([a.hidden for a in batch]).astype(np.float32),
                "code0": np.array([a.code0 for a in batch], np.int64),
                "noise": noise,
                "do_sample": np.array([s.do_sample for s in sub], bool),
                "temperature": np.array([s.temperature for s in sub], np.float32),
                "top_k": np.array([s.top_k for s in sub], np.int64),
                "top_p": np.array([s.top_p for s in sub], np.float32),
            }
        )
        codes, embed_sum = cp["codes"], cp["codec_embed_sum"]
        inputs = np.empty((B, 1, embed_sum.shape[1]), np.float32)
        for row, a in enumerate(batch):
            frame = np.concatenate([[a.code0], codes[row]]).astype(np.int64)
            a.pending.append(frame)
            a.frames_out += 1
            step = a.frames_out - 1
            text = a.prompt.trailing[step] if step < a.prompt.trailing.shape[0] else a.prompt.pad
            inputs[row, 0] = embed_sum[row] + text
        # Requests whose budget is spent need no further talker step.
        cont = []
        for row, a in enumerate(batch):
            if a.frames_out >= a.req.max_new_tokens:
                a.finished = "length"
            else:
                cont.append(row)
        if not cont:
            return
        live = [batch[r] for r in cont]
        P = max(a.kv.length for a in live)
        Bc = len(live)
        mask = np.zeros((Bc, P + 1), np.int64)
        mask[:, P] = 1
        feeds: dict[str, np.ndarray] = {
            "inputs_embeds": inputs[cont],
            "position_ids": np.array([[a.kv.length] for a in live], np.int64),
        }
        for i in range(self._layers):
            pk = np.zeros((Bc, self._kvh, P, self._hd), np.float32)
            pv = np.zeros((Bc, self._kvh, P, self._hd), np.float32)
            for row, a in enumerate(live):
                n = a.kv.length
                # Left-pad: each row's cache ends right before the new token.
                pk[row, :, P - n :] = a.kv.k[i][:, :n]
                pv[row, :, P - n :] = a.kv.v[i][:, :n]
                if i == 0:
                    mask[row, P - n : P] = 1
            feeds[spec.talker_past_key(i)] = pk
            feeds[spec.talker_past_value(i)] = pv
        feeds["attention_mask"] = mask
        out = self.p.talker.run(feeds)
        for row, a in enumerate(live):
            for i in range(self._layers):
                a.kv.append(i, out[spec.talker_new_key(i)][row], out[spec.talker_new_value(i)][row])
            a.kv.length += 1
            a.logits = out["logits"][row]
            a.hidden = out["hidden"][row]
            self._sample_code0(a)

    def _vocode(self, actives: list[_Active]) -> list[ChunkEvent]:
        ready: list[_Active] = []
        for a in actives:
            threshold = a.req.initial_chunk_frames if a.chunks_out == 0 else a.req.chunk_frames
            if a.finished is not None or len(a.pending) >= threshold:
                ready.append(a)
        if not ready:
            return []
        work = [(a.vocoder, np.stack(a.pending)) for a in ready if a.pending]
        pcms = iter(self.vocoder.decode(work)) if work else iter(())
        events = []
        for a in ready:
            n = len(a.pending)
            pcm = next(pcms) if n else np.zeros(0, np.float32)
            codes = np.stack(a.pending) if n else np.zeros((0, self.info.num_code_groups), np.int64)
            a.pending = []
            a.chunks_out += 1
            events.append(
                ChunkEvent(
                    req_id=a.req_id,
                    pcm=np.asarray(pcm, np.float32),
                    frames=n,
                    final=a.finished is not None,
                    finish_reason=a.finished,
                    usage=Usage(a.prompt.text_tokens, a.prompt.audio_tokens, a.frames_out),
                    codes=codes,
                )
            )
        return events

    # --- convenience ----------------------------------------------------------------------------

    def synthesize(self, request: SynthesisRequest, req_id: str = "offline") -> Iterator[ChunkEvent]:
        """Run one request to completion (offline use), yielding its chunks as they are decoded."""
        self.submit(req_id, request)
        try:
            while req_id in self._active:
                for ev in self.step():
                    if ev.req_id == req_id:
                        yield ev
        finally:
            self.cancel(req_id)
