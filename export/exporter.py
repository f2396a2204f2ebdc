"""`triton-tts export`: checkpoint directory -> validated ONNX artifacts + manifest.json.

Everything is written into a temporary sibling directory and renamed into place only after every
graph passed validation against PyTorch, so a failed export never leaves a directory that looks
valid. The source checkpoint is never written to. What is exported is the family's business
(export/<family>/exporter.py); this module owns the directory, the source record and the errors.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from export.families import export_entry
from export.family import ExportFamily, ExportProgress
from ttscore.contract.errors import ExportError, InvalidRequest, TTSError
from ttscore.contract.manifest import MANIFEST
from ttscore.runtime.weights import checkpoint_fingerprint, file_digest

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "int8", "int4")


def fingerprint(checkpoint: Path, memo: dict[str, str] | None = None) -> str:
    """Identity of a checkpoint's files by content, for export caches (ttscore.runtime.weights)."""
    return checkpoint_fingerprint(checkpoint, memo)


def source_record(src: Path) -> dict[str, Any]:
    """The manifest's `source`: path, fingerprint and every file's checksum."""
    memo: dict[str, str] = {}
    files = {}
    for p in sorted(src.rglob("*")):
        if p.is_file():
            files[str(p.relative_to(src))] = {"sha256": file_digest(p, memo), "bytes": p.stat().st_size}
    return {"path": str(src), "fingerprint": fingerprint(src, memo), "files": files}


def adapter_identity(family: ExportFamily, lora: str | Path) -> dict[str, Any]:
    """The identity of a startup LoRA adapter for a checkpoint of `family` (export.family.LoraSupport),
    its format checked; InvalidRequest for a family that takes none."""
    if family.lora is None:
        raise InvalidRequest(f"--lora: {family.display} checkpoints take no LoRA adapter", "lora")
    return family.lora.identity(Path(lora))


def export_checkpoint(
    checkpoint: str | Path, out: str | Path, *, precision: str = "fp32", device: str = "cpu",
    progress: ExportProgress | None = None, lora: str | Path | None = None,
) -> dict[str, Any]:
    """Export + validate. Returns the manifest. Raises CheckpointError / ExportError.
    `progress` is told of each stage as it starts. `lora`: a startup LoRA adapter directory merged
    into the weights before export (the family's format, export.family.LoraSupport)."""
    if precision not in PRECISIONS:
        raise ExportError(f"precision must be one of {', '.join(PRECISIONS)} on this build, got {precision!r}")
    if device != "cpu":
        raise ExportError("TensorRT engines are built on a GPU host (device=gpu); this machine has none")
    src = Path(checkpoint).resolve()
    dst = Path(out).resolve()
    # The checkpoint's config.json decides the family (the one dispatch point of export); the forced aligner, no
    # speech family, is recognised first.
    family = export_entry(src)
    family.check(src)
    options: dict[str, Any] = {}
    if lora is not None:
        adapter_identity(family, lora)  # its format, before any heavy work
        options["lora"] = Path(lora).resolve()
    if dst == src or src in dst.parents:
        raise ExportError("the output directory must not be inside the source checkpoint")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    started = time.time()
    try:
        manifest = family.export(src, tmp, precision, progress, source_record(src), **options)
        manifest["export_revision"] = family.revision
        manifest["export_seconds"] = round(time.time() - started, 1)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
        if dst.exists():
            old = dst.parent / f".{dst.name}.old-{os.getpid()}"
            dst.rename(old)
            tmp.rename(dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dst)
        return manifest
    except TTSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # every failure becomes a typed export error
        shutil.rmtree(tmp, ignore_errors=True)
        logger.exception("export failed")
        raise ExportError(f"export failed: {type(exc).__name__}: {exc}") from exc
