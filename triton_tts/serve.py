"""`triton-tts serve`: export (if needed) -> render the model repository -> tritonserver -> gateway.

One `speech_generation` model per served checkpoint (named `speech_generation` when only one is
served, `speech_generation_<name>` otherwise); what else a family's checkpoints need (a shared or
per-checkpoint vocoder, voice-feature models) its export entry says (export.family.ExportFamily.deploy).
Ctrl-C / SIGTERM drains the gateway (it finishes what is in flight, up to --drain-timeout), then
stops Triton. A tritonserver that dies is restarted with backoff
(triton_tts.supervisor); serve exits 1 only when restarts keep failing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_tts.artifacts import add_lora
from triton_tts.progress import add_quiet
from ttscore.contract.errors import TTSError
from ttscore.contract.manifest import Manifest

logger = logging.getLogger(__name__)

DRAIN_MARGIN_S = 10.0  # past the gateway's drain time: its own shutdown grace, then it is killed


class ServeError(TTSError):
    pass


@dataclass
class Served:
    name: str
    checkpoint: Path
    artifacts: Path
    manifest: Manifest
    triton_model: str = "speech_generation"
    voice_features_model: str | None = None  # set by plan_deployment

    @property
    def variant(self) -> str:
        return self.manifest.variant


def _model_id(path: Path, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.name) or "model"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


ALIGNER_ENV = "TTS_ALIGNER"  # the default of --aligner (compose, Kubernetes); empty: no aligner
RUNAWAY_FACTOR_ENV = "TTS_RUNAWAY_FACTOR"  # the default of --runaway-factor (compose, Kubernetes)
RUNAWAY_MIN_S_ENV = "TTS_RUNAWAY_MIN_S"  # the default of --runaway-min-s


def add_aligner_arg(parser: Any) -> None:
    """--aligner CHECKPOINT (serve, prepare): the forced aligner for word timestamps; default $TTS_ALIGNER."""
    parser.add_argument("--aligner", metavar="CHECKPOINT", default=os.environ.get(ALIGNER_ENV, "").strip() or None,
                        help="a Qwen3-ForcedAligner checkpoint (word timestamps), served by the forced_aligner model; "
                             f"default ${ALIGNER_ENV}")


def add_runaway_args(parser: Any) -> None:
    """--runaway-factor / --runaway-min-s: speech_generation's runaway guard (ttscore.contract.rules.runaway_frames)."""
    parser.add_argument("--runaway-factor", type=float, default=_env_float(RUNAWAY_FACTOR_ENV),
                        help="runaway guard: a generation ends (finish_reason length) past MIN_S + this x the family's "
                             f"seconds per text token x its text tokens; 0 turns it off (default 4, or ${RUNAWAY_FACTOR_ENV})")
    parser.add_argument("--runaway-min-s", type=float, default=_env_float(RUNAWAY_MIN_S_ENV),
                        help=f"runaway guard: seconds every generation may make whatever its text (default 10, or "
                             f"${RUNAWAY_MIN_S_ENV})")


def _env_float(name: str) -> str | None:
    """An environment default for a float option: argparse converts a string default with the option's type, so
    a bad value is the same one-line usage error as a bad option."""
    return os.environ.get(name, "").strip() or None


def generation_params(args: Any) -> dict[str, str]:
    """speech_generation parameters from the command line (those given)."""
    out = {}
    for key, value in (("runaway_factor", getattr(args, "runaway_factor", None)),
                       ("runaway_min_s", getattr(args, "runaway_min_s", None))):
        if value is not None:
            if not value >= 0 or value == float("inf"):
                raise ServeError(f"--{key.replace('_', '-')} must be a finite number >= 0, got {value}")
            out[key] = f"{value:g}"
    return out


