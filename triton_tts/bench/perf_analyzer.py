"""perf_analyzer 2.51 against the Triton models (model level; the gateway has its own benchmark).

    triton-tts bench perf-analyzer check
    triton-tts bench perf-analyzer speech   --url 127.0.0.1:8001 [--artifacts-dir DIR] [--concurrency 1:4:1] [--out DIR]
    triton-tts bench perf-analyzer code2wav --url 127.0.0.1:8001 [--artifacts-dir DIR] [--batch-sizes 1,2,4,8]

The served export's manifest (--artifacts-dir, or the served model's `artifacts_dir` parameter when
this machine can read it) gives the sample rate, frame size, code groups and vocoder state size the
summaries and inputs need.

- The binary ships in the tritonclient==2.51.0 wheel (pip puts it in <venv>/bin); `fetch` extracts it
  from a downloaded wheel when the installed package lacks it. It needs libb64.so.0d and
  libcudart.so.12 (ttscore.backend.perf_analyzer.perf_analyzer_env: apt libb64-0d / pip nvidia-cuda-runtime-cu12,
  or the identical copies bundled in nvidia-pytriton, symlinked under their sonames).
- `speech` runs `--streaming` against the decoupled speech_generation with the committed prompts
  (triton_tts/bench/data/, linked from perf/data/speech_generation.json) and summarises the per-response timestamps and outputs of
  perf_analyzer's profile export: time to first audio, inter-chunk gaps, playback underruns,
  RTF (processing seconds per audio second: < 1 is faster than real time), audio seconds per
  second, p50/p95/p99 per concurrency.
- `code2wav` sweeps batch size x concurrency with `--input-data` rendered from
  data/code2wav.json (frames per request) and the deployment's state_size.
Results: DIR/<scenario>.csv (perf_analyzer), DIR/<scenario>.profile.json, DIR/summary.json + .csv.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from triton_tts.progress import Stages, add_quiet
from ttscore.backend import perf_analyzer as backend_perf
from ttscore.backend import triton_install, triton_server

PERF_DIR = Path(__file__).resolve().parent
PROFILE_TRIES = 2  # runs of perf_analyzer before a profile export that is not JSON stops the bench
DATA_DIR = PERF_DIR / "data"
TRITONCLIENT_VERSION = "2.51.0"


# --- the binary ---------------------------------------------------------------------------------


def fetch_binary(dest_dir: Path | None = None) -> Path:
    """Download the tritonclient wheel (no deps) and extract perf_analyzer from its .data dir."""
    dest_dir = dest_dir or triton_install.cache_dir() / "bin"
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", tmp,
             f"tritonclient=={TRITONCLIENT_VERSION}"],
            check=True,
        )
        wheels = sorted(Path(tmp).glob("tritonclient-*.whl"))
        if not wheels:
            raise SystemExit("pip download produced no tritonclient wheel")
        member = f"tritonclient-{TRITONCLIENT_VERSION}.data/data/bin/perf_analyzer"
        with zipfile.ZipFile(wheels[0]) as zf, zf.open(member) as src, open(dest_dir / "perf_analyzer", "wb") as dst:
            shutil.copyfileobj(src, dst)
    target = dest_dir / "perf_analyzer"
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return target


def find_binary() -> Path:
    try:
        return backend_perf.perf_analyzer_binary()
    except triton_install.TritonEnvError:
        cached = triton_install.cache_dir() / "bin" / "perf_analyzer"
        if cached.is_file():
            return cached
        raise


def run_perf_analyzer(args: list[str], log_path: Path, stages: Stages | None = None) -> None:
    """One perf_analyzer run (a stage of `stages`, named after its log file)."""
    if stages is not None:
        stages.stage(log_path.stem)
    cmd = [str(find_binary()), *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n\n")
        log.flush()
        proc = subprocess.run(cmd, check=False, env=backend_perf.perf_analyzer_env(), stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-20:])
        raise SystemExit(f"perf_analyzer failed ({proc.returncode}); see {log_path}:\n{tail}")


def _profile(args: list[str], path: Path, log_path: Path, stages: Stages | None = None,
             tries: int = PROFILE_TRIES) -> Any:
    """perf_analyzer's profile export of a run with `args` (which write it to `path`). An export that is not
    JSON (seen once in ~20 runs on the 2-vCPU machine: cut off mid-file, though perf_analyzer exited 0) is
    reported and the run made again, up to `tries` runs in all."""
    for attempt in range(1, tries + 1):
        path.unlink(missing_ok=True)  # perf_analyzer refuses to overwrite a profile export
        run_perf_analyzer(args, log_path, stages)
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            message = f"perf_analyzer's profile export {path} is not JSON ({exc})"
            if attempt == tries:
                raise SystemExit(f"{message}, {tries} runs in a row") from None
            print(f"{message}: running it again", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def _measurement_args(ns: argparse.Namespace) -> list[str]:
    return [
        "--measurement-mode", "count_windows",
        "--measurement-request-count", str(ns.requests_per_window),
        "--stability-percentage", str(ns.stability_percentage),
        "--max-trials", str(ns.max_trials),
    ]


# --- summaries ----------------------------------------------------------------------------------


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p95": round(float(np.percentile(arr, 95)), 3),
        "p99": round(float(np.percentile(arr, 99)), 3),
        "max": round(float(arr.max()), 3),
    }


def _audio_samples(output: dict[str, Any]) -> int:
    """Samples in one response's `audio`. perf_analyzer 2.51 exports an empty tensor (a final response
    after a stop, `frames` 0) as one uninitialized number instead of [], so a bare number counts as
    one sample only where the response says it carries frames."""
    audio = output.get("audio")
    if isinstance(audio, list):
        return len(audio)
    return 0 if audio is None or output.get("frames") in (0, [0]) else 1


def summarize_streaming(profile: dict[str, Any], sample_rate: int) -> list[dict[str, Any]]:
    """Per experiment (concurrency): TTFA, gaps, underruns, RTF, audio seconds per second."""
    rows = []
    for exp in profile.get("experiments", []):
        ttfa, total, gaps, rtf = [], [], [], []
        audio_total = 0.0
        underrun_requests = 0
        chunks = []
        t_first, t_last = None, None
        for req in exp.get("requests", []):
            start = req["timestamp"]
            stamps = req.get("response_timestamps") or []
            outputs = req.get("response_outputs") or []
            if not stamps:
                continue
            durations = [_audio_samples(o) / sample_rate for o in outputs] or [0.0] * len(stamps)
            audio = float(sum(durations))
            audio_total += audio
            chunks.append(len(stamps))
            ttfa.append((stamps[0] - start) / 1e6)
            total.append((stamps[-1] - start) / 1e6)
            gaps += [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]
            if audio > 0:
                rtf.append(((stamps[-1] - start) / 1e9) / audio)
            # Playback starts when the first chunk arrives; an underrun is a chunk arriving after
            # everything before it has finished playing.
            played = 0.0
            for i in range(1, len(stamps)):
                played += durations[i - 1] if i - 1 < len(durations) else 0.0
                if (stamps[i] - stamps[0]) / 1e9 > played + 1e-3:
                    underrun_requests += 1
                    break
            t_first = start if t_first is None else min(t_first, start)
            t_last = stamps[-1] if t_last is None else max(t_last, stamps[-1])
        wall = (t_last - t_first) / 1e9 if t_first is not None and t_last is not None else 0.0
        exp_info = exp.get("experiment", {})
        rows.append(
            {
                "mode": exp_info.get("mode"),
                "concurrency": exp_info.get("value"),
                "requests": len(ttfa),
                "chunks_per_request": round(float(np.mean(chunks)), 2) if chunks else None,
                "ttfa_ms": _pct(ttfa),
                "latency_ms": _pct(total),
                "chunk_gap_ms": _pct(gaps),
                "rtf": _pct(rtf),
                "rtf_direction": "processing seconds per audio second; < 1 is faster than real time",
                "underrun_requests": underrun_requests,
                "audio_seconds": round(audio_total, 3),
                "audio_seconds_per_second": round(audio_total / wall, 3) if wall > 0 else None,
                "requests_per_second": round(len(ttfa) / wall, 3) if wall > 0 else None,
            }
        )
    return rows


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_summary(out: Path, scenario: str, rows: list[dict[str, Any]]) -> None:
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    summary[scenario] = rows
    summary_path.write_text(json.dumps(summary, indent=2))
    flat = []
    for row in rows:
        item: dict[str, Any] = {}
        for k, v in row.items():
            if isinstance(v, dict):
                item.update({f"{k}_{kk}": vv for kk, vv in v.items()})
            else:
                item[k] = v
        flat.append(item)
    if flat:
        with open(out / f"{scenario}.summary.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(flat[0]))
            writer.writeheader()
            writer.writerows(flat)


# --- scenarios ----------------------------------------------------------------------------------


def cmd_speech(ns: argparse.Namespace) -> int:
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "speech_generation"
    profile_path = out / f"{name}.profile.json"
    args = ["-m", ns.model, "-i", "grpc", "-u", ns.url, "--streaming", "--input-data", str(ns.input_data),
            "--concurrency-range", ns.concurrency, *_measurement_args(ns), "-f", str(out / f"{name}.csv"),
            "--profile-export-file", str(profile_path)]
    rows = summarize_streaming(_profile(args, profile_path, out / f"{name}.log", ns.stages), _sample_rate(ns))
    write_summary(out, name, rows)
    print(json.dumps(rows, indent=2))
    return 0


def code2wav_input_data(frames: list[int], state_size: int, groups: int) -> dict[str, Any]:
    data = []
    for f in frames:
        codes = (np.arange(f * groups, dtype=np.int64) % 64).tolist()
        data.append(
            {
                "codes": {"content": codes, "shape": [f, groups]},
                "state": {"content": [0.0] * state_size, "shape": [state_size]},
                "position": {"content": [0], "shape": [1]},
            }
        )
    return {"data": data}


def served_config(url: str, model: str) -> Any:
    """A served model's config (model_config_pb2.ModelConfig); None when the server cannot tell."""
    import tritonclient.grpc as grpcclient

    try:
        client = grpcclient.InferenceServerClient(url)
        config = client.get_model_config(model).config
        client.close()
    except Exception:  # an unreachable server or unknown model: perf_analyzer reports it
        return None
    return config


