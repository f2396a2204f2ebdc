"""Schemathesis against the gateway's own OpenAPI schema (app + fake Triton backend, in process).

Positive and negative examples for every operation; the checks: no 5xx, every status code and
content type documented, bodies and headers conform to the schema, schema-invalid requests are
rejected. Bounded: derandomized, a fixed number of examples per operation, no shrinking; the
generated max_new_tokens are clamped by the fake so each example stays tiny.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis==4.32.5 is a test requirement")

from gateway_fixtures import FakeBackend, fake_deployment  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from schema_checks import CHECKS  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from gateway.app import create_app  # noqa: E402

pytestmark = [pytest.mark.gateway, pytest.mark.slow]

MAX_EXAMPLES = 50


class SmallFake(FakeBackend):
    """Generated requests may ask for 4096 frames; the contract is the same with fewer."""

    async def stream_speech(self, model, inputs, request_id):  # type: ignore[no-untyped-def]
        if "max_new_tokens" in inputs:
            inputs = {**inputs, "max_new_tokens": inputs["max_new_tokens"].clip(max=2)}
        async for chunk in super().stream_speech(model, inputs, request_id):
            yield chunk


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):  # type: ignore[no-untyped-def]
    app = create_app(fake_deployment(tmp_path_factory.mktemp("st")), backend_factory=lambda s: SmallFake())
    return schemathesis.openapi.from_asgi("/openapi.json", app)


OPERATIONS = [
    ("POST", "/v1/audio/speech"),
    ("POST", "/v1/audio/speech/batch"),
    ("GET", "/v1/audio/voices"),
    ("POST", "/v1/audio/voices"),
    ("DELETE", "/v1/audio/voices/{name}"),
    ("GET", "/v1/models"),
    ("GET", "/health"),
    ("GET", "/ready"),
]


def test_every_operation_is_covered(api_schema):  # type: ignore[no-untyped-def]
    found = {(r.ok().method.upper(), r.ok().path) for r in api_schema.get_all_operations()}
    assert found == set(OPERATIONS)


# (schemathesis' own pytest plugin, `from_fixture`, does not run under pytest 9: it sets
# `node._nodeid`; hypothesis strategies per operation do the same work.)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=str)
def test_no_server_errors_and_schema_conformance(api_schema, method, path, mode):  # type: ignore[no-untyped-def]
    operation = api_schema[path][method]
    if mode is GenerationMode.NEGATIVE and method in ("GET", "DELETE"):
        pytest.skip("no parameters to get wrong (DELETE: any path string is a name)")

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    def run(case):  # type: ignore[no-untyped-def]
        case.call_and_validate(checks=CHECKS)

    run()
