"""Gepard-1.0's part of the benches that compare with the reference (`bench offline`, `bench compare`;
triton_tts.bench.common.bench_families): its random-weight checkpoint (`make-tiny --family gepard`, NanoCodec
included) and the reference, perf/gepard_reference.py in the ref5 environment (`.venv-ref5`, built by `make
setup`; `TTS_GEPARD_REFERENCE_PYTHON` names another interpreter) in `--serve` mode: one process that loads the
checkpoint once, so the time measured here is its generation and decode alone (plus a line over a pipe).

The bench's checkpoint never stops by itself (its sidecar's `stop_threshold` is 2.0, which the stop head's
sigmoid cannot pass): a random stop head ends a request after a handful of frames (7 at real size), so every
request runs to the bench's frame cap instead, as a long sentence does on the released model. Gepard has no
greedy switch (Gumbel-max at temperature 0.3 always): both sides sample, seeded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from triton_tts.bench import common
from ttscore.contract import gepard as spec

FAMILY = spec.FAMILY
SIZES = ("tiny", "real")
CHECKPOINT = "zero_shot"
REQUEST: dict[str, Any] = {}  # no extra wire fields: one voice, no greedy switch
NEVER_STOP = 2.0  # a stop_threshold no sigmoid passes
SCRIPT = common.ROOT / "perf" / "gepard_reference.py"


def make_checkpoint(path: Path, size: str) -> Path:
    from export.gepard.tiny import make_tiny_gepard

    out = make_tiny_gepard(path, seed=0, size=size)
    sidecar = out / "gepard_config.json"
    config = json.loads(sidecar.read_text(encoding="utf-8"))
    config["stop_threshold"] = NEVER_STOP
    sidecar.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return out


class Reference(common.ServedReference):
    """The reference composition with its backbone's K/V cache, then NeMo's NanoCodec decode, in ref5."""

    def __init__(self, checkpoint: Path) -> None:
        super().__init__(common.reference_python("TTS_GEPARD_REFERENCE_PYTHON", ".venv-ref5"), SCRIPT, checkpoint)