def served_artifacts(url: str, model: str) -> Path | None:
    """The `artifacts_dir` parameter of a served model, when that directory is readable here."""
    config = served_config(url, model)
    params = config.parameters if config is not None else {}
    path = Path(params["artifacts_dir"].string_value) if "artifacts_dir" in params else None
    return path if path is not None and path.is_dir() else None


def _manifest(ns: argparse.Namespace) -> Any:
    """The served export's manifest: --artifacts-dir, else the served model's artifacts_dir."""
    from ttscore.contract.manifest import read_manifest

    artifacts = getattr(ns, "artifacts_dir", None) or served_artifacts(ns.url, ns.model)
    if not artifacts:
        raise SystemExit("give --artifacts-dir: the served export, whose manifest.json has the sample rate and frame size")
    ns.artifacts_dir = str(artifacts)
    return read_manifest(artifacts)


def _sample_rate(ns: argparse.Namespace) -> int:
    rate = getattr(ns, "sample_rate", None) or _manifest(ns).sample_rate
    if not rate:
        raise SystemExit(f"{ns.artifacts_dir}/manifest.json has no sample_rate: re-export")
    return int(rate)


def _state_size(ns: argparse.Namespace) -> int:
    if ns.state_size:
        return int(ns.state_size)
    size = _manifest(ns).code2wav_state_size
    if size is None:
        raise SystemExit("give --state-size or --artifacts-dir (its manifest.json has code2wav.state_size)")
    return int(size)


