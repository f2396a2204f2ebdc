"""Every K/V family's decode over its K/V arena (ttscore.runtime.kv), on its tiny exported checkpoint: two
requests of different lengths stepped together read their pasts in place (the arena's own buffer, whose address
changes only when it grows) and a step writes only its new positions; then Qwen3-TTS's: a burst of joins is one
batched prefill, chunked prefill changes nothing, capacity stays within the plan and every row is given back."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from ttscore.contract.kv import past_key, past_value
from ttscore.runtime import kv
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest
from ttscore.runtime.family import SayOptions
from ttscore.runtime.kv import KVArena

pytestmark = pytest.mark.slow

# family -> (the fixture giving its tiny artifacts, its say options besides the text)
KV_FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3_tts": ("tiny_custom_voice", {"voice": "vivian", "language": "English"}),
    "voxcpm2": ("voxcpm2_artifacts", {}),
    "breeze_tts_2": ("breeze_export", {}),
    "gepard": ("gepard_artifacts", {}),
    "voxtral_tts": ("voxtral_artifacts", {"voice": "casual_male"}),
    "fish_speech": ("fish_artifacts", {}),
    "cosyvoice3": ("cosyvoice3_artifacts", {"ref_text": "A short reference."}),
}


@pytest.mark.parametrize("family", list(KV_FAMILIES))
def test_every_step_binds_the_past_in_place_and_writes_only_the_new_positions(
        family: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fixture, options = KV_FAMILIES[family]
    got = request.getfixturevalue(fixture)
    artifacts = got[1] if isinstance(got, tuple) else got
    if family == "cosyvoice3":
        ref = tmp_path / "ref.wav"
        t = np.arange(int(1.2 * 24000)) / 24000
        sf.write(ref, (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 24000)
        options = {**options, "ref_audio": str(ref)}
    job = FAMILIES[family].offline.say(artifacts, SayOptions(text="Hello, this is a fingerprint.", seed=7,
                                                             max_new_tokens=20, **options))
    arenas = [a for a in vars(job.model).values() if isinstance(a, KVArena)]
    assert arenas, f"{family} keeps no KVArena"
    steps: list[dict[str, Any]] = []
    run = KVArena.run

    class Spy:
        def __init__(self, graph: Any, arena: KVArena) -> None:
            self.graph, self.arena, self.input_names = graph, arena, graph.input_names

        def run_bound(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            a = self.arena
            past = [feeds[past_key(i)] for i in range(a.layers)] + [feeds[past_value(i)] for i in range(a.layers)]
            rows = [a.row(s) for s in steps[-1]["seqs"]]
            steps[-1].update(width=past[0].shape[2], capacity=a.capacity, address=a.k[0].ctypes.data,
                             longest=max(a.lengths[min(rows):max(rows) + 1]),
                             spanned=feeds["attention_mask"].shape[1] - feeds["inputs_embeds"].shape[1],
                             in_place=all(p.base is buf for p, buf in zip(past, a.k + a.v, strict=True)))
            return self.graph.run_bound(feeds)

    def spied(arena: KVArena, graph: Any, seqs: Any, x: Any, new: Any = None) -> Any:
        lengths = [arena.length(s) for s in seqs]
        before = [b.copy() for b in arena.k + arena.v]
        steps.append({"arena": arena, "rows": len(seqs), "seqs": seqs})
        out = run(arena, Spy(graph, arena), seqs, x, new)
        added = [arena.length(s) - n for s, n in zip(seqs, lengths, strict=True)]
        assert added == (list(new) if new is not None else [x.shape[1]] * len(seqs))
        want = {(arena.row(s), p) for s, n, m in zip(seqs, lengths, added, strict=True) for p in range(n, n + m)}
        for was, now in zip(before, arena.k + arena.v, strict=True):
            rows, cap = min(was.shape[0], now.shape[0]), min(was.shape[2], now.shape[2])
            changed = {(r, p) for r, p in np.argwhere((was[:rows, :, :cap] != now[:rows, :, :cap]).any(axis=(1, 3)))}
            assert changed <= want, f"{family}: a step wrote positions it did not add"
        return out

    monkeypatch.setattr(kv.KVArena, "run", spied)
    gen = Generator(job.model, max_batch=2)
    gen.submit("a", job.request)
    gen.submit("b", dataclasses.replace(job.request, text="A second, longer request of the same two."))
    while gen.num_active:
        gen.step()
    decode = [s for s in steps if s["rows"] == 2 and s["width"] > 0]
    assert decode, f"{family}: no batched step over a past"
    for arena in arenas:
        mine = [s for s in steps if s["arena"] is arena and s["width"] > 0]
        assert mine
        # Every row bound whole, in place (no copy), VoxCPM2's exact arenas too: their mask spans the longest
        # row's past only (ttscore/runtime/kv.py), and their graphs cut the past to it.
        assert all(s["in_place"] and s["width"] == s["capacity"] for s in mine)
        if arena.exact:
            assert all(s["spanned"] == s["longest"] for s in mine)
            assert any(s["spanned"] < s["capacity"] for s in mine), f"{family}: no step fed rows longer than the mask"
        else:
            assert all(s["spanned"] == s["capacity"] for s in mine)
        addresses: dict[int, set[int]] = {}
        for s in mine:
            addresses.setdefault(s["capacity"], set()).add(s["address"])
        assert all(len(a) == 1 for a in addresses.values()), "the arena moved without growing"
        assert len(addresses) <= 6, f"{family}: capacities {sorted(addresses)}: the arena grows too often"
        assert arena.rows == 0  # every row given back

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
