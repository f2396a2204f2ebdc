"""The schemathesis checks the Speech API's OpenAPI document is held to, by the fake-backend test
(gateway_tests/test_gateway_schemathesis.py) and against the real stack (e2e_tests/test_e2e_speech.py)."""

from __future__ import annotations

from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
]
