"""A loaded OmniVoice export as the engine's FamilyModel, non-autoregressive.

A request has no prompt to prefill (`prompt_tokens` 0): each engine step is one unmasking step for
every active request (each at its own step index; one generator call over all their cond rows, and
the uncond rows of those with guidance), and at a request's last step all its frames go to `pending`
at once with `finished` set, so the engine hands the whole utterance to the vocoder in one chunk.
The vocoder is the codec decoder over the whole utterance (not a streaming vocoder).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import omnivoice as contract
from ttscore.contract.errors import ArtifactError
from ttscore.contract.manifest import Manifest
from ttscore.contract.omnivoice import text as text_rules
from ttscore.contract.rules import checked_float
from ttscore.contract.voicefile import checked_codes
from ttscore.runtime.families.omnivoice.checkpoint import (
    CODEC_DIR,
    CONFIG,
    LANGUAGE_TABLE,
    OmniVoiceInfo,
    parse_config,
)
from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest
from ttscore.runtime.families.omnivoice.tokenizer import OmniVoiceTokenizer
from ttscore.runtime.families.omnivoice.unmask import Knobs, schedule, unmask_step
from ttscore.runtime.family import Sequence
from ttscore.runtime.onnx import open_graph
from ttscore.runtime.vocoder import OrtVocoder


@dataclass
class OmniVoiceSequence(Sequence):
    cond_ids: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))  # [C, S] prompt + target
    audio_start: int = 0  # first audio position of the cond row (reference codes, then the target)
    tokens: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))  # [C, T] the target
    knobs: Knobs | None = None
    plan: list[int] = field(default_factory=list)  # slots unmasked at each step
    step_index: int = 0
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    # Long text: the reference's chunks, generated in order; each part's frames go out when it is done.
    parts: list[str] = field(default_factory=list)
    part: int = 0
    language: str | None = None
    instructions: str | None = None
    speed: float = 1.0
    ref: NDArray[np.int64] | None = None  # the request's reference codes [C, T_ref] (cloning)
    ref_text: str | None = None
    first: tuple[NDArray[np.int64], str] | None = None  # no request reference: part 0's codes and text


class CodecVocoder(OrtVocoder):
    """The codec decoder as the engine's vocoder: codes [T, 8] per item -> audio [T * hop], items of equal length
    as one batch. It keeps no state between chunks (it decodes a whole utterance): a stream's state is a
    placeholder of vocoder_state_size 1."""

    def _run(self, frames: NDArray[Any], state: NDArray[np.float32], position: NDArray[np.int64]
             ) -> tuple[NDArray[Any], NDArray[Any]]:
        return self.graph.run(self.feeds(frames, state, position))["audio"][:, 0], state


class OmniVoiceModel:
    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None, vocoder: bool = True) -> None:
        self.info: OmniVoiceInfo = parse_config(manifest.config(CONFIG), manifest.config(f"{CODEC_DIR}/{CONFIG}"))
        if contract.CODEC_DECODER.name not in manifest.graphs:
            raise ArtifactError(f"{artifacts}/manifest.json lists no {contract.CODEC_DECODER.name} graph: re-export")
        self.generator = open_graph(artifacts, manifest, contract.GENERATOR.name, threads)
        self.vocoder_state_size = 1
        self.vocoder = (CodecVocoder(open_graph(artifacts, manifest, contract.CODEC_DECODER.name, threads),
                                     self.vocoder_state_size, self.vocoder_feeds) if vocoder else None)
        self.num_codebooks = self.info.num_codebooks
        self.frame_seconds = self.info.hop / self.info.sample_rate
        self.tokenizer = OmniVoiceTokenizer(artifacts)
        table = (manifest.raw.get("tables") or {}).get(LANGUAGE_TABLE)
        if not isinstance(table, Mapping):
            raise ArtifactError(f"{artifacts}: the manifest has no {LANGUAGE_TABLE} table: re-export")
        self.language_names: dict[str, str] = {str(k): str(v) for k, v in table.items()}

    # --- FamilyModel --------------------------------------------------------------------------
    def vocoder_feeds(self, frames: NDArray[Any], state: NDArray[np.float32], position: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        return {"codes": np.ascontiguousarray(np.asarray(frames, np.int64).transpose(0, 2, 1))}

    def admit(self, request: OmniVoiceRequest) -> OmniVoiceSequence:
        rules = contract.RULES
        rules.checked_text(request.text, "text")
        language = text_rules.resolve_language(request.language, self.language_names, contract.RULES.name)
        instructions = text_rules.resolve_instructions(request.instructions, text_rules.has_chinese(request.text))
        seed = rules.field("seed").check(request.seed)
        num_step = rules.field("num_step").resolve(request.num_step)  # before the knobs: its refusal names it
        floats = rules.request_knobs(request, contract.KNOB_DEFAULTS)  # refusals name `extra_params`
        knobs = Knobs(
            num_step=num_step,
            guidance_scale=float(floats["guidance_scale"]),
            t_shift=float(floats["t_shift"]),
            layer_penalty=contract.DEFAULT_LAYER_PENALTY,
            position_temperature=float(floats["position_temperature"]),
            class_temperature=float(floats["class_temperature"]),
            class_top_k_ratio=contract.CLASS_TOP_K_RATIO,
        )
        ref = None if request.ref_codes is None else np.ascontiguousarray(checked_codes(
            request.ref_codes, self.info.num_codebooks, contract.CODEBOOK_SIZE, time_major=False, param="ref_codes"
        ).T, np.int64)  # [C, T_ref]
        speed = checked_float(1.0 if request.speed is None else request.speed, "speed", *contract.SPEED_RANGE)
        # The duration estimate (the reference's rule), checked against max_new_tokens.
        frames = contract.checked_frames(request.text, request.ref_text, None if ref is None else int(ref.shape[1]),
                                         speed, request.max_new_tokens)
        parts = [request.text]
        if frames > contract.CHUNK_THRESHOLD_SECONDS * self.frame_rate:
            # The reference's long-text rule: chunks of about CHUNK_SECONDS at the text's estimated rate.
            parts = self._chunks(request.text, frames, contract.CHUNK_SECONDS)
        elif request.sentence_chunks:
            # Sentence-level streaming: the same rule with short chunks, each sent as it completes.
            parts = self._chunks(request.text, frames, contract.STREAM_CHUNK_SECONDS)
        seq = OmniVoiceSequence(
            initial_chunk_frames=1, chunk_frames=1, text_tokens=0, audio_tokens=0 if ref is None else int(ref.shape[1]),
            knobs=knobs, rng=np.random.default_rng(seed), parts=parts, language=language, instructions=instructions,
            speed=speed, ref=ref,
            ref_text=request.ref_text if ref is not None else None,
        )
        self._start_part(seq, 0)
        return seq

    def _chunks(self, text: str, frames: int, seconds: float) -> list[str]:
        """The reference's chunking rule (omnivoice_text.chunk_text) with chunks of about `seconds` at
        the text's estimated rate."""
        chunk_chars = max(1, int(seconds * self.frame_rate / (frames / len(text))))
        return text_rules.chunk_text(text, chunk_chars) or [text]

    @property
    def frame_rate(self) -> int:
        return -(-self.info.sample_rate // self.info.hop)

    def _start_part(self, seq: OmniVoiceSequence, part: int) -> None:
        """Set `seq` up to generate its part `part`: the request's reference, or (without one) the
        first part's codes and text as the reference of every later part, as the reference does."""
        assert seq.knobs is not None
        text = seq.parts[part]
        ref, ref_text = seq.ref, seq.ref_text
        if ref is None and seq.first is not None:
            ref, ref_text = seq.first
        frames = text_rules.estimate_frames(text, ref_text, None if ref is None else int(ref.shape[1]),
                                            contract.ANCHOR_TEXT, contract.ANCHOR_FRAMES, seq.speed)
        ids = self.tokenizer.prompt(text, ref_text=ref_text if ref is not None else None, language=seq.language,
                                    instructions=seq.instructions, denoise=ref is not None)
        c = self.info.num_codebooks
        pieces = [np.tile(np.asarray(ids, np.int64)[None, :], (c, 1))]
        if ref is not None:
            pieces.append(ref)
        pieces.append(np.full((c, frames), self.info.mask_id, np.int64))
        seq.cond_ids = np.concatenate(pieces, axis=1)
        seq.audio_start = len(ids)
        seq.tokens = np.full((c, frames), self.info.mask_id, np.int64)
        seq.plan = schedule(frames * c, seq.knobs.num_step, seq.knobs.t_shift)
        seq.step_index = 0
        seq.part = part
        seq.text_tokens += len(ids)

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        """No prompt to prefill (prompt_tokens is 0)."""

    def step(self, batch: list[Sequence]) -> None:
        seqs = [s for s in batch if isinstance(s, OmniVoiceSequence)]
        if not seqs:
            return
        logits = self.logits(seqs)
        for seq, (cond, uncond) in zip(seqs, logits, strict=True):
            assert seq.knobs is not None
            unmask_step(seq.tokens, cond, uncond, seq.plan[seq.step_index], seq.knobs, self.info.mask_id, seq.rng)
            t = seq.tokens.shape[1]
            seq.cond_ids[:, -t:] = seq.tokens
            seq.step_index += 1
            if seq.step_index == seq.knobs.num_step:
                seq.pending.extend(np.ascontiguousarray(seq.tokens.T))
                seq.frames_out += t
                if seq.part + 1 < len(seq.parts):
                    if seq.ref is None and seq.first is None:
                        seq.first = (seq.tokens.copy(), seq.parts[0])
                    self._start_part(seq, seq.part + 1)
                else:
                    seq.finished = "stop"

    def logits(self, seqs: list[OmniVoiceSequence]) -> list[tuple[NDArray[np.float32], NDArray[np.float32] | None]]:
        """One generator call: every sequence's cond row, then the uncond rows (the target alone) of
        those with guidance; right-padded. Returns each sequence's (cond, uncond) logits [C, T, V]."""
        rows: list[tuple[NDArray[np.int64], int, int]] = []  # (ids [C, L], audio start, target frames)
        for s in seqs:
            rows.append((s.cond_ids, s.audio_start, s.tokens.shape[1]))
        guided = [i for i, s in enumerate(seqs) if s.knobs is not None and s.knobs.guidance_scale != 0]
        for i in guided:
            s = seqs[i]
            rows.append((s.cond_ids[:, -s.tokens.shape[1]:], 0, s.tokens.shape[1]))
        n, c = len(rows), self.info.num_codebooks
        width = max(r[0].shape[1] for r in rows)
        frames = max(r[2] for r in rows)
        ids = np.full((n, c, width), self.info.mask_id, np.int64)
        audio = np.zeros((n, width), bool)
        mask = np.zeros((n, width), np.int64)
        target = np.zeros((n, frames), np.int64)
        for r, (row_ids, start, t) in enumerate(rows):
            length = row_ids.shape[1]
            ids[r, :, :length] = row_ids
            audio[r, start:length] = True
            mask[r, :length] = 1
            target[r, :t] = np.arange(length - t, length)
        out = self.generator.run({"input_ids": ids, "audio_mask": audio, "attention_mask": mask,
                                  "target_index": target})["logits"]
        result: list[tuple[NDArray[np.float32], NDArray[np.float32] | None]] = []
        for i, s in enumerate(seqs):
            t = s.tokens.shape[1]
            u = out[len(seqs) + guided.index(i), :, :t] if i in guided else None
            result.append((out[i, :, :t], u))
        return result

    def release(self, seq: Sequence) -> None:
        """No decode state to free."""

    def memory(self) -> dict[str, int]:
        return {}
