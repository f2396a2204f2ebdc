"""CosyVoice3 on its exported graphs, one request at a time (offline; the shared continuous-batching
engine is not wired yet).

- `tokens`: prefill `[sos, text(ref_text + text), task_id, prompt speech tokens]` (rows of the two tables),
  then per token `lm_step` -> logits -> RAS (sampling.py) with the request's noise; a stop id ends.
- `mel`: the flow over prompt + speech tokens: `flow_cond` (mu, spks), cond = the prompt mel then zeros,
  x0 = the request's position-indexed noise, 10 Euler steps of `flow_velocity` on the cosine schedule;
  the prompt's frames cropped. `chunk` is the attention chunk in mel frames (0: full attention, vLLM-Omni's
  offline decode; the yaml's static_chunk_size: upstream's streaming mask).
- `audio`: `hift` over the mel with the fixed sine-noise table's rows from sample 0.
- `stream`: the hop scheme (export/cosyvoice3/README.md "Streaming"): the first hop ends where prompt +
  hop is a multiple of the chunk (chunk_size tokens), later hops chunk_size tokens; each hop needs
  `pre_lookahead_len` tokens past its end, re-runs the flow over the whole prefix with the chunk mask and
  keeps the hop's frames, re-runs HiFT over the whole mel so far and emits the samples no withheld frame
  can change (all but the last `WITHHELD_FRAMES` mel frames' worth); the last hop runs with zeros after
  the end (finalize) and emits the rest. Under the chunk mask with position-indexed noise this equals the
  whole-utterance decode with the same mask.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscore.contract import cosyvoice3 as spec
from ttscore.runtime.families.cosyvoice3.sampling import (
    F32,
    I64,
    ras_pick,
    scores,
    sine_rows,
    sine_table,
    timesteps,
)
from ttscore.runtime.kv import GrowingPast
from ttscore.runtime.onnx import ExportedGraphs

# mel frames at the end of a non-final hop whose samples are withheld: the f0 predictor's look-ahead (3),
# conv_pre's (4), and one frame for the inverse STFT's overlap (vLLM-Omni's frames_withheld_per_chunk).
WITHHELD_FRAMES = 8


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
        mask = np.ones((1, n), np.float32)
        ch = np.array([chunk if chunk > 0 else n], np.int64)
        vel = self.graphs["flow_velocity"]
        ts = timesteps(spec.FLOW_STEPS)
        t, dt = ts[0], ts[1] - ts[0]
        for s in range(1, len(ts)):
            v = vel.run({"x": x, "mask": mask, "mu": mu, "t": np.array([t], np.float32), "spks": c["spks"],
                         "cond": cond, "chunk": ch})["velocity"]
            x = (x + dt * v).astype(np.float32)
            t = np.float32(t + dt)
            if s < len(ts) - 1:
                dt = np.float32(ts[s + 1] - t)
        out: F32 = x[0, :, p:]
        return out

    def mel(self, prompt: Prompt, tokens: Sequence[int], noise: F32, chunk: int = 0) -> F32:
        return self._flow(prompt, tokens, self.ratio * len(tokens), noise, chunk)

    # --- vocoder ----------------------------------------------------------------------------------
    def audio(self, mel: F32) -> F32:
        frames = mel.shape[1]
        rows = sine_rows(sine_table(self.sample_rate, self.harmonics), 0, frames * self.samples_per_mel)
        out: F32 = self.graphs["hift"].run({"mel": np.ascontiguousarray(mel[None], np.float32),
                                            "sine_noise": rows[None]})["pcm"][0]
        return out

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
    """One utterance's streaming decode: tokens pushed as they come, audio out per completed hop."""

    def __init__(self, graphs: CosyVoice3Graphs, prompt: Prompt, noise: F32) -> None:
        self.g, self.prompt, self.noise = graphs, prompt, noise
        hop, n_prompt = graphs.chunk_tokens, len(prompt.speech_tokens)
        self.end = -(-n_prompt // hop) * hop - n_prompt + hop  # prompt + first hop: a multiple of hop
        self.tokens: list[int] = []
        self.mel: list[F32] = []
        self.emitted = 0
        self.done = False

    def _hop(self, final: bool) -> F32:
        g = self.g
        upto = len(self.tokens) if final else self.end
        have = sum(m.shape[1] for m in self.mel)
        used = self.tokens if final else self.tokens[: self.end + g.lookahead]
        mel = g._flow(self.prompt, used, g.ratio * upto, self.noise, g.static_chunk)
        self.mel.append(mel[:, have:])
        whole: F32 = np.concatenate(self.mel, axis=1)
        pcm = g.audio(whole) if whole.shape[1] else np.zeros(0, np.float32)
        keep = len(pcm) if final else max(0, (whole.shape[1] - WITHHELD_FRAMES) * g.samples_per_mel)
        out: F32 = pcm[self.emitted:keep] if keep > self.emitted else np.zeros(0, np.float32)
        self.emitted = max(self.emitted, keep)
        self.end += g.chunk_tokens
        return out

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
