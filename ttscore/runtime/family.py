"""The seam between the family-agnostic engine and one model family.

The engine (ttscore.runtime.engine) owns continuous batching, the chunk schedule, the streaming
vocoder state, usage and the event protocol. A family owns everything model-specific: request rules
and resolution, the prompt, the per-frame decode. It exposes that as a `FamilyModel` whose requests
are `Sequence`s: the engine reads and clears the generic fields below, the family adds its own.
Registration: ttscore.runtime.families.FAMILIES. A family may also give the offline tools (`say`,
`precompute-voice`) what they need as `offline` (an `OfflineTools`; see below).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ttscore.contract.manifest import Manifest
from ttscore.contract.rules import FamilyRules

Codes = npt.NDArray[Any]  # one row per frame: codec codes [frames, codebooks] (Qwen3-TTS) or latent patches [frames, P, D] (VoxCPM2)
Pcm = npt.NDArray[np.float32]  # mono samples


@dataclass
class Sequence:
    """One admitted request, as the engine sees it. Families subclass it with their decode state."""

    initial_chunk_frames: int  # frames in the first audio chunk
    chunk_frames: int  # frames in every later chunk
    text_tokens: int  # usage: input text tokens
    audio_tokens: int = 0  # usage: reference audio frames fed in context
    vocoder_prefix: Codes | None = None  # codes run through the vocoder first, their audio dropped
    prompt_tokens: int = 0  # positions the family's prefill must run before the first frame
    prefilled: int = 0  # of those, already run (a long prompt is prefilled in chunks)
    pending: list[Codes] = field(default_factory=list)  # frames made but not yet vocoded
    frames_out: int = 0
    finished: str | None = None  # "stop" | "length" once no more frames will come
    # Incremental text (a family's `extend_text`): the sequence has used all the text it has and
    # waits for more (or for its end); the engine keeps it, but neither prefills nor steps it.
    waiting_for_text: bool = False
    # An utterance of independent parts (MOSS-TTS-Nano's text chunks, each decoded on its own): after `n` frames in
    # all, the vocoder stream ends, `breaks[n]` samples of silence follow and a new stream starts.
    breaks: dict[int, int] = field(default_factory=dict)


class Vocoder(Protocol):
    """Streaming vocoder: per-stream state travels with the request; items of one call may batch."""

    def new_stream(self) -> Any: ...

    def decode(self, items: list[tuple[Any, Codes]]) -> list[Pcm]: ...


class FamilyModel(Protocol):
    """A loaded checkpoint of one family."""

    @property
    def vocoder(self) -> Vocoder | None:
        """The in-process vocoder (None: the caller supplies one, e.g. Triton BLS)."""
        ...

    @property
    def num_codebooks(self) -> int: ...

    @property
    def frame_seconds(self) -> float:
        """Audio seconds of one frame (the chunk schedule paces streams with it)."""
        ...

    @property
    def vocoder_state_size(self) -> int:
        """Floats of the streaming vocoder's per-stream state (ttscore.runtime.vocoder)."""
        ...

    def vocoder_feeds(
        self, frames: npt.NDArray[Any], state: npt.NDArray[np.float32], position: npt.NDArray[np.int64]
    ) -> dict[str, npt.NDArray[Any]]:
        """The vocoder graph's inputs for one batch of chunks (frames [B, T, ...], state [B, S],
        position [B]); the same names serve the in-process graph and the Triton vocoder model."""
        ...

    def admit(self, request: Any) -> Sequence:
        """Validate (InvalidRequest naming the field) and prepare one request; no model call, so a
        burst of joins costs nothing until the engine schedules their prefill."""
        ...

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        """Run the next `n` prompt positions of each sequence in one batched call. A sequence whose
        prompt completes leaves with its first frame in `pending` (or `finished`)."""
        ...

    def step(self, batch: list[Sequence]) -> None:
        """Advance every prefilled sequence by one frame: append it to `pending`, set `finished` when done."""
        ...

    def release(self, seq: Sequence) -> None:
        """Free the sequence's decode state (its KV slot); called once it leaves the engine."""
        ...

    def memory(self) -> dict[str, int]:
        """Decode-state memory now (bytes), for reports and metrics."""
        ...


class Family(Protocol):
    @property
    def name(self) -> str:
        """The manifest's "family"."""
        ...

    @property
    def rules(self) -> FamilyRules:
        """The request rules, shared with the gateway."""
        ...

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> FamilyModel: ...

    def request_from_tensors(self, tensors: Mapping[str, npt.NDArray[Any]]) -> Any:
        """The family's request (what `admit` takes) from a speech_generation request's input
        tensors; raises InvalidRequest naming the tensor (one the family does not take included)."""
        ...


