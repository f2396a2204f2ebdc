"""code2wav: validate each request's (codes, state, position), batch by frame count, run once, scatter."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscore.backend.settings import ModelSettingsError
from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.contract.tensors import INTERNAL, INTERNAL_MESSAGE, WireError

log = logging.getLogger(__name__)


# --- code2wav: gather, run once per frame count, scatter ----------------------------------------


@dataclass(frozen=True)
class CodecFacts:
    state_size: int
    num_groups: int
    samples_per_frame: int
    codebook_size: int | None  # None: codes are not range-checked


def codec_facts(model: str, manifest: Manifest, artifacts_dir: Path) -> CodecFacts:
    state_size = manifest.code2wav_state_size
    if state_size is None:
        raise ModelSettingsError(f"{model}: manifest.json has no code2wav.state_size")
    groups, spf, codebook = spec.NUM_CODE_GROUPS, spec.SAMPLES_PER_FRAME, None
    cfg = manifest.configs
    if cfg:
        from ttscore.runtime.families.qwen3_tts.checkpoint import parse_configs

        info = parse_configs(
            cfg["config.json"], cfg["speech_tokenizer/config.json"], cfg["generation_config.json"], artifacts_dir
        )
        groups, spf, codebook = info.num_code_groups, info.samples_per_frame, info.codebook_size
    return CodecFacts(state_size, groups, spf, codebook)


def check_state_dims(model: str, config_dims: Sequence[int], state_size: int, tensor: str) -> None:
    """config.pbtxt may leave the state dim as -1; a fixed one must equal the manifest."""
    dims = [int(d) for d in config_dims]
    if dims not in ([-1], [state_size]):
        raise ModelSettingsError(f"{model}: {tensor} dims {dims} do not match the manifest state_size {state_size}")


@dataclass
class Code2WavItem:
    """One request's rows: codes [b, F, G], state [b, S], position [b]."""

    codes: np.ndarray
    state: np.ndarray
    position: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def frames(self) -> int:
        return int(self.codes.shape[1])


def code2wav_item(tensors: Mapping[str, np.ndarray], facts: CodecFacts) -> Code2WavItem:
    """Validate one request's tensors (with Triton's batch dim). Raises InvalidRequest naming the tensor."""
    codes, state, position = (np.asarray(tensors[n]) if n in tensors else None for n in ("codes", "state", "position"))
    for name, value in (("codes", codes), ("state", state), ("position", position)):
        if value is None:
            raise InvalidRequest(f"input '{name}' is required", name)
    assert codes is not None and state is not None and position is not None
    if codes.ndim != 3 or codes.shape[2] != facts.num_groups:
        raise InvalidRequest(f"input 'codes' must have shape [batch, frames, {facts.num_groups}]", "codes")
    b = codes.shape[0]
    if state.shape != (b, facts.state_size):
        raise InvalidRequest(f"input 'state' must have shape [batch, {facts.state_size}], got {list(state.shape)}", "state")
    if position.size != b:
        raise InvalidRequest("input 'position' must hold one value per batch row", "position")
    position = position.reshape(b).astype(np.int64)
    if codes.size and (codes.min() < 0 or (facts.codebook_size is not None and codes.max() >= facts.codebook_size)):
        raise InvalidRequest(f"input 'codes' must be in [0, {facts.codebook_size})", "codes")
    if np.any(position < 0):
        raise InvalidRequest("input 'position' must be >= 0", "position")
    if not np.all(np.isfinite(state)):
        raise InvalidRequest("input 'state' must be finite", "state")
    return Code2WavItem(codes.astype(np.int64, copy=False), state.astype(np.float32, copy=False), position)


Code2WavResult = tuple[np.ndarray, np.ndarray]  # pcm [b, F*spf], new_state [b, S]


def run_code2wav(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    items: Sequence[Code2WavItem | WireError],
) -> list[Code2WavResult | WireError]:
    """Batch every valid item by frame count, run once per group, scatter back in order.

    A failing group run is retried item by item, so one bad request fails alone (INTERNAL for
    that request only, logged) and its neighbours still get audio.
    """
    results: list[Code2WavResult | WireError | None] = [None] * len(items)
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        if isinstance(item, WireError):
            results[i] = item
        elif item.rows == 0:
            results[i] = (np.zeros((0, 0), np.float32), np.zeros_like(item.state))
        else:
            groups.setdefault(item.frames, []).append(i)

    def one_run(idx: list[int]) -> None:
        batch = [items[i] for i in idx]
        assert all(isinstance(b, Code2WavItem) for b in batch)
        out = run(
            {
                "codes": np.concatenate([b.codes for b in batch]),  # type: ignore[union-attr]
                "state": np.concatenate([b.state for b in batch]),  # type: ignore[union-attr]
                "position": np.concatenate([b.position for b in batch]),  # type: ignore[union-attr]
            }
        )
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
                log.exception("code2wav failed for one request")
                results[idx[0]] = WireError(INTERNAL, INTERNAL_MESSAGE)
                continue
            log.warning("code2wav batch of %d failed; retrying its requests one by one", len(idx), exc_info=True)
            for i in idx:
                try:
                    one_run([i])
                except Exception:
                    log.exception("code2wav failed for one request")
                    results[i] = WireError(INTERNAL, INTERNAL_MESSAGE)
    return [r if r is not None else WireError(INTERNAL, INTERNAL_MESSAGE) for r in results]
