"""toy_tone's runtime Family (ttscore.runtime.family): one frame per input character, from the
exported `frames` graph, and an in-process streaming vocoder (a one-pole smoothing filter)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import tensors
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import Sequence
from ttscore.runtime.onnx import OnnxGraph
from ttscore.runtime.vocoder import VocoderStream, decode_streams, new_stream

from . import contract

CHUNK_FRAMES = 4  # frames in every audio chunk after the first


@dataclass
class ToyToneRequest:
    """What `admit` takes (fields named as the speech_generation inputs)."""

    text: str
    voice: str | None = None
    max_new_tokens: int | None = None
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None


@dataclass
class ToyToneSequence(Sequence):
    ids: list[int] = field(default_factory=list)  # one character id per frame to make
    cut: bool = False  # max_new_tokens stops it before the text's end


def char_ids(text: str, vocab_size: int) -> list[int]:
    """One id per character: its code point, folded into the vocabulary."""
    return [ord(c) % vocab_size for c in text]


def smooth(x: NDArray[np.float32], state: NDArray[np.float32], a: float) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """y[n] = a * y[n-1] + (1 - a) * x[n] along the last axis of x [B, N]; state [B, 1] is y[-1]."""
    y = np.empty_like(x)
    prev = state[:, 0].astype(np.float32)
    for n in range(x.shape[1]):
        prev = np.float32(a) * prev + np.float32(1 - a) * x[:, n]
        y[:, n] = prev
    return y, prev[:, None].copy()


class SmoothingVocoder:
    """The streaming vocoder, in process: frames [T, samples_per_frame] -> T * samples_per_frame samples."""

    def __init__(self, a: float) -> None:
        self.a = a

    def new_stream(self) -> VocoderStream:
        return new_stream(1)

    def _run(self, frames: NDArray[Any], state: NDArray[np.float32], position: NDArray[np.int64]) -> tuple[NDArray[Any], NDArray[Any]]:
        return smooth(frames.reshape(frames.shape[0], -1).astype(np.float32), state, self.a)

    def decode(self, items: list[tuple[VocoderStream, NDArray[Any]]]) -> list[NDArray[Any]]:
        return decode_streams(items, self._run)


class ToyToneModel:
    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None) -> None:
        config = manifest.configs.get("config.json")
        if not isinstance(config, Mapping):
            raise ArtifactError(f"{artifacts}: the manifest has no config.json")
        self.vocab_size = int(config["vocab_size"])
        self.samples_per_frame = int(config["samples_per_frame"])
        self.sample_rate = int(config["sample_rate"])
        spec = manifest.graphs.get(contract.FRAMES.name)
        if spec is None:
            raise ArtifactError(f"{artifacts}: no {contract.FRAMES.name} graph in the manifest")
        self.frames_graph = OnnxGraph(artifacts / str(spec["file"]), dict(spec), threads)
        self._vocoder = SmoothingVocoder(float(config["smoothing"]))

    @property
    def vocoder(self) -> SmoothingVocoder:
        return self._vocoder

    @property
    def num_codebooks(self) -> int:
        return self.samples_per_frame  # a frame is one row of samples

    @property
    def frame_seconds(self) -> float:
        return self.samples_per_frame / self.sample_rate

    @property
    def vocoder_state_size(self) -> int:
        return 1

    def vocoder_feeds(self, frames: NDArray[Any], state: NDArray[np.float32], position: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        return {"frames": frames, "state": state}  # no Triton vocoder model: only the in-process one runs

    def admit(self, request: ToyToneRequest) -> ToyToneSequence:
        rules = contract.RULES
        if not isinstance(request.text, str) or not request.text.strip():
            raise InvalidRequest("'text' must not be empty", "text")
        if request.voice not in (None, contract.VOICE):
            raise InvalidRequest(f"voice {request.voice!r} is not a {rules.name} voice (its only one is "
                                 f"{contract.VOICE!r})", "voice")
        limit = rules.field("max_new_tokens").check(request.max_new_tokens)
        if limit is None and len(request.text) > contract.MAX_FRAMES:
            raise InvalidRequest(f"'text' makes one frame per character: at most {contract.MAX_FRAMES}", "text")
        initial = rules.field("initial_codec_chunk_frames").resolve(request.initial_chunk_frames)
        ids = char_ids(request.text, self.vocab_size)
        return ToyToneSequence(initial_chunk_frames=initial, chunk_frames=request.chunk_frames or CHUNK_FRAMES,
                               text_tokens=len(ids), ids=ids[:limit], cut=len(ids) > len(ids[:limit]))

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        """No prompt (prompt_tokens is 0): nothing to prefill."""

    def step(self, batch: list[Sequence]) -> None:
        seqs = [s for s in batch if isinstance(s, ToyToneSequence)]
        ids = np.array([[s.ids[s.frames_out]] for s in seqs], dtype=np.int64)
        frames = self.frames_graph.run({"ids": ids})["frames"]
        for row, seq in enumerate(seqs):
            seq.pending.append(frames[row, 0])
            seq.frames_out += 1
            if seq.frames_out == len(seq.ids):
                seq.finished = "length" if seq.cut else "stop"

    def release(self, seq: Sequence) -> None:
        """No decode state to free."""

    def memory(self) -> dict[str, int]:
        return {}


class ToyTone:
    name = contract.NAME
    rules = contract.RULES

    def load(self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool,
             encoders: bool) -> ToyToneModel:
        return ToyToneModel(artifacts, manifest, threads)  # its vocoder is always in process

    def request_from_tensors(self, inputs: Mapping[str, NDArray[Any]]) -> ToyToneRequest:
        return ToyToneRequest(**tensors.request_kwargs(inputs, self.name))


FAMILY = ToyTone()
