"""Exported artifacts loaded for inference: ONNX Runtime sessions, embedding tables, tokenizer.

Serving never imports torch: everything here is numpy + onnxruntime. `Qwen3TTSPipeline.load` checks the
manifest first and fails with one clear message if anything is missing or stale.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest, read_manifest
from ttscore.runtime.families.qwen3_tts import decode
from ttscore.runtime.families.qwen3_tts.checkpoint import Qwen3TTSInfo, parse_configs
from ttscore.runtime.families.qwen3_tts.decode import QwenSequence
from ttscore.runtime.families.qwen3_tts.prompt import Tables
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest
from ttscore.runtime.families.qwen3_tts.tokenizer import TextTokenizer, pretokenizer_regex
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import KVArena
from ttscore.runtime.onnx import open_graph, open_table
from ttscore.runtime.sampling import suppress_mask
from ttscore.runtime.step_kit import ArenaModel
from ttscore.runtime.vocoder import OrtVocoder

logger = logging.getLogger(__name__)

class Qwen3TTSPipeline(ArenaModel):
    sequence = QwenSequence

    def __init__(
        self,
        artifacts: Path,
        manifest: Manifest,
        threads: int | None = None,
        *,
        vocoder: bool = True,
        encoders: bool = True,
    ) -> None:
        """`vocoder` / `encoders` False skip the code2wav / voice-feature sessions (a Triton
        speech_generation model gets them from the code2wav model and the voice_features ensemble)."""
        self.artifacts = artifacts
        self.manifest = manifest
        cfg = manifest.configs
        self.info: Qwen3TTSInfo = parse_configs(
            cfg["config.json"], cfg["speech_tokenizer/config.json"], cfg["generation_config.json"], artifacts
        )
        graphs = manifest.graphs
        if manifest.code2wav_state_size is None:
            raise ArtifactError(f"{artifacts}/manifest.json has no code2wav.state_size: re-export")
        self.vocoder_state_size: int = manifest.code2wav_state_size
        self.frame_seconds = self.info.samples_per_frame / self.info.sample_rate
        graph = partial(open_graph, artifacts, manifest, threads=threads)
        self.talker = graph("talker")
        self.code_predictor = graph("code_predictor")
        self.vocoder: OrtVocoder | None = (
            OrtVocoder(graph("code2wav_stream"), self.vocoder_state_size, self.vocoder_feeds) if vocoder
            else None
        )
        self.speaker_encoder = graph("speaker_encoder") if encoders and "speaker_encoder" in graphs else None
        self.speech_encoder = graph("speech_encoder") if encoders and "speech_encoder" in graphs else None
        table = partial(open_table, artifacts)
        self.tables = Tables(
            text=table("text_embeddings"), codec=table("codec_embeddings"), groups=table("group_embeddings")
        )
        self.mel_filters = (
            np.asarray(table(spec.MEL_FILTERS)) if (artifacts / f"{spec.MEL_FILTERS}.npy").is_file() else None
        )
        self.tokenizer = TextTokenizer(artifacts / "tokenizer", pretokenizer_regex(cfg["config.json"]))
        self.talker_layers = self.info.talker.num_layers
        self.num_codebooks = self.info.num_code_groups
        self.suppressed = suppress_mask(self.info.codec_vocab_size, self.info.codec_ids["eos"])
        t = self.info.talker
        self.arena = KVArena(t.num_layers, t.num_kv_heads, t.head_dim)
        self.decoder = decode.Decoder(self.info, self.tables, self.tokenizer, self.talker, self.code_predictor,
                                      self.suppressed, self.arena)

    # --- FamilyModel ---------------------------------------------------------------------------

    @staticmethod
    def vocoder_feeds(frames: NDArray[Any], state: NDArray[np.float32], position: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        """code2wav_stream's inputs (the code2wav model's too): codes [B, T, G], state, position."""
        return {"codes": frames.astype(np.int64, copy=False), "state": state, "position": position}

    def admit(self, request: Qwen3TTSRequest) -> QwenSequence:
        return decode.admit(self.decoder, request)

    def admit_open(self, request: Qwen3TTSRequest) -> QwenSequence:
        """Incremental text (ttscore.runtime.engine): the request's text is a beginning."""
        return decode.admit_open(self.decoder, request)

    def extend_text(self, seq: Sequence, text: str, done: bool) -> None:
        if isinstance(seq, QwenSequence):
            decode.extend_text(self.decoder, seq, text, done)

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        decode.prefill(self.decoder, [(s, n) for s, n in work if isinstance(s, QwenSequence)])

    def step(self, batch: list[Sequence]) -> None:
        decode.step(self.decoder, [s for s in batch if isinstance(s, QwenSequence)])

    def arenas(self) -> list[KVArena]:
        return [self.arena]

    @classmethod
    def load(
        cls, artifacts: str | Path, threads: int | None = None, *, vocoder: bool = True, encoders: bool = True
    ) -> Qwen3TTSPipeline:
        root = Path(artifacts)
        manifest = read_manifest(root)
        return cls(root, manifest, threads, vocoder=vocoder, encoders=encoders)

    # --- Base voice features ------------------------------------------------------------------

    def voice_features(
        self, audio: NDArray[Any], sample_rate: int, with_codes: bool
    ) -> tuple[NDArray[Any], NDArray[Any] | None]:
        """x-vector (and reference codes for in-context cloning) of a reference clip."""
        from ttscore.runtime.families.qwen3_tts.audio import prepare_reference

        if self.speaker_encoder is None or self.mel_filters is None:
            raise InvalidRequest("this checkpoint does not support voice cloning (not a Base model)", "ref_audio")
        wav24, mels = prepare_reference(audio, int(sample_rate), self.mel_filters)
        xvec = self.speaker_encoder.run({"mels": mels[None]})["x_vector"][0]
        codes = None
        if with_codes:
            if self.speech_encoder is None:
                raise ArtifactError("artifacts lack speech_encoder.onnx")
            codes = self.speech_encoder.run({"audio": wav24[None]})["codes"][0].astype(np.int64)
        return xvec.astype(np.float32), codes
