"""`triton-tts`: make-tiny, make-tiny-lora, export, say, serve, prepare, precompute-voice, bench.

Every expected failure (bad checkpoint, bad request, failed validation) prints one line naming the
problem and exits with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from triton_tts.artifacts import add_lora, ensure_artifacts
from triton_tts.progress import add_quiet
from ttscore.contract.errors import TTSError
from ttscore.runtime.onnx import THREAD_POOLS

logger = logging.getLogger("triton-tts")
CHECKPOINT_HELP = "checkpoint directory, Hugging Face cache snapshot, or repo id Org/Name[@revision]"


def _cmd_make_tiny(args: argparse.Namespace) -> int:
    from export.families import FAMILIES
    from ttscore.contract.errors import InvalidRequest

    if args.aligner:  # the forced aligner: no speech family, made by its own entry (export.families.ALIGNER)
        from export.families import ALIGNER

        print(ALIGNER.make_tiny(Path(args.out), seed=args.seed, size=args.size))
        return 0
    family = FAMILIES[args.family]
    own = {o.name for o in family.tiny_options}
    options = {o.name: getattr(args, o.name) for f in FAMILIES.values() for o in f.tiny_options}
    foreign = [o for f in FAMILIES.values() for o in f.tiny_options if o.name not in own and options[o.name]]
    if foreign:
        owners = "/".join(dict.fromkeys(f.display for f in FAMILIES.values() for o in f.tiny_options if o in foreign))
        flags = "/".join(dict.fromkeys(o.cli for o in foreign))
        what = f"are {owners} options" if len(foreign) > 1 else f"is a {owners} option"
        raise InvalidRequest(f"{flags} {what} (not --family {family.name})", foreign[0].name)
    given = {name: value for name, value in options.items() if name in own and value}
    print(family.make_tiny(Path(args.out), seed=args.seed, size=args.size, **given))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from export.exporter import export_checkpoint
    from triton_tts.checkpoints import resolve_checkpoint
    from triton_tts.progress import Stages

    t0 = time.time()
    checkpoint = resolve_checkpoint(args.checkpoint)
    with Stages(f"export {checkpoint.name}", quiet=args.quiet) as shown:
        manifest = export_checkpoint(
            checkpoint.path, Path(args.out), precision=args.precision, device=args.device, progress=shown.hook,
            lora=args.lora,
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
    """Offline synthesis of one request, by the family the export's manifest names (its runtime's
    `offline.say` builds the request and refuses the options it does not take)."""
    import numpy as np
    import soundfile as sf

    from ttscore.contract.errors import InvalidRequest
    from ttscore.contract.manifest import read_manifest
    from ttscore.contract.rules import DEFAULT_RUNAWAY_FACTOR, DEFAULT_RUNAWAY_MIN_S
    from ttscore.runtime.engine import Generator, RunawayGuard
    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.family import SayOptions

    if bool(args.checkpoint) == bool(args.artifacts):
        raise InvalidRequest("give exactly one of --checkpoint or --artifacts", "checkpoint")
    if args.lora and args.artifacts:
        raise InvalidRequest("--lora is merged at export: give it with --checkpoint, not --artifacts", "lora")
    artifacts = (Path(args.artifacts) if args.artifacts
                 else ensure_artifacts(args.checkpoint, args.precision, lora=args.lora))
    if args.thread_pool == "shared":  # after any export above: its sessions have their own pools
        from ttscore.runtime.onnx import share_thread_pool

        share_thread_pool()
    family = read_manifest(artifacts).family
    offline = getattr(FAMILIES.get(family), "offline", None)
    if offline is None:
        raise InvalidRequest(f"say does not know model family {family!r}", "checkpoint")
    job = offline.say(artifacts, SayOptions(
        text=args.text, voice=args.voice, language=args.language, instructions=args.instructions,
        ref_audio=args.ref_audio, ref_text=args.ref_text, x_vector_only=args.x_vector_only, seed=args.seed,
        max_new_tokens=args.max_new_tokens, non_streaming_mode=args.non_streaming_mode, greedy=args.greedy,
    ))
    rules = FAMILIES[family].rules
    guard = RunawayGuard(rules.seconds_per_text_token,
                         DEFAULT_RUNAWAY_FACTOR if args.runaway_factor is None else args.runaway_factor,
                         DEFAULT_RUNAWAY_MIN_S if args.runaway_min_s is None else args.runaway_min_s)
    # A file: chunk boundaries that repeat bit for bit.
    gen = Generator(job.model, max_batch=1, chunk_policy="fixed", runaway=guard)
    t0 = time.time()
    chunks, frames, reason = [], 0, None
    for ev in gen.synthesize(job.request):
        chunks.append(ev.pcm)
        frames += ev.frames
        reason = ev.finish_reason or reason
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    elapsed = time.time() - t0
    sf.write(args.output, pcm, job.sample_rate, subtype="PCM_16")
    seconds = pcm.shape[0] / job.sample_rate
    print(
        f"wrote {args.output}: {frames} {job.frame_unit}, {seconds:.2f} s at {job.sample_rate} Hz "
        f"(finish: {reason}; {elapsed:.2f} s, RTF {elapsed / max(seconds, 1e-9):.2f})"
    )
    return 0


BENCHES = {
    "offline": "triton_tts.bench.offline",  # exported pipeline vs the reference PyTorch generate
    "triton": "triton_tts.bench.throughput",  # throughput through Triton vs the offline pipeline
    "perf-analyzer": "triton_tts.bench.perf_analyzer",  # Triton's perf_analyzer against the served models
    "compare": "triton_tts.bench.compare",  # all of it in one run: reference, offline, Triton c=1/4/8; table + plot
    "breakdown": "triton_tts.bench.breakdown",  # each graph's share of a decode step, by batch size
    "peer": "triton_tts.bench.peer",  # side by side with another engine's command, alternating
}


def _cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    module = BENCHES[args.which]
    sys.argv = [module, *args.bench_args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def _cmd_make_tiny_lora(args: argparse.Namespace) -> int:
    from export.families import family_of
    from triton_tts.checkpoints import resolve_checkpoint
    from ttscore.contract.errors import InvalidRequest

    src = resolve_checkpoint(args.checkpoint).path.resolve()
    family = family_of(src)
    if family.lora is None:
        raise InvalidRequest(f"{family.display} checkpoints take no LoRA adapter", "checkpoint")
    print(family.lora.make_tiny(src, Path(args.out), args.seed))
    return 0


def _add_make_tiny_parser(sub: Any) -> None:
    """make-tiny's flags: --family, --out, --seed, --size, and every registered family's own options
    (export.family.TinyOption), each refused for a family that does not take it."""
    from export.families import DEFAULT, FAMILIES

    t = sub.add_parser("make-tiny", help="write a random-weight checkpoint in the real layout")
    t.add_argument("--family", default=DEFAULT, choices=list(FAMILIES))
    t.add_argument("--aligner", action="store_true",
                   help="write a Qwen3-ForcedAligner checkpoint (word timestamps) instead of a family's")
    t.add_argument("--out", required=True)
    t.add_argument("--seed", type=int, default=0)
    sizes = list(dict.fromkeys(size for f in FAMILIES.values() for size in f.sizes))
    t.add_argument(
        "--size", default=sizes[0], choices=sizes,
        help="; ".join(f"{f.name}: {', '.join(f.sizes)}" for f in FAMILIES.values()),
    )
    seen: set[str] = set()
    for family in FAMILIES.values():
        for option in family.tiny_options:
            if option.name in seen:
                continue
            seen.add(option.name)
            if option.flag:
                t.add_argument(option.cli, dest=option.name, action="store_true", help=option.help)
            else:
                t.add_argument(option.cli, dest=option.name, choices=option.choices, help=option.help)
    t.set_defaults(func=_cmd_make_tiny)

    lt = sub.add_parser("make-tiny-lora", help="write a random LoRA adapter (the family's native format) for a "
                        "checkpoint, e.g. a make-tiny one")
    lt.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    lt.add_argument("--out", required=True)
    lt.add_argument("--seed", type=int, default=0)
    lt.set_defaults(func=_cmd_make_tiny_lora)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triton-tts", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)

    _add_make_tiny_parser(sub)

    e = sub.add_parser("export", help="export a checkpoint to validated ONNX artifacts")
    e.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    e.add_argument("--out", required=True)
    e.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    e.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4", "fp16", "bf16"])
    add_lora(e)
    add_quiet(e)
    e.set_defaults(func=_cmd_export)

    s = sub.add_parser("say", help="offline synthesis to a WAV file")
    s.add_argument("text")
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("--artifacts")
    s.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4"])
    add_lora(s, env=False)
    s.add_argument("--voice")
    s.add_argument("--language")
    s.add_argument("--instructions")
    s.add_argument("--ref-audio")
    s.add_argument("--ref-text")
    s.add_argument("--x-vector-only", action="store_true")
    s.add_argument("--seed", type=int)
    s.add_argument("--max-new-tokens", type=int)
    s.add_argument("--greedy", action="store_true", help="override sampling: greedy talker and code predictor")
    s.add_argument("--thread-pool", choices=THREAD_POOLS, default="session",
                   help="session: a pool per graph (as served); shared: one ONNX Runtime pool for every graph, "
                        "faster for one stream with the cores to itself (process-wide: a CLI process only)")
    s.add_argument(
        "--non-streaming-mode", type=lambda v: v.lower() in ("1", "true", "yes"), default=None,
        help="prompt construction mode (default: the variant's)",
    )
    from triton_tts.serve import add_runaway_args

    add_runaway_args(s)  # as served: a generation that does not stop ends at the guard ("finish: length")
    s.set_defaults(func=_cmd_say)

    b = sub.add_parser("bench", help="run a benchmark (see perf/README.md)")
    b.add_argument("which", choices=sorted(BENCHES))
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments of that benchmark (--help)")
    b.set_defaults(func=_cmd_bench)

    from triton_tts.precompute import add_precompute_parser
    from triton_tts.prepare import add_prepare_parser
    from triton_tts.serve import add_serve_parser

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
