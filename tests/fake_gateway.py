"""`python tests/fake_gateway.py <python -m gateway arguments>`: the gateway process exactly as
`python -m gateway` runs it (gateway.__main__: uvicorn, signals, drain, settings from the config,
the environment and the command line) over gateway_fixtures.FakeBackend instead of Triton.

One trigger besides FakeBackend's: the text "gated" streams its first chunk, then waits until the
file named by $FAKE_GATE exists before the rest, so a test holds a request in flight for as long
as it needs, across the process boundary, without timing.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(TESTS.parent), str(TESTS)]  # this checkout's gateway, whatever is installed

from gateway_fixtures import FakeBackend  # noqa: E402

import gateway.app  # noqa: E402
from gateway.__main__ import main  # noqa: E402
from ttscore.contract import tensors as triton_io  # noqa: E402


class GatedBackend(FakeBackend):
    async def stream_speech(self, model, inputs, request_id):  # type: ignore[no-untyped-def]
        gated = triton_io.request_kwargs(inputs)["text"] == "gated"
        first = True
        async for chunk in super().stream_speech(model, inputs, request_id):
            yield chunk
            if gated and first:
                gate = Path(os.environ["FAKE_GATE"])
                while not gate.exists():
                    await asyncio.sleep(0.02)
            first = False


if __name__ == "__main__":
    gateway.app._triton_backend = lambda settings: (lambda url: GatedBackend())  # every endpoint's client
    sys.exit(main())
