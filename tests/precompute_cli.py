"""`triton-tts precompute-voice` as the CLI parses and runs it, for the families' precompute tests, and the voices
the gateway then loads from a codec family's voice files."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_tts.precompute import add_precompute_parser


def precompute_command(artifacts: Path, ref_audio: Path, output_dir: Path) -> Callable[..., int]:
    """`run(*more)`: `triton-tts precompute-voice --artifacts ARTIFACTS --ref-audio REF_AUDIO --output-dir
    OUTPUT_DIR -q *more`, parsed by the CLI's own parser and run; its exit code (a refusal raises)."""
    parser = argparse.ArgumentParser(prog="triton-tts")
    add_precompute_parser(parser.add_subparsers(dest="cmd", required=True))
    base = ["precompute-voice", "--artifacts", str(artifacts), "--ref-audio", str(ref_audio),
            "--output-dir", str(output_dir), "-q"]

    def run(*more: str) -> int:
        args = parser.parse_args([*base, *more])
        return args.func(args)

    return run


def codec_voices(out: Path, family: str, *targets: tuple[str, str]) -> dict[str, Any]:
    """The precomputed voices in `out` the gateway loads for `family`'s served checkpoints `targets` ((name, its
    codec's sha256) pairs: gateway.family_kit.CodecTarget)."""
    from gateway.family_kit import CodecTarget
    from gateway.voice_registry import precomputed_loaders
    from gateway.voices.precomputed import load_precomputed_voices

    checks = {family: {"targets": [CodecTarget(name, sha) for name, sha in targets]}}
    return load_precomputed_voices(out, precomputed_loaders(checks))