def plan_deployment(served: list[Served], max_active: int | None = None, aligner: Path | None = None,
                    generation: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Model names, aliases and per-model settings for render_repository (pure). `generation`: parameters
    every speech_generation model gets (generation_params).

    Each served checkpoint gets its speech_generation model; each family adds what its checkpoints
    need (export.family.ExportFamily.deploy), in registry order. `aligner`: the export of a forced aligner
    (word timestamps), served by the `forced_aligner` model (the plan's `aligner_model`; None without one)."""
    from export.families import FAMILIES
    from export.family import model_name

    other = sorted({s.manifest.family for s in served} - set(FAMILIES))
    if other:
        raise ServeError(f"cannot serve model family {other[0]!r} (known: {', '.join(FAMILIES)})")
    parts = {name: family.deploy(members) for name, family in FAMILIES.items()
             if (members := [s for s in served if s.manifest.family == name])}
    aliases: dict[str, str] = {}
    settings: dict[str, Any] = {}
    models: list[str] = []

    def add(name: str, origin: str, params: dict[str, str] | None) -> None:
        if name != origin:
            aliases[name] = origin
        if params is not None:
            settings[name] = {"parameters": params}
        models.append(name)

    for s in served:
        part = parts[s.manifest.family]
        s.triton_model = model_name("speech_generation", s, len(served) == 1)
        s.voice_features_model = part.voice_features.get(s.name)
        params = {"artifacts_dir": str(s.artifacts), "vocoder": part.vocoder[s.name]}
        if max_active:
            params["max_active_requests"] = str(max_active)
        params.update(generation or {})
        add(s.triton_model, "speech_generation", params)
    plan: dict[str, Any] = {}
    for part in parts.values():
        for name, origin, model_params in part.models:
            add(name, origin, model_params)
        plan.update(part.flags)
    if aligner is not None:
        from ttscore.contract import aligner as word_timestamps

        add(word_timestamps.MODEL, word_timestamps.MODEL, {"artifacts_dir": str(aligner)})
    plan["aligner_model"] = None if aligner is None else models[-1]
    if max_active:
        plan["max_running_per_model"] = max_active  # the gateway sends a model no more than it steps together
    vocoders = [m for part in parts.values() for m in part.readiness]
    return {"models": models, "aliases": aliases, "settings": settings, **plan, "vocoders": vocoders}


def gateway_config(
    served: list[Served], grpc_url: str, plan: dict[str, Any] | None = None, voices: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The gateway's JSON config; `voices`: optional gateway settings (custom_voice_dir,
    allowed_local_media_path, allow_private_urls), left out when None."""
    from export.families import FAMILIES

    # `<org>/<name>` is accepted as a model id too (the form the OpenAI examples use, e.g.
    # Qwen/Qwen3-TTS-12Hz-0.6B-Base): the organisation is the family's (ExportFamily.hub_org).
    extra: dict[str, Any] = {"readiness_models": plan["vocoders"]} if plan and plan.get("vocoders") else {}
    if plan and plan.get("aligner_model"):
        extra["aligner_model"] = plan["aligner_model"]  # word timestamps (gateway.word_timing)
    if plan and plan.get("max_running_per_model"):
        extra["max_running_per_model"] = plan["max_running_per_model"]  # (gateway.admission)
    extra.update({k: v for k, v in (voices or {}).items() if v is not None})
    return {
        **extra,
        "triton_url": grpc_url,
        "models": [
            {
                "name": s.name,
                "variant": s.variant,
                "triton_model": s.triton_model,
                "voice_features_model": s.voice_features_model,
                "artifacts_dir": str(s.artifacts),
                "aliases": [f"{FAMILIES[s.manifest.family].hub_org}/{s.name}"],
            }
            for s in served
        ],
    }


def _wait_http(url: str, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServeError(f"process exited with status {proc.returncode} before {url} was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise ServeError(f"{url} not ready in time")


def _cmd_serve(args: argparse.Namespace) -> int:
    from triton_tts.artifacts import assign_lora, cache_root, ensure_artifacts
    from triton_tts.checkpoints import resolve_checkpoint
    from triton_tts.supervisor import RestartPolicy, Supervisor
    from ttscore.backend import repository
    from ttscore.backend.triton_server import TritonServer, TritonServerError
    from ttscore.contract.manifest import read_manifest

    checkpoints: list[Any] = [resolve_checkpoint(c) for c in args.checkpoint or []]  # fail fast
    if not checkpoints:
        from triton_tts.artifacts import demo_checkpoints

        # CustomVoice for the preset speakers, Base so that the spec's voice-cloning examples
        # (uploaded voices, ref_audio, the WebSocket with a cloned voice) work too, and VoxCPM2.
        print(f"no --checkpoint given: the tiny random-weight demo checkpoints in {cache_root() / 'demo'}", flush=True)
        checkpoints = demo_checkpoints(cache_root() / "demo")

    work = Path(args.work or cache_root() / "serve")
    taken: set[str] = set()
    served = []
    resolved = [resolve_checkpoint(c) for c in checkpoints]
    for ckpt, lora in zip(resolved, assign_lora(resolved, args.lora), strict=True):
        print(f"preparing {ckpt.path} (export is skipped when up to date)...", flush=True)
        art = ensure_artifacts(ckpt, args.precision, quiet=args.quiet, lora=lora)
        served.append(Served(_model_id(Path(ckpt.name), taken), ckpt.path, art, read_manifest(art)))

    aligner = None
    if args.aligner:
        print(f"preparing the aligner {args.aligner} (export is skipped when up to date)...", flush=True)
        aligner = ensure_artifacts(resolve_checkpoint(args.aligner), "fp32", quiet=args.quiet)
    plan = plan_deployment(served, args.max_active, aligner, generation_params(args))
    repo = repository.render_repository(
        work / "model_repository", plan["settings"], models=plan["models"], aliases=plan["aliases"]
    )
    server = TritonServer(
        repo, args.triton_http_port, args.triton_grpc_port, args.triton_metrics_port,
        log_file=work / "tritonserver.log", ready_timeout_s=args.ready_timeout,
    )
    gateway: subprocess.Popen[bytes] | None = None
    stop = {"flag": False}

    def _terminate(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        server.start()
        server.wait_ready()
        print(f"Triton ready: HTTP {server.http_url}, gRPC {server.grpc_url}, metrics {server.metrics_url}", flush=True)
        print(f"  models: {', '.join(plan['models'])} (log: {server.log_file})", flush=True)
        import importlib.util

        if not args.no_gateway and importlib.util.find_spec("gateway.__main__") is None:
            print("the gateway package is not installed: serving Triton only", file=sys.stderr)
            args.no_gateway = True
        if not args.no_gateway:
            cfg_path = work / "gateway.json"
            voices = {
                "custom_voice_dir": str(Path(args.custom_voice_dir).resolve()) if args.custom_voice_dir else None,
                "allowed_local_media_path": (
                    str(Path(args.allowed_local_media_path).resolve()) if args.allowed_local_media_path else None
                ),
                "allow_private_urls": True if args.allow_private_urls else None,
                "drain_timeout_s": args.drain_timeout,
            }
            cfg_path.write_text(json.dumps(gateway_config(served, server.grpc_url, plan, voices), indent=2))
            env = dict(os.environ)
            if args.api_key:  # through the environment: arguments would show in `ps`
                env["TTS_API_KEYS"] = ",".join(filter(None, [env.get("TTS_API_KEYS"), *args.api_key]))
            gateway = subprocess.Popen(
                [sys.executable, "-m", "gateway", "--config", str(cfg_path), "--host", args.host, "--port", str(args.port)],
                start_new_session=True, env=env,
            )
            _wait_http(f"http://127.0.0.1:{args.port}/health", time.time() + 60, gateway)
            url = f"http://{'localhost' if args.host in ('0.0.0.0', '127.0.0.1') else args.host}:{args.port}"
            voice = next((sorted(s.manifest.speakers)[:1] for s in served if s.manifest.speakers), [])
            print(f"Speech API ready at {url}  (Ctrl-C stops)", flush=True)
            example = {"input": "Hello from Triton.", "voice": voice[0] if voice else None}
            print(
                f"  curl -s {url}/v1/audio/speech -H 'Content-Type: application/json' "
                f"-d '{json.dumps({k: v for k, v in example.items() if v})}' -o hello.wav",
                flush=True,
            )
        else:
            print(
                f"Serving Triton only. Stream audio with gRPC (model {served[0].triton_model}, "
                f"see model_repository/README.md) or run `triton-tts bench perf-analyzer`. Ctrl-C stops.",
                flush=True,
            )
        supervisor = Supervisor(
            server, RestartPolicy(max_failures=args.max_restarts, ready_timeout_s=args.ready_timeout),
            announce=lambda message: print(f"triton-tts serve: {message}", file=sys.stderr, flush=True),
        )
        while not stop["flag"]:
            if not supervisor.poll():
                return 1
            if gateway is not None and gateway.poll() is not None:
                print(f"gateway exited with status {gateway.returncode}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        return 0
    except TritonServerError as exc:
        print(f"triton-tts: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if gateway is not None and gateway.poll() is None:
            gateway.terminate()  # it drains, then exits
            try:
                gateway.wait(args.drain_timeout + DRAIN_MARGIN_S)
            except subprocess.TimeoutExpired:
                gateway.kill()
        server.stop()
        print("stopped", flush=True)


def _api_key(value: str) -> str:
    if not value or any(c.isspace() or c == "," for c in value):  # TTS_API_KEYS is comma-separated
        raise argparse.ArgumentTypeError("an API key cannot be empty or hold spaces or commas")
    return value


def add_serve_parser(sub: Any) -> None:
    s = sub.add_parser("serve", help="export if needed, start tritonserver and the Speech API gateway")
    s.add_argument("--checkpoint", action="append",
                   help="checkpoint directory, Hugging Face cache snapshot, or repo id Org/Name[@revision] "
                        "(repeat to serve several)")
    s.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4"])
    add_aligner_arg(s)
    add_lora(s)
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--port", type=int, default=8091, help="gateway port")
    s.add_argument("--triton-http-port", type=int, default=8000)
    s.add_argument("--triton-grpc-port", type=int, default=8001)
    s.add_argument("--triton-metrics-port", type=int, default=8002)
    s.add_argument("--max-active", type=int, help="requests batched together per step (per checkpoint)")
    add_runaway_args(s)
    s.add_argument("--work", help="where the rendered repository and logs go")
    s.add_argument("--ready-timeout", type=float, default=300.0)
    s.add_argument("--max-restarts", type=int, default=5,
                   help="failed restarts of tritonserver in a row before serve gives up and exits 1 "
                        "(a server that stays up for a minute resets the count)")
    s.add_argument("--no-gateway", action="store_true", help="serve Triton only")
    s.add_argument("--custom-voice-dir", help="gateway: precomputed voices (see `triton-tts precompute-voice`)")
    s.add_argument("--allowed-local-media-path", help="gateway: allow file:// ref_audio under this directory")
    s.add_argument("--allow-private-urls", action="store_true",
                   help="gateway: let http(s) ref_audio reach private/loopback addresses")
    s.add_argument("--api-key", action="append", default=[], type=_api_key,
                   help="gateway: require this API key (repeatable; passed on in TTS_API_KEYS, not the command line)")
    s.add_argument("--drain-timeout", type=float, default=30.0,
                   help="gateway: seconds requests in flight get to finish on Ctrl-C / SIGTERM")
    add_quiet(s)
    s.set_defaults(func=_cmd_serve)
