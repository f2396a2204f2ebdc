"""The gateway as a *process* for tests of what only a process has: signals, exit status, the
command line and the environment.

- `GatewayProcess`: a procs.Proc running `python -m gateway` on a free port (the worktree's code: cwd
  and PYTHONPATH are the repository), output in a log file; `start()` returns once /health answers.
  `fake=True` runs tests/fake_gateway.py instead: the same `gateway.__main__` over
  gateway_fixtures.FakeBackend, so no Triton is needed.
- `fake_config(dir, **keys)`: a gateway.json over hand-written manifests (fake_deployment's models).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from pathlib import Path
from typing import Any

import httpx
from gateway_fixtures import NAMES, fake_manifest
from procs import ROOT, Proc, wait_until

from ttscore.backend.triton_server import free_port

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


class GatewayProcess(Proc):
    def __init__(self, config: Path, log: Path, *, fake: bool = False, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        entry = [str(FAKE_GATEWAY)] if fake else ["-m", "gateway"]
        super().__init__([sys.executable, *entry, "--config", str(config), "--host", "127.0.0.1",
                          "--port", str(self.port), "--log-level", "info", *args],
                         log, env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}, cwd=ROOT, name="gateway")
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> GatewayProcess:
        super().start()
        try:
            wait_until(self._healthy, timeout_s, f"the gateway's /health on {self.url}", logs=[self])
        except AssertionError:
            self.stop()
            raise
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def terminate(self) -> None:
        self.send(signal.SIGTERM)

    def until_draining(self, timeout_s: float = 10) -> httpx.Response:
        """/ready once it answers 503 (after a SIGTERM, which the process handles asynchronously)."""
        def draining() -> httpx.Response | None:
            r = httpx.get(self.url + "/ready", timeout=5)
            return r if r.status_code == 503 else None

        return wait_until(draining, timeout_s, "/ready to answer 503", logs=[self], step=0.02)
