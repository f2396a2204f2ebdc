"""Exported artifacts loaded for inference: ONNX Runtime sessions, embedding tables, tokenizer.

Serving never imports torch: everything here is numpy + onnxruntime. `Pipeline.load` checks the
manifest first and fails with one clear message if anything is missing or stale.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest, read_manifest
from ttscore.runtime.families.qwen3_tts.checkpoint import CheckpointInfo, parse_configs
from ttscore.runtime.families.qwen3_tts.prompt import Tables
from ttscore.runtime.families.qwen3_tts.tokenizer import TextTokenizer, pretokenizer_regex

logger = logging.getLogger(__name__)

class OnnxGraph:
    """One ONNX Runtime session, fed and read by the names of its GraphSpec."""

    def __init__(self, path: Path, graph: dict[str, Any], threads: int | None = None) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise ArtifactError(f"missing graph {path}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or int(os.environ.get("TTS_ORT_THREADS", "0") or 0)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers: list[Any] = ["CPUExecutionProvider"]
        if os.environ.get("TTS_DEVICE", "cpu") == "gpu":
            device_id = int(os.environ.get("TTS_CUDA_DEVICE", "0"))
            providers = [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=providers)  # type: ignore[arg-type]
        self.input_names = [t["name"] for t in graph["inputs"]]
        self.output_names = [t["name"] for t in graph["outputs"]]
        got = [i.name for i in self.session.get_inputs()]
        if sorted(got) != sorted(self.input_names):
            raise ArtifactError(f"{path.name}: inputs {got} do not match the manifest {self.input_names}")

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, outs, strict=True))


@dataclass
class VocoderStream:
    """Per-stream state of the exact streaming vocoder."""

    state: np.ndarray
    position: int = 0


def decode_streams(
    items: list[tuple[VocoderStream, np.ndarray]],
    run: Any,
    max_rows: int | None = None,
) -> list[np.ndarray]:
    """Decode each (stream, codes [T, G]) pair and advance its stream. Streams whose chunks have the
    same length go through one batched call (at most `max_rows` rows) `run(codes [B,T,G],
    state [B,S], position [B]) -> (pcm [B, T*spf], new_state [B, S])`; returns the PCM per item."""
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(items)
    by_len: dict[int, list[int]] = {}
    for i, (_, codes) in enumerate(items):
        by_len.setdefault(int(codes.shape[0]), []).append(i)
    groups = [g[k : k + (max_rows or len(g))] for g in by_len.values() for k in range(0, len(g), max_rows or len(g))]
    for idx in groups:
        pcm, state = run(
            np.stack([items[i][1] for i in idx]).astype(np.int64),
            np.stack([items[i][0].state for i in idx]).astype(np.float32),
            np.array([items[i][0].position for i in idx], dtype=np.int64),
        )
        for row, i in enumerate(idx):
            stream, codes = items[i]
            stream.state = np.array(state[row], dtype=np.float32)
            stream.position += int(codes.shape[0])
            out[i] = np.array(pcm[row], dtype=np.float32)
    return out


class OrtVocoder:
    """code2wav_stream run in-process; requests with equal chunk lengths are batched."""

    def __init__(self, graph: OnnxGraph, state_size: int, samples_per_frame: int) -> None:
        self.graph = graph
        self.state_size = state_size
        self.samples_per_frame = samples_per_frame

    def new_stream(self) -> VocoderStream:
        return VocoderStream(np.zeros(self.state_size, dtype=np.float32))

    def _run(self, codes: np.ndarray, state: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        res = self.graph.run({"codes": codes, "state": state, "position": position})
        return res["pcm"], res["new_state"]

    def decode(self, items: list[tuple[VocoderStream, np.ndarray]]) -> list[np.ndarray]:
        return decode_streams(items, self._run)


class Pipeline:
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
        self.info: CheckpointInfo = parse_configs(
            cfg["config.json"], cfg["speech_tokenizer/config.json"], cfg["generation_config.json"], artifacts
        )
        graphs = manifest.graphs
        if manifest.code2wav_state_size is None:
            raise ArtifactError(f"{artifacts}/manifest.json has no code2wav.state_size: re-export")
        self.state_size: int = manifest.code2wav_state_size

        def graph(name: str) -> OnnxGraph:
            entry = graphs[name]
            return OnnxGraph(artifacts / entry["file"], dict(entry), threads)

        self.talker = graph("talker")
        self.code_predictor = graph("code_predictor")
        self.vocoder: OrtVocoder | None = (
            OrtVocoder(graph("code2wav_stream"), self.state_size, self.info.samples_per_frame)
            if vocoder
            else None
        )
        self.speaker_encoder = graph("speaker_encoder") if encoders and "speaker_encoder" in graphs else None
        self.speech_encoder = graph("speech_encoder") if encoders and "speech_encoder" in graphs else None

        def table(name: str) -> np.ndarray:
            path = artifacts / f"{name}.npy"
            if not path.is_file():
                raise ArtifactError(f"missing table {path}")
            return np.load(path, mmap_mode="r")

        self.tables = Tables(
            text=table("text_embeddings"), codec=table("codec_embeddings"), groups=table("group_embeddings")
        )
        self.mel_filters = (
            np.asarray(table(spec.MEL_FILTERS)) if (artifacts / f"{spec.MEL_FILTERS}.npy").is_file() else None
        )
        self.tokenizer = TextTokenizer(artifacts / "tokenizer", pretokenizer_regex(cfg["config.json"]))
        self.talker_layers = self.info.talker.num_layers

    @classmethod
    def load(
        cls, artifacts: str | Path, threads: int | None = None, *, vocoder: bool = True, encoders: bool = True
    ) -> Pipeline:
        root = Path(artifacts)
        manifest = read_manifest(root)
        return cls(root, manifest, threads, vocoder=vocoder, encoders=encoders)

    # --- Base voice features ------------------------------------------------------------------

    def voice_features(
        self, audio: np.ndarray, sample_rate: int, with_codes: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """x-vector (and reference codes for in-context cloning) of a reference clip."""
        from ttscore.runtime.audio import prepare_reference

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
