"""Reference environments: the virtual environments in which the families' references run.

A family's export and parity tests compare our code with the family's reference package, and the
references need different `transformers` releases: qwen-tts pins 4.57.3 and does not import on 5.x,
while the next families' reference classes exist only in 5.x. `make setup` builds one environment
per release line (docs/families.md, "Reference environments"):

- "main": `.venv`, requirements.txt (+ requirements-nodeps.txt): serving, tests, and the 4.57.3
  references (qwen-tts, voxcpm). It is the environment pytest runs in.
- "ref5": `.venv-ref5`, requirements-ref5.txt: transformers 5.x, the same torch build, nothing else.
- "mlx": `.venv-mlx`, requirements-mlx.txt: mlx-audio on mlx's CPU build (MOSS-TTS-Nano's reference); no torch.

A test reaches another environment only through `run`: it writes its input arrays to an .npz file,
runs a script with that environment's python (the checkout and tests/ on its PYTHONPATH, Hugging Face
offline), and reads the script's output arrays back from another .npz file. The script runs in a child
forked by the environment's worker (tests/refenv_worker.py: torch and transformers imported once per
test session, each run isolated from the others); `TTS_REFENV_WORKER=0` runs a fresh interpreter instead.
The script's side is `serve(fn)`, at the bottom of this module, which therefore imports nothing but
the standard library and numpy (both environments have them).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
STAMP = ".installed"  # the Makefile's $(STAMP): written last, so a half-built environment has none


@dataclass(frozen=True)
class RefEnv:
    name: str
    venv: str  # the folder `make setup` builds, relative to the checkout
    requirements: str  # where its transformers pin is

    def transformers_pin(self) -> str:
        text = (ROOT / self.requirements).read_text()
        match = re.search(r"^transformers==(\S+)", text, re.MULTILINE)
        if match is None:
            raise RefEnvError(f"{self.requirements} pins no transformers version")
        return match.group(1)


ENVS = {
    "main": RefEnv("main", ".venv", "requirements.txt"),
    "ref5": RefEnv("ref5", ".venv-ref5", "requirements-ref5.txt"),
    "mlx": RefEnv("mlx", ".venv-mlx", "requirements-mlx.txt"),
}

# Family -> the environment its reference runs in. A new family whose reference needs transformers
# 5.x (Breeze-TTS-2's T5Gemma2, Gepard's Qwen3.5, OmniVoice's Higgs audio tokenizer) adds a "ref5" line.
FAMILY_ENV = {
    "qwen3_tts": "main",  # qwen-tts==0.1.1
    "voxcpm2": "main",  # voxcpm==2.0.3
    "breeze_tts_2": "ref5",  # T5Gemma2TextEncoder (transformers>=5)
    "omnivoice": "ref5",  # the codec encoder: HiggsAudioV2TokenizerModel (transformers>=5.3); the generator reference runs in "main"
    "gepard": "ref5",  # Qwen3_5TextModel (transformers>=5.2)
    "voxtral_tts": "main",  # MistralModel + vLLM-Omni's modules (they need einops, which ref5 lacks)
    "fish_speech": "ref5",  # vLLM-Omni's fish_speech modules (plain torch; transformers' PretrainedConfig)
    "cosyvoice3": "main",  # Qwen2ForCausalLM + vLLM-Omni's flow and HiFT (diffusers 0.35.2 and x-transformers pinned there)
    "moss_tts_nano": "mlx",  # mlx-audio==0.6.2's moss_tts_nano model and MOSS-Audio-Tokenizer-Nano codec (no torch)
}


class RefEnvError(RuntimeError):
    pass


# `make test` sets it: a reference that `make setup` installs must run there, never skip.
REQUIRE_ENV = "TTS_REQUIRE_REFERENCES"


def missing(reason: str) -> None:
    """A reference check that cannot run here: skipped on a partial setup, a failure under `make test`."""
    import pytest

    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: `make setup` installs it)", pytrace=False)
    pytest.skip(reason)


def env_for(family: str) -> RefEnv:
    try:
        return ENVS[FAMILY_ENV[family]]
    except KeyError:
        raise RefEnvError(f"no reference environment for family {family!r}: add it to FAMILY_ENV in "
                          f"{Path(__file__).name}") from None


def python(env: str | RefEnv) -> Path:
    """The interpreter of a built environment. Looked for in the checkout, then beside the environment
    pytest runs in (a git worktree that borrows another checkout's .venv borrows its .venv-ref5 too)."""
    ref = ENVS[env] if isinstance(env, str) else env
    places = [ROOT / ref.venv]
    running = Path(sys.prefix)
    if running != Path(sys.base_prefix):  # pytest runs in a virtual environment
        places.append(running.parent / ref.venv)
    for place in places:
        if (place / STAMP).is_file() and (place / "bin" / "python").is_file():
            return place / "bin" / "python"
    raise RefEnvError(f"reference environment {ref.name!r} is not built (no {ref.venv}/{STAMP} in "
                      f"{' or '.join(str(p.parent) for p in dict.fromkeys(places))}): run `make setup`")


def _child_env() -> dict[str, str]:
    child_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    child_env.update(PYTHONPATH=os.pathsep.join((str(ROOT), str(TESTS))), PYTHONNOUSERSITE="1",
                     HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return child_env


# `TTS_REFENV_WORKER=0`: a fresh interpreter per run (the slow way, to rule the fork server out).
WORKER_ENV = "TTS_REFENV_WORKER"
# A script that must not start from the worker's imports says so on a line of its own (e.g. one that
# stubs a module before transformers is imported: transformers records which packages exist when it
# is first imported, and the worker has imported it already).
FRESH_MARK = "REFENV_FRESH_INTERPRETER = True"


class _Worker:
    """One environment's fork server (tests/refenv_worker.py): torch and transformers imported once,
    each run a forked child that starts from that freshly imported state."""

    START_S = 180.0  # its first answer waits for the imports

    def __init__(self, exe: Path, name: str) -> None:
        self.name = name
        fd, log = tempfile.mkstemp(prefix=f"refenv-worker-{name}-", suffix=".log")
        self.log = Path(log)
        self.proc = subprocess.Popen([str(exe), str(TESTS / "refenv_worker.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=fd, env=_child_env(), cwd=str(ROOT))
        os.close(fd)
        self.buffer = b""
        self.started = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _answer(self, timeout_s: float) -> dict[str, int] | None:
        import select

        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                data = os.read(self.proc.stdout.fileno(), 65536)
                if not data:
                    raise RefEnvError(f"the {self.name!r} reference worker exited ({self.proc.poll()}):\n"
                                      f"{_tail(self.log.read_text(errors='replace'))}")
                self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def run(self, script: Path, argv: Sequence[str], cwd: str, log: Path, timeout_s: float) -> int | None:
        """The script's exit status; None when it ran past `timeout_s` (and was killed)."""
        assert self.proc.stdin is not None
        request = {"script": str(script), "argv": list(argv), "cwd": cwd, "log": str(log)}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        forked = self._answer(timeout_s + (0 if self.started else self.START_S))
        if forked is None:
            raise RefEnvError(f"the {self.name!r} reference worker did not start a run in time")
        self.started = True
        done = self._answer(timeout_s)
        if done is not None:
            return done["rc"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(forked["pid"], signal.SIGKILL)
        self._answer(30.0)  # its exit status, to keep the protocol in step
        return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError):
            self.log.unlink()


_workers: dict[str, _Worker] = {}
_lock = threading.Lock()


@atexit.register
def _close_workers() -> None:
    for worker in _workers.values():
        worker.close()
    _workers.clear()


def _worker(exe: Path, name: str) -> _Worker:
    worker = _workers.get(name)
    if worker is None or not worker.alive():
        if worker is not None:
            worker.close()
        worker = _workers[name] = _Worker(exe, name)
    return worker


def run(env: str | RefEnv, script: Path | str, inputs: Mapping[str, np.ndarray] | None = None,
        args: Sequence[str] = (), *, timeout_s: float = 300) -> dict[str, np.ndarray]:
    """Run `script` (a file that ends in `serve(fn)`) with the environment's python, `inputs` in,
    its output arrays out. Fails with the script's output if it exits non-zero or times out.

    The script runs in a child forked by the environment's worker (tests/refenv_worker.py): the same
    as a fresh `python SCRIPT IN.npz OUT.npz ARGS...`, without importing torch each time."""
    exe = python(env)
    name = env if isinstance(env, str) else env.name
    with tempfile.TemporaryDirectory(prefix=f"refenv-{name}-") as tmp:
        src, dst, log = Path(tmp) / "in.npz", Path(tmp) / "out.npz", Path(tmp) / "output.log"
        np.savez(src, **dict(inputs or {}))
        argv = [str(src), str(dst), *args]
        if os.environ.get(WORKER_ENV, "1") == "0" or FRESH_MARK in Path(script).read_text():
            try:
                done = subprocess.run([str(exe), str(script), *argv], cwd=tmp, env=_child_env(),
                                      capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise RefEnvError(f"{Path(script).name} in {name!r} ran past {timeout_s} s:\n"
                                  f"{_tail(exc.stderr)}") from None
            rc: int | None = done.returncode
            log.write_text(done.stdout + done.stderr)
        else:
            with _lock:
                rc = _worker(exe, name).run(Path(script).resolve(), argv, tmp, log, timeout_s)
        output = log.read_text(errors="replace") if log.is_file() else ""
        if rc is None:
            raise RefEnvError(f"{Path(script).name} in {name!r} ran past {timeout_s} s:\n{_tail(output)}")
        if rc != 0:
            raise RefEnvError(f"{Path(script).name} in {name!r} ({exe}) exited with {rc}:\n{_tail(output)}")
        if not dst.is_file():
            raise RefEnvError(f"{Path(script).name} in {name!r} wrote no outputs (does it end in serve(fn)?)")
        with np.load(dst, allow_pickle=False) as out:
            return {k: out[k] for k in out.files}


def _tail(text: str | bytes | None, lines: int = 40) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])


# --- the script's side (runs in the reference environment) ------------------------------------------


def serve(fn: Callable[..., Mapping[str, object]]) -> None:
    """`python script.py IN.npz OUT.npz [args...]`: fn(inputs, *args) -> output arrays."""
    src, dst, *args = sys.argv[1:]
    with np.load(src, allow_pickle=False) as data:
        inputs = {k: data[k] for k in data.files}
    outputs = fn(inputs, *args)
    np.savez(dst, **{k: np.asarray(v) for k, v in outputs.items()})
