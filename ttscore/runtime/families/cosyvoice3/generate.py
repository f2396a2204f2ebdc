"""CosyVoice3 on its exported graphs, one request at a time (offline; the shared continuous-batching
engine is not wired yet).

- `tokens`: prefill `[sos, text(ref_text + text), task_id, prompt speech tokens]` (rows of the two tables),
  then per token `lm_step` -> logits -> RAS (sampling.py) with the request's noise; a stop id ends.
- `mel`: the flow over prompt + speech tokens: `flow_cond` (mu, spks), cond = the prompt mel then zeros,
  x0 = the request's position-indexed noise, 10 Euler steps of `flow_velocity` (no past) on the cosine schedule;
  the prompt's frames cropped. `chunk` is the attention chunk in mel frames (0: full attention, vLLM-Omni's
  offline decode; the yaml's static_chunk_size: upstream's streaming mask).
- `audio`: `hift` over the mel with the fixed sine-noise table's rows from sample 0.
- `stream`: the hop scheme (export/cosyvoice3/README.md "Streaming"): the first hop ends where prompt +
  hop is a multiple of the chunk (chunk_size tokens), later hops chunk_size tokens; each hop needs
  `pre_lookahead_len` tokens past its end. Under the chunk mask a completed chunk never sees later frames,
  so the flow computes only the hop's new frames (`flow_velocity`) over the past frames' K/V kept per solver step
  (and CFG row), with the position convs' left context; HiFT runs over a window of the mel (its receptive
  field before the first sample still to emit, then the new frames) seeded with the source's running phase,
  and the hop emits the samples no withheld frame can change (all but the last `WITHHELD_FRAMES` mel frames'
  worth); the last hop runs with zeros after the end (finalize) and emits the rest. Each hop costs the same
  whatever its position (but for attention over the growing past), and the pieces equal the whole-utterance
  decode with the same mask.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract import cosyvoice3 as spec
from ttscore.runtime.families.cosyvoice3.sampling import (
    F32,
    I64,
    euler,
    ras_pick,
    scores,
    sine_rows,
    sine_table,
)
from ttscore.runtime.kv import GrowingPast
from ttscore.runtime.onnx import ExportedGraphs

logger = logging.getLogger(__name__)

# mel frames at the end of a non-final hop whose samples are withheld: the f0 predictor's look-ahead (3),
# conv_pre's (4), and one frame for the inverse STFT's overlap (vLLM-Omni's frames_withheld_per_chunk).
WITHHELD_FRAMES = 8
# The most bytes one stream's flow K/V cache may hold (TTS_COSYVOICE3_FLOW_CACHE_MB; at the released sizes a frame
# costs 3.6 MB, 180 MB per second of audio, so the default holds about 11 s): past it the stream frees the cache
# and recomputes the flow over its whole prefix each hop (the pre-cache scheme, quadratic but with bounded memory;
# the same audio within STREAM_TOLERANCE), so a long request slows down instead of taking the server's memory.
DEFAULT_FLOW_CACHE_MB = 2048


def flow_cache_budget() -> int:
    return int(float(os.environ.get("TTS_COSYVOICE3_FLOW_CACHE_MB", DEFAULT_FLOW_CACHE_MB)) * 2**20)


def hift_context(hift: dict[str, Any]) -> tuple[int, int]:
    """(f0 frames, window frames): the mel frames before a sample that can change it, bounded from HiFT's
    sizes (export/cosyvoice3/graphs.py HiFT): the f0 predictor's causal convs (its first conv looks right
    only) and, through the source's STFT, every conv after it, each counted serially at its own rate (an
    upper bound: parallel branches are added, not maxed), plus the STFT and inverse-STFT overlap and the
    last level's one-sample reflection pad, rounded up, plus the f0 frames."""
    rates = list(hift["upsample_rates"])
    spf = int(np.prod(rates)) * int(hift["hop_len"])
    n_fft = int(hift["n_fft"])
    f0 = 4 * 2  # F0Predictor: four causal convs of kernel 3 after the first
    samples = 0.0  # left extent in seconds x frame rate, i.e. in mel frames
    res = [sum((k - 1) * d + (k - 1) for d in dil)
           for k, dil in zip(hift["resblock_kernel_sizes"], hift["resblock_dilation_sizes"], strict=True)]
    src = [sum((k - 1) * d + (k - 1) for d in dil)
           for k, dil in zip(hift["source_resblock_kernel_sizes"], hift["source_resblock_dilation_sizes"], strict=True)]
    per_frame = 1
    for i, (u, k) in enumerate(zip(rates, hift["upsample_kernel_sizes"], strict=True)):
        per_frame *= u
        stride = int(np.prod(rates[i + 1:]))  # source_downs' stride in STFT frames
        samples += (k - 1 + max(res) + src[i] + 1) / per_frame + (2 * stride) * int(hift["hop_len"]) / spf
    samples += 6 / per_frame + 2 * n_fft / spf  # conv_post, the STFT's and inverse STFT's windows
    return f0, f0 + int(np.ceil(samples)) + 1


