"""Qwen3-TTS's export entry (export/families.py): detect, export, make-tiny, demo, deployment.

Light to import (no torch): the heavy modules load when an entry point is called.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint, TinyOption, lazy
from ttscore.contract import qwen3_tts as contract
from ttscore.contract.errors import ArtifactError, InvalidRequest

VARIANTS = ("custom_voice", "voice_design", "base")
SIZES = ("tiny", "0.6b", "1.7b")  # export.qwen3_tts.tiny.SIZES (checked by tests/export_tests/test_tiny.py)
# Models of the voice-cloning (Base) checkpoint's voice features: the ensemble and its steps.
VOICE_FEATURE_MODELS = ("voice_features", "audio_preprocess", "speaker_encoder", "speech_encoder")
TOKENIZER_WEIGHTS = "speech_tokenizer/model.safetensors"


def detect(checkpoint: Path) -> bool:
    try:
        cfg = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("model_type") == contract.FAMILY


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.qwen3_tts.exporter import export_qwen3_tts
    from ttscore.runtime.families.qwen3_tts.checkpoint import read_checkpoint

    return export_qwen3_tts(src, tmp, read_checkpoint(src), precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny", *, variant: str | None = None,
              greedy: bool = False) -> Path:
    from export.qwen3_tts import tiny

    if not variant:
        raise InvalidRequest(f"--variant is required for --family {contract.FAMILY}", "variant")
    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {', '.join(SIZES)}", "size")
    return tiny.make_tiny(variant, Path(out), seed=seed, size=size, greedy=greedy)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Every checkpoint shares one `code2wav` model (BLS) when their speech tokenizers are
    byte-identical, else each decodes inline; the Base checkpoint (at most one) gets the
    `voice_features` ensemble."""
    bases = [s for s in served if s.manifest.variant == "base"]
    if len(bases) > 1:
        raise ArtifactError("at most one Qwen3-TTS Base checkpoint can be served at a time (one voice_features ensemble)")
    shas = {s.manifest.source_sha256(TOKENIZER_WEIGHTS) for s in served}
    shared = len(shas) == 1 and None not in shas
    plan = Deployment(flags={"shared_code2wav": shared})
    for s in served:
        plan.vocoder[s.name] = "code2wav" if shared else "inline"
        plan.voice_features[s.name] = "voice_features" if s.manifest.variant == "base" else None
    if shared:
        plan.models.append(("code2wav", "code2wav", {"artifacts_dir": str(served[0].artifacts)}))
        plan.readiness.append("code2wav")
    for name in VOICE_FEATURE_MODELS if bases else ():
        params = None if name == "voice_features" else {"artifacts_dir": str(bases[0].artifacts)}
        plan.models.append((name, name, params))
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY,
    display="Qwen3-TTS",
    hub_org="Qwen",
    signature=f"config.json with model_type {contract.FAMILY!r}",
    detect=detect,
    check=lazy("ttscore.runtime.families.qwen3_tts.checkpoint:read_checkpoint"),
    export=export,
    make_tiny=make_tiny,
    sizes=SIZES,
    deploy=deploy,
    tiny_options=(
        TinyOption("variant", "Qwen3-TTS only (required there)", choices=VARIANTS),
        TinyOption("greedy", "generation_config with do_sample false", flag=True),
    ),
    demo=(("Qwen3-TTS-tiny-CustomVoice", {"variant": "custom_voice"}), ("Qwen3-TTS-tiny-Base", {"variant": "base"})),
)
