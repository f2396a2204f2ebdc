"""toy_tone's export entry (export.family.ExportFamily): its checkpoint is a directory with a
config.json (`model_type` "toy_tone") and weights.npz (`embed` [vocab, hidden], `proj` [hidden,
samples_per_frame]); export writes the `frames` graph, checked against numpy, and the manifest."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint
from ttscore.contract.errors import CheckpointError, ExportError
from ttscore.contract.manifest import build_manifest

from . import contract

CONFIG = "config.json"
WEIGHTS = "weights.npz"
TINY: dict[str, Any] = {"model_type": contract.NAME, "vocab_size": 128, "hidden": 8, "samples_per_frame": 160,
        "sample_rate": contract.SAMPLE_RATE, "smoothing": 0.5}


def _config(checkpoint: Path) -> dict[str, Any]:
    try:
        config = json.loads((checkpoint / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def detect(checkpoint: Path) -> bool:
    return _config(checkpoint).get("model_type") == contract.NAME


def check(checkpoint: Path) -> dict[str, Any]:
    config = _config(checkpoint)
    missing = [k for k in TINY if k not in config]
    if missing or not (checkpoint / WEIGHTS).is_file():
        raise CheckpointError(f"{checkpoint}: a {contract.NAME} checkpoint needs {CONFIG} with {', '.join(TINY)} "
                              f"and {WEIGHTS} (missing: {', '.join(missing) or WEIGHTS})")
    return config


def reference_frames(checkpoint: Path, ids: np.ndarray) -> np.ndarray:
    """What the `frames` graph computes, in numpy: embed[ids] @ proj."""
    with np.load(checkpoint / WEIGHTS) as w:
        return (w["embed"][ids] @ w["proj"]).astype(np.float32)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    import torch

    from export.tracing import check_close, export_inline, ort_run, ort_session, versions

    if precision != "fp32":
        raise ExportError(f"{contract.NAME} exports fp32 only, not {precision}")
    config = check(src)
    if progress:
        progress(1, 2, "frames graph")
    with np.load(src / WEIGHTS) as w:
        embed, proj = torch.from_numpy(w["embed"]), torch.from_numpy(w["proj"])

    class Frames(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding.from_pretrained(embed)
            self.proj = torch.nn.Parameter(proj)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.embed(ids) @ self.proj

    example = torch.tensor([[1, 2, 3]], dtype=torch.int64)
    path = export_inline(Frames().eval(), (example,), contract.FRAMES, tmp)
    if progress:
        progress(2, 2, "validate")
    ids = np.random.default_rng(0).integers(0, config["vocab_size"], (2, 5))
    (got,) = ort_run(ort_session(path), {"ids": ids})
    err = check_close("frames", got, reference_frames(src, ids), 1e-5)
    return build_manifest(
        tmp, family=contract.NAME, variant=contract.VARIANT, model_size="tiny", precision=precision, source=source,
        sizes={k: config[k] for k in ("vocab_size", "hidden", "samples_per_frame")},
        sample_rate=int(config["sample_rate"]), samples_per_frame=int(config["samples_per_frame"]),
        vocoder_state_size=1, vocoder_state_layout=[["last_sample", 1]],
        graphs={contract.FRAMES.name: contract.FRAMES}, validation={contract.FRAMES.name: {"frames": err}},
        configs={CONFIG: config}, versions=versions(),
    )


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    (out / CONFIG).write_text(json.dumps(TINY, indent=2))
    np.savez(out / WEIGHTS, embed=rng.normal(0, 1, (TINY["vocab_size"], TINY["hidden"])).astype(np.float32),
             proj=rng.normal(0, 0.1, (TINY["hidden"], TINY["samples_per_frame"])).astype(np.float32))
    return out


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Only speech_generation, with its vocoder inline."""
    return Deployment(vocoder={s.name: "inline" for s in served}, voice_features={s.name: None for s in served})


FAMILY = ExportFamily(
    name=contract.NAME, display=contract.RULES.name, hub_org="toy", signature=f"config.json with model_type {contract.NAME}",
    detect=detect, check=check, export=export, make_tiny=make_tiny, sizes=("tiny",), deploy=deploy,
)
