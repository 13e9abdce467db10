"""server.session: answers serialized as protobuf would, and a SessionError that tells the
client exactly what the unary call's status would have (server/rpc/status.py's half and
client/errors.py's half of the same contract)."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.client.errors import from_rpc_error, from_session_error
from stratalog.server.rpc import status
from stratalog.server.rpc.session import SESSION_RPCS, session_response
from stratalog.v1 import broker_pb2 as pb

from .test_status import _instance


@given(request_id=st.integers(0, 2**64 - 1), offset=st.integers(-(2**63), 2**63 - 1),
       field=st.sampled_from(sorted(set(SESSION_RPCS.values()))))
def test_an_answer_is_serialized_as_protobuf_serializes_it(request_id, offset, field) -> None:
    inner = {2: pb.ProduceResponse(base_offset=offset),
             3: pb.FetchResponse(next_offset=offset, record_batches=b"x" * (offset % 300)),
             4: pb.ListOffsetsResponse(offset=offset)}[field]
    member = pb.SessionResponse.DESCRIPTOR.fields_by_number[field].name
    expected = pb.SessionResponse(id=request_id, **{member: inner})
    assert session_response(request_id, field, inner.SerializeToString()) == (
        expected.SerializeToString())


def _errors() -> list[Exception]:
    return [_instance(cls) for cls in status.ERROR_TABLE] + [RuntimeError("unexpected")]


@pytest.mark.parametrize("exc", _errors(), ids=lambda e: type(e).__name__)
def test_a_session_error_maps_back_to_the_unary_calls_exception(exc) -> None:
    grpc_status = status.to_status(exc)
    unary = from_rpc_error(grpc.aio.AioRpcError(
        grpc_status.code, grpc.aio.Metadata(), grpc.aio.Metadata(*grpc_status.trailing_metadata),
        grpc_status.details))
    error = status.session_error(grpc_status)
    on_session = from_session_error(pb.SessionError.FromString(error.SerializeToString()))
    assert type(on_session) is type(unary)
    assert (on_session.code, on_session.reason, on_session.message, on_session.metadata,
            on_session.retriable) == (unary.code, unary.reason, unary.message, unary.metadata,
                                      unary.retriable)


def test_a_request_shape_error_names_its_field() -> None:
    error = status.session_error(status.invalid_request("bad", metadata={"field": "id"}))
    assert (error.code, error.reason, error.message, dict(error.metadata)) == (
        grpc.StatusCode.INVALID_ARGUMENT.value[0], pb.INVALID_REQUEST, "bad", {"field": "id"})
