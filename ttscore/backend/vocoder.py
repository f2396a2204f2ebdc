"""The streaming vocoder models (code2wav, audiovae_decoder): gather the requests of one execute(),
run the graph once per frame count, scatter the rows back. Each model validates its own inputs
into a VocoderItem (the families' glue, e.g. ttscore.backend.qwen3_tts.code2wav); this part is shared."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ttscore.backend.settings import ModelSettingsError
from ttscore.contract.tensors import INTERNAL, INTERNAL_MESSAGE, WireError

log = logging.getLogger(__name__)


@dataclass
class VocoderItem:
    """One request's validated inputs (graph input name -> [rows, ...], rows on axis 0) and the
    frame count its rows share (rows of different requests batch only with equal counts)."""

    inputs: dict[str, np.ndarray]
    frames: int

    @property
    def rows(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


VocoderResult = tuple[np.ndarray, np.ndarray]  # pcm [b, samples], new_state [b, S]


def check_state_dims(model: str, config_dims: Sequence[int], state_size: int, tensor: str) -> None:
    """config.pbtxt may leave the state dim as -1; a fixed one must equal the manifest."""
    dims = [int(d) for d in config_dims]
    if dims not in ([-1], [state_size]):
        raise ModelSettingsError(f"{model}: {tensor} dims {dims} do not match the manifest state_size {state_size}")


def check_state(state: np.ndarray | None, rows: int, state_size: int) -> np.ndarray:
    """The `state` input of a streaming vocoder request; InvalidRequest naming it."""
    from ttscore.contract.errors import InvalidRequest

    if state is None:
        raise InvalidRequest("input 'state' is required", "state")
    if state.shape != (rows, state_size):
        raise InvalidRequest(f"input 'state' must have shape [batch, {state_size}], got {list(state.shape)}", "state")
    if not np.all(np.isfinite(state)):
        raise InvalidRequest("input 'state' must be finite", "state")
    return state.astype(np.float32, copy=False)


def run_vocoder(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    items: Sequence[VocoderItem | WireError],
) -> list[VocoderResult | WireError]:
    """Batch every valid item by frame count, run once per group, scatter back in order.

    A failing group run is retried item by item, so one bad request fails alone (INTERNAL for
    that request only, logged) and its neighbours still get audio.
    """
    results: list[VocoderResult | WireError | None] = [None] * len(items)
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        if isinstance(item, WireError):
            results[i] = item
        elif item.rows == 0:
            results[i] = (np.zeros((0, 0), np.float32), np.zeros_like(item.inputs["state"]))
        else:
            groups.setdefault(item.frames, []).append(i)

    def one_run(idx: list[int]) -> None:
        batch = [items[i] for i in idx]
        assert all(isinstance(b, VocoderItem) for b in batch)
        names = list(batch[0].inputs)  # type: ignore[union-attr]
        out = run({n: np.concatenate([b.inputs[n] for b in batch]) for n in names})  # type: ignore[union-attr]
        pcm, new_state = out["pcm"], out["new_state"]
        row = 0
        for i, b in zip(idx, batch, strict=True):
            n = b.rows  # type: ignore[union-attr]
            results[i] = (np.ascontiguousarray(pcm[row : row + n]), np.ascontiguousarray(new_state[row : row + n]))
            row += n

    for idx in groups.values():
        try:
            one_run(idx)
        except Exception:
            if len(idx) == 1:
                log.exception("vocoder failed for one request")
                results[idx[0]] = WireError(INTERNAL, INTERNAL_MESSAGE)
                continue
            log.warning("vocoder batch of %d failed; retrying its requests one by one", len(idx), exc_info=True)
            for i in idx:
                try:
                    one_run([i])
                except Exception:
                    log.exception("vocoder failed for one request")
                    results[i] = WireError(INTERNAL, INTERNAL_MESSAGE)
    return [r if r is not None else WireError(INTERNAL, INTERNAL_MESSAGE) for r in results]


def vocoder_responses(results: Sequence[VocoderResult | WireError], response: Callable[..., object]) -> list[object]:
    """One Triton response per result (`response` is ttscore.backend.glue.response)."""
    out = []
    for result in results:
        if isinstance(result, WireError):
            out.append(response(error=result))
        else:
            pcm, new_state = result
            out.append(response({"pcm": pcm, "new_state": new_state}))
    return out
