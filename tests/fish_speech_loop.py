"""Fish Speech's frame loop for the checks (tests/export_tests): the served runtime runs it inside the shared engine
(ttscore.runtime.families.fish_speech.model); here the same loop over any Slow AR / Fast AR step, with the sampling
noise given: the exported graphs one request at a time (`synthesize`, each with its own growing past), or the
export's torch modules (`torch_steps`), against the vLLM-Omni reference.

Per frame (vLLM-Omni's order): the Slow AR's hidden state h of the last position gives the masked logits and
the semantic token y (`<|im_end|>` ends the utterance, no frame); the Fast AR runs [project(h),
fast_embedding(y - semantic_start)] and then each sampled residual code's embedding, 9 codes in turn; the frame
is (y - semantic_start, the 9 codes) and the Slow AR's next input is the frame's embedding. At most
`max_new_tokens` frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from export.fish_speech.graphs import FastStep, SlowStep
from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.fish_speech.artifacts import FishArtifacts, request_noise
from ttscore.runtime.families.fish_speech.checkpoint import FishConfig, Transformer
from ttscore.runtime.families.fish_speech.generate import F32, Tables, frame_embedding, prompt_embeddings
from ttscore.runtime.families.fish_speech.sampling import sample_fast, sample_slow
from ttscore.runtime.kv import GrowingPast

# (inputs_embeds [1, T, D], position of its first row, past) -> (hidden [D], logits [codebook_size + 1], past)
SlowFn = Callable[[F32, int, Any], tuple[F32, F32, Any]]
# (inputs_embeds [1, T, Df], position of its first row, past) -> (logits [1024], past); past None starts a frame
FastFn = Callable[[F32, int, Any], tuple[F32, Any]]


@dataclass(frozen=True)
class Knobs:
    temperature: float
    top_k: int
    top_p: float


@dataclass
class Result:
    codes: NDArray[np.int64]  # [frames, num_codebooks]
    stopped: bool
    hidden: F32  # [frames, D]: the Slow AR state each frame's token was sampled from


def fast_codes(t: Tables, fast: FastFn, h: F32, code0: int, q: F32) -> NDArray[np.int64]:
    """The frame's 10 codes: code0 and 9 residual codes sampled in turn (q [9, 1024]) at the Fast AR's fixed
    sampling (vLLM-Omni's)."""
    first = h if t.project_in is None else (t.project_in[0] @ h + t.project_in[1]).astype(np.float32)
    x = np.stack([first, t.fast_embeddings[code0]])[None].astype(np.float32)
    codes = [code0]
    past, pos = None, 0
    for j in range(t.num_codebooks - 1):
        logits, past = fast(x, pos, past)
        pos += x.shape[1]
        c = sample_fast(logits, *spec.FAST_AR_SAMPLING, q[j])  # extra_params reach the Slow AR only
        codes.append(c)
        x = t.fast_embeddings[c][None, None].astype(np.float32)
    return np.array(codes, np.int64)


def generate(t: Tables, slow: SlowFn, fast: FastFn, prompt: F32, max_new_tokens: int, knobs: Knobs,
             q_slow: F32, q_fast: F32) -> Result:
    """q_slow [max_new_tokens, codebook_size + 1], q_fast [max_new_tokens, 9, 1024]."""
    frames, hiddens = [], []
    x, pos, past = prompt[None], 0, None
    stopped = False
    for step in range(max_new_tokens):
        h, logits, past = slow(x, pos, past)
        pos += x.shape[1]
        y = sample_slow(logits, knobs.temperature, knobs.top_k, knobs.top_p, q_slow[step])
        if y == t.codebook_size:  # the last candidate: <|im_end|>
            stopped = True
            break
        codes = fast_codes(t, fast, h, y, q_fast[step])
        frames.append(codes)
        hiddens.append(h)
        x = frame_embedding(t, codes)[None, None]
    d = t.embeddings.shape[1]
    return Result(np.array(frames, np.int64).reshape(-1, t.num_codebooks), stopped,
                  np.array(hiddens, np.float32).reshape(-1, d))


def torch_steps(cfg: FishConfig, slow: SlowStep, fast: FastStep) -> tuple[Any, Any]:
    """The frame loop's step functions over the export's torch modules."""
    s, f = cfg.slow, cfg.fast

    def run(module: nn.Module, t: Transformer, x: np.ndarray, pos: int, past: Any, mask: bool) -> Any:
        if past is None:
            past = [torch.zeros(1, t.n_local_heads, 0, t.head_dim) for _ in range(2 * t.n_layer)]
        n = x.shape[1]
        args: list[torch.Tensor] = [torch.from_numpy(x)]
        if mask:
            args.append(torch.ones(1, pos + n, dtype=torch.int64))
        args.append(torch.arange(pos, pos + n)[None])
        with torch.inference_mode():
            out = module(*args, *past)
        k = 2 if mask else 1
        new = [torch.cat([p, q], dim=2) for p, q in zip(past, out[k:], strict=True)]
        return [o.numpy() for o in out[:k]], new

    def slow_fn(x: np.ndarray, pos: int, past: Any) -> Any:
        (h, logits), new = run(slow, s, x, pos, past, True)
        return h[0], logits[0], new

    def fast_fn(x: np.ndarray, pos: int, past: Any) -> Any:
        (logits,), new = run(fast, f, x, pos, past, False)
        return logits[0], new

    return slow_fn, fast_fn


def tables(checkpoint: object) -> Tables:
    """The numpy tables of the frame loop, from the checkpoint's model.safetensors (float32), for `torch_steps`."""
    from pathlib import Path

    from safetensors import safe_open

    from ttscore.runtime.families.fish_speech.checkpoint import WEIGHTS, read_config

    cfg = read_config(Path(str(checkpoint)))
    with safe_open(str(Path(str(checkpoint)) / WEIGHTS), framework="pt") as f:
        def get(name: str) -> np.ndarray:
            return f.get_tensor(name).to(torch.float32).numpy()

        project = ((get("audio_decoder.fast_project_in.weight"), get("audio_decoder.fast_project_in.bias"))
                   if cfg.project_in else None)
        return Tables(embeddings=get("text_model.model.embeddings.weight"),
                      codebook_embeddings=get("audio_decoder.codebook_embeddings.weight"),
                      fast_embeddings=get("audio_decoder.embeddings.weight"), project_in=project,
                      semantic_start=cfg.semantic_start, codebook_size=cfg.codebook_size,
                      num_codebooks=cfg.num_codebooks)


def graph_steps(art: FishArtifacts) -> tuple[SlowFn, FastFn]:
    """The frame loop's step functions over the export's slow_step and fast_step graphs."""

    def slow(x: F32, _pos: int, past: GrowingPast | None) -> tuple[F32, F32, GrowingPast]:
        past = past or GrowingPast(art.slow_layers, *art.slow_kv)
        out = past.step(art.graphs["slow_step"], x)
        return out["hidden"][0], out["logits"][0], past

    def fast(x: F32, _pos: int, past: GrowingPast | None) -> tuple[F32, GrowingPast]:
        past = past or GrowingPast(art.fast_layers, *art.fast_kv)
        return past.step(art.graphs["fast_step"], x, mask=False)["logits"][0], past

    return slow, fast


def synthesize(art: FishArtifacts, text: str, *, max_new_tokens: int = spec.DEFAULT_MAX_NEW_TOKENS, seed: int = 42,
               temperature: float = spec.DEFAULT_TEMPERATURE, top_k: int = spec.DEFAULT_TOP_K,
               top_p: float = spec.DEFAULT_TOP_P, ref_audio: F32 | None = None, ref_text: str | None = None,
               noise: tuple[F32, F32] | None = None) -> tuple[Result, NDArray[np.int64] | None]:
    """(the frames, the reference clip's codes when cloning)."""
    if ref_audio is not None and not (ref_text or "").strip():
        raise InvalidRequest("'ref_text' is required with 'ref_audio'", "ref_text")
    ref_codes = art.encode(ref_audio) if ref_audio is not None else None
    if ref_codes is not None:
        ids, at = art.prompt.clone(text, str(ref_text), [int(c) + art.tables.semantic_start for c in ref_codes[:, 0]])
    else:
        ids, at = art.prompt.text_only(text), 0
    q_slow, q_fast = noise or request_noise(seed, max_new_tokens, art.tables.codebook_size + 1,
                                            art.tables.num_codebooks)
    slow, fast = graph_steps(art)
    result = generate(art.tables, slow, fast, prompt_embeddings(art.tables, ids, ref_codes, at),
                      max_new_tokens, Knobs(temperature, top_k, top_p), q_slow, q_fast)
    return result, ref_codes
