"""Voxtral TTS over its exported graphs under the shared engine (ttscore.runtime.family).

A request's life: `admit` (validate; the prompt from tekken.json with the preset voice's frame count;
the request's flow-matching noise from its seed; no model call) -> `prefill` (token rows, the [AUDIO]
positions replaced by the voice's rows; `lm_step` over them; the call that completes the prompt makes
the first frame) -> `step` (the last frame's 37 codebook embeddings summed, `lm_step` one position further
for every sequence in one batched call, then the frames) -> `release`.

A frame: `lm_step`'s semantic code ([END_AUDIO] ends the utterance: "stop"), then the acoustic codes by
the numpy Euler loop over the `velocity` graph for all the batch's rows at once (flow.py), each row with
its own noise row (frame i of the request takes row i of its noise, so a request's audio does not depend
on what it was batched with) and its own cfg_alpha.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.families.voxtral_tts.flow import F32, I64, acoustic_codes, frame_noise
from ttscore.runtime.families.voxtral_tts.generate import VoxtralGraphs
from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest
from ttscore.runtime.families.voxtral_tts.tokenizer import TekkenTokenizer
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import KVArena
from ttscore.runtime.step_kit import ArenaModel, FrameSequence, prefill_chunks, step_frames
from ttscore.runtime.vocoder import OrtVocoder


@dataclass
class VoxtralSequence(FrameSequence):
    ids: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    voice: str = ""
    hidden: F32 | None = None
    semantic: int = 0
    max_frames: int = spec.DEFAULT_MAX_NEW_TOKENS
    noise: F32 | None = None  # [max_frames, n_acoustic]
    cfg_alpha: float = spec.DEFAULT_CFG_ALPHA


class VoxtralModel(ArenaModel):
    sequence = VoxtralSequence
    drops = ("embeds", "noise")

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None = None, *,
                 vocoder: bool = True) -> None:
        self.g = VoxtralGraphs(artifacts, threads)
        self.manifest = manifest
        self.sizes = self.g.sizes
        lm = self.sizes["lm"]
        self.kv = KVArena(int(lm["n_layers"]), int(lm["n_kv_heads"]), int(lm["head_dim"]))
        self.tokenizer = TekkenTokenizer(Path(artifacts) / "tokenizer" / "tekken.json")
        self.vocoder_state_size = int(manifest.vocoder_state_size or 0)
        self.vocoder: OrtVocoder | None = (
            OrtVocoder(self.g.graphs["codec_stream"], self.vocoder_state_size, self.vocoder_feeds) if vocoder else None)
        self.num_codebooks = 1 + int(self.sizes["n_acoustic_codebook"])
        self.sample_rate = int(self.sizes["codec"]["sampling_rate"])
        self.samples_per_frame = int(manifest.samples_per_frame or 0)
        self.frame_seconds = self.samples_per_frame / self.sample_rate

    @staticmethod
    def vocoder_feeds(frames: npt.NDArray[Any], state: F32, position: I64) -> dict[str, npt.NDArray[Any]]:
        """codec_stream's inputs: frames [B, T, 37] (vLLM-Omni's ids) -> codes [B, 37, T] without the offset."""
        codes = np.ascontiguousarray(frames.astype(np.int64).transpose(0, 2, 1) - spec.NUM_AUDIO_SPECIAL)
        return {"codes": codes, "state": state}

    def admit(self, request: VoxtralRequest) -> VoxtralSequence:
        spec.RULES.checked_text(request.text)
        if not request.voice:
            raise InvalidRequest(f"'voice' is required: one of {', '.join(self.g.voices)}", "voice")
        voice = request.voice.lower()
        if voice not in self.g.voices:
            raise InvalidRequest(f"unknown voice {request.voice!r} (this checkpoint's: {', '.join(self.g.voices)})",
                                 "voice")
        alpha = spec.DEFAULT_CFG_ALPHA if request.cfg_alpha is None else request.cfg_alpha
        lo, hi = spec.CFG_ALPHA_KNOB.lo, spec.CFG_ALPHA_KNOB.hi
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not lo <= float(alpha) <= hi:
            raise InvalidRequest(f"'cfg_alpha' must be a number between {lo} and {hi}", "cfg_alpha")
        max_new = spec.RULES.field("max_new_tokens").resolve(request.max_new_tokens)
        seed = spec.RULES.field("seed").checked_or_drawn(request.seed)  # none: random, as vLLM-Omni
        ids, n_text = self.tokenizer.prompt(request.text, voice)
        return VoxtralSequence(
            initial_chunk_frames=request.initial_chunk_frames or spec.DEFAULT_INITIAL_CHUNK_FRAMES,
            chunk_frames=request.chunk_frames or spec.DEFAULT_CHUNK_FRAMES,
            text_tokens=n_text, prompt_tokens=len(ids), ids=np.array(ids, np.int64), voice=voice,
            max_frames=max_new, noise=frame_noise(seed, max_new, int(self.sizes["n_acoustic_codebook"])),
            cfg_alpha=float(alpha))

    def prompt_embeds(self, ids: I64, voice: str) -> F32:
        out: F32 = np.array(self.g.tok[ids], np.float32)
        slots = ids == int(self.sizes["audio_token_id"])
        out[slots] = self.g.voice_rows(voice)
        return out

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        done = prefill_chunks(self.kv, work, VoxtralSequence, lambda s: s.prompt_tokens + s.max_frames, self._lm,
                              lambda s: self.prompt_embeds(s.ids, s.voice))
        if done:
            self._frames(done)

    def step(self, batch: list[Sequence]) -> None:
        step_frames(batch, VoxtralSequence, lambda last: np.stack([self.g.frame_embedding(f) for f in last]),
                    self._lm, self._frames)

    def _lm(self, seqs: list[VoxtralSequence], x: F32) -> None:
        """New positions x [B, T, D] after each row's past (the K/V arena's)."""
        out = self.kv.run(self.g.graphs["lm_step"], seqs, x)
        for r, s in enumerate(seqs):
            s.hidden = np.asarray(out["hidden"][r], np.float32)
            s.semantic = int(out["semantic_code"][r])

    def _frames(self, seqs: list[VoxtralSequence]) -> None:
        going: list[VoxtralSequence] = []
        for s in seqs:
            if s.frames_out >= s.max_frames:
                s.finished = "length"
            elif s.semantic == spec.END_AUDIO:
                s.finished = "stop"
            else:
                going.append(s)
        if not going:
            return
        vel = self.g.graphs["velocity"]

        def velocity(xx: F32, t: F32, h: F32, a: F32) -> F32:
            res: F32 = vel.run({"x": xx, "t": t, "hidden": h, "cfg_alpha": a})["velocity"]
            return res

        noise = np.stack([s.noise[s.frames_out] for s in going if s.noise is not None]).astype(np.float32)
        hidden = np.stack([s.hidden for s in going if s.hidden is not None]).astype(np.float32)
        semantic = np.array([s.semantic for s in going], np.int64)
        alpha = np.array([s.cfg_alpha for s in going], np.float32)
        ac = acoustic_codes(velocity, noise, hidden, alpha, semantic, int(self.sizes["fm"]["n_decoding_steps"]),
                            int(self.sizes["acoustic_codebook_size"]))
        for r, s in enumerate(going):
            frame: I64 = np.concatenate([[s.semantic], ac[r]]).astype(np.int64)
            s.emit(frame, s.max_frames)
