"""`triton-tts bench peer`: our pipeline and another engine's command, run alternately with the same
text, frames and threads; the peer's frames are counted from the audio it writes."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from triton_tts.bench.peer import DEFAULT_RTF_PATTERN, parse_peer, peer_argv, reported_rtf, summary


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triton_tts.cli", *args], capture_output=True, text=True, timeout=600)

# A stand-in engine: writes `frames + 1` frames of 24 kHz audio to the wav, after a short sleep, and
# records the argv it got (text as one word, threads, and the OMP thread count it was given).
PEER = """
import json, os, sys, time
import numpy as np, soundfile as sf
wav, frames, threads, text, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
time.sleep(0.05)
sf.write(wav, np.zeros((frames + 1) * 1920, np.float32), 24000)
with open(log, "a") as fh:
    fh.write(json.dumps([text, threads, os.environ.get("OMP_NUM_THREADS")]) + "\\n")
"""


def test_peer_argv_replaces_placeholders_word_by_word(tmp_path):
    argv = peer_argv("engine -t {threads} --text {text} -n {frames} -o {wav} --x=a{frames}b",
                     text="Hello, it's me", frames=7, threads=2, wav=tmp_path / "o.wav")
    assert argv == ["engine", "-t", "2", "--text", "Hello, it's me", "-n", "7", "-o", str(tmp_path / "o.wav"), "--x=a7b"]


def test_parse_peer_needs_a_label():
    assert parse_peer("c-int8=./qwen_tts --text {text}") == ("c-int8", "./qwen_tts --text {text}")
    for bad in ("./qwen_tts", "=cmd", "a b=cmd", "lab="):
        with pytest.raises(SystemExit):
            parse_peer(bad)


def test_summary_is_the_median_of_per_frame_times():
    s = summary([{"seconds": 1.0, "frames": 10}, {"seconds": 3.0, "frames": 10}, {"seconds": 2.2, "frames": 11}], 0.08)
    assert s["ms_per_frame"] == 200.0 and s["rtf"] == 2.5 and s["runs_ms_per_frame"] == [100.0, 300.0, 200.0]
    assert s["best_ms_per_frame"] == 200.0 and "reported_rtf" not in s


def test_a_peers_own_rtf_is_read_and_the_best_taken():
    c_engine = "  Speech decoder: 2201 ms total\nAudio: 3.2s generated in 5.4s (RTF 1.67)\nWrote out.wav"
    assert reported_rtf(c_engine, DEFAULT_RTF_PATTERN) == 1.67
    assert reported_rtf("RTF=0.5 then RTF: 2", DEFAULT_RTF_PATTERN) == 2.0  # the last one printed
    assert reported_rtf("no timing here", DEFAULT_RTF_PATTERN) is None
    runs = [{"seconds": 1.6, "frames": 10, "output_tail": f"(RTF {x})"} for x in (1.5, 1.7, 1.6)]
    s = summary(runs, 0.08, DEFAULT_RTF_PATTERN)
    assert s["ms_per_frame"] == 160.0 and s["reported_rtf"] == 1.6 and s["reported_ms_per_frame"] == 128.0
    assert s["best_ms_per_frame"] == 128.0  # its own report leaves model loading out
    runs[1]["output_tail"] = "crashed before printing"
    assert "reported_rtf" not in summary(runs, 0.08, DEFAULT_RTF_PATTERN)  # only when every round printed it


@pytest.mark.slow
def test_bench_peer_runs_both_alternately(tiny_custom_voice, tmp_path):
    _, art, _ = tiny_custom_voice
    script, log, out = tmp_path / "peer.py", tmp_path / "peer.log", tmp_path / "peer.json"
    script.write_text(PEER)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{wav}} {{frames}} {{threads}} {{text}} {log}"
    proc = cli("bench", "peer", "--artifacts", str(art), "--frames", "5", "--threads", "1", "--repeats", "2",
               "--peer", f"fake={command}", "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    fake, ours = result["engines"]["fake"], result["engines"]["ours"]
    assert fake["frames"] == [6, 6]  # counted from its wav, not taken from --frames
    assert fake["ms_per_frame"] >= 50 / 6
    assert ours["frames"] == [5, 5] and set(ours["graph_ms_per_frame"]) == {"talker", "code_predictor", "vocoder"}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3  # warm-up + 2 rounds
    assert all(c == [result["meta"]["text"], "1", "1"] for c in calls)
    assert "| fake |" in proc.stdout and Path(out).with_suffix(".md").is_file() and Path(out).with_suffix(".png").is_file()


@pytest.mark.slow
def test_bench_peer_reports_a_failing_peer(tiny_custom_voice, tmp_path):
    _, art, _ = tiny_custom_voice
    proc = cli("bench", "peer", "--artifacts", str(art), "--frames", "2", "--repeats", "1",
               "--peer", f"bad={shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)'", "-q")
    assert proc.returncode != 0 and "exited 3" in proc.stderr
