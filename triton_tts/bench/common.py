"""What every bench shares: a checkpoint's family model and requests, built from the export's manifest.

A bench never names a family: it loads the export through the runtime's registry, builds requests
from Speech API wire fields (ttscore.contract.tensors; a field the family does not take is left
out, so `speaker` or greedy switches apply to the families that have them), and takes the sample
rate and frame size from the manifest. What only one family has (a PyTorch reference to compare
with, its random-weight checkpoint) lives in that family's bench package, `triton_tts/bench/<family>/`,
found by `bench_families`.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

from ttscore.contract.manifest import Manifest


def add_thread_pool(ap: Any) -> None:
    """`--thread-pool`: how this bench's ONNX Runtime sessions get their threads, as the
    speech_generation model's `thread_pool` parameter (default session, as served; shared is
    process-wide and one-way, so it is only ever asked for)."""
    from ttscore.runtime.onnx import THREAD_POOLS

    ap.add_argument("--thread-pool", choices=THREAD_POOLS, default="session",
                    help="session: a blocking pool per graph (as served); shared: one spinning pool for every graph")


def use_thread_pool(args: Any) -> None:
    """Apply `--thread-pool` (with `--threads`) before the first session opens."""
    if args.thread_pool == "shared":
        from ttscore.runtime.onnx import share_thread_pool

        share_thread_pool(args.threads)


def load_model(artifacts: str | Path, threads: int | None = None, *, encoders: bool = True) -> Any:
    """The export in `artifacts`, loaded by the family its manifest names (a runtime FamilyModel)."""
    from ttscore.runtime.families import load_model as load

    return load(artifacts, threads=threads, encoders=encoders)


def wire_fields(family: str, **fields: Any) -> dict[str, Any]:
    """The speech_generation inputs among `fields` that `family` takes (None values left out)."""
    from ttscore.contract import tensors as triton_io

    taken = {t.name for t in triton_io.SPEECH_INPUTS if family in t.families}
    return {name: value for name, value in fields.items() if value is not None and name in taken}


def wire_inputs(family: str, **fields: Any) -> dict[str, Any]:
    """The request tensors of a speech_generation request (what a Triton client sends)."""
    from ttscore.contract import tensors as triton_io

    return triton_io.request_tensors(**wire_fields(family, **fields))


def request(family: str, **fields: Any) -> Any:
    """The family's request (what its model's `admit` takes), from wire fields."""
    from ttscore.runtime.families import FAMILIES

    return FAMILIES[family].request_from_tensors(wire_inputs(family, **fields))


def first_speaker(manifest: Manifest) -> str | None:
    """A preset speaker of the export, if its family has any."""
    return sorted(manifest.speakers)[0] if manifest.speakers else None


def sample_rate(manifest: Manifest) -> int:
    if not manifest.sample_rate:
        raise SystemExit(f"{manifest.path}/manifest.json has no sample_rate: re-export")
    return manifest.sample_rate


def frame_seconds(manifest: Manifest) -> float:
    """Audio seconds of one frame of the export (the family's frame: a codec frame, a latent patch)."""
    if not manifest.samples_per_frame:
        raise SystemExit(f"{manifest.path}/manifest.json has no samples_per_frame: re-export")
    return manifest.samples_per_frame / sample_rate(manifest)


def bench_families() -> dict[str, ModuleType]:
    """The families' bench packages (`triton_tts/bench/<family>/`), by family. Each gives:
    `FAMILY`, `SIZES` (random-weight checkpoint sizes), `CHECKPOINT` (a label for the work
    directories), `REQUEST` (extra wire fields of the bench's requests), `make_checkpoint(path, size)`,
    and `Reference(checkpoint)` whose `generate(text, frames, **REQUEST-like fields)` runs the PyTorch
    reference greedily and returns the frames it made."""
    from triton_tts import bench

    found = {}
    for info in pkgutil.iter_modules(bench.__path__):
        if info.ispkg:
            module = importlib.import_module(f"{bench.__name__}.{info.name}")
            found[module.FAMILY] = module
    return found


def bench_family(name: str | None) -> ModuleType:
    """One family's bench package; None: the first (by name) of those there are."""
    families = bench_families()
    if not families:
        raise SystemExit("no family has a bench package (triton_tts/bench/<family>/)")
    if name is None:
        return families[sorted(families)[0]]
    if name not in families:
        raise SystemExit(f"no bench package for family {name!r} (have: {', '.join(sorted(families))})")
    return families[name]


# --- a reference run in its own environment ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def reference_python(env_var: str, venv: str) -> Path:
    """The interpreter of a reference environment: `env_var` names one, else the checkout's `venv` (built by
    `make setup`)."""
    given = os.environ.get(env_var)
    exe = Path(given) if given else ROOT / venv / "bin" / "python"
    if not exe.is_file():
        raise SystemExit(f"no reference environment at {exe}: run `make setup` (or --no-reference)")
    return exe


class ServedReference:
    """A family's reference in its own environment: `script CHECKPOINT --serve`, which loads the checkpoint once,
    prints one JSON line when ready, then answers each `{"text", "frames"}` line with `{"frames": made, ...}`. So
    the time measured around `generate` is the reference's generation alone (plus a line over a pipe)."""

    def __init__(self, python: Path, script: Path, checkpoint: Path) -> None:
        self.script = script
        self.proc = subprocess.Popen([str(python), str(script), str(checkpoint), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self._read()  # loaded

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the reference {self.script.name} exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def generate(self, text: str, frames: int, **_fields: Any) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"text": text, "frames": frames}) + "\n")
        self.proc.stdin.flush()
        return int(self._read()["frames"])

    def __del__(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