@dataclass
class Prompt:
    text_ids: I64  # ref_text + text, tokenized
    speech_tokens: I64  # the reference clip's speech tokens
    feat: F32  # [2 * len(speech_tokens), mel] the prompt mel
    embedding: F32  # [spk_embed_dim] the speaker embedding


class CosyVoice3Graphs(ExportedGraphs):
    def __init__(self, artifacts: Path, threads: int | None = None) -> None:
        super().__init__(artifacts, threads)
        self.text = self.table(spec.TEXT_EMBEDDING, mmap=True)
        self.speech = self.table(spec.SPEECH_EMBEDDING, mmap=True)
        lm, flow, hift = self.sizes["lm"], self.sizes["flow"], self.sizes["hift"]
        self.speech_token_size = int(lm["speech_token_size"])
        self.mel_dim = int(flow["mel"])
        self.ratio = int(flow["token_mel_ratio"])
        self.lookahead = int(flow["pre_lookahead_len"])
        self.static_chunk = int(flow["static_chunk_size"])
        self.chunk_tokens = int(self.sizes["chunk_size"])
        self.samples_per_mel = int(np.prod(hift["upsample_rates"])) * int(hift["hop_len"])
        self.harmonics = int(hift["nb_harmonics"])
        self.sample_rate = int(self.sizes["sample_rate"])

    # --- language model ---------------------------------------------------------------------------
    def tokens(self, prompt: Prompt, noise: F32, min_len: int, max_len: int) -> list[int]:
        lm = self.sizes["lm"]
        size = self.speech_token_size
        rows = [self.speech[size + spec.SOS_OFFSET][None], np.asarray(self.text[prompt.text_ids]),
                self.speech[size + spec.TASK_ID_OFFSET][None], np.asarray(self.speech[prompt.speech_tokens])]
        x: F32 = np.concatenate(rows).astype(np.float32)[None]
        past = GrowingPast(lm["layers"], lm["kv_heads"], lm["head_dim"])
        step = self.graphs["lm_step"]
        out = list[int]()
        for i in range(max_len):
            res = past.step(step, x)
            w = scores(res["logits"][0], size, allow_stop=i >= min_len)
            tok, _ = ras_pick(w, out, noise[i, 0], noise[i, 1], lm["top_p"], lm["top_k"], lm["win_size"], lm["tau_r"])
            if tok >= size:
                break
            out.append(tok)
            x = np.asarray(self.speech[tok], np.float32)[None, None]
        return out

    # --- flow -------------------------------------------------------------------------------------
    def _flow(self, prompt: Prompt, tokens: Sequence[int], frames_out: int, noise: F32, chunk: int) -> F32:
        """Mel [mel, frames_out] after the prompt, over all of `tokens` (those past frames_out's count
        only look ahead)."""
        allt: I64 = np.concatenate([prompt.speech_tokens, np.asarray(tokens, np.int64)]).astype(np.int64)
        c = self.graphs["flow_cond"].run({"tokens": allt[None], "token_len": np.array([len(allt)], np.int64),
                                          "embedding": prompt.embedding[None].astype(np.float32)})
        p = self.ratio * len(prompt.speech_tokens)
        n = p + frames_out
        mu: F32 = np.ascontiguousarray(c["mu"][:, :, :n])
        cond = np.zeros((1, self.mel_dim, n), np.float32)
        cond[0, :, :p] = prompt.feat.T
        x: F32 = np.ascontiguousarray(noise[None, :, :n]).astype(np.float32)
        feeds = {"mask": np.ones((1, n), np.float32), "mu": mu, "spks": c["spks"], "cond": cond,
                 "chunk": np.array([chunk if chunk > 0 else n], np.int64), **self.empty_past()}
        vel = self.graphs["flow_velocity"]

        def velocity(step: int, x: F32, t: F32) -> F32:
            out: F32 = vel.run({**feeds, "x": x, "t": t})["velocity"]
            return out

        x = euler(velocity, x, spec.FLOW_STEPS)
        out: F32 = x[0, :, p:]
        return out

    def empty_past(self) -> dict[str, F32]:
        """flow_velocity's past K/V when there is none (a whole utterance, a stream's first hop)."""
        f = self.sizes["flow"]
        shape = (0, 2, int(f["heads"]), int(f["dim_head"]))
        return {name(i): np.zeros(shape, np.float32) for i in range(int(f["depth"])) for name in (spec.past_key, spec.past_value)}

    def mel(self, prompt: Prompt, tokens: Sequence[int], noise: F32, chunk: int = 0) -> F32:
        return self._flow(prompt, tokens, self.ratio * len(tokens), noise, chunk)

    # --- vocoder ----------------------------------------------------------------------------------
    def audio(self, mel: F32) -> F32:
        return self._hift(mel, 0, np.zeros(self.harmonics + 1, np.float32), 0)[0]

    def _hift(self, mel: F32, start: int, phase0: F32, skip: int) -> tuple[F32, F32]:
        """HiFT over mel frames start.. (the sine-noise rows of their samples): (pcm, the cumulative phase
        increments per frame), the increments summed from `phase0` at frame `skip` of the window."""
        spm = self.samples_per_mel
        rows = sine_rows(sine_table(self.sample_rate, self.harmonics), start * spm, mel.shape[1] * spm)
        out = self.graphs["hift"].run({"mel": np.ascontiguousarray(mel[None], np.float32), "sine_noise": rows[None],
                                       "phase0": phase0[None].astype(np.float32), "skip": np.array([skip], np.int64)})
        return out["pcm"][0], out["phase"][0]

    # --- streaming ---------------------------------------------------------------------------------
    def stream(self, prompt: Prompt, tokens: Iterator[int] | Sequence[int], noise: F32) -> Iterator[F32]:
        """Audio pieces as the tokens arrive (the hop scheme above); their concatenation equals
        `audio(mel(prompt, all tokens, noise, chunk=static_chunk))`."""
        hops = HopStream(self, prompt, noise)
        for t in tokens:
            piece = hops.push([t])
            if len(piece):
                yield piece
        last = hops.finish()
        if len(last):
            yield last