def cmd_code2wav(ns: argparse.Namespace) -> int:
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    scenario = json.loads(Path(ns.scenario).read_text())
    state_size = _state_size(ns)
    manifest = _manifest(ns)
    # Codes per frame: the served model's `codes` input [frames, groups] says it exactly.
    config = served_config(ns.url, ns.model)
    dims = next((list(t.dims) for t in config.input if t.name == "codes"), []) if config is not None else []
    groups = dims[-1] if dims and dims[-1] > 0 else manifest.num_code_groups
    if not groups:
        raise SystemExit(f"cannot tell the code groups of {ns.model} (its config, {ns.artifacts_dir}/manifest.json)")
    # Audio per frame from the manifest (a partial, vocoder-only export has none: no audio rate then).
    frame_seconds = (manifest.samples_per_frame / manifest.sample_rate
                     if manifest.samples_per_frame and manifest.sample_rate else None)
    rows: list[dict[str, Any]] = []
    for frames in scenario["frames"]:
        data_path = out / f"code2wav_f{frames}.input.json"
        data_path.write_text(json.dumps(code2wav_input_data([frames], state_size, groups)))
        for batch in [int(b) for b in ns.batch_sizes.split(",")]:
            name = f"code2wav_f{frames}_b{batch}"
            run_perf_analyzer(
                [
                    "-m", ns.model, "-i", "grpc", "-u", ns.url, "-b", str(batch),
                    "--input-data", str(data_path),
                    "--concurrency-range", ns.concurrency,
                    *_measurement_args(ns),
                    "-f", str(out / f"{name}.csv"),
                ],
                out / f"{name}.log", ns.stages,
            )
            for r in read_csv(out / f"{name}.csv"):
                ips = float(r["Inferences/Second"])
                rows.append(
                    {
                        "frames": frames,
                        "batch_size": batch,
                        "concurrency": int(r["Concurrency"]),
                        "inferences_per_second": ips,  # rows (batch elements) per second
                        "audio_seconds_per_second": round(ips * frames * frame_seconds, 3) if frame_seconds else None,
                        "latency_ms": {
                            k: round(float(r[f"{k} latency"]) / 1000, 3) for k in ("p50", "p95", "p99")
                        },
                        "server_queue_us": float(r["Server Queue"]),
                        "server_compute_us": float(r["Server Compute Infer"]),
                    }
                )
    write_summary(out, "code2wav", rows)
    print(json.dumps(rows, indent=2))
    return 0


