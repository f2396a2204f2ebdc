"""Issue 18: a model family made only of its own folders serves through the real gateway and Triton.

tests/families/toy_tone is a family package of its own (contract rules + wire, runtime family,
backend entry, gateway adapter, export entry), found only through `TTS_FAMILY_PACKAGES=toy_tone`:
no project file names it. This test makes its tiny checkpoint with `triton-tts make-tiny`, exports
it with `triton-tts export`, serves it with `triton-tts serve` (the real tritonserver, whose python
stubs inherit the environment, and the gateway) and checks what the Speech API answers.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from procs import Proc, wait_until

from gateway import encoding
from ttscore.backend.triton_server import free_ports

ROOT = Path(__file__).resolve().parents[2]
FAMILIES_DIR = Path(__file__).resolve().parents[1] / "families"
PACKAGE = "toy_tone"
TEXT = "Hello, toy tone!"
SPEECH = "/v1/audio/speech"


def family_env(**extra: str) -> dict[str, str]:
    """The environment that makes the toy family known: its package on the path and named."""
    path = os.pathsep.join(p for p in (str(ROOT), str(FAMILIES_DIR), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "TTS_FAMILY_PACKAGES": PACKAGE, **extra}


def cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "triton_tts.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def toy():
    """The toy family's own modules, imported from its package (not through any registry)."""
    sys.path.insert(0, str(FAMILIES_DIR))
    try:
        from toy_tone import export, runtime
    finally:
        sys.path.remove(str(FAMILIES_DIR))
    return export, runtime


def test_no_project_file_names_the_toy_family():
    """It takes part through the registration points alone: nothing outside its package names it."""
    named = [str(p.relative_to(ROOT)) for top in ("ttscore", "gateway", "export", "model_repository")
             for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in (".py", ".pbtxt", ".md", ".json")
             and PACKAGE in p.read_text(encoding="utf-8", errors="replace")]
    assert named == []


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy-family")
    cache = tmp / "cache"
    env = family_env(TRITON_TTS_CACHE=str(cache))
    checkpoint, artifacts = tmp / "ToyTone-tiny", tmp / "artifacts"
    cli("make-tiny", "--family", PACKAGE, "--out", str(checkpoint), env=env)
    cli("export", "--checkpoint", str(checkpoint), "--out", str(artifacts), env=env)
    # `serve` reuses an up-to-date export in its cache (triton_tts.artifacts.ensure_artifacts): this one.
    from export.exporter import fingerprint
    from triton_tts.artifacts import cache_root, cached_export

    seeded = cache / cached_export(fingerprint(checkpoint.resolve()), "fp32").relative_to(cache_root())
    seeded.parent.mkdir(parents=True)
    seeded.symlink_to(artifacts)
    port, http_port, grpc_port, metrics_port = free_ports(4)
    cmd = [sys.executable, "-m", "triton_tts.cli", "serve", "--checkpoint", str(checkpoint), "--host", "127.0.0.1",
           "--port", str(port), "--triton-http-port", str(http_port), "--triton-grpc-port", str(grpc_port),
           "--triton-metrics-port", str(metrics_port), "--work", str(tmp / "work")]
    url = f"http://127.0.0.1:{port}"
    with Proc(cmd, tmp / "serve.log", env=env, cwd=ROOT, name="triton-tts serve") as serve:
        def ready() -> bool:
            try:
                return httpx.get(url + "/ready", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 240, f"triton-tts serve's /ready ({url})", logs=[serve])
        config = json.loads((tmp / "work" / "gateway.json").read_text())
        assert Path(config["models"][0]["artifacts_dir"]).resolve() == artifacts.resolve()  # the export above
        with httpx.Client(base_url=url, timeout=120) as client:
            yield {"client": client, "checkpoint": checkpoint, "artifacts": artifacts, "config": config,
                   "model": config["models"][0]["name"], "serve": serve, "repository": tmp / "work" / "model_repository"}


def offline(checkpoint: Path, artifacts: Path, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(the family's offline engine, the exact formula) for `text`."""
    from ttscore.contract.errors import InvalidRequest
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.engine import Generator

    export, runtime = toy()
    model = runtime.FAMILY.load(artifacts, read_manifest(artifacts), threads=1, vocoder=True, encoders=False)
    with pytest.raises(InvalidRequest) as refused:  # its runtime checks its own input too
        model.admit(runtime.ToyToneRequest(text, voice="vivian"))
    assert refused.value.param == "voice"
    engine = np.concatenate([e.pcm for e in Generator(model, max_batch=1).synthesize(runtime.ToyToneRequest(text))])
    config = json.loads((checkpoint / "config.json").read_text())
    frames = export.reference_frames(checkpoint, np.array(runtime.char_ids(text, config["vocab_size"])))
    formula, _ = runtime.smooth(frames.reshape(1, -1), np.zeros((1, 1), np.float32), config["smoothing"])
    return engine, formula[0]


def int16(pcm: np.ndarray) -> np.ndarray:
    return encoding.to_int16(pcm).astype(np.int32)  # as the gateway writes it


@pytest.mark.integration
@pytest.mark.slow
def test_toy_family_serves_through_gateway_and_triton(served):
    http, model = served["client"], served["model"]
    # The deployment: speech_generation alone (its vocoder runs in process), no voice-features model;
    # the family's own input ("voice") added to speech_generation's config by the renderer.
    assert served["config"]["models"][0]["voice_features_model"] is None
    assert sorted(p.name for p in served["repository"].iterdir()) == ["speech_generation"]
    assert 'name: "voice"' in (served["repository"] / "speech_generation" / "config.pbtxt").read_text()
    cards = {c["id"]: c for c in http.get("/v1/models").json()["data"]}
    assert cards[model]["family"] == PACKAGE and cards[model]["sample_rate"] == 16000, cards[model]

    engine, formula = offline(served["checkpoint"], served["artifacts"], TEXT)
    assert engine.shape == (len(TEXT) * 160,)
    np.testing.assert_allclose(engine, formula, atol=1e-5)

    r = http.post(SPEECH, json={"model": model, "input": TEXT, "voice": "default", "response_format": "wav"})
    assert r.status_code == 200, r.text
    audio, rate = sf.read(io.BytesIO(r.content), dtype="int16")
    assert rate == 16000
    assert np.max(np.abs(audio.astype(np.int32) - int16(engine))) <= 1

    # Streaming raw PCM: the same samples, in more than one chunk.
    with http.stream("POST", SPEECH, json={"model": model, "input": TEXT, "response_format": "pcm",
                                           "stream_format": "audio"}) as s:
        assert s.status_code == 200
        chunks = [c for c in s.iter_bytes() if c]
    streamed = np.frombuffer(b"".join(chunks), np.int16).astype(np.int32)
    assert np.max(np.abs(streamed - int16(engine))) <= 1

    # max_new_tokens caps the frames: one per character.
    r = http.post(SPEECH, json={"model": model, "input": TEXT, "response_format": "pcm", "max_new_tokens": 3})
    assert r.status_code == 200 and len(r.content) == 3 * 160 * 2, r.text

    # What the family refuses is a 400 naming the field; the server keeps serving.
    for field, value in (("instructions", "whisper"), ("seed", 3), ("voice", "vivian")):
        r = http.post(SPEECH, json={"model": model, "input": TEXT, field: value})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == field, r.json()
    r = http.post(SPEECH, json={"model": model, "input": "ok", "response_format": "pcm"})
    assert r.status_code == 200 and len(r.content) == 2 * 160 * 2
    assert served["serve"].alive
