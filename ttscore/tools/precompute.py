"""`triton-tts precompute-voice`: compute a voice's features offline and write a voice file
(format: ttscore.contract.voicefile)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MANIFEST_NAME, MODES, validate_voice_name, write_voice_profile
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


# --- CLI -------------------------------------------------------------------------------------------


def _cmd_precompute_voice(args: argparse.Namespace) -> int:
    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline
    from ttscore.tools import artifacts as artifact_cache
    from ttscore.tools.progress import Stages

    if args.mode == "icl" and not (args.ref_text or "").strip():
        raise InvalidRequest("--mode icl needs --ref-text", "ref_text")
    # (an export the checkpoint needs first shows its own stages)
    artifacts = (Path(args.artifacts) if args.artifacts
                 else artifact_cache.ensure_artifacts(Path(args.checkpoint), quiet=args.quiet))
    with Stages(f"precompute-voice {args.voice_name}", total=2, quiet=args.quiet) as stages:
        stages.stage(f"loading {artifacts.name}")
        pipeline = Pipeline.load(artifacts)
        stages.stage(f"computing the voice features ({args.mode}) and writing the voice file")
        entry = precompute_voice(
            pipeline,
            args.voice_name,
            args.ref_audio,
            ref_text=args.ref_text,
            mode=args.mode,
            output_dir=args.output_dir,
            speaker_description=args.speaker_description,
        )
    out = Path(args.output_dir)
    print(f"wrote {out / entry['file']} ({entry['mode']}, embedding dim {entry['embedding_dim']}) and {out / MANIFEST_NAME}")
    return 0


def add_precompute_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `precompute-voice` on the `triton-tts` sub-command parser."""
    p = subparsers.add_parser(
        "precompute-voice",
        help="compute a custom voice offline into a custom_voice_dir (manifest + safetensors)",
        description=(
            "Compute a voice's speaker embedding (and, with --mode icl, its reference codes) from a "
            "reference clip with a Base checkpoint, and write <output-dir>/<name>.safetensors plus "
            f"<output-dir>/{MANIFEST_NAME} for the gateway's custom_voice_dir."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="Qwen3-TTS Base checkpoint directory (exported into the cache if needed)")
    src.add_argument("--artifacts", help="already exported artifacts directory (skips the export check)")
    p.add_argument("--voice-name", required=True)
    p.add_argument("--ref-audio", required=True, help="reference audio file (wav, flac, ogg, mp3)")
    p.add_argument("--ref-text", help="transcript of the reference audio (required for --mode icl)")
    p.add_argument(
        "--mode", choices=MODES, default="xvec",
        help="xvec: speaker embedding only; icl: embedding + reference codes for in-context cloning",
    )
    p.add_argument("--output-dir", required=True)
    p.add_argument("--speaker-description", help="free-form description listed by GET /v1/audio/voices")
    add_quiet(p)
    p.set_defaults(func=_cmd_precompute_voice)
    return p
