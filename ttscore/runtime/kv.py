"""The past of a decoder step with an explicit past (ttscore.contract.kv names), kept in place: every K/V family
runs its autoregressive stack's steps through one `KVArena` per stack.

Per layer a key and a value buffer [rows, kv_heads, capacity, head_dim], one row per sequence, whose valid
positions are [0, length) (right-padded). A step over some sequences feeds the contiguous block of rows holding
them, `arena[lo:hi]`, as the graph's past: a view bound in place through IO binding, never copied nor
concatenated. `attention_mask` marks each row's valid slots and its new positions, and only the step's new K/V
(the graph outputs the new positions alone) is written, into [length, length + n). Every step graph attends
through the mask (slot j of row b valid iff attention_mask[b, j], the new positions after the past), so this one
layout serves every family whatever padding its exporter validated. A step whose rows all have an empty past (a
prompt's first chunk) feeds an empty past.

An `exact` arena's mask spans only the longest valid past of the step's rows (`longest + T` wide, not
`capacity + T`), its rows still fed in place at their whole capacity: its graph must cut its past to the mask
(`past_cut_to_mask`, ttscore.contract.kv), so it attends over exactly the slots and values of a past fed cut to the
longest row. ONNX Runtime's softmax over a padded row differs from the unpadded one in the last bits, which a
family whose stack output is continuous (VoxCPM2's feature patches) carries into its audio, so only this keeps its
output identical to the pre-arena runtime's (the graph's own concatenation copies the cut past, as it copies any
past); the families that sample codes from their stack's logits attend over the whole capacity.

Rows are kept dense (a departing row's place is taken by the last row: one copy per departure), so a step over
every sequence feeds the whole prefix; rows inside the block but outside the step compute a throwaway result.
Capacity grows by an eighth when a step needs room (one copy per growth, every eighth of the length at most), never
past the largest plan (the most positions an owner may need), and shrinks back when the longest plan leaves. A
step attends over the whole capacity, masked slots included, and a step graph copies its past once more inside
(concatenating the new K/V, repeating K/V heads for grouped queries), so the padding costs what it spans: growing
by doubling made the step at position 1,000 slower than the concatenating runtime's (perf/README.md).

`GrowingPast` is the concatenating past without an arena: one sequence run offline, or a frame's inner stack (Fish
Speech's Fast AR, Breeze's depth decoder) over the rows of a step in lockstep."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ttscore.contract.kv import new_key, new_value, past_key, past_value

F32 = npt.NDArray[np.float32]
GROWTH_BLOCK = 16  # the fewest positions a growth adds


class BoundGraph(Protocol):
    """What a step needs of its graph (ttscore.runtime.onnx.OnnxGraph)."""

    input_names: list[str]

    def run_bound(self, feeds: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]: ...


class KVArena:
    """The pasts of one decoder stack's sequences, in place (see the module docstring). A sequence owns a row
    from `acquire` (or its first step) to `release`; rows are found by the sequence's identity."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, *, exact: bool = False) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.exact = exact
        self.k: list[F32] = []
        self.v: list[F32] = []
        self.owners: list[object] = []  # row -> sequence
        self.lengths: list[int] = []  # row -> valid positions
        self.plans: list[int] = []  # row -> the most positions it may need (0: unknown)
        self._row: dict[int, int] = {}  # id(sequence) -> row
        self._alloc(0, 0)

    @property
    def bytes_per_position(self) -> int:
        """Bytes one sequence needs per cached position (all layers, K and V, float32)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 4

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    @property
    def capacity(self) -> int:
        return int(self.k[0].shape[2]) if self.k else 0

    @property
    def rows(self) -> int:
        return len(self.owners)

    def memory(self) -> dict[str, int]:
        """The arena's share of a model's `memory()`."""
        return {"kv_arena_bytes": self.nbytes, "kv_bytes_per_position": self.bytes_per_position,
                "kv_rows": self.rows, "kv_capacity": self.capacity}

    def row(self, seq: object) -> int:
        """`seq`'s row, -1 when it holds none."""
        return self._row.get(id(seq), -1)

    def length(self, seq: object) -> int:
        """`seq`'s valid positions (0 when it holds no row)."""
        r = self.row(seq)
        return self.lengths[r] if r >= 0 else 0

    def _alloc(self, rows: int, capacity: int) -> None:
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        old = self.k + self.v
        self.k = [np.zeros(shape, np.float32) for _ in range(self.layers)]
        self.v = [np.zeros(shape, np.float32) for _ in range(self.layers)]
        if old:
            r, c = min(rows, old[0].shape[0]), min(capacity, old[0].shape[2])
            for new, was in zip(self.k + self.v, old, strict=True):
                new[:r, :, :c] = was[:r, :, :c]

    def acquire(self, seq: object, plan: int = 0) -> int:
        """A row for `seq` (its own if it holds one), empty; `plan`: the most positions it may need (0:
        unknown), which bounds the capacity's growth."""
        r = self.row(seq)
        if r >= 0:
            return r
        if self.rows == self.k[0].shape[0]:
            self._alloc(max(1, 2 * self.rows), self.capacity)
        r = self.rows
        self._row[id(seq)] = r
        self.owners.append(seq)
        self.lengths.append(0)
        self.plans.append(plan)
        return r

    def seed(self, seq: object, past: Sequence[F32], plan: int = 0) -> int:
        """A row for `seq` (acquired as `acquire` does) holding `past` as its first positions: per layer its keys
        then values, [kv_heads, n, head_dim] each (a prefix computed once and kept by the family, e.g. a voice's
        prompt prefix). The row must be empty."""
        r = self.acquire(seq, plan)
        if self.lengths[r]:
            raise ValueError("seed() takes an empty row")
        n = int(past[0].shape[1])
        self.reserve(n)
        for i in range(self.layers):
            self.k[i][r, :, :n] = past[2 * i]
            self.v[i][r, :, :n] = past[2 * i + 1]
        self.lengths[r] = n
        return r

    def release(self, seq: object) -> None:
        """Free `seq`'s row (nothing if it holds none); the last row moves into the hole (one copy per
        departure) to keep rows dense."""
        i = self._row.pop(id(seq), -1)
        if i < 0:
            return
        last = self.rows - 1
        if i != last:
            n = self.lengths[last]
            for buf in self.k + self.v:
                buf[i, :, :n] = buf[last, :, :n]
            self.owners[i], self.lengths[i], self.plans[i] = self.owners[last], n, self.plans[last]
            self._row[id(self.owners[i])] = i
        self.owners.pop()
        self.lengths.pop()
        self.plans.pop()
        # Give memory back once the longest plan has left: the next sequences may plan less.
        plan = max(max(self.plans, default=0), max(self.lengths, default=0))
        if self.capacity > plan:
            self._alloc(self.k[0].shape[0] if self.owners else 0, plan)

    def reserve(self, needed: int) -> None:
        """Room for `needed` positions in every row: grow by an eighth (at least GROWTH_BLOCK positions), never
        past the largest plan while that is enough (no bound when a row's plan is unknown)."""
        cap = self.capacity
        if needed <= cap:
            return
        grown = max(needed, cap + max(GROWTH_BLOCK, cap // 8))
        plan = max(self.plans, default=0)
        if min(self.plans, default=0) > 0 and needed <= plan:
            grown = min(grown, plan)
        self._alloc(self.k[0].shape[0], grown)

    def run(self, graph: BoundGraph, seqs: Sequence[object], x: F32, new: Sequence[int] | None = None
            ) -> dict[str, npt.NDArray[Any]]:
        """One step of `graph` over `seqs` (a row each, acquired if they hold none): `x` [B, T, H] their new
        positions, the last `new[b]` of row b's T real (left-padded; None: all T). Feeds inputs_embeds,
        attention_mask, position_ids (if the graph takes it) and the arena's rows as the past, writes each
        row's new K/V after its past, and returns the graph's other outputs with their rows in `seqs`' order."""
        b, t, _ = x.shape
        real = np.full(b, t, np.int64) if new is None else np.asarray(new, np.int64)
        rows = np.array([self.acquire(s) for s in seqs], np.int64)
        lengths = np.array(self.lengths, np.int64)
        self.reserve(int((lengths[rows] + real).max()))
        lo, hi = int(rows.min()), int(rows.max()) + 1
        idx = rows - lo
        same = hi - lo == b and bool((idx == np.arange(b)).all())
        past = lengths[lo:hi]
        held = self.capacity if past.any() else 0  # the past fed: the rows at their capacity (none: empty)
        width = int(past.max()) if self.exact and held else held  # the past the mask spans
        n_new = np.full(hi - lo, t, np.int64)  # rows outside the step: a throwaway step of T positions
        n_new[idx] = real
        xs = np.ascontiguousarray(x, np.float32)
        if not same:
            xs = np.zeros((hi - lo, *x.shape[1:]), np.float32)
            xs[idx] = x
        is_new = np.arange(t)[None] >= (t - n_new)[:, None]
        mask = np.concatenate([np.arange(width)[None] < past[:, None], is_new], axis=1).astype(np.int64)
        feeds: dict[str, npt.NDArray[Any]] = {"inputs_embeds": xs, "attention_mask": mask}
        if "position_ids" in graph.input_names:
            pos = past[:, None] + np.arange(t)[None] - (t - n_new)[:, None]
            feeds["position_ids"] = np.where(is_new, pos, 0).astype(np.int64)
        for i in range(self.layers):  # views of whole rows: contiguous, bound in place
            feeds[past_key(i)] = self.k[i][lo:hi, :, :held]
            feeds[past_value(i)] = self.v[i][lo:hi, :, :held]
        out = graph.run_bound(feeds)
        at = lengths[rows]
        for i in range(self.layers):
            for buf, name in ((self.k[i], new_key(i)), (self.v[i], new_value(i))):
                got = out.pop(name)
                if t == 1:
                    buf[rows, :, at] = got[idx, :, 0]
                else:
                    for r, a in enumerate(rows):
                        buf[a, :, at[r]:at[r] + real[r]] = got[idx[r], :, t - real[r]:]
        for r, a in enumerate(rows):
            self.lengths[a] += int(real[r])
        return out if same else {name: v[idx] for name, v in out.items()}


def arenas_memory(arenas: Sequence[KVArena]) -> dict[str, int]:
    """A model's `memory()` over its arenas: bytes summed, rows and capacity the largest."""
    parts = [a.memory() for a in arenas]
    return {"kv_arena_bytes": sum(p["kv_arena_bytes"] for p in parts),
            "kv_bytes_per_position": sum(p["kv_bytes_per_position"] for p in parts),
            "kv_rows": max((p["kv_rows"] for p in parts), default=0),
            "kv_capacity": max((p["kv_capacity"] for p in parts), default=0)}


class GrowingPast:
    """The explicit K/V past of a decoder step graph run without an arena: `batch` rows in lockstep (every row at
    the same positions: one sequence run offline, or a frame's inner stack over the sequences of a step). It starts
    empty, each `step` feeds it whole with the new positions' embeddings, and grows it by the positions the step
    returns."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, batch: int = 1) -> None:
        self.layers = layers
        self.kv = [np.zeros((batch, kv_heads, 0, head_dim), np.float32) for _ in range(2 * layers)]
        self.length = 0

    def step(self, graph: Any, x: F32, *, mask: bool = True) -> dict[str, npt.NDArray[Any]]:
        """Run `graph` (an OnnxGraph) on `inputs_embeds` x [B, T, D] at positions length..length + T - 1 (with an
        all-ones `attention_mask` unless `mask` is False) and the past; its outputs, the past grown by T."""
        pos, b, n = self.length, x.shape[0], x.shape[1]
        feeds: dict[str, npt.NDArray[Any]] = {"inputs_embeds": x}
        if mask:
            feeds["attention_mask"] = np.ones((b, pos + n), np.int64)
        feeds["position_ids"] = np.tile(np.arange(pos, pos + n, dtype=np.int64), (b, 1))
        for i in range(self.layers):
            feeds[past_key(i)], feeds[past_value(i)] = self.kv[2 * i], self.kv[2 * i + 1]
        out: dict[str, npt.NDArray[Any]] = graph.run(feeds)
        for i in range(self.layers):
            self.kv[2 * i] = np.concatenate([self.kv[2 * i], out[new_key(i)]], axis=2)
            self.kv[2 * i + 1] = np.concatenate([self.kv[2 * i + 1], out[new_value(i)]], axis=2)
        self.length += n
        return out
