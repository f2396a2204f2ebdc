"""ttscore/runtime/kv.py: a step's ragged K/V feeds (left- or right-padded rows) and a sequence's K/V after it."""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.runtime.kv import appended, ragged_step_feeds

pytestmark = pytest.mark.unit


def _past(n: int, layers: int = 2, kvh: int = 1, hd: int = 2, base: float = 1.0) -> list[np.ndarray]:
    return [np.full((kvh, n, hd), base + k, np.float32) for k in range(2 * layers)]


@pytest.mark.parametrize("left", [True, False])
def test_ragged_rows_mask_positions_and_placement(left: bool) -> None:
    kvs = [_past(3, base=10.0), [], _past(1, base=20.0)]
    f = ragged_step_feeds(kvs, 2, 2, 1, 2, left=left)
    assert f["past_key_0"].shape == (3, 1, 3, 2) and f["past_value_1"].shape == (3, 1, 3, 2)
    np.testing.assert_array_equal(f["position_ids"], [[3, 4], [0, 1], [1, 2]])
    want_mask = [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 0, 1, 1, 1]] if left else \
        [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1], [1, 0, 0, 1, 1]]
    np.testing.assert_array_equal(f["attention_mask"], want_mask)
    row2 = f["past_value_0"][2, 0, :, 0]  # row 2's one past slot: layer 0's value (base 20 + 1)
    np.testing.assert_array_equal(row2, [0, 0, 21] if left else [21, 0, 0])
    assert not f["past_key_1"][1].any()  # no past: all padding


def test_appended_grows_each_layer_by_the_step() -> None:
    out = {f"new_{kind}_{i}": np.full((2, 1, 1, 2), 7.0 + i, np.float32) for i in range(2) for kind in ("key", "value")}
    grown = appended(_past(3), out, 1, 2)
    assert [a.shape for a in grown] == [(1, 4, 2)] * 4
    np.testing.assert_array_equal(grown[2][0, -1], [8.0, 8.0])  # layer 1's key: the step's new_key_1 row
    assert [a.shape for a in appended([], out, 0, 2)] == [(1, 1, 2)] * 4  # no past: the new positions only
