"""Voxtral TTS on its exported graphs, one request at a time (offline; the shared continuous-batching
engine is not wired yet): prefill the prompt with the voice's rows at the [AUDIO] positions, then per
frame: `lm_step` -> hidden state and semantic code; [END_AUDIO] ends; else the acoustic codes from the
`velocity` graph's Euler loop (flow.py) with the request's noise; the next input is the sum of the 37
codebooks' embeddings. Audio comes from `codec_stream` in chunks (exact: equal to a whole decode).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.voxtral_tts.flow import F32, I64, acoustic_codes
from ttscore.runtime.kv import GrowingPast
from ttscore.runtime.onnx import ExportedGraphs


@dataclass
class Result:
    codes: I64  # [frames, 1 + n_acoustic], vLLM-Omni's ids (+2 offset)
    pcm: F32  # [frames * samples_per_frame]
    stopped: bool  # [END_AUDIO] came before max_new_tokens


class VoxtralGraphs(ExportedGraphs):
    def __init__(self, artifacts: Path, threads: int | None = None) -> None:
        super().__init__(artifacts, threads)
        self.tok = self.table(spec.TOK_EMBEDDINGS, mmap=True)
        self.audio = self.table(spec.AUDIO_EMBEDDINGS, mmap=True)
        sizes = [self.sizes["semantic_codebook_size"] + spec.NUM_AUDIO_SPECIAL] + [
            self.sizes["acoustic_codebook_size"] + spec.NUM_AUDIO_SPECIAL] * self.sizes["n_acoustic_codebook"]
        self.offsets: I64 = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
        self.voices = sorted(self.sizes["voices"])

    def voice_rows(self, voice: str) -> F32:
        if voice not in self.voices:
            raise InvalidRequest(f"unknown voice {voice!r} (this checkpoint's: {', '.join(self.voices)})", "voice")
        return self.table(f"{spec.VOICE_TABLE_PREFIX}{voice}")

    def frame_embedding(self, codes: I64) -> F32:
        out: F32 = self.audio[codes + self.offsets].sum(0, dtype=np.float32)
        return out

    def generate(self, prompt: I64, voice: str, noise: F32, max_new_tokens: int, cfg_alpha: float,
                 chunk_frames: int = 8) -> Result:
        lm, fm = self.sizes["lm"], self.sizes["fm"]
        rows = self.voice_rows(voice)
        embeds: F32 = np.array(self.tok[prompt], np.float32)
        slots = prompt == self.sizes["audio_token_id"]
        if int(slots.sum()) != len(rows):
            raise InvalidRequest(f"the prompt has {int(slots.sum())} [AUDIO] slots, voice {voice!r} {len(rows)} rows",
                                 "voice")
        embeds[slots] = rows
        past = GrowingPast(lm["n_layers"], lm["n_kv_heads"], lm["head_dim"])
        step, vel = self.graphs["lm_step"], self.graphs["velocity"]
        x, frames, stopped = embeds[None], [], False
        alpha = np.array([cfg_alpha], np.float32)

        def velocity(xx: F32, t: F32, h: F32, a: F32) -> F32:
            out: F32 = vel.run({"x": xx, "t": t, "hidden": h, "cfg_alpha": a})["velocity"]
            return out

        for i in range(max_new_tokens):
            out = past.step(step, x)
            semantic: I64 = out["semantic_code"]
            if int(semantic[0]) == spec.END_AUDIO:
                stopped = True
                break
            ac = acoustic_codes(velocity, noise[i:i + 1], out["hidden"], alpha, semantic, fm["n_decoding_steps"],
                                self.sizes["acoustic_codebook_size"])
            codes: I64 = np.concatenate([semantic, ac[0]])
            frames.append(codes)
            x = self.frame_embedding(codes)[None, None]
        all_codes: I64 = np.array(frames, np.int64).reshape(len(frames), 1 + self.sizes["n_acoustic_codebook"])
        return Result(all_codes, self.decode(all_codes, chunk_frames), stopped)

    def decode(self, codes: I64, chunk_frames: int) -> F32:
        """The frames' audio through codec_stream, `chunk_frames` at a time."""
        codec = self.graphs["codec_stream"]
        state: F32 = np.zeros((1, self.manifest.vocoder_state_size or 0), np.float32)
        pieces: list[F32] = []
        ids = (codes.T - spec.NUM_AUDIO_SPECIAL)[None]
        for a in range(0, codes.shape[0], max(1, chunk_frames)):
            out = codec.run({"codes": np.ascontiguousarray(ids[:, :, a:a + chunk_frames]), "state": state})
            pieces.append(out["pcm"][0])
            state = out["new_state"]
        pcm: F32 = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        return pcm
