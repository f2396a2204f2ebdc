"""`triton-tts` as a user runs it: `say` writes a 24 kHz WAV of the generated frames, and every bad
checkpoint or request prints one line naming the problem and exits 2, leaving nothing half-written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytestmark = pytest.mark.slow


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("triton-tts: error:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n.lower() in lines[0].lower(), lines[0]


def test_say_writes_a_24khz_wav_of_the_generated_frames(tiny_custom_voice, tmp_path):
    _, art, _ = tiny_custom_voice
    out = tmp_path / "hello.wav"
    proc = cli("say", "--artifacts", str(art), "--voice", "vivian", "--language", "English",
               "--max-new-tokens", "17", "--seed", "3", "-o", str(out), "Hello there, this is a test.")
    assert proc.returncode == 0, proc.stderr
    frames = int(proc.stdout.split(":")[1].split("frames")[0])
    info = sf.info(str(out))
    assert info.samplerate == 24000 and info.channels == 1
    assert info.frames == frames * 1920 and 1 <= frames <= 17
    audio, _ = sf.read(str(out))
    assert np.sqrt(np.mean(audio**2)) > 1e-3
    again = tmp_path / "again.wav"  # same seed: the same file, byte for byte
    proc = cli("say", "--artifacts", str(art), "--voice", "vivian", "--language", "English",
               "--max-new-tokens", "17", "--seed", "3", "-o", str(again), "Hello there, this is a test.")
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == out.read_bytes()


def test_bench_breakdown_accounts_for_each_graph(tiny_custom_voice, tmp_path):
    _, art, _ = tiny_custom_voice
    out = tmp_path / "breakdown.json"
    proc = cli("bench", "breakdown", "--artifacts", str(art), "--batch", "1", "3", "--frames", "6",
               "--chunk-frames", "4", "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 3]
    for r in rows:
        assert set(r["graph_ms_per_step"]) == {"talker", "code_predictor", "vocoder"}
        assert all(v > 0 for v in r["graph_ms_per_step"].values())
        assert r["outside_ms_per_step"] >= 0
        # the parts add up to the step: graphs + the rest
        assert abs(sum(r["graph_ms_per_step"].values()) + r["outside_ms_per_step"] - r["step_ms"]) < 1e-6 * r["step_ms"] + 1e-9
        assert r["frames_per_stream"] == 6
    assert "| batch | step ms |" in proc.stdout and out.with_suffix(".md").is_file()


def test_say_clones_from_a_reference_file(tiny_base, tmp_path):
    _, art, _ = tiny_base
    ref = tmp_path / "ref.wav"
    t = np.arange(16000) / 16000
    sf.write(str(ref), (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), 16000)
    out = tmp_path / "clone.wav"
    proc = cli("say", "--artifacts", str(art), "--ref-audio", str(ref), "--ref-text", "A reference.",
               "--max-new-tokens", "6", "-o", str(out), "Cloned speech.")
    assert proc.returncode == 0, proc.stderr
    assert sf.info(str(out)).frames == 6 * 1920 or "stop" in proc.stdout


@pytest.fixture(scope="module")
def tiny_copy(tmp_path_factory):
    from export.qwen3_tts.tiny import make_tiny

    return make_tiny("custom_voice", tmp_path_factory.mktemp("ck") / "ckpt", seed=1)


def broken(tiny_copy: Path, tmp_path: Path, mutate) -> Path:
    dst = tmp_path / "broken"
    shutil.copytree(tiny_copy, dst)
    mutate(dst)
    return dst


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda d: (d / "merges.txt").unlink(), ("missing", "merges.txt")),
        (lambda d: _edit_json(d / "config.json", model_type="qwen2"), ("model_type",)),
        (lambda d: _edit_json(d / "speech_tokenizer" / "config.json", model_type="qwen3_tts_tokenizer_25hz"), ("25 hz",)),
        (lambda d: _edit_json(d / "config.json", tokenizer_type="qwen3_tts_tokenizer_25hz"), ("25 hz",)),
        (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:100000]), ("truncated",)),
        (lambda d: (d / "speech_tokenizer" / "model.safetensors").write_bytes(b"\x00" * 64), ("corrupt",)),
        (lambda d: (d / "config.json").write_text("{not json"), ("config.json",)),
    ],
    ids=["missing-file", "model-type", "25hz-speech-tokenizer", "25hz-tokenizer-type", "truncated", "corrupt", "bad-json"],
)
def test_bad_checkpoints(tiny_copy, tmp_path, mutate, needles):
    ckpt = broken(tiny_copy, tmp_path, mutate)
    out = tmp_path / "artifacts"
    proc = cli("export", "--checkpoint", str(ckpt), "--out", str(out))
    one_line_error(proc, *needles)
    assert not out.exists() and not list(tmp_path.glob(".artifacts*")), "half-written output left behind"
    proc = cli("say", "--checkpoint", str(ckpt), "-o", str(tmp_path / "x.wav"), "Hello.")
    one_line_error(proc, *needles)
    assert not (tmp_path / "x.wav").exists()


def test_missing_directory(tmp_path):
    one_line_error(cli("export", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "o")), "does not exist")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--voice", "nobody"], ("nobody", "vivian")),
        (["--voice", "vivian", "--language", "Klingon"], ("klingon", "english")),
        (["--voice", "vivian", "--max-new-tokens", "0"], ("max_new_tokens",)),
    ],
)
def test_bad_requests(tiny_custom_voice, tmp_path, args, needles):
    _, art, _ = tiny_custom_voice
    out = tmp_path / "x.wav"
    one_line_error(cli("say", "--artifacts", str(art), *args, "-o", str(out), "Hello."), *needles)
    assert not out.exists()


def test_empty_text(tiny_custom_voice, tmp_path):
    _, art, _ = tiny_custom_voice
    one_line_error(cli("say", "--artifacts", str(art), "--voice", "vivian", "-o", str(tmp_path / "x.wav"), "   "), "input")


def test_reference_audio_that_is_not_audio(tiny_base, tmp_path):
    _, art, _ = tiny_base
    bogus = tmp_path / "ref.wav"
    bogus.write_bytes(b"this is not audio at all" * 100)
    one_line_error(cli("say", "--artifacts", str(art), "--ref-audio", str(bogus), "--ref-text", "x",
                       "-o", str(tmp_path / "x.wav"), "Hello."), "audio")