def voice_features_input_data(seconds: float, sample_rate: int) -> dict[str, Any]:
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    rng = np.random.default_rng(0)
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.02 * rng.standard_normal(t.size)).astype(np.float32)
    return {"data": [{"audio": {"content": [round(float(x), 5) for x in audio], "shape": [audio.size]},
                      "sample_rate": {"content": [sample_rate], "shape": [1]}}]}


def cmd_voice_features(ns: argparse.Namespace) -> int:
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    scenario = json.loads(Path(ns.scenario).read_text())
    rows: list[dict[str, Any]] = []
    for seconds in scenario["seconds"]:
        for rate in scenario["sample_rates"]:
            name = f"voice_features_{seconds}s_{rate}"
            data_path = out / f"{name}.input.json"
            data_path.write_text(json.dumps(voice_features_input_data(seconds, rate)))
            run_perf_analyzer(
                [
                    "-m", ns.model, "-i", "grpc", "-u", ns.url, "--input-data", str(data_path),
                    "--concurrency-range", ns.concurrency, *_measurement_args(ns), "-f", str(out / f"{name}.csv"),
                ],
                out / f"{name}.log", ns.stages,
            )
            for r in read_csv(out / f"{name}.csv"):
                rows.append(
                    {
                        "seconds": seconds,
                        "sample_rate": rate,
                        "concurrency": int(r["Concurrency"]),
                        "clips_per_second": float(r["Inferences/Second"]),
                        "latency_ms": {
                            k: round(float(r[f"{k} latency"]) / 1000, 3) for k in ("p50", "p95", "p99")
                        },
                    }
                )
    write_summary(out, "voice_features", rows)
    print(json.dumps(rows, indent=2))
    return 0


def cmd_check(ns: argparse.Namespace) -> int:
    binary = find_binary()
    env = backend_perf.perf_analyzer_env()
    proc = subprocess.run([str(binary), "--version"], check=False, env=env, capture_output=True, text=True)
    print(f"binary: {binary}\nLD_LIBRARY_PATH: {env['LD_LIBRARY_PATH']}\n{(proc.stdout + proc.stderr).strip()}")
    return proc.returncode


def cmd_fetch(ns: argparse.Namespace) -> int:
    print(fetch_binary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="locate the binary and run --version").set_defaults(fn=cmd_check)
    sub.add_parser("fetch", help="extract perf_analyzer from the tritonclient wheel").set_defaults(fn=cmd_fetch)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name, fn in (("speech", cmd_speech), ("code2wav", cmd_code2wav), ("voice_features", cmd_voice_features)):
        s = sub.add_parser(name)
        s.set_defaults(fn=fn)
        s.add_argument("--url", default=f"127.0.0.1:{triton_server.DEFAULT_GRPC_PORT}", help="Triton gRPC host:port")
        s.add_argument("--out", default=str(Path("build") / "perf" / f"{stamp}-{name}"))
        s.add_argument("--concurrency", default="1:4:1", help="perf_analyzer --concurrency-range")
        s.add_argument("--requests-per-window", type=int, default=8)
        # The prompt mix is heterogeneous by design, so perf_analyzer's throughput stabilisation
        # rarely converges for `speech`: it measures a fixed number of windows instead.
        s.add_argument("--stability-percentage", type=int, default=999 if name == "speech" else 50)
        s.add_argument("--max-trials", type=int, default=3 if name == "speech" else 5)
        add_quiet(s)
    speech = sub.choices["speech"]
    speech.add_argument("--model", default="speech_generation")
    speech.add_argument("--artifacts-dir", help="the served export (default: the served model's, if readable here)")
    speech.add_argument("--sample-rate", type=int, help="instead of --artifacts-dir")
    speech.add_argument("--input-data", default=str(DATA_DIR / "speech_generation.json"))
    c2w = sub.choices["code2wav"]
    c2w.add_argument("--model", default="code2wav")
    c2w.add_argument("--scenario", default=str(DATA_DIR / "code2wav.json"))
    c2w.add_argument("--batch-sizes", default="1,2,4,8")
    c2w.add_argument("--state-size", type=int)
    c2w.add_argument("--artifacts-dir")
    vf = sub.choices["voice_features"]
    vf.add_argument("--model", default="voice_features")
    vf.add_argument("--scenario", default=str(DATA_DIR / "voice_features.json"))
    return p


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    if ns.cmd in ("check", "fetch"):
        return int(ns.fn(ns))
    with Stages(f"bench perf-analyzer {ns.cmd}", quiet=ns.quiet) as stages:  # a stage per perf_analyzer run
        ns.stages = stages
        return int(ns.fn(ns))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
