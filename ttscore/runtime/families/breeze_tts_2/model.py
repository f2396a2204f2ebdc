"""Breeze-TTS-2 over its exported graphs (export/breeze_tts_2/README.md).

A request's life (the engine's Sequence protocol): `admit` (validate, lay out the prompt ids; no
model call) -> `prefill` (first call: each text segment through the text encoder graph, reference
frames as summed code embeddings; then the prompt through the backbone in chunks; the call that
completes it makes the first frame) -> `step` (the backbone advances one position for every
sequence in one batched call, then code 0 per sequence and the depth decoder's 15 codes, batched
across sequences) -> `release`.

Decoding is greedy (the Speech API's rule for this family): code 0 is the argmax of the backbone
head after the repetition penalty on the codes 0 generated so far (REPETITION_PENALTY, as the
reference keeps it at temperature 0); the depth codes are plain argmaxes. The reserved rows
(codes 2048..2050) are never chosen; the extra row 2051 ends the utterance. Per sequence, each
stack's K/V is kept as its own arrays (padded per batch, as VoxCPM2 does).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.families.breeze_tts_2.checkpoint import BreezeInfo, parse_config
from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest
from ttscore.runtime.families.breeze_tts_2.tokenizer import BreezeTokenizer
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import GrowingPast, KVArena
from ttscore.runtime.onnx import OnnxGraph, open_graph, open_table
from ttscore.runtime.step_kit import ArenaModel, FrameSequence, prefill_chunks, step_frames
from ttscore.runtime.vocoder import OrtVocoder

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@dataclass
class BreezeSequence(FrameSequence):
    ids: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    text_mask: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))
    segments: list[tuple[int, int]] = field(default_factory=list)
    ref_codes: I64 | None = None
    logits: F32 | None = None  # the code-0 logits of the last position
    hidden: F32 | None = None  # the backbone's last hidden state
    history: list[int] = field(default_factory=list)  # codes 0 generated so far
    max_frames: int = spec.DEFAULT_MAX_NEW_TOKENS


class BreezeModel(ArenaModel):
    """FamilyModel for an exported Breeze-TTS-2 checkpoint (ttscore.runtime.family)."""

    sequence = BreezeSequence
    drops = ("embeds",)

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None = None, *,
                 vocoder: bool = True, encoders: bool = True) -> None:
        self.artifacts = artifacts
        self.manifest = manifest
        self.info: BreezeInfo = parse_config(manifest.config("config.json"))
        graph = partial(open_graph, artifacts, manifest, threads=threads)
        table = partial(open_table, artifacts)
        self.text_encoder, self.backbone, self.depth = graph("text_encoder"), graph("backbone"), graph("depth_decoder")
        b = self.info.backbone
        self.kv = KVArena(b.num_layers, b.num_kv_heads, b.head_dim)
        self.speech_encoder = graph("speech_encoder") if encoders else None
        if manifest.code2wav_state_size is None:
            raise ArtifactError(f"{artifacts}/manifest.json has no vocoder state size: re-export")
        self.vocoder_state_size: int = manifest.code2wav_state_size
        self.frame_seconds = spec.SAMPLES_PER_FRAME / self.info.sample_rate
        self.vocoder: OrtVocoder | None = (
            OrtVocoder(graph("code2wav_stream"), self.vocoder_state_size, self.vocoder_feeds) if vocoder else None)
        self.audio_table = table(spec.AUDIO_EMBEDDINGS)
        self.heads = np.asarray(table(spec.DEPTH_HEADS), np.float32)
        self.hidden_projector = (np.asarray(table(spec.HIDDEN_PROJECTOR), np.float32)
                                 if self.info.backbone.hidden_size != self.info.audio_embed_size else None)
        self.tokenizer = BreezeTokenizer(artifacts / "tokenizer")
        self.num_codebooks = self.info.num_codebooks
        self.offsets = np.arange(self.num_codebooks, dtype=np.int64) * self.info.codebook_vocab

    # --- FamilyModel -------------------------------------------------------------------------

    @staticmethod
    def vocoder_feeds(frames: npt.NDArray[Any], state: F32, position: I64) -> dict[str, npt.NDArray[Any]]:
        """code2wav_stream's inputs (the Qwen3-TTS codec's): codes [B, T, 16], state, position."""
        return {"codes": frames.astype(np.int64, copy=False), "state": state, "position": position}

    def admit(self, request: BreezeRequest) -> BreezeSequence:
        spec.RULES.checked_text(request.text)
        voice = request.voice or spec.DEFAULT_VOICE
        if voice not in spec.VOICES:
            raise InvalidRequest(f"voice must be one of {', '.join(spec.VOICES)} for Breeze-TTS-2, got {voice!r}",
                                 "voice")
        rules = spec.RULES
        max_new = rules.field("max_new_tokens").resolve(request.max_new_tokens)
        rules.field("seed").check(request.seed)
        first = rules.field("initial_codec_chunk_frames").resolve(request.initial_chunk_frames)
        chunk = rules.field("codec_chunk_frames").resolve(request.chunk_frames)
        # As vLLM-Omni's adapter: verbatim; none (or only whitespace) is the default instruction.
        instructions = request.instructions if request.instructions and request.instructions.strip() else None
        ref_text = request.ref_text if request.ref_text and request.ref_text.strip() else None
        codes = request.ref_codes
        if codes is None and ref_text is not None:
            raise InvalidRequest("'ref_text' needs 'ref_audio' (the reference clip it transcribes)", "ref_text")
        if codes is not None:
            codes = np.asarray(codes)
            if codes.ndim != 2 or codes.shape[1] != self.num_codebooks or codes.shape[0] < 1:
                raise InvalidRequest(f"reference codes must be [T, {self.num_codebooks}], got {codes.shape}", "ref_audio")
            if codes.min() < 0 or codes.max() >= self.info.codebook_size:
                raise InvalidRequest("reference codes must be codec codes (0..2047)", "ref_audio")
            if ref_text is None:
                raise InvalidRequest("voice cloning needs 'ref_text' (the transcript of the reference audio)",
                                     "ref_text")
        prompt = self.tokenizer.prompt(request.text, voice, instructions, ref_text,
                                       None if codes is None else int(codes.shape[0]),
                                       (self.info.audio_token_id, self.info.audio_eos_token_id))
        room = self.info.max_context - len(prompt.ids)
        if room < 1:
            raise InvalidRequest(f"the prompt takes {len(prompt.ids)} of the model's {self.info.max_context} "
                                 "positions: shorten 'input' or the reference", "input")
        return BreezeSequence(
            initial_chunk_frames=first,
            chunk_frames=chunk,
            text_tokens=prompt.text_tokens,
            audio_tokens=0 if codes is None else int(codes.shape[0]),
            prompt_tokens=len(prompt.ids),
            ids=np.array(prompt.ids, np.int64),
            text_mask=np.array(prompt.text_mask, bool),
            segments=prompt.segments,
            ref_codes=None if codes is None else codes.astype(np.int64),
            max_frames=min(max_new, room),
        )

    def frame_embeds(self, frames: I64) -> F32:
        """Frames [N, 16] -> the backbone's input [N, E]: the sum of each code's table row."""
        rows = np.asarray(self.audio_table[(frames + self.offsets).reshape(-1)], np.float32)
        out: F32 = rows.reshape(frames.shape[0], self.num_codebooks, -1).sum(axis=1, dtype=np.float32)
        return out

    def _prompt_embeds(self, seq: BreezeSequence) -> F32:
        n = len(seq.ids)
        embeds = np.zeros((n, self.info.backbone.hidden_size), np.float32)
        for start, length in seq.segments:  # one text encoder pass per segment
            ids = seq.ids[None, start:start + length]
            embeds[start:start + length] = self.text_encoder.run(
                {"input_ids": ids, "attention_mask": np.ones_like(ids)})["embeds"][0]
        if seq.ref_codes is not None:  # the rows between the reference text and the target: frames, then EOS
            start = seq.segments[0][1]
            frames = int(seq.ref_codes.shape[0])
            assert not seq.text_mask[start:start + frames + 1].any()
            embeds[start:start + frames] = self.frame_embeds(seq.ref_codes)
            embeds[start + frames] = self.frame_embeds(np.full((1, self.num_codebooks), self.info.codebook_eos,
                                                               np.int64))[0]
        return embeds

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        done = prefill_chunks(self.kv, work, BreezeSequence, lambda s: s.prompt_tokens + s.max_frames,
                              self._backbone, self._prompt_embeds)
        if done:
            self._frames(done)

    def step(self, batch: list[Sequence]) -> None:
        step_frames(batch, BreezeSequence, lambda last: self.frame_embeds(np.stack(last)), self._backbone,
                    self._frames)

    # --- internals ---------------------------------------------------------------------------

    def _backbone(self, seqs: list[BreezeSequence], x: F32) -> None:
        """New positions x [B, T, H] after each row's past (the K/V arena's): keeps the last position's hidden
        state and code-0 logits."""
        out = self.kv.run(self.backbone, seqs, x)
        for r, s in enumerate(seqs):
            s.hidden = out["hidden"][r, -1]
            s.logits = out["logits"][r]

    def _code0(self, s: BreezeSequence) -> int:
        assert s.logits is not None
        logits = np.array(s.logits, np.float32)
        if s.history:
            h = np.unique(np.array(s.history, np.int64))
            v = logits[h]
            logits[h] = np.where(v < 0, v * spec.REPETITION_PENALTY, v / spec.REPETITION_PENALTY)
        return int(np.argmax(logits))

    def _frames(self, seqs: list[BreezeSequence]) -> None:
        """One frame per sequence (or its end): code 0 from the logits, then the depth decoder."""
        going: list[tuple[BreezeSequence, int]] = []
        for s in seqs:
            if len(s.history) >= s.max_frames:
                s.finished = "length"
                continue
            code0 = self._code0(s)
            if code0 == self.info.eos_code:
                s.finished = "stop"
                continue
            going.append((s, code0))
        if not going:
            return
        frames = self._depth([s.hidden for s, _ in going if s.hidden is not None], [c for _, c in going])
        for (s, code0), frame in zip(going, frames, strict=True):
            s.history.append(code0)
            s.emit(frame, s.max_frames)

    def _depth(self, hidden: list[F32], code0: list[int]) -> list[I64]:
        """The 15 depth codes of each frame, batched across sequences (same positions for all)."""
        d = self.info.depth
        layers, kvh, hd = d.num_layers, d.num_kv_heads, d.head_dim
        b = len(code0)
        h = np.stack(hidden).astype(np.float32)
        if self.hidden_projector is not None:
            h = h @ self.hidden_projector.T
        codes = np.zeros((b, self.num_codebooks), np.int64)
        codes[:, 0] = code0
        x = np.stack([h, np.asarray(self.audio_table[np.array(code0)], np.float32)], axis=1)  # positions 0, 1
        past = GrowingPast(layers, kvh, hd, batch=b)
        size = self.info.codebook_size
        for k in range(self.num_codebooks - 1):
            out = past.step(self.depth, np.ascontiguousarray(x), mask=False)
            logits = out["hidden"][:, -1] @ self.heads[k]  # [B, 2051]
            c = np.argmax(logits[:, :size], axis=-1).astype(np.int64)
            codes[:, k + 1] = c
            x = np.asarray(self.audio_table[c + (k + 1) * self.info.codebook_vocab], np.float32)[:, None]
        return list(codes)

    def encode_reference(self, audio: npt.NDArray[Any], sample_rate: int) -> I64:
        """A reference clip -> its codes [T, 16] (the Qwen3-TTS speech encoder at 24 kHz)."""
        if self.speech_encoder is None:
            raise ArtifactError("the speech encoder was not loaded")
        return encode_reference(self.speech_encoder, audio, sample_rate)


def encode_reference(encoder: OnnxGraph, audio: npt.NDArray[Any], sample_rate: int, *, param: str = "ref_audio",
                     rate_param: str | None = None) -> I64:
    """A reference clip (mono, any rate within the family's bounds) -> its codes [T, 16]: resampled to
    24 kHz and run through the export's speech encoder (the audio_tokenizer's). The one rule for
    `say`, precompute-voice and the Triton model (InvalidRequest naming `param` / `rate_param`)."""
    from ttscore.runtime.audio import check_reference, resample, to_mono

    wav = check_reference(to_mono(audio), int(sample_rate), param, rate_param, spec.REF_AUDIO)
    wav = resample(wav, int(sample_rate), spec.SAMPLE_RATE)
    codes: I64 = encoder.run({"audio": wav[None].astype(np.float32)})["codes"][0].astype(np.int64)
    return codes
