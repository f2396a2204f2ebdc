"""The gateway as a *process* for tests of what only a process has: signals, exit status, the
command line and the environment.

- `GatewayProcess`: `python -m gateway` on a free port (the worktree's code: cwd and PYTHONPATH are
  the repository), output in a log file; `fake=True` runs tests/fake_gateway.py instead: the same
  `gateway.__main__` over gateway_fixtures.FakeBackend, so no Triton is needed.
- `fake_config(dir, **keys)`: a gateway.json over hand-written manifests (fake_deployment's models).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
from gateway_fixtures import NAMES, fake_manifest

from ttscore.backend.launcher import free_port

ROOT = Path(__file__).resolve().parents[1]
FAKE_GATEWAY = Path(__file__).resolve().parent / "fake_gateway.py"


def fake_config(root: Path, variants: tuple[str, ...] = ("custom_voice",), **keys: Any) -> Path:
    models = []
    for variant in variants:
        art = root / f"art-{variant}"
        art.mkdir(parents=True, exist_ok=True)
        (art / "manifest.json").write_text(json.dumps(fake_manifest(variant)))
        models.append({"name": NAMES[variant], "variant": variant, "triton_model": f"speech_generation_{NAMES[variant]}",
                       "voice_features_model": "voice_features" if variant == "base" else None,
                       "artifacts_dir": str(art)})
    path = root / "gateway.json"
    keys.setdefault("speaker_samples_dir", str(root / "speakers"))
    keys.setdefault("triton_resolve_interval_s", 0)  # "fake" is no host to resolve: the pool takes it as it is
    path.write_text(json.dumps({"triton_url": "fake:0", "models": models, **keys}))
    return path


class GatewayProcess:
    def __init__(self, config: Path, log: Path, *, fake: bool = False, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        entry = [str(FAKE_GATEWAY)] if fake else ["-m", "gateway"]
        self.cmd = [sys.executable, *entry, "--config", str(config), "--host", "127.0.0.1", "--port", str(self.port),
                    "--log-level", "info", *args]
        self.env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
        self.log = log
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> GatewayProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gateway not up in {timeout_s}s:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def until_draining(self, timeout_s: float = 10) -> httpx.Response:
        """/ready once it answers 503 (after a SIGTERM, which the process handles asynchronously)."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            r = httpx.get(self.url + "/ready", timeout=5)
            if r.status_code == 503:
                return r
            time.sleep(0.02)
        raise AssertionError(f"/ready never answered 503:\n{self.log_text()[-2000:]}")

    def stop(self) -> None:
        """Whatever state it is in: SIGTERM, then SIGKILL if it has not exited after the drain it owes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
