"""The security RPCs of the Broker service: WhoAmI, and the ACL RPCs CreateAcls, DeleteAcls and
DescribeAcls over the authorizer (server/security/authorizer.py), which checks calls in its own
interceptor, not here.

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.rpc.requests import RpcBase, rpc_method
from stratalog.server.security.acl_messages import (
    binding_from_message,
    binding_message,
    filter_from_message,
)
from stratalog.server.security.authentication import peer_host
from stratalog.server.security.authorizer import managing_acls
from stratalog.server.security.principal import ANONYMOUS, CallIdentity, current_identity
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.security.authorizer import Authorizer

__all__ = ["SecurityRpcs"]


class SecurityRpcs(RpcBase):
    """The security RPCs (module docstring)."""

    @rpc_method()
    async def WhoAmI(
        self, request: broker_pb2.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.WhoAmIResponse:
        # The authentication interceptor decided the identity; without one installed (a test
        # servicer) the caller is anonymous.
        identity = current_identity.get(None)
        if identity is None:
            identity = CallIdentity(ANONYMOUS, peer_host(context.peer()))
        return broker_pb2.WhoAmIResponse(
            principal=str(identity.principal),
            authenticated_by=identity.authenticated_by,
            host=identity.host,
        )

    def _acl_authorizer(self) -> Authorizer:
        return managing_acls(self._authorizer)

    @rpc_method()
    async def CreateAcls(
        self, request: broker_pb2.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreateAclsResponse:
        authorizer = self._acl_authorizer()
        await authorizer.create_acls([binding_from_message(b) for b in request.creations])
        return broker_pb2.CreateAclsResponse()

    @rpc_method()
    async def DeleteAcls(
        self, request: broker_pb2.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteAclsResponse:
        authorizer = self._acl_authorizer()
        deleted = await authorizer.delete_acls([filter_from_message(f) for f in request.filters])
        return broker_pb2.DeleteAclsResponse(deleted=[binding_message(b) for b in deleted])

    @rpc_method()
    async def DescribeAcls(
        self, request: broker_pb2.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeAclsResponse:
        authorizer = self._acl_authorizer()
        acls = authorizer.describe_acls(filter_from_message(request.filter))
        return broker_pb2.DescribeAclsResponse(acls=[binding_message(b) for b in acls])
