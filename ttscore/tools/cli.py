"""`triton-tts`: make-tiny, export, say, serve, prepare, precompute-voice, bench.

Every expected failure (bad checkpoint, bad request, failed validation) prints one line naming the
problem and exits with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ttscore.contract.errors import TTSError
from ttscore.tools.artifacts import ensure_artifacts
from ttscore.tools.progress import add_quiet

logger = logging.getLogger("triton-tts")
CHECKPOINT_HELP = "checkpoint directory, Hugging Face cache snapshot, or repo id Org/Name[@revision]"


def _cmd_make_tiny(args: argparse.Namespace) -> int:
    from ttscore.contract.errors import InvalidRequest

    if args.family == "voxcpm2":
        from export.voxcpm2.tiny import SIZES, make_tiny_voxcpm2

        if args.variant or args.greedy:
            raise InvalidRequest("--variant/--greedy are Qwen3-TTS options (not --family voxcpm2)", "variant")
        if args.size not in SIZES:
            raise InvalidRequest(f"--family voxcpm2 takes --size {' or '.join(SIZES)}", "size")
        print(make_tiny_voxcpm2(Path(args.out), seed=args.seed, size=args.size))
        return 0
    from export.tiny import SIZES as QWEN_SIZES
    from export.tiny import make_tiny

    if not args.variant:
        raise InvalidRequest("--variant is required for --family qwen3_tts", "variant")
    if args.size not in QWEN_SIZES:
        raise InvalidRequest(f"--family qwen3_tts takes --size {', '.join(QWEN_SIZES)}", "size")
    path = make_tiny(args.variant, Path(args.out), seed=args.seed, size=args.size, greedy=args.greedy)
    print(path)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from export.exporter import export_checkpoint
    from ttscore.tools.checkpoints import resolve_checkpoint
    from ttscore.tools.progress import Stages

    t0 = time.time()
    checkpoint = resolve_checkpoint(args.checkpoint)
    with Stages(f"export {checkpoint.name}", quiet=args.quiet) as shown:
        manifest = export_checkpoint(
            checkpoint.path, Path(args.out), precision=args.precision, device=args.device, progress=shown.hook
        )
    print(
        f"exported {manifest['variant']} ({manifest['precision']}) to {args.out} "
        f"in {time.time() - t0:.1f} s; graphs: {', '.join(manifest['graphs'])}"
    )
    memory = manifest.get("export") or {}
    stages = memory.get("stages") or {}
    if stages:
        per_stage = ", ".join(f"{name} {rec['peak_rss_gib']:.2f}" for name, rec in stages.items())
        print(f"peak RSS per stage (GiB): {per_stage}; whole export {memory.get('process_peak_rss_gib', 0):.2f}")
    return 0


def _cmd_say(args: argparse.Namespace) -> int:
    import numpy as np
    import soundfile as sf

    from ttscore.contract.errors import InvalidRequest
    from ttscore.runtime.audio import load_audio
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline
    from ttscore.runtime.families.qwen3_tts.request import SynthesisRequest

    if bool(args.checkpoint) == bool(args.artifacts):
        raise InvalidRequest("give exactly one of --checkpoint or --artifacts", "checkpoint")
    artifacts = Path(args.artifacts) if args.artifacts else ensure_artifacts(args.checkpoint, args.precision)
    from ttscore.contract.manifest import read_manifest

    if read_manifest(artifacts).family == "voxcpm2":
        return _say_voxcpm2(args, artifacts)
    pipe = Pipeline.load(artifacts)
    ref_codes = x_vector = None
    if args.ref_audio:
        try:
            data = Path(args.ref_audio).read_bytes()
        except OSError as exc:
            raise InvalidRequest(f"cannot read reference audio {args.ref_audio}: {exc}", "ref_audio") from None
        wav, sr = load_audio(data)
        x_vector, ref_codes = pipe.voice_features(wav, sr, with_codes=not args.x_vector_only)
    elif args.ref_text or args.x_vector_only:
        raise InvalidRequest("--ref-text/--x-vector-only need --ref-audio", "ref_audio")
    req = SynthesisRequest(
        text=args.text,
        speaker=args.voice,
        language=args.language,
        instructions=args.instructions,
        ref_text=args.ref_text,
        ref_codes=ref_codes,
        x_vector=x_vector,
        x_vector_only=args.x_vector_only,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        non_streaming_mode=args.non_streaming_mode,
        do_sample=False if args.greedy else None,
        subtalker_do_sample=False if args.greedy else None,
    )
    if req.speaker is None and pipe.info.variant == "custom_voice":
        req.speaker = sorted(pipe.info.speakers)[0]
    gen = Generator(pipe, max_batch=1, chunk_policy="fixed")  # a file: chunk boundaries that repeat bit for bit
    t0 = time.time()
    chunks, frames, reason = [], 0, None
    for ev in gen.synthesize(req):
        chunks.append(ev.pcm)
        frames += ev.frames
        reason = ev.finish_reason or reason
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    elapsed = time.time() - t0
    sf.write(args.output, pcm, pipe.info.sample_rate, subtype="PCM_16")
    seconds = pcm.shape[0] / pipe.info.sample_rate
    print(
        f"wrote {args.output}: {frames} frames, {seconds:.2f} s at {pipe.info.sample_rate} Hz "
        f"(finish: {reason}; {elapsed:.2f} s, RTF {elapsed / max(seconds, 1e-9):.2f})"
    )
    return 0


def _say_voxcpm2(args: argparse.Namespace, artifacts: Path) -> int:
    """`say` for a VoxCPM2 checkpoint: zero-shot, or cloning with --ref-audio (+ --ref-text: the
    reference's continuation mode, where the clip is the prompt audio and the text its transcript)."""
    import numpy as np
    import soundfile as sf

    from ttscore.contract.errors import InvalidRequest
    from ttscore.runtime.audio import load_audio
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model, VoxCPM2Request

    for flag, value in (("--voice", args.voice), ("--language", args.language), ("--instructions", args.instructions)):
        if value:
            raise InvalidRequest(f"{flag} is not supported by VoxCPM2 checkpoints", flag.lstrip("-"))
    if args.x_vector_only or args.greedy or args.non_streaming_mode is not None:
        raise InvalidRequest("--x-vector-only/--greedy/--non-streaming-mode are Qwen3-TTS options", "ref_audio")
    model = load_model(artifacts)
    assert isinstance(model, VoxCPM2Model)
    req = VoxCPM2Request(text=args.text, seed=args.seed, max_new_tokens=args.max_new_tokens)
    if args.ref_audio:
        try:
            data = Path(args.ref_audio).read_bytes()
        except OSError as exc:
            raise InvalidRequest(f"cannot read reference audio {args.ref_audio}: {exc}", "ref_audio") from None
        wav, sr = load_audio(data)
        if args.ref_text:
            req.prompt_patches = model.encode_reference(wav, sr, pad="left")
            req.prompt_text = args.ref_text
        else:
            req.ref_patches = model.encode_reference(wav, sr, pad="right")
    elif args.ref_text:
        raise InvalidRequest("--ref-text needs --ref-audio", "ref_audio")
    gen = Generator(model, max_batch=1, chunk_policy="fixed")
    t0 = time.time()
    chunks, frames, reason = [], 0, None
    for ev in gen.synthesize(req):
        chunks.append(ev.pcm)
        frames += ev.frames
        reason = ev.finish_reason or reason
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    elapsed = time.time() - t0
    rate = model.info.sample_rate
    sf.write(args.output, pcm, rate, subtype="PCM_16")
    seconds = pcm.shape[0] / rate
    print(
        f"wrote {args.output}: {frames} patches, {seconds:.2f} s at {rate} Hz "
        f"(finish: {reason}; {elapsed:.2f} s, RTF {elapsed / max(seconds, 1e-9):.2f})"
    )
    return 0


BENCHES = {
    "offline": "ttscore.tools.bench.offline",  # exported pipeline vs the reference PyTorch generate
    "triton": "ttscore.tools.bench.throughput",  # throughput through Triton vs the offline pipeline
    "perf-analyzer": "ttscore.tools.bench.perf_analyzer",  # Triton's perf_analyzer against the served models
    "compare": "ttscore.tools.bench.compare",  # all of it in one run: reference, offline, Triton c=1/4/8; table + plot
    "breakdown": "ttscore.tools.bench.breakdown",  # each graph's share of a decode step, by batch size
}


def _cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    module = BENCHES[args.which]
    sys.argv = [module, *args.bench_args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triton-tts", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("make-tiny", help="write a random-weight checkpoint in the real layout")
    t.add_argument("--family", default="qwen3_tts", choices=["qwen3_tts", "voxcpm2"])
    t.add_argument("--variant", choices=["custom_voice", "voice_design", "base"], help="Qwen3-TTS only (required there)")
    t.add_argument("--out", required=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--size", default="tiny", choices=["tiny", "0.6b", "1.7b", "real"],
        help="qwen3_tts: tiny, 0.6b, 1.7b; voxcpm2: tiny, real",
    )
    t.add_argument("--greedy", action="store_true", help="generation_config with do_sample false")
    t.set_defaults(func=_cmd_make_tiny)

    e = sub.add_parser("export", help="export a checkpoint to validated ONNX artifacts")
    e.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    e.add_argument("--out", required=True)
    e.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    e.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4", "fp16", "bf16"])
    add_quiet(e)
    e.set_defaults(func=_cmd_export)

    s = sub.add_parser("say", help="offline synthesis to a WAV file")
    s.add_argument("text")
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("--artifacts")
    s.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4"])
    s.add_argument("--voice")
    s.add_argument("--language")
    s.add_argument("--instructions")
    s.add_argument("--ref-audio")
    s.add_argument("--ref-text")
    s.add_argument("--x-vector-only", action="store_true")
    s.add_argument("--seed", type=int)
    s.add_argument("--max-new-tokens", type=int)
    s.add_argument("--greedy", action="store_true", help="override sampling: greedy talker and code predictor")
    s.add_argument(
        "--non-streaming-mode", type=lambda v: v.lower() in ("1", "true", "yes"), default=None,
        help="prompt construction mode (default: the variant's)",
    )
    s.set_defaults(func=_cmd_say)

    b = sub.add_parser("bench", help="run a benchmark (see perf/README.md)")
    b.add_argument("which", choices=sorted(BENCHES))
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments of that benchmark (--help)")
    b.set_defaults(func=_cmd_bench)

    from ttscore.tools.precompute import add_precompute_parser
    from ttscore.tools.prepare import add_prepare_parser
    from ttscore.tools.serve import add_serve_parser

    add_serve_parser(sub)
    add_precompute_parser(sub)
    add_prepare_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except TTSError as exc:
        msg = getattr(exc, "message", None) or str(exc)
        print(f"triton-tts: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
