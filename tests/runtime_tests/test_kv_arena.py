"""Qwen3-TTS decode over the KV arena, on the tiny exported checkpoint: the talker reads the arena
in place, a burst of joins is one batched prefill, chunked prefill changes nothing, capacity stays
within the plan and every row is given back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = pytest.mark.slow

TEXTS = ["First request of the burst.", "A second, somewhat longer request of the same burst.", "Third."]


def _requests(n: int = 3, frames: int = 6) -> list[Qwen3TTSRequest]:
    return [Qwen3TTSRequest(text=TEXTS[i % 3], speaker="vivian", max_new_tokens=frames + i, seed=i + 1) for i in range(n)]


def _run(gen: Generator, reqs: list[Qwen3TTSRequest]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    for i, r in enumerate(reqs):
        gen.submit(f"r{i}", r)
    got: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {f"r{i}": ([], []) for i in range(len(reqs))}
    while gen.num_active:
        for ev in gen.step():
            got[ev.req_id][0].append(ev.codes)
            got[ev.req_id][1].append(ev.pcm)
    return {k: (np.concatenate(c), np.concatenate(p)) for k, (c, p) in got.items()}


class Spy:
    """Wraps a graph's run_bound and records each call's past_key_0 and batch."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.calls: list[dict[str, Any]] = []
        self.inner = pipe.talker.run_bound

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        past = feeds["past_key_0"]
        self.calls.append({
            "seq": feeds["inputs_embeds"].shape[1],
            "rows": past.shape[0],
            "in_place": np.shares_memory(past, self.pipe.arena.k[0]),
        })
        return self.inner(feeds)


def test_burst_is_one_prefill_and_decode_reads_the_arena_in_place(tiny_custom_voice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, pipe = tiny_custom_voice
    spy = Spy(pipe)
    monkeypatch.setattr(pipe.talker, "run_bound", spy)
    gen = Generator(pipe, max_batch=4)
    for i, r in enumerate(_requests()):
        gen.submit(f"r{i}", r)
    gen.step()
    assert [c["seq"] > 1 for c in spy.calls] == [True, False]  # one prefill for all three, one decode
    assert spy.calls[1]["rows"] == 3 and spy.calls[1]["in_place"]
    while gen.num_active:
        gen.step()
    decodes = [c for c in spy.calls if c["seq"] == 1]
    assert decodes and all(c["in_place"] for c in decodes)
    assert pipe.arena.rows == 0  # every row given back


def test_chunked_prefill_and_batching_change_nothing(tiny_custom_voice: Any) -> None:
    _, _, pipe = tiny_custom_voice
    reqs = _requests()
    alone = {f"r{i}": _run(Generator(pipe, max_batch=1), [r])["r0"] for i, r in enumerate(reqs)}
    chunked = _run(Generator(pipe, max_batch=4, prefill_budget=5), reqs)
    for k, (codes, pcm) in alone.items():
        np.testing.assert_array_equal(chunked[k][0], codes)
        np.testing.assert_allclose(chunked[k][1], pcm, atol=1e-4, rtol=0)


def test_capacity_follows_the_plan_and_memory_is_reported(tiny_custom_voice: Any) -> None:
    _, _, pipe = tiny_custom_voice
    gen = Generator(pipe, max_batch=2)
    gen.submit("a", Qwen3TTSRequest(text="Short.", speaker="vivian", max_new_tokens=3, seed=1))
    seq = gen._active["a"].seq
    while gen.num_active:
        gen.step()
        mem = pipe.memory()
        assert mem["kv_capacity"] <= seq.planned  # type: ignore[attr-defined]
    t = pipe.info.talker
    assert mem["kv_bytes_per_position"] == 2 * t.num_layers * t.num_kv_heads * t.head_dim * 4
    assert mem["kv_arena_bytes"] == pipe.arena.nbytes
