"""`triton-tts precompute-voice`: compute a voice's features offline and write a voice file
(format: ttscore.contract.voicefile).

Qwen3-TTS Base: speaker embedding (+ reference codes for mode icl). VoxCPM2: the reference clip's
latent patches through the exported AudioVAE encoder (the audiovae_encoder Triton model's code,
so a profile equals an uploaded voice), stored for the prompt mode chosen (reference,
continuation, ref_continuation) with the transcript and the checkpoint's identity."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttscore.contract import voxcpm2 as voxcpm2_contract
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import (
    MANIFEST_NAME,
    MODES,
    VOXCPM2_MODES,
    validate_voice_name,
    write_voice_profile,
    write_voxcpm2_profile,
)
from ttscore.tools.progress import add_quiet

if TYPE_CHECKING:
    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline

logger = logging.getLogger(__name__)


def precompute_voice(
    pipeline: Pipeline,
    voice_name: str,
    ref_audio_path: str | Path,
    ref_text: str | None = None,
    mode: str = "xvec",
    output_dir: str | Path = ".",
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """Compute a voice's features offline with `pipeline` (a Base checkpoint) and write them.

    mode "xvec": speaker embedding only; "icl": embedding + reference codes + transcript (in-context
    cloning, higher quality). Returns the manifest entry that was written.
    """
    from ttscore.runtime.audio import load_audio

    name = validate_voice_name(voice_name, "voice_name")
    if mode not in MODES:
        raise InvalidRequest(f"mode must be one of {', '.join(MODES)}, got {mode!r}", "mode")
    if mode == "icl" and not (ref_text or "").strip():
        raise InvalidRequest("mode 'icl' needs the reference transcript (--ref-text)", "ref_text")
    try:
        data = Path(ref_audio_path).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read reference audio {ref_audio_path}: {exc}", "ref_audio") from None
    audio, sr = load_audio(data)
    x_vector, ref_codes = pipeline.voice_features(audio, sr, with_codes=mode == "icl")
    entry = write_voice_profile(
        output_dir, name, x_vector, ref_codes, mode=mode, ref_text=ref_text, speaker_description=speaker_description
    )
    logger.info("precomputed voice %r (%s, dim %d) into %s", name, mode, entry["embedding_dim"], output_dir)
    return entry


def precompute_voxcpm2_voice(
    artifacts: str | Path,
    voice_name: str,
    ref_audio_path: str | Path,
    prompt_text: str | None = None,
    mode: str | None = None,
    output_dir: str | Path = ".",
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """A VoxCPM2 profile from the exported checkpoint in `artifacts`: the clip's patches padded for
    the mode (right: the isolated reference; left: the continuation prompt), as audiovae_encoder
    computes them. mode None: "ref_continuation" with a transcript, else "reference"."""
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.audio import load_audio
    from ttscore.runtime.families.voxcpm2.checkpoint import parse_config
    from ttscore.runtime.families.voxcpm2.model import encode_reference
    from ttscore.runtime.onnx import OnnxGraph

    name = validate_voice_name(voice_name, "voice_name")
    text = (prompt_text or "").strip() or None
    mode = mode or ("ref_continuation" if text else "reference")
    if mode not in VOXCPM2_MODES:
        raise InvalidRequest(f"mode must be one of {', '.join(VOXCPM2_MODES)} for VoxCPM2, got {mode!r}", "mode")
    if mode != "reference" and text is None:
        raise InvalidRequest(f"mode {mode!r} needs the transcript of the reference audio (--prompt-text)",
                             "prompt_text")
    root = Path(artifacts)
    manifest = read_manifest(root)
    if manifest.family != voxcpm2_contract.FAMILY:
        raise InvalidRequest(f"{root} is a {manifest.family} export, not VoxCPM2", "checkpoint")
    graph = manifest.graphs.get("vae_encoder")
    if graph is None:
        raise InvalidRequest(f"{root}/manifest.json lists no vae_encoder graph: re-export", "checkpoint")
    encoder = OnnxGraph(root / graph["file"], dict(graph), None)
    info = parse_config(dict(manifest.configs["config.json"]))
    try:
        data = Path(ref_audio_path).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read reference audio {ref_audio_path}: {exc}", "ref_audio") from None
    audio, sr = load_audio(data)
    ref = encode_reference(encoder, info, audio, sr, pad="right") if mode != "continuation" else None
    prompt = encode_reference(encoder, info, audio, sr, pad="left") if mode != "reference" else None
    source = Path(str((manifest.raw.get("source") or {}).get("path") or root))
    entry = write_voxcpm2_profile(
        output_dir, name, mode=mode, ref_patches=ref, prompt_patches=prompt, prompt_text=text,
        checkpoint={"name": source.name, "audiovae_sha256": manifest.source_sha256(voxcpm2_contract.AUDIOVAE_FILE)},
        speaker_description=speaker_description,
    )
    logger.info("precomputed VoxCPM2 voice %r (%s) into %s", name, mode, output_dir)
    return entry


# --- CLI -------------------------------------------------------------------------------------------


def _cmd_precompute_voice(args: argparse.Namespace) -> int:
    from ttscore.contract.manifest import read_manifest
    from ttscore.tools import artifacts as artifact_cache
    from ttscore.tools.progress import Stages

    # (an export the checkpoint needs first shows its own stages)
    artifacts = (Path(args.artifacts) if args.artifacts
                 else artifact_cache.ensure_artifacts(args.checkpoint, quiet=args.quiet))
    out = Path(args.output_dir)
    if read_manifest(artifacts).family == voxcpm2_contract.FAMILY:
        with Stages(f"precompute-voice {args.voice_name}", total=1, quiet=args.quiet) as stages:
            stages.stage(f"encoding the reference with {artifacts.name}'s AudioVAE and writing the voice file")
            entry = precompute_voxcpm2_voice(
                artifacts, args.voice_name, args.ref_audio, prompt_text=args.ref_text, mode=args.mode,
                output_dir=out, speaker_description=args.speaker_description,
            )
        print(f"wrote {out / entry['file']} (VoxCPM2 {entry['mode']}, patches "
              f"[{entry.get('ref_patch_length', entry.get('prompt_patch_length'))}, {entry['patch_size']}, "
              f"{entry['feat_dim']}]) and {out / MANIFEST_NAME}")
        return 0

    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline

    mode = args.mode or "xvec"
    if mode not in MODES:
        raise InvalidRequest(f"--mode {mode} is a VoxCPM2 mode; Qwen3-TTS Base takes {', '.join(MODES)}", "mode")
    if mode == "icl" and not (args.ref_text or "").strip():
        raise InvalidRequest("--mode icl needs --ref-text", "ref_text")
    with Stages(f"precompute-voice {args.voice_name}", total=2, quiet=args.quiet) as stages:
        stages.stage(f"loading {artifacts.name}")
        pipeline = Pipeline.load(artifacts)
        stages.stage(f"computing the voice features ({mode}) and writing the voice file")
        entry = precompute_voice(
            pipeline,
            args.voice_name,
            args.ref_audio,
            ref_text=args.ref_text,
            mode=mode,
            output_dir=args.output_dir,
            speaker_description=args.speaker_description,
        )
    print(f"wrote {out / entry['file']} ({entry['mode']}, embedding dim {entry['embedding_dim']}) and {out / MANIFEST_NAME}")
    return 0


def add_precompute_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `precompute-voice` on the `triton-tts` sub-command parser."""
    p = subparsers.add_parser(
        "precompute-voice",
        help="compute a custom voice offline into a custom_voice_dir (manifest + safetensors)",
        description=(
            "Compute a voice from a reference clip and write <output-dir>/<name>.safetensors plus "
            f"<output-dir>/{MANIFEST_NAME} for the gateway's custom_voice_dir. Qwen3-TTS Base: the speaker "
            "embedding (+ reference codes with --mode icl). VoxCPM2: the clip's latent patches for "
            "--mode reference, continuation or ref_continuation (the last two with --prompt-text)."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", "--model", dest="checkpoint",
                     help="Qwen3-TTS Base or VoxCPM2 checkpoint: directory, Hugging Face cache snapshot or repo id "
                          "(exported into the cache if needed)")
    src.add_argument("--artifacts", help="already exported artifacts directory (skips the export check)")
    p.add_argument("--voice-name", required=True)
    p.add_argument("--ref-audio", required=True, help="reference audio file (wav, flac, ogg, mp3)")
    p.add_argument("--ref-text", "--prompt-text", dest="ref_text",
                   help="transcript of the reference audio (Qwen3-TTS --mode icl; VoxCPM2 continuation modes)")
    p.add_argument(
        "--mode", choices=(*MODES, *VOXCPM2_MODES), default=None,
        help="Qwen3-TTS: xvec (default; speaker embedding only) or icl (+ reference codes, in-context cloning); "
             "VoxCPM2: reference (isolated reference), continuation (transcribed prompt) or ref_continuation "
             "(both; the default with --prompt-text)",
    )
    p.add_argument("--output-dir", required=True)
    p.add_argument("--speaker-description", help="free-form description listed by GET /v1/audio/voices")
    add_quiet(p)
    p.set_defaults(func=_cmd_precompute_voice)
    return p