class HopStream:
    """One utterance's streaming decode: tokens pushed as they come, audio out per completed hop.

    State: per Euler step the past frames' K/V of every DiT layer (both CFG rows) and the last
    FLOW_CONV_CONTEXT frames of x; the mel of HiFT's window; the source's cumulative phase per frame of the
    last window. The K/V live in one buffer reserved at the first hop for every frame the stream may reach
    (the noise's frames, at most the cache budget's): [FLOW_STEPS, 2 x depth, capacity, 2 CFG rows, heads,
    dim_head], frame first, zeros the system commits only where written, so a stream holds the memory of its
    frames only. A hop feeds each layer's frames 0..frames-1 as a prefix view (IO binding, in place: the graph
    attends over exactly the frames held, no slack slots) and the graph writes the new frames' K/V straight
    into the slots after them: a hop copies nothing that grows with the stream, and the buffer never grows.
    `cache_bytes`: the frames held (`bytes_per_frame` each: 2 x depth x heads x dim_head x FLOW_STEPS x 2 CFG
    rows x 4 bytes). A stream that would pass `cache_budget` bytes (default: flow_cache_budget()) drops its
    cache and from then on recomputes each hop's frames over the whole prefix (`rerun`)."""

    def __init__(self, graphs: CosyVoice3Graphs, prompt: Prompt, noise: F32, cache_budget: int | None = None) -> None:
        self.g, self.prompt, self.noise = graphs, prompt, noise
        self.cache_budget = flow_cache_budget() if cache_budget is None else cache_budget
        self.rerun = False
        hop, n_prompt = graphs.chunk_tokens, len(prompt.speech_tokens)
        self.end = -(-n_prompt // hop) * hop - n_prompt + hop  # prompt + first hop: a multiple of hop
        self.tokens: list[int] = []
        self.done = False
        # flow: frames computed (prompt included), the K/V buffer and per step x's context
        self.frames = 0
        self.kv: F32 | None = None
        self.x_ctx: list[F32] = []
        # HiFT: mel frames after the prompt kept from `mel_start`, samples emitted, the last window's phase
        self.mel = np.zeros((graphs.mel_dim, 0), np.float32)
        self.mel_start = 0
        self.emitted = 0
        self.phase = np.zeros((0, graphs.harmonics + 1), np.float32)
        self.phase_start = 0
        self.f0_context, self.window = hift_context(graphs.sizes["hift"])

    @property
    def capacity(self) -> int:
        return 0 if self.kv is None else int(self.kv.shape[2])

    @property
    def cache_bytes(self) -> int:
        return 0 if self.kv is None else self.frames * self.bytes_per_frame

    @property
    def bytes_per_frame(self) -> int:
        f = self.g.sizes["flow"]
        return 2 * int(f["depth"]) * int(f["heads"]) * int(f["dim_head"]) * spec.FLOW_STEPS * 2 * 4

    def _room(self, stop: int) -> bool:
        """A K/V buffer with slots for frames 0..stop-1 (reserved at the first call: the noise's frames, at most the
        cache budget's); False: the budget does not hold them."""
        if self.kv is None:
            cap = min(self.cache_budget // self.bytes_per_frame, self.noise.shape[1])
            if stop > cap:
                return False
            f = self.g.sizes["flow"]
            self.kv = np.zeros((spec.FLOW_STEPS, 2 * int(f["depth"]), cap, 2, int(f["heads"]), int(f["dim_head"])),
                               np.float32)
        return stop <= self.capacity

    def _flow(self, tokens: Sequence[int], upto: int) -> F32:
        """The mel [mel, n] of frames self.frames..(prompt + upto tokens) x ratio, from `tokens` (those past
        `upto` only look ahead), over the cached past; the cache grown by them."""
        g, pr = self.g, self.prompt
        p_frames = g.ratio * len(pr.speech_tokens)
        start, stop = self.frames, p_frames + g.ratio * upto
        if stop <= start:
            return np.zeros((g.mel_dim, 0), np.float32)
        ctx = min(spec.FLOW_CONV_CONTEXT, start)
        lo = start - ctx  # first frame fed (context)
        # mu of frames lo..stop: token t's mu sees tokens t - 2 .. t + lookahead (pre-lookahead convs), so the
        # conditioning runs from 2 tokens before lo's and its first outputs are dropped
        allt: I64 = np.concatenate([pr.speech_tokens, np.asarray(tokens, np.int64)]).astype(np.int64)
        t0 = max(0, lo // g.ratio - 2)
        part = allt[t0:]
        c = g.graphs["flow_cond"].run({"tokens": part[None], "token_len": np.array([len(part)], np.int64),
                                       "embedding": pr.embedding[None].astype(np.float32)})
        mu: F32 = np.ascontiguousarray(c["mu"][:, :, lo - g.ratio * t0: stop - g.ratio * t0])
        cond = np.zeros((1, g.mel_dim, stop - lo), np.float32)
        if lo < p_frames:
            cond[0, :, : p_frames - lo] = pr.feat[lo:].T
        if not self.rerun and not self._room(stop):
            logger.info("CosyVoice3 stream past %d MB of flow cache at frame %d: recomputing the prefix per hop "
                        "from here (TTS_COSYVOICE3_FLOW_CACHE_MB)", self.cache_budget >> 20, stop)
            self.rerun, self.kv, self.x_ctx = True, None, []
        if self.rerun:
            whole = g._flow(pr, tokens, stop - p_frames, self.noise, g.static_chunk)
            self.frames = stop
            rest: F32 = whole[:, max(0, start - p_frames):]
            return rest
        x: F32 = np.ascontiguousarray(self.noise[None, :, start:stop]).astype(np.float32)
        feeds: dict[str, Any] = {"mask": np.ones((1, stop - start), np.float32), "mu": mu,
                                 "spks": np.ascontiguousarray(c["spks"]), "cond": cond,
                                 "chunk": np.array([g.static_chunk], np.int64)}
        hop = g.graphs["flow_velocity"]
        depth = int(g.sizes["flow"]["depth"])
        if not self.x_ctx:
            self.x_ctx = [np.zeros((1, g.mel_dim, 0), np.float32) for _ in range(spec.FLOW_STEPS)]
        kv = self.kv
        assert kv is not None

        def velocity(step: int, x: F32, t: F32) -> F32:
            xin = np.concatenate([self.x_ctx[step], x], axis=2)
            feeds["x"], feeds["t"] = xin, t
            into = {}
            for i in range(depth):
                for j, (past, new) in enumerate(((spec.past_key, spec.new_key), (spec.past_value, spec.new_value))):
                    buf = kv[step, 2 * i + j]
                    feeds[past(i)], into[new(i)] = buf[:start], buf[start:stop]
            out = hop.run_bound(feeds, into)
            self.x_ctx[step] = xin[:, :, -spec.FLOW_CONV_CONTEXT:]
            v: F32 = out["velocity"]
            return v

        x = euler(velocity, x, spec.FLOW_STEPS)
        self.frames = stop
        # the prompt's frames are not audio
        new: F32 = x[0, :, max(0, p_frames - start):]
        return new

    def _vocode(self, final: bool) -> F32:
        """HiFT over the window ending at the last mel frame; the samples from `emitted` to those no later
        frame can change (final: all)."""
        g = self.g
        spm = g.samples_per_mel
        total = self.mel_start + self.mel.shape[1]
        if total == 0:
            return np.zeros(0, np.float32)
        first = self.emitted // spm  # the first frame with samples still to emit
        start = max(0, first - self.window)
        skip = self.f0_context if start > 0 else 0
        phase0 = np.zeros(g.harmonics + 1, np.float32)
        if skip:
            k = start + skip - 1 - self.phase_start  # the last window's running sum before frame start + skip
            if not 0 <= k < len(self.phase):
                raise RuntimeError("HopStream: the HiFT window outran the carried phase")
            phase0 = self.phase[k]
        pcm, phase = g._hift(self.mel[:, start - self.mel_start:], start, phase0, skip)
        self.phase, self.phase_start = phase, start
        # keep the mel from the next window's earliest start on
        drop = start - self.mel_start
        self.mel, self.mel_start = self.mel[:, drop:], start
        keep = total * spm if final else max(0, (total - WITHHELD_FRAMES) * spm)
        out: F32 = pcm[self.emitted - start * spm: keep - start * spm] if keep > self.emitted else np.zeros(0, np.float32)
        self.emitted = max(self.emitted, keep)
        return out

    def _hop(self, final: bool) -> F32:
        g = self.g
        upto = len(self.tokens) if final else self.end
        used = self.tokens if final else self.tokens[: self.end + g.lookahead]
        self.mel = np.concatenate([self.mel, self._flow(used, upto)], axis=1)
        self.end += g.chunk_tokens
        return self._vocode(final)

    def push(self, tokens: Sequence[int]) -> F32:
        """Take new tokens; the audio of every hop they complete (maybe none)."""
        self.tokens.extend(int(t) for t in tokens)
        pieces: list[F32] = []
        while not self.done and len(self.tokens) >= self.end + self.g.lookahead:
            pieces.append(self._hop(final=False))
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)

    def finish(self) -> F32:
        """The rest of the utterance (the last hop, finalized)."""
        if self.done:
            return np.zeros(0, np.float32)
        self.done = True
        return self._hop(final=True)
