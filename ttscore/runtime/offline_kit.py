"""What the families' offline tools (`say`, `precompute-voice`; ttscore.runtime.family.OfflineTools) do the
same way: refuse the `say` options a family does not take, refuse voice files where a family has none, and open
the export a voice file is computed from (a decoder step over one sequence's growing K/V past:
ttscore.runtime.kv.GrowingPast)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest, read_manifest
from ttscore.runtime.family import Progress, VoiceFileOptions


def refuse_options(options: Any, display: str, names: Iterable[str] = (), *, qwen_param: str = "ref_audio") -> None:
    """InvalidRequest for the first of `names` (SayOptions fields) given to a family (`display`) that does not
    take it, then for Qwen3-TTS's own --x-vector-only/--non-streaming-mode (named `qwen_param`)."""
    for name in names:
        if getattr(options, name):
            raise InvalidRequest(f"--{name.replace('_', '-')} is not supported by {display}", name)
    if options.x_vector_only or options.non_streaming_mode is not None:
        raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", qwen_param)


def ref_text_needs_audio(options: Any, param: str = "ref_text") -> None:
    """InvalidRequest naming `param` for --ref-text (a reference clip's transcript) without --ref-audio."""
    if options.ref_text and not options.ref_audio:
        raise InvalidRequest("--ref-text needs --ref-audio", param)


def check_voice_mode(mode: str | None, modes: tuple[str, ...], display: str) -> None:
    """A precompute-voice --mode among the family's `modes` (None: the family's default)."""
    if mode not in (None, *modes):
        raise InvalidRequest(f"mode must be one of {', '.join(modes)} for {display}, got {mode!r}", "mode")


@dataclass(frozen=True)
class NoVoiceFiles:
    """The voice-file half of a family that has none: precompute-voice refuses, saying why (`refusal`, after
    "precompute-voice does not support ")."""

    voice_help: str
    refusal: str
    voice_modes: tuple[str, ...] = ()

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        raise InvalidRequest(f"precompute-voice does not support {self.refusal}", "checkpoint")


@dataclass(frozen=True)
class Export:
    """A family's exported checkpoint a voice file is computed from."""

    root: Path
    manifest: Manifest

    @classmethod
    def of(cls, artifacts: str | Path, family: str, display: str) -> Export:
        """The export in `artifacts`; InvalidRequest when it is another family's."""
        root = Path(artifacts)
        manifest = read_manifest(root)
        if manifest.family != family:
            raise InvalidRequest(f"{root} is a {manifest.family} export, not {display}", "checkpoint")
        return cls(root, manifest)

    def graph(self, name: str) -> Any:
        """The manifest's graph `name` opened (ttscore.runtime.onnx.OnnxGraph, default threads)."""
        from ttscore.runtime.onnx import OnnxGraph

        entry = self.manifest.graphs.get(name)
        if entry is None:
            raise InvalidRequest(f"{self.root}/manifest.json lists no {name} graph: re-export", "checkpoint")
        return OnnxGraph(self.root / entry["file"], dict(entry), None)

    def identity(self, sha_key: str, source_file: str) -> dict[str, Any]:
        """What a voice file records of the checkpoint: its name and the checksum of the source file the
        voice's codes depend on (`sha_key`: the voice file's key for it)."""
        source = Path(str((self.manifest.raw.get("source") or {}).get("path") or self.root))
        return {"name": source.name, sha_key: self.manifest.source_sha256(source_file)}
