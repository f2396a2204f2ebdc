"""A Fish Speech export run offline: its graphs and tables behind the frame loop (generate.py), the DAC encoder for
a reference clip, and the streaming decoder for the audio (the served path is model.py under the shared engine;
the served dac_encoder runs `encode_reference`).

Noise: a request's sampling noise comes from its seed, `request_noise(seed, frames)`: numpy's default_rng(seed)
draws the Slow AR's Exp(1) rows [frames, codebook_size + 1], then the Fast AR's [frames, 9, 1024].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.fish_speech.generate import (
    F32,
    Knobs,
    Result,
    Tables,
    generate,
    prompt_embeddings,
)
from ttscore.runtime.families.fish_speech.prompt import FishPrompt
from ttscore.runtime.kv import GrowingPast
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

    def slow(self, x: F32, _pos: int, past: GrowingPast | None) -> tuple[F32, F32, GrowingPast]:
        past = past or GrowingPast(self.slow_layers, *self.slow_kv)
        out = past.step(self.graphs["slow_step"], x)
        return out["hidden"][0], out["logits"][0], past

    def fast(self, x: F32, _pos: int, past: GrowingPast | None) -> tuple[F32, GrowingPast]:
        past = past or GrowingPast(self.fast_layers, *self.fast_kv)
        return past.step(self.graphs["fast_step"], x, mask=False)["logits"][0], past

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

    def synthesize(self, text: str, *, max_new_tokens: int = spec.DEFAULT_MAX_NEW_TOKENS, seed: int = 42,
                   temperature: float = spec.DEFAULT_TEMPERATURE, top_k: int = spec.DEFAULT_TOP_K,
                   top_p: float = spec.DEFAULT_TOP_P, ref_audio: F32 | None = None, ref_text: str | None = None,
                   noise: tuple[F32, F32] | None = None) -> tuple[Result, NDArray[np.int64] | None]:
        """(the frames, the reference clip's codes when cloning)."""
        if ref_audio is not None and not (ref_text or "").strip():
            raise InvalidRequest("'ref_text' is required with 'ref_audio'", "ref_text")
        ref_codes = self.encode(ref_audio) if ref_audio is not None else None
        if ref_codes is not None:
            ids, at = self.prompt.clone(text, str(ref_text), [int(c) + self.tables.semantic_start for c in ref_codes[:, 0]])
        else:
            ids, at = self.prompt.text_only(text), 0
        q_slow, q_fast = noise or request_noise(seed, max_new_tokens, self.tables.codebook_size + 1,
                                                self.tables.num_codebooks)
        result = generate(self.tables, self.slow, self.fast, prompt_embeddings(self.tables, ids, ref_codes, at),
                          max_new_tokens, Knobs(temperature, top_k, top_p), q_slow, q_fast)
        return result, ref_codes
