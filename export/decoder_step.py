"""One exporter for "a decoder step with an explicit past" (ttscore.contract.kv): the graph every K/V family's
autoregressive stack becomes, exported from its torch module and validated against it the same way:

- prefill: the first `n_prefill` positions over an empty past equal the module on that prefix;
- decode: each later position over the graph's own K/V equals the module on the whole prefix;
- ragged batch: two rows with pasts of 7 and 5 (the shorter left-padded, `attention_mask` marking its slots)
  equal each row alone.

The module takes (inputs_embeds [B, T, H], attention_mask [B, P + T], position_ids [B, T], *past K/V) and returns
its own outputs (`outputs`: their names, in order) followed by the new K/V."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from export.memory import release_memory
from export.tracing import ErrorTracker, export_bound, ort_run, ort_session, torch_threads
from ttscore.contract.graphs import GraphSpec
from ttscore.contract.kv import past_key, past_value

# (tracker, the graph's own outputs, the module's, case) -> record the errors (a family may compare codes exactly).
Compare = Callable[[ErrorTracker, Sequence[np.ndarray], Sequence[np.ndarray], str], None]


def compare_all(names: Sequence[str]) -> Compare:
    """Every output against the module's, by name."""

    def compare(tr: ErrorTracker, got: Sequence[np.ndarray], want: Sequence[np.ndarray], case: str) -> None:
        for name, a, b in zip(names, got, want, strict=True):
            tr.add(name, a, b, case)

    return compare


def export_decoder_step(make_model: Callable[[], Any], gspec: GraphSpec, out: Path, *, layers: int, kv_heads: int,
                        head_dim: int, hidden: int, outputs: Sequence[str], compare: Compare | None = None
                        ) -> tuple[Path, ErrorTracker]:
    """Export `make_model()` (built and run under the export's torch threads, no grad) as `gspec` into `out` and
    validate it (above); returns the graph's path and the errors recorded (the caller enforces its tolerances)."""
    import torch

    compare = compare or compare_all(outputs)
    n_out = len(outputs)
    g = torch.Generator().manual_seed(3)
    n_total, n_prefill = 9, 6
    x = torch.randn(1, n_total, hidden, generator=g)
    with torch_threads(), torch.inference_mode():
        model = make_model()
        want = []
        for n in range(n_prefill, n_total + 1):
            res = model(x[:, :n], torch.ones(1, n, dtype=torch.int64), torch.arange(n)[None],
                        *[torch.zeros(1, kv_heads, 0, head_dim) for _ in range(2 * layers)])
            want.append([r.numpy() for r in res[:n_out]])
        past = [torch.randn(1, kv_heads, 2, head_dim, generator=g) for _ in range(2 * layers)]
        ex = (torch.randn(1, 3, hidden, generator=g), torch.ones(1, 5, dtype=torch.int64), torch.arange(2, 5)[None],
              *past)
        path = export_bound(model, ex, gspec, out)
        del model
    release_memory()
    sess = ort_session(path)
    tr = ErrorTracker()
    xn = x.numpy()

    def feeds(xs: np.ndarray, mask: np.ndarray, pos: np.ndarray, kv: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        f = {"inputs_embeds": xs, "attention_mask": mask, "position_ids": pos}
        for i in range(layers):
            f[past_key(i)], f[past_value(i)] = kv[2 * i], kv[2 * i + 1]
        return f

    empty = [np.zeros((1, kv_heads, 0, head_dim), np.float32) for _ in range(2 * layers)]
    got = ort_run(sess, feeds(xn[:, :n_prefill], np.ones((1, n_prefill), np.int64),
                              np.arange(n_prefill, dtype=np.int64)[None], empty))
    compare(tr, got[:n_out], want[0], "prefill")
    past_np = list(got[n_out:])
    for p in range(n_prefill, n_total):
        step = ort_run(sess, feeds(xn[:, p:p + 1], np.ones((1, p + 1), np.int64), np.array([[p]], np.int64), past_np))
        compare(tr, step[:n_out], want[p - n_prefill + 1], f"decode past={p}")
        past_np = [np.concatenate([a, b], axis=2) for a, b in zip(past_np, step[n_out:], strict=True)]
    rows, pmax = (7, 5), 7  # ragged batch: row 1's past left-padded
    pasts = [np.zeros((2, kv_heads, pmax, head_dim), np.float32) for _ in range(2 * layers)]
    bx = np.zeros((2, 1, hidden), np.float32)
    mask = np.zeros((2, pmax + 1), np.int64)
    pos = np.zeros((2, 1), np.int64)
    for r, n_past in enumerate(rows):
        kv = ort_run(sess, feeds(xn[:, :n_past], np.ones((1, n_past), np.int64),
                                 np.arange(n_past, dtype=np.int64)[None], empty))[n_out:]
        for j in range(2 * layers):
            pasts[j][r, :, pmax - n_past:] = kv[j][0]
        bx[r, 0] = xn[0, n_past]
        mask[r, pmax - n_past:] = 1
        pos[r, 0] = n_past
    batched = ort_run(sess, feeds(bx, mask, pos, pasts))
    for r, n_past in enumerate(rows):
        compare(tr, [o[r:r + 1] for o in batched[:n_out]], want[n_past + 1 - n_prefill], f"batched row {r}")
    del sess
    return path, tr
