"""ttscore/runtime/kv.py's KVArena over a fake step graph: ragged rows, the mask and positions it feeds, the past
bound in place, a step writing only its new positions, growth within the plan, dense rows on release, the exact
mode (its mask cut to the longest past, its rows still bound whole, in place)."""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.contract.kv import new_key, new_value, past_key, past_value
from ttscore.runtime.kv import GROWTH_BLOCK, KVArena

pytestmark = pytest.mark.unit

LAYERS, KVH, HD = 2, 1, 2


class FakeStep:
    """A step graph whose new K/V at position p of row b is p + 100 * (layer + 1) (+ 0.5 for values), and whose
    `echo` output is the row's input; it records every call's feeds."""

    input_names = ["inputs_embeds", "attention_mask", "position_ids"]

    def __init__(self) -> None:
        self.calls: list[dict[str, np.ndarray]] = []

    def run_bound(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(feeds)
        b, t, _ = feeds["inputs_embeds"].shape
        pos = feeds["position_ids"].astype(np.float32)[:, None, :, None] * np.ones((1, KVH, 1, HD), np.float32)
        out: dict[str, np.ndarray] = {"echo": feeds["inputs_embeds"][:, -1, 0].copy()}
        for i in range(LAYERS):
            out[new_key(i)] = pos + 100 * (i + 1)
            out[new_value(i)] = pos + 100 * (i + 1) + 0.5
        return out


class Seq:
    pass


def _x(b: int, t: int, base: float = 1.0) -> np.ndarray:
    return np.arange(b, dtype=np.float32)[:, None, None] + base + np.zeros((b, t, 3), np.float32)


@pytest.mark.parametrize("exact", [False, True])
def test_ragged_rows_mask_positions_and_writes(exact: bool) -> None:
    arena, g = KVArena(LAYERS, KVH, HD, exact=exact), FakeStep()
    a, b = Seq(), Seq()
    arena.run(g, [a], _x(1, 3))  # a's prompt: 3 positions, an empty past fed
    assert g.calls[-1][past_key(0)].shape == (1, KVH, 0, HD)
    arena.run(g, [b], _x(1, 5), [4])  # b's prompt: the last 4 of 5 (left-padded)
    np.testing.assert_array_equal(g.calls[-1]["position_ids"], [[0, 0, 1, 2, 3]])
    np.testing.assert_array_equal(g.calls[-1]["attention_mask"], [[0, 1, 1, 1, 1]])
    assert [arena.length(a), arena.length(b)] == [3, 4]
    out = arena.run(g, [b, a], _x(2, 1, base=7.0))  # one step of both, in the other order
    f = g.calls[-1]
    width = 4 if exact else arena.capacity  # the past the mask spans (exact: the longest row's)
    for i in range(LAYERS):  # the rows themselves, whole, bound in place (exact too: its graph cuts them)
        assert f[past_key(i)].shape == (2, KVH, arena.capacity, HD) and f[past_key(i)].base is arena.k[i]
        assert f[past_value(i)].shape == (2, KVH, arena.capacity, HD) and f[past_value(i)].base is arena.v[i]
    np.testing.assert_array_equal(f["position_ids"], [[3], [4]])  # rows in arena order: a, then b
    want = np.zeros((2, width + 1), np.int64)
    want[0, :3] = want[1, :4] = want[:, -1] = 1
    np.testing.assert_array_equal(f["attention_mask"], want)
    np.testing.assert_array_equal(out["echo"], [7.0, 8.0])  # outputs back in the step's order
    assert [arena.length(a), arena.length(b)] == [4, 5]
    np.testing.assert_array_equal(arena.k[1][0, 0, :4, 0], [200, 201, 202, 203])  # a: positions 0..3
    np.testing.assert_array_equal(arena.v[0][1, 0, :5, 1], [100.5, 101.5, 102.5, 103.5, 104.5])


@pytest.mark.parametrize("exact", [False, True])
def test_a_step_binds_the_arena_in_place_and_writes_only_the_new_positions(exact: bool) -> None:
    arena, g = KVArena(LAYERS, KVH, HD, exact=exact), FakeStep()
    seqs = [Seq(), Seq(), Seq()]
    for n, s in zip((5, 2, 7), seqs, strict=True):
        arena.acquire(s, plan=40)
        arena.run(g, [s], _x(1, n))
    for _ in range(3):
        before = [buf.copy() for buf in arena.k + arena.v]
        lengths = [arena.length(s) for s in seqs]
        arena.run(g, seqs[1:], _x(2, 1))  # rows 1 and 2 step, row 0 does not
        f = g.calls[-1]
        for i in range(LAYERS):
            assert f[past_key(i)].base is arena.k[i] and np.shares_memory(f[past_key(i)], arena.k[i])
            assert f[past_value(i)].base is arena.v[i] and f[past_key(i)].shape[2] == arena.capacity
        spanned = max(lengths[1:]) if exact else arena.capacity  # exact: the block's (rows 1, 2) longest past
        assert f["attention_mask"].shape == (2, spanned + 1)
        assert spanned < arena.capacity or not exact  # exact: rows longer than the mask, fed whole all the same
        for was, now in zip(before, arena.k + arena.v, strict=True):
            changed = np.argwhere((was != now).any(axis=(1, 3)))
            assert sorted(map(tuple, changed)) == [(1, lengths[1]), (2, lengths[2])]


def test_capacity_grows_within_the_plan_and_rows_stay_dense() -> None:
    arena, g = KVArena(LAYERS, KVH, HD), FakeStep()
    a, b = Seq(), Seq()
    arena.acquire(a, plan=50)
    arena.run(g, [a], _x(1, 3))
    assert arena.capacity == GROWTH_BLOCK
    caps, addresses = set(), set()
    for _ in range(60):
        arena.run(g, [a], _x(1, 1))
        caps.add(arena.capacity)
        addresses.add(arena.k[0].ctypes.data)
    assert sorted(caps) == [16, 32, 48, 50, 66]  # growth by blocks, bounded by the plan until it is passed
    assert len(addresses) == len(caps)  # a buffer is reallocated only when it grows
    arena.acquire(b, plan=10)
    arena.run(g, [b], _x(1, 4))
    moved = arena.k[0][1, :, :4].copy()
    arena.release(a)
    assert arena.rows == 1 and arena.row(b) == 0 and arena.capacity == 10  # b moved into row 0, memory given back
    np.testing.assert_array_equal(arena.k[0][0, :, :4], moved)
    arena.release(b)
    assert arena.rows == 0 and arena.nbytes == 0


def test_throwaway_rows_inside_the_block_keep_their_past() -> None:
    arena, g = KVArena(LAYERS, KVH, HD), FakeStep()
    seqs = [Seq(), Seq(), Seq()]
    for s in seqs:
        arena.run(g, [s], _x(1, 2))
    arena.run(g, [seqs[0], seqs[2]], _x(2, 1))  # the block is rows 0..2; row 1 computes a throwaway result
    assert g.calls[-1]["inputs_embeds"].shape[0] == 3
    assert [arena.length(s) for s in seqs] == [3, 2, 3]
    assert not arena.k[0][1, :, 2:].any()