# --- what the offline tools ask of a family (`Family.offline`, optional) ---------------------------

# Progress hook: (stage number from 1, number of stages, what the stage does), called as each starts
# (triton_tts.progress.Stages.hook).
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class SayOptions:
    """What `triton-tts say` asks for, family-neutral: the family refuses what it does not take
    (InvalidRequest naming the option) and builds its own request."""

    text: str
    voice: str | None = None
    language: str | None = None
    instructions: str | None = None
    ref_audio: str | None = None  # a reference clip file
    ref_text: str | None = None
    x_vector_only: bool = False
    seed: int | None = None
    max_new_tokens: int | None = None
    non_streaming_mode: bool | None = None
    greedy: bool = False


@dataclass(frozen=True)
class SayJob:
    model: FamilyModel
    request: Any  # what model.admit takes
    sample_rate: int  # of the audio it makes
    frame_unit: str  # what its frames are called in messages ("frames", "patches")


@dataclass(frozen=True)
class VoiceFileOptions:
    """What `triton-tts precompute-voice` asks for: a voice file from a reference clip."""

    voice_name: str
    ref_audio: str  # a reference clip file
    output_dir: Path
    ref_text: str | None = None  # its transcript
    mode: str | None = None  # one of the family's voice_modes; None: the family's default
    speaker_description: str | None = None


class OfflineTools(Protocol):
    voice_modes: tuple[str, ...]  # precompute-voice --mode values
    voice_help: str  # what precompute-voice writes for this family, for --help

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """Load the exported checkpoint and build the request `say` synthesizes."""
        ...

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress) -> tuple[dict[str, Any], str]:
        """Write the voice file; returns the voice manifest entry and a short description of it."""
        ...


def read_reference(path: str | Path) -> tuple[npt.NDArray[Any], int]:
    """A reference clip file -> (float32 mono, sample rate); InvalidRequest naming `ref_audio`."""
    from ttscore.contract.errors import InvalidRequest
    from ttscore.runtime.audio import load_audio

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read reference audio {path}: {exc}", "ref_audio") from None
    return load_audio(data)


# --- the kit: a family's runtime entry as a declaration ---------------------------------------------------


def resolve(target: str) -> Any:
    """`"package.module:name"`, imported now (a family entry names its heavy modules, loaded when first used)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class DeclaredFamily:
    """A `Family` from names: its model class (`model`, built as `Model(artifacts, [manifest,] threads, **kw)`
    with the keywords in `takes` among manifest, vocoder and encoders), its request class (built from the
    request's tensors, `renames` mapping a wire name to the request's field) and its offline tools. The modules
    load when first used (onnxruntime, tokenizers)."""

    name: str
    rules: FamilyRules
    model: str
    request: str
    offline_tools: str
    takes: tuple[str, ...] = ("manifest", "vocoder")
    renames: Mapping[str, str] = field(default_factory=dict)
    export_revision: int = 1  # the export format its model reads (the contract's EXPORT_REVISION)

    @classmethod
    def of(cls, contract: Any, model: str, request: str, *, takes: tuple[str, ...] = ("manifest", "vocoder"),
           renames: Mapping[str, str] | None = None) -> DeclaredFamily:
        """A built-in family by folder convention: `contract` is its contract module (FAMILY, RULES), `model` and
        `request` name the classes (or the request builder) in its folder's model.py and request.py, and its
        offline tools are offline.py's OFFLINE."""
        package = f"{__package__}.families.{contract.FAMILY}"
        return cls(contract.FAMILY, contract.RULES, f"{package}.model:{model}", f"{package}.request:{request}",
                   f"{package}.offline:OFFLINE", takes, dict(renames or {}), getattr(contract, "EXPORT_REVISION", 1))

    def load(self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
             ) -> FamilyModel:
        cls = resolve(self.model)
        args: list[Any] = [artifacts, *([manifest] if "manifest" in self.takes else []), threads]
        kw = {k: v for k, v in (("vocoder", vocoder), ("encoders", encoders)) if k in self.takes}
        model: FamilyModel = cls(*args, **kw)
        return model

    @property
    def offline(self) -> OfflineTools:
        tools: OfflineTools = resolve(self.offline_tools)
        return tools

    def request_from_tensors(self, tensors: Mapping[str, npt.NDArray[Any]]) -> Any:
        from ttscore.contract import tensors as triton_io

        kwargs = triton_io.request_kwargs(tensors, self.name)
        for wire, own in self.renames.items():
            if wire in kwargs:
                kwargs[own] = kwargs.pop(wire)
        return resolve(self.request)(**kwargs)
