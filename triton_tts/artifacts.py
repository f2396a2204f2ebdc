"""Where exported artifacts live and when a checkpoint needs (re-)exporting: shared by the CLI commands."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from triton_tts.checkpoints import Checkpoint, resolve_checkpoint
from ttscore.contract.errors import ArtifactError

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    return Path(os.environ.get("TRITON_TTS_CACHE", Path.home() / ".cache" / "triton-tts"))


def cached_export(fingerprint: str, precision: str, adapter_sha256: str | None = None) -> Path:
    """Where the cache keeps the export of the checkpoint with this content fingerprint (and startup
    LoRA adapter, by content): keyed by content, not path, so two paths to the same files share one export."""
    lora = f"-lora-{adapter_sha256[:16]}" if adapter_sha256 else ""
    return cache_root() / "artifacts" / f"{fingerprint}-{precision}{lora}"


def _digests() -> Path:
    return cache_root() / "digests.json"


def checkpoint_fingerprint(src: Path) -> str:
    """export.exporter.fingerprint of `src`, with the file hashes remembered across runs in the
    cache (by real path, size and modification time): a large checkpoint is read once."""
    from export.exporter import fingerprint

    try:
        memo = json.loads(_digests().read_text(encoding="utf-8"))
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        memo = {}
    before = len(memo)
    fp = fingerprint(src, memo)
    if len(memo) != before:
        try:
            _digests().parent.mkdir(parents=True, exist_ok=True)
            tmp = _digests().with_name(f".digests.{os.getpid()}")
            tmp.write_text(json.dumps(memo), encoding="utf-8")
            os.replace(tmp, _digests())
        except OSError as exc:  # a read-only cache only costs hashing again
            logger.warning("cannot remember checkpoint file hashes in %s: %s", _digests(), exc)
    return fp


def ensure_artifacts(checkpoint: str | Path | Checkpoint, precision: str = "fp32", out: Path | None = None, *,
                     quiet: bool = False, lora: str | Path | None = None) -> Path:
    """Artifacts for a checkpoint (a directory, cache snapshot or repo id: triton_tts.checkpoints),
    exported into the cache (or `out`) unless an up-to-date export exists (same source fingerprint,
    precision and startup LoRA adapter `lora`, by content, made at the family's current export revision:
    export.family.ExportFamily.revision); an export shows its stages (triton_tts.progress) unless `quiet`."""
    from export.exporter import adapter_identity, export_checkpoint
    from export.families import export_entry
    from triton_tts.progress import Stages
    from ttscore.contract.manifest import read_manifest

    ckpt = resolve_checkpoint(checkpoint)
    src = ckpt.path.resolve()
    family = export_entry(src)  # a family's checkpoint, or the forced aligner's
    family.check(src)  # fail fast, before any heavy import
    adapter = adapter_identity(family, lora)["sha256"] if lora is not None else None
    fp = checkpoint_fingerprint(src)
    target = out or cached_export(fp, precision, adapter)
    try:
        manifest = read_manifest(target)
        if (manifest.fingerprint == fp and manifest.precision == precision and manifest.adapter_sha256 == adapter
                and manifest.export_revision == family.revision):
            return target
    except ArtifactError:
        pass
    logger.info("exporting %s -> %s (%s%s)", src, target, precision, f", LoRA {lora}" if lora else "")
    with Stages(f"export {ckpt.name}", quiet=quiet) as stages:
        export_checkpoint(src, target, precision=precision, progress=stages.hook, lora=lora)
    return target


def lora_env() -> str | None:
    """The default of `--lora`: $TTS_LORA (compose and Kubernetes set it; empty: none)."""
    return os.environ.get("TTS_LORA") or None


def add_lora(parser: argparse.ArgumentParser, env: bool = True) -> None:
    """`--lora DIR` (export, say, serve, prepare); serve and prepare default to $TTS_LORA."""
    from export.families import FAMILIES

    formats = "; ".join(f"{f.display}: {f.lora.format}" for f in FAMILIES.values() if f.lora is not None)
    parser.add_argument("--lora", metavar="DIR", default=lora_env() if env else None,
                        help=f"a startup LoRA adapter directory, merged into the weights before export ({formats})"
                        + ("; default $TTS_LORA" if env else ""))


def assign_lora(checkpoints: list[Checkpoint], lora: str | Path | None) -> list[str | Path | None]:
    """`--lora` of serve and prepare, per checkpoint: the adapter goes to the one checkpoint whose
    family takes startup LoRA adapters (export.family.LoraSupport); none or several such is an error."""
    from export.families import family_of
    from ttscore.contract.errors import InvalidRequest

    if lora is None:
        return [None] * len(checkpoints)
    takes = [family_of(c.path.resolve()).lora is not None for c in checkpoints]
    if sum(takes) != 1:
        names = [c.name for c, t in zip(checkpoints, takes, strict=True) if t]
        raise InvalidRequest(
            f"--lora applies to the one served checkpoint whose family takes LoRA adapters; "
            f"{'none is' if not names else 'several are: ' + ', '.join(names)}", "lora")
    return [lora if t else None for t in takes]


def demo_checkpoints(root: Path) -> list[Path]:
    """The tiny random-weight demo checkpoints of `serve` and `prepare --demo` (built once under
    `root`): every registered family's (export.family.ExportFamily.demo), in registry order."""
    from export.families import FAMILIES

    out = []
    for family in FAMILIES.values():
        for name, options in family.demo:
            path = root / name
            if not family.detect(path):
                family.make_tiny(path, seed=0, **options)
            out.append(path)
    return out
