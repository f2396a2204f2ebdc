"""Gepard-1.0 over its exported graphs (export/gepard/README.md).

A request's life (the engine's Sequence protocol): `admit` (validate, lay out the prompt ids; no model
call) -> `prefill` (the prompt's embeddings: token rows, the speaker slots replaced by `null_prefix`;
the backbone over them in chunks; the call that completes it samples the first frame) -> `step`
(the last frame's 32 codes through `frame_embed`, the backbone one position further for every
sequence in one batched call, one frame sampled per sequence) -> `release`.

Sampling is vLLM-Omni's: every head by Gumbel-max at the checkpoint's temperature (0.3), no top-k or
top-p; heads 1..31 read their logits padded to the widest head (padding -inf), and their noise
[31, widest] is drawn before head 0's [levels of head 0], every step, from the request's own
generator (seeded by `seed`, 42 without one as vLLM-Omni's deploy YAML pins it), so a request's
audio does not depend on what it was batched with. The stop head ends the utterance when sigmoid > threshold, never before
the first frame; a step that stops commits no frame.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import gepard as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.families.gepard.checkpoint import SIDECAR, GepardInfo, parse_config
from ttscore.runtime.families.gepard.request import GepardRequest
from ttscore.runtime.families.gepard.tokenizer import GepardTokenizer, prompt_ids
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import KVArena
from ttscore.runtime.onnx import open_graph, open_table
from ttscore.runtime.step_kit import ArenaModel, FrameSequence, prefill_chunks, step_frames
from ttscore.runtime.vocoder import OrtVocoder

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
# One step's Gumbel noise: heads 1..31 [31, widest], head 0 [levels of head 0].
Noise = Callable[[], tuple[F32, F32]]


def gumbel(u: F32) -> F32:
    """-log(-log(u)), u clamped below at 1e-20 (as the reference)."""
    out: F32 = -np.log(-np.log(np.maximum(u, np.float32(1e-20))))
    return out


def seeded_noise(seed: int, heads: int, width: int, head0: int) -> Noise:
    """The request's own noise source: uniform float32 draws of its generator, heads 1..31 first."""
    rng = np.random.Generator(np.random.PCG64(seed))

    def draw() -> tuple[F32, F32]:
        return gumbel(rng.random((heads, width), np.float32)), gumbel(rng.random(head0, np.float32))

    return draw


@dataclass
class GepardSequence(FrameSequence):
    ids: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    logits: F32 | None = None  # the last position's 216 logits
    stop_prob: float = 0.0
    max_frames: int = spec.DEFAULT_MAX_NEW_TOKENS
    noise: Noise | None = None


