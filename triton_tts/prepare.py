"""`triton-tts prepare`: everything a deployment needs before Triton starts (docker-compose.yml's init service).

1. the checkpoints: every checkpoint of a registered family (export/families.py) in `--checkpoints`
   (that directory itself, a Hugging Face cache snapshot or repo id, or the checkpoints directly in
   it: subdirectories and `models--*` repos of a Hugging Face cache; triton_tts.checkpoints), or
   with `--demo` the tiny random-weight demo checkpoints of `triton-tts serve` (built once under
   `<artifacts>/demo-checkpoints`);
2. each exported into `<artifacts>/<model id>`, skipped when the export there is current (same
   source fingerprint and precision, as `serve` decides);
3. the Triton model repository rendered into `--repository` (as `serve` renders it; `--device gpu`
   puts the graph-running models on KIND_GPU instances);
4. the gateway config written to `--gateway-config`, naming Triton as `--triton-url`.

The paths written into the repository and the config are the ones given here: the serving containers
mount the same directories at the same paths. Nothing else needs editing by hand.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from triton_tts.artifacts import add_lora
from triton_tts.checkpoints import Checkpoint, resolve_checkpoint
from triton_tts.checkpoints import find_checkpoints as checkpoints_in
from triton_tts.progress import add_quiet
from triton_tts.serve import add_aligner_arg, add_runaway_args, generation_params
from ttscore.contract.errors import CheckpointError, TTSError

ALIGNER_DIR = "forced-aligner"  # under ARTIFACTS: the aligner's export (a model id would need a checkpoint of that name)
# Models that run exported graphs (audio_preprocess is numpy; voice_features is an ensemble).
GPU_MODELS = ("speech_generation", "code2wav", "speaker_encoder", "speech_encoder", "audiovae_decoder", "audiovae_encoder")


class PrepareError(TTSError):
    pass


def find_checkpoints(root: str | Path) -> list[Checkpoint]:
    """`root` if it is a checkpoint (a directory with config.json, a Hugging Face cache snapshot or
    `models--*` folder, a repo id), else the checkpoints directly in it, by name
    (triton_tts.checkpoints.find_checkpoints)."""
    try:
        found = checkpoints_in(root)
    except CheckpointError as exc:
        raise PrepareError(f"{exc} (set TTS_CHECKPOINTS)") from None
    if not found:
        raise PrepareError(
            f"no checkpoint in {root}: point TTS_CHECKPOINTS at a checkpoint directory, a directory of "
            "them or a Hugging Face cache holding them (or use the cpu profile for the tiny demo)")
    return found


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def prepare(checkpoints: list[Path] | list[Checkpoint], artifacts: Path, repository: Path, gateway_config_path: Path, *,
            triton_url: str, device: str = "cpu", precision: str = "fp32", max_active: int | None = None,
            quiet: bool = False, lora: str | Path | None = None, aligner: str | Path | None = None,
            generation: dict[str, str] | None = None) -> dict[str, Any]:
    """Export (when needed), render, write the gateway config; returns that config. `lora`: a startup
    LoRA adapter for the one checkpoint whose family takes adapters (triton_tts.artifacts.assign_lora).
    `aligner`: a forced aligner checkpoint (word timestamps), exported to ARTIFACTS/forced-aligner and served by
    the `forced_aligner` model. `generation`: speech_generation parameters (triton_tts.serve.generation_params)."""
    from triton_tts.artifacts import assign_lora, ensure_artifacts
    from triton_tts.serve import Served, _model_id, gateway_config, plan_deployment
    from ttscore.backend import repository as renderer
    from ttscore.contract.manifest import read_manifest

    taken: set[str] = set()
    served = []
    resolved = [resolve_checkpoint(spec) for spec in checkpoints]
    for ckpt, adapter in zip(resolved, assign_lora(resolved, lora), strict=True):
        model_id = _model_id(Path(ckpt.name), taken)  # named as found (a symlink keeps its own name)
        art = ensure_artifacts(ckpt, precision, out=artifacts / model_id, quiet=quiet, lora=adapter)
        served.append(Served(model_id, ckpt.path, art, read_manifest(art)))
    aligner_art = None
    if aligner is not None:
        aligner_art = ensure_artifacts(resolve_checkpoint(aligner), "fp32", out=artifacts / ALIGNER_DIR, quiet=quiet)
    plan = plan_deployment(served, max_active, aligner_art, generation)
    if device == "gpu":
        for name, settings in plan["settings"].items():
            if plan["aliases"].get(name, name) in GPU_MODELS:
                settings["kind"] = "gpu"
        for name in plan["models"]:
            if name in GPU_MODELS and name not in plan["settings"]:
                plan["settings"][name] = {"kind": "gpu"}
    renderer.render_repository(repository, plan["settings"], models=plan["models"], aliases=plan["aliases"])
    config = gateway_config(served, triton_url, plan)
    _write_atomic(gateway_config_path, json.dumps(config, indent=2) + "\n")
    return config


def _cmd_prepare(args: argparse.Namespace) -> int:
    artifacts = Path(args.artifacts)
    checkpoints: list[Path] | list[Checkpoint]
    if args.demo:
        from triton_tts.artifacts import demo_checkpoints

        checkpoints = demo_checkpoints(artifacts / "demo-checkpoints")
    elif args.checkpoints:
        checkpoints = find_checkpoints(args.checkpoints)
    else:
        raise PrepareError("give --checkpoints DIR or --demo")
    config = prepare(checkpoints, artifacts, Path(args.repository), Path(args.gateway_config),
                     triton_url=args.triton_url, device=args.device, precision=args.precision,
                     max_active=args.max_active, quiet=args.quiet, lora=args.lora, aligner=args.aligner,
                     generation=generation_params(args))
    names = ", ".join(m["name"] for m in config["models"])
    print(f"prepared {names}: repository {args.repository}, gateway config {args.gateway_config}", flush=True)
    return 0


def add_prepare_parser(sub: Any) -> None:
    p = sub.add_parser("prepare", help="export (if needed), render the model repository, write the gateway config "
                       "(the compose init step)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoints", help="a checkpoint (directory, Hugging Face cache snapshot or repo id), a "
                     "directory of checkpoint directories, or a Hugging Face cache (every models--* repo in it)")
    src.add_argument("--demo", action="store_true", help="the tiny random-weight demo checkpoints")
    p.add_argument("--artifacts", required=True, help="exports go to ARTIFACTS/<model id>")
    p.add_argument("--repository", required=True, help="the rendered Triton model repository (replaced)")
    p.add_argument("--gateway-config", required=True, help="the gateway's JSON config file")
    p.add_argument("--triton-url", default="127.0.0.1:8001", help="Triton gRPC address as the gateway reaches it")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="instance kind of the graph models")
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8"])
    add_lora(p)
    add_aligner_arg(p)
    p.add_argument("--max-active", type=int, help="requests batched together per step (per checkpoint)")
    add_runaway_args(p)
    add_quiet(p)
    p.set_defaults(func=_cmd_prepare)
