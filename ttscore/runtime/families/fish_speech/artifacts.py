"""A Fish Speech export's graphs and the tables of the frame loop (model.py runs it under the shared engine), the
DAC encoder for a reference clip (the served dac_encoder runs `encode_reference`), and the streaming decoder for a
whole utterance's audio.

Noise: a request's sampling noise comes from its seed, `request_noise(seed, frames)`: numpy's default_rng(seed)
draws the Slow AR's Exp(1) rows [frames, codebook_size + 1], then the Fast AR's [frames, 9, 1024].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import fish_speech as spec
from ttscore.runtime.families.fish_speech.generate import F32, Tables
from ttscore.runtime.families.fish_speech.prompt import FishPrompt
from ttscore.runtime.onnx import ExportedGraphs, OnnxGraph


def request_noise(seed: int, frames: int, candidates: int = 4097, codebooks: int = spec.NUM_CODEBOOKS
                  ) -> tuple[F32, F32]:
    rng = np.random.default_rng(seed)
    q_slow = rng.exponential(size=(frames, candidates)).astype(np.float32)
    q_fast = rng.exponential(size=(frames, codebooks - 1, spec.RESIDUAL_CODEBOOK_SIZE)).astype(np.float32)
    return q_slow, q_fast


def encode_clip(graph: OnnxGraph, audio: NDArray[Any], samples_per_frame: int) -> NDArray[np.int64]:
    """A 44.1 kHz clip -> its DAC codes [frames, 10] (zero-padded to whole frames, as DAC.encode pads)."""
    a = np.asarray(audio, np.float32).reshape(-1)
    a = np.pad(a, (0, -len(a) % samples_per_frame))
    codes: NDArray[np.int64] = graph.run({"audio": a[None]})["codes"][0].T.astype(np.int64)
    return codes


def encode_reference(graph: OnnxGraph, audio: NDArray[Any], rate: int, samples_per_frame: int,
                     param: str = "ref_audio", rate_param: str | None = None) -> NDArray[np.int64]:
    """A reference clip at any rate (the family's bounds, InvalidRequest naming `param`) -> resampled to 44.1 kHz
    (vLLM-Omni resamples with torchaudio's Resample; here soxr, ttscore.runtime.audio) -> its codes [frames, 10].
    The one rule of the served dac_encoder and offline cloning."""
    from ttscore.runtime.audio import check_reference, resample

    wav = check_reference(audio, rate, param, rate_param, spec.REF_AUDIO)
    if int(rate) != spec.SAMPLE_RATE:
        wav = np.asarray(resample(wav, int(rate), spec.SAMPLE_RATE), np.float32)
    return encode_clip(graph, wav, samples_per_frame)


class FishArtifacts(ExportedGraphs):
    def __init__(self, artifacts: Path, threads: int | None = None) -> None:
        super().__init__(artifacts, threads)
        raw = self.manifest.raw
        self.state_size = int(raw["vocoder"]["state_size"])
        self.samples_per_frame = int(raw["samples_per_frame"])
        cfg = self.sizes["config"]

        table = self.table
        project = ((table(spec.PROJECT_IN_WEIGHT), table(spec.PROJECT_IN_BIAS))
                   if (self.root / f"{spec.PROJECT_IN_WEIGHT}.npy").is_file() else None)
        self.tables = Tables(embeddings=table(spec.EMBEDDINGS), codebook_embeddings=table(spec.CODEBOOK_EMBEDDINGS),
                             fast_embeddings=table(spec.FAST_EMBEDDINGS), project_in=project,
                             semantic_start=int(cfg["semantic_start"]), codebook_size=int(cfg["codebook_size"]),
                             num_codebooks=int(cfg["num_codebooks"]))
        self.slow_layers = int(cfg["slow"]["n_layer"])
        self.fast_layers = int(cfg["fast"]["n_layer"])
        self.slow_kv = (int(cfg["slow"]["n_local_heads"]), int(cfg["slow"]["head_dim"]))
        self.fast_kv = (int(cfg["fast"]["n_local_heads"]), int(cfg["fast"]["head_dim"]))
        self.prompt = FishPrompt(self.root / "tokenizer" / "tokenizer.json")

    def encode(self, audio: F32) -> NDArray[np.int64]:
        """A 44.1 kHz clip -> its codes [frames, 10]."""
        return encode_clip(self.graphs["dac_encode"], audio, self.samples_per_frame)

    def decode(self, codes: NDArray[np.int64], chunks: list[int] | None = None) -> F32:
        """Frames [T, 10] -> audio, streamed through dac_stream in `chunks` (default: whole)."""
        sizes = chunks or [len(codes)]
        state = np.zeros((1, self.state_size), np.float32)
        pieces, at = [], 0
        for n in sizes:
            out = self.graphs["dac_stream"].run({"codes": np.ascontiguousarray(codes[at:at + n].T[None]),
                                                 "state": state})
            pieces.append(out["pcm"][0])
            state = out["new_state"]
            at += n
        return np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
