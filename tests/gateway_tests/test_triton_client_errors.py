"""gateway.triton_client's reading of gRPC failures: which ones say the server is unavailable (retryable, 503) and
which are a fault (500)."""

from __future__ import annotations

import grpc
import pytest
from tritonclient.utils import InferenceServerException

from gateway.triton_client import _from_exception, _from_rpc
from ttscore.contract.tensors import INTERNAL, UNAVAILABLE

pytestmark = pytest.mark.gateway


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def test_a_call_whose_transport_broke_is_unavailable_not_a_fault():
    """A stream sent as tritonserver was SIGKILLed (the mixed soak, 960 s) ended with INTERNAL "Internal error from
    Core": gRPC core's words, not Triton's. It was answered 500; it is the server going away: 503, retryable."""
    assert _from_rpc(rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core")).code == UNAVAILABLE
    unary = InferenceServerException("Internal error from Core", status="StatusCode.INTERNAL")
    assert _from_exception(unary).code == UNAVAILABLE


def test_tritons_own_internal_errors_stay_faults():
    err = _from_rpc(rpc_error(grpc.StatusCode.INTERNAL, "model speech_generation failed: CUDA error"))
    assert err.code == INTERNAL and "CUDA error" in err.message
    assert _from_rpc(rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed")).code == UNAVAILABLE