class GepardModel(ArenaModel):
    """FamilyModel for an exported Gepard-1.0 checkpoint (ttscore.runtime.family)."""

    sequence = GepardSequence
    drops = ("embeds",)

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None = None, *,
                 vocoder: bool = True) -> None:
        self.artifacts = artifacts
        self.manifest = manifest
        self.info: GepardInfo = parse_config(manifest.config("config.json"), manifest.config(SIDECAR))
        graph = partial(open_graph, artifacts, manifest, threads=threads)
        table = partial(open_table, artifacts)
        self.backbone, self.frame_embed = graph("backbone"), graph("frame_embed")
        b = self.info.backbone
        self.kv = KVArena(b.num_layers, b.num_kv_heads, b.head_dim)
        if manifest.code2wav_state_size is None:
            raise ArtifactError(f"{artifacts}/manifest.json has no vocoder state size: re-export")
        self.vocoder_state_size: int = manifest.code2wav_state_size
        self.frame_seconds = spec.SAMPLES_PER_FRAME / self.info.sample_rate
        self.vocoder: OrtVocoder | None = (
            OrtVocoder(graph("codec_stream"), self.vocoder_state_size, self.vocoder_feeds) if vocoder else None)
        self.embed_tokens = table(spec.EMBED_TOKENS)
        self.null_prefix = np.asarray(table(spec.NULL_PREFIX), np.float32)
        self.tokenizer = GepardTokenizer(artifacts / "tokenizer")
        levels = list(self.info.head_levels)
        self.num_codebooks = len(levels)
        self.head0 = levels[0]
        self.width = max(levels[1:])
        # Heads 1..31 as rows of one padded [31, width] block (vLLM-Omni's _build_gather_mask).
        starts = np.cumsum([0, *levels])[:-1]
        self.gather = np.array([[starts[i] + (j if j < n else 0) for j in range(self.width)]
                                for i, n in enumerate(levels) if i > 0], np.int64)
        self.pad = np.array([[0.0 if j < n else -np.inf for j in range(self.width)] for n in levels[1:]], np.float32)
        self.temperature = np.float32(self.info.temperature)

    # --- FamilyModel -------------------------------------------------------------------------

    @staticmethod
    def vocoder_feeds(frames: npt.NDArray[Any], state: F32, position: I64) -> dict[str, npt.NDArray[Any]]:
        """codec_stream's inputs: codes [B, T, 32] and the conv history (position is not needed)."""
        return {"codes": frames.astype(np.int64, copy=False), "state": state}

    def admit(self, request: GepardRequest) -> GepardSequence:
        spec.RULES.checked_text(request.text)
        if request.voice is not None and request.voice not in spec.VOICES:
            raise InvalidRequest(f"voice must be omitted or 'default' for {spec.RULES.name}, got {request.voice!r}",
                                 "voice")
        rules = spec.RULES
        max_new = rules.field("max_new_tokens").resolve(request.max_new_tokens)
        seed = rules.field("seed").resolve(request.seed)
        text_ids = self.tokenizer.text_ids(request.text)
        ids = prompt_ids(text_ids, self.info)
        room = self.info.backbone.max_positions - len(ids)
        if room < 1:
            raise InvalidRequest(f"the prompt takes {len(ids)} of the model's {self.info.backbone.max_positions} "
                                 "positions: shorten 'input'", "input")
        return GepardSequence(
            initial_chunk_frames=request.initial_chunk_frames or spec.DEFAULT_INITIAL_CHUNK_FRAMES,
            chunk_frames=request.chunk_frames or spec.DEFAULT_CHUNK_FRAMES,
            text_tokens=len(text_ids),
            prompt_tokens=len(ids),
            ids=np.array(ids, np.int64),
            max_frames=min(max_new, room),
            noise=seeded_noise(seed, len(self.info.head_levels) - 1, self.width, self.head0),
        )

    def prompt_embeds(self, ids: I64) -> F32:
        """Token rows; the speaker slots are `null_prefix` (the default voice)."""
        base, slots = self.info.speaker_token_base, self.info.num_speaker_slots
        speaker = (ids >= base) & (ids < base + slots)
        out: F32 = np.asarray(self.embed_tokens[np.where(speaker, 0, ids)], np.float32).copy()
        out[speaker] = self.null_prefix[ids[speaker] - base]
        return out

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        done = prefill_chunks(self.kv, work, GepardSequence, lambda s: s.prompt_tokens + s.max_frames,
                              self._backbone, lambda s: self.prompt_embeds(s.ids))
        if done:
            self._frames(done)

    def step(self, batch: list[Sequence]) -> None:
        step_frames(batch, GepardSequence,
                    lambda last: self.frame_embed.run({"codes": np.stack(last).astype(np.int64)})["embeds"],
                    self._backbone, self._frames)

    # --- internals ---------------------------------------------------------------------------

    def _backbone(self, seqs: list[GepardSequence], x: F32) -> None:
        """New positions x [B, T, H] after each row's past (the K/V arena's): keeps the last position's logits and
        stop probability."""
        out = self.kv.run(self.backbone, seqs, x)
        for r, s in enumerate(seqs):
            s.logits = np.asarray(out["logits"][r], np.float32)
            s.stop_prob = float(out["stop_prob"][r])

    def sample(self, logits: F32, noise: tuple[F32, F32]) -> I64:
        """The 32 codes of one frame by Gumbel-max: argmax(logits / temperature + noise) per head."""
        g_heads, g0 = noise
        heads = (logits[self.gather] + self.pad) / self.temperature + g_heads
        head0 = logits[:self.head0] / self.temperature + g0
        codes: I64 = np.concatenate([[np.argmax(head0)], np.argmax(heads, axis=-1)]).astype(np.int64)
        return codes

    def _frames(self, seqs: list[GepardSequence]) -> None:
        """One frame per sequence, or its end (the stop head, past the first frame; or the budget)."""
        for s in seqs:
            if s.frames_out >= s.max_frames:
                s.finished = "length"
                continue
            assert s.logits is not None and s.noise is not None
            frame = self.sample(s.logits, s.noise())
            if s.frames_out > 0 and s.stop_prob > self.info.stop_threshold:
                s.finished = "stop"
                continue
            s.emit(frame, s.max_frames)
