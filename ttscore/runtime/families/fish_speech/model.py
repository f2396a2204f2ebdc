"""Fish Speech S2 Pro over its exported graphs under the shared engine (ttscore.runtime.family), registered as
the family `fish_speech` (ttscore.runtime.families) and served by speech_generation.

A request's life: `admit` (validate; a cloning request's reference codes are given (`ref_codes`: on the served
path from the checkpoint's dac_encoder Triton model) or, offline only (`encoders`), a reference clip is encoded
by `dac_encode` here; the codes' semantic ids go into the prompt; the sampling noise from the seed; the prompt
rows) -> `prefill` (`slow_step` over the
prompt; the call that completes it makes the first frame) -> `step` (each sequence's last frame embedded,
`slow_step` one position further for every sequence in one batched call over ragged pasts, then the frames:
the Slow AR's token per row, the Fast AR's 9 codes for all going rows in lockstep) -> `release`. Frame i of a
request takes row i of its noise, so its audio does not depend on what it was batched with. The vocoder is
`dac_stream`, exact streaming (each stream's state carries its own frame count).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.tensors import code_grid
from ttscore.runtime.families.fish_speech.artifacts import FishArtifacts, request_noise
from ttscore.runtime.families.fish_speech.generate import F32, frame_embedding, prompt_embeddings
from ttscore.runtime.families.fish_speech.request import FishRequest
from ttscore.runtime.families.fish_speech.sampling import sample_fast, sample_slow
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import GrowingPast, KVArena
from ttscore.runtime.step_kit import ArenaModel, FrameSequence, prefill_chunks, step_frames
from ttscore.runtime.vocoder import OrtVocoder

I64 = npt.NDArray[np.int64]


@dataclass
class FishSequence(FrameSequence):
    hidden: F32 | None = None
    logits: F32 | None = None
    max_frames: int = spec.DEFAULT_MAX_NEW_TOKENS
    q_slow: F32 | None = None
    q_fast: F32 | None = None
    temperature: float = spec.DEFAULT_TEMPERATURE
    top_k: int = spec.DEFAULT_TOP_K
    top_p: float = spec.DEFAULT_TOP_P


class FishModel(ArenaModel):
    sequence = FishSequence
    drops = ("embeds", "q_slow", "q_fast")

    def __init__(self, artifacts: Path, threads: int | None = None, *, encoders: bool = True) -> None:
        self.a = FishArtifacts(artifacts, threads)
        self.kv = KVArena(self.a.slow_layers, *self.a.slow_kv)
        self.encoders = encoders  # may admit a reference clip (offline); served: codes from dac_encoder only
        self.vocoder_state_size = self.a.state_size
        self.samples_per_frame = self.a.samples_per_frame
        self.sample_rate = spec.SAMPLE_RATE
        self.frame_seconds = self.samples_per_frame / self.sample_rate
        self.num_codebooks = self.a.tables.num_codebooks
        self.vocoder = OrtVocoder(self.a.graphs["dac_stream"], self.vocoder_state_size, self.vocoder_feeds)

    @staticmethod
    def vocoder_feeds(frames: npt.NDArray[Any], state: F32, position: I64) -> dict[str, npt.NDArray[Any]]:
        return {"codes": np.ascontiguousarray(frames.astype(np.int64).transpose(0, 2, 1)), "state": state}

    def admit(self, request: FishRequest) -> FishSequence:
        spec.RULES.checked_text(request.text)
        max_new = spec.DEFAULT_MAX_NEW_TOKENS if request.max_new_tokens is None else int(request.max_new_tokens)
        if not 1 <= max_new <= spec.MAX_NEW_TOKENS_LIMIT:
            raise InvalidRequest(f"'max_new_tokens' must be between 1 and {spec.MAX_NEW_TOKENS_LIMIT}", "max_new_tokens")
        temperature = spec.DEFAULT_TEMPERATURE if request.temperature is None else float(request.temperature)
        top_k = spec.DEFAULT_TOP_K if request.top_k is None else int(request.top_k)
        top_p = spec.DEFAULT_TOP_P if request.top_p is None else float(request.top_p)
        if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
            raise InvalidRequest("temperature >= 0, top_k >= 0 and 0 < top_p <= 1 are required", "extra_params")
        t = self.a.tables
        ref_codes = self._reference(request)
        if ref_codes is not None:
            ids, at = self.a.prompt.clone(request.text, str(request.ref_text),
                                          [int(c) + t.semantic_start for c in ref_codes[:, 0]])
        else:
            ids, at = self.a.prompt.text_only(request.text), 0
        q_slow, q_fast = request_noise(spec.DEFAULT_SEED if request.seed is None else int(request.seed), max_new,
                                       t.codebook_size + 1, t.num_codebooks)
        return FishSequence(
            initial_chunk_frames=request.initial_chunk_frames or spec.DEFAULT_INITIAL_CHUNK_FRAMES,
            chunk_frames=request.chunk_frames or spec.DEFAULT_CHUNK_FRAMES,
            text_tokens=self.a.prompt.text_tokens(request.text), prompt_tokens=len(ids),
            audio_tokens=0 if ref_codes is None else len(ref_codes),
            embeds=prompt_embeddings(t, ids, ref_codes, at), max_frames=max_new, q_slow=q_slow, q_fast=q_fast,
            temperature=temperature, top_k=top_k, top_p=top_p)

    def _reference(self, request: FishRequest) -> I64 | None:
        """The reference clip's codes [frames, num_codebooks] (None: text-only); InvalidRequest naming the field."""
        if request.ref_codes is None and request.ref_audio is None:
            if request.ref_text is not None:
                raise InvalidRequest("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
            return None
        if not (request.ref_text or "").strip():
            raise InvalidRequest("Voice cloning requires 'ref_text' (transcript of the reference audio)", "ref_text")
        t = self.a.tables
        if request.ref_codes is not None:
            return code_grid(request.ref_codes, t.num_codebooks, t.codebook_size, "ref_codes", "ref_audio")
        if not self.encoders:
            raise InvalidRequest("this model takes reference codes from its dac_encoder, not reference audio",
                                 "ref_audio")
        return self.a.encode(np.asarray(request.ref_audio, np.float32))

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        done = prefill_chunks(self.kv, work, FishSequence, lambda s: s.prompt_tokens + s.max_frames, self._slow)
        if done:
            self._frames(done)

    def step(self, batch: list[Sequence]) -> None:
        step_frames(batch, FishSequence, lambda last: np.stack([frame_embedding(self.a.tables, f) for f in last]),
                    self._slow, self._frames)

    def _slow(self, seqs: list[FishSequence], x: F32) -> None:
        """New positions x [B, T, D] after each row's past (the K/V arena's)."""
        out = self.kv.run(self.a.graphs["slow_step"], seqs, x)
        for r, s in enumerate(seqs):
            s.hidden = np.asarray(out["hidden"][r], np.float32)
            s.logits = np.asarray(out["logits"][r], np.float32)

    def _frames(self, seqs: list[FishSequence]) -> None:
        t = self.a.tables
        going: list[tuple[FishSequence, int]] = []
        for s in seqs:
            assert s.logits is not None and s.q_slow is not None
            y = sample_slow(s.logits, s.temperature, s.top_k, s.top_p, s.q_slow[s.frames_out])
            if y == t.codebook_size:  # <|im_end|>
                s.finished = "stop"
            else:
                going.append((s, y))
        if not going:
            return
        codes = self._fast([s for s, _ in going], [y for _, y in going])
        for (s, _), frame in zip(going, codes, strict=True):
            s.emit(frame, s.max_frames)

    def _fast(self, seqs: list[FishSequence], code0: list[int]) -> list[I64]:
        """The Fast AR for all rows in lockstep (every row at the same position), each row its own noise."""
        t = self.a.tables
        h = np.stack([s.hidden for s in seqs if s.hidden is not None]).astype(np.float32)
        first = h if t.project_in is None else (h @ t.project_in[0].T + t.project_in[1]).astype(np.float32)
        x = np.stack([first, t.fast_embeddings[np.array(code0)]], axis=1).astype(np.float32)
        past = GrowingPast(self.a.fast_layers, *self.a.fast_kv, batch=len(seqs))
        codes = [list([c]) for c in code0]
        for j in range(t.num_codebooks - 1):
            out = past.step(self.a.graphs["fast_step"], x, mask=False)
            picked = []
            for r, s in enumerate(seqs):
                assert s.q_fast is not None
                c = sample_fast(out["logits"][r], *spec.FAST_AR_SAMPLING, s.q_fast[s.frames_out, j])
                codes[r].append(c)
                picked.append(c)
            x = t.fast_embeddings[np.array(picked)][:, None].astype(np.float32)
        return [np.array(c, np.int64) for c in codes]
