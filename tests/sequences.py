"""A family model's sequences run by hand in the runtime and parity tests (admit, prefill, step), as the
engine runs them, all batched; and requests run together through one engine Generator."""

from __future__ import annotations

from typing import Any

import numpy as np


def run_to_the_end(model: Any, seqs: list[Any], width: int) -> list[np.ndarray]:
    """prefill -> step the live sequences until every one has finished; the frames each made
    ([frames, width] int64, taken from its `pending` after each step)."""
    model.prefill([(s, s.prompt_tokens) for s in seqs])
    out: list[list[np.ndarray]] = [[] for _ in seqs]
    while True:
        for i, s in enumerate(seqs):
            out[i] += s.pending
            s.pending = []
        live = [s for s in seqs if s.finished is None]
        if not live:
            break
        model.step(live)
    return [np.array(f, np.int64).reshape(-1, width) for f in out]


def run_together(gen: Any, requests: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each of `requests` (by request id) submitted to the Generator `gen`, stepped until none is active: the
    PCM each gave, its events' in order, concatenated."""
    for req_id, request in requests.items():
        gen.submit(req_id, request)
    pcm: dict[str, list[np.ndarray]] = {req_id: [] for req_id in requests}
    while gen.num_active:
        for ev in gen.step():
            pcm[ev.req_id].append(ev.pcm)
    return {req_id: np.concatenate(chunks) for req_id, chunks in pcm.items()}


def say_offline(artifacts: Any, **options: Any) -> tuple[np.ndarray, int, Any]:
    """What `triton-tts say --artifacts` runs: the export's family's offline `say` request (SayOptions
    `options`) through one Generator; the PCM, the frames it counted and the SayJob."""
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.family import SayOptions

    job = FAMILIES[read_manifest(artifacts).family].offline.say(artifacts, SayOptions(**options))
    events = list(Generator(job.model, max_batch=1, chunk_policy="fixed").synthesize(job.request))
    return np.concatenate([ev.pcm for ev in events]), sum(ev.frames for ev in events), job
