"""Security at the edge: who a caller is, and what it may do.

The storage engine and the coordinator know nothing of callers; every check happens before a
request reaches the serving layer, at the front end, as Kafka authorizes each request in
``KafkaApis`` (core/src/main/scala/kafka/server/AuthHelper.scala) before its work (docs/security.md,
first section). This package decides (who, what, how fast); the gRPC front end's interceptors
(server/rpc/) are thin adapters that ask it, once per call, and the Kafka front end
(server/kafka/) asks it per connection (TLS, SASL) and per request (ACLs, quotas). docs/security.md has the threat
model, the settings and how to make test certificates.

| module | what it holds |
|---|---|
| ``principal.py`` | :class:`Principal` (Kafka's ``KafkaPrincipal``), the identity of one call |
| ``errors.py`` | the package's error tree (``AuthenticationFailedError``, ``NotAuthorizedError`` ...) |
| ``tls.py`` | the listeners' TLS material (certificate, key, client CA), its SIGHUP reload (gRPC, Kafka, metrics), the principal of an mTLS certificate |
| ``credentials.py`` | the credential file: users' and tokens' salted SCRAM-SHA-256 secrets |
| ``authentication.py`` | the authenticator: its credential cache and check queue (bounded, per host, round robin), the re-check after a reload |
| ``scram.py`` | SCRAM-SHA-256's server side against the credential file's stored keys (the Kafka listener's SASL) |
| ``acls.py`` | Kafka's ACL model (bindings, filters, enums) and its matching rules |
| ``acl_store.py`` | the ACL file (``acls.json`` in a log dir), replaced atomically |
| ``acl_messages.py`` | broker.proto's ACL messages to the model and back |
| ``authorizer.py`` | the decisions (cached), the RPC -> (operation, resource) table, the open services' paths |
| ``quotas.py`` | byte rates per principal, throttle times, the Produce queue per principal and backlog per client |

The gRPC interceptors over them (server/rpc/: metrics_interceptor.py, authentication.py,
authorization.py, quotas.py, sharing handlers.py), in the order ``Server._interceptors()``
(server/app.py) installs them; gRPC calls the first one first:

| # | interceptor | decides | refuses with |
|---|---|---|---|
| 0 | ``MetricsInterceptor`` | nothing: counts every call, refused ones too (``grpc_server_*``) | (never refuses) |
| 1 | ``AuthenticationInterceptor`` | the call's :class:`CallIdentity` | UNAUTHENTICATED + AUTHENTICATION_FAILED |
| 2 | ``AuthorizationInterceptor`` (``authorizer = "acl"`` only) | what the identity may do | PERMISSION_DENIED + NOT_AUTHORIZED |
| 3 | ``QuotaInterceptor`` | how fast: a throttled principal's Produce waits before it is served, fetch answers are delayed (idle without quotas) | RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED: a throttled client's Produce backlog is full |

The identity contract: interceptor 1 checks the call's metadata in ``intercept_service`` and
finishes the identity (client certificate, client address) in the handler it returns, through
:func:`~stratalog.server.rpc.handlers.wrap_handler`; it sets
:data:`~stratalog.server.security.principal.current_identity` there, for the call's task, and
resets it when the handler ends. An interceptor after it reads ``current_identity`` *inside the
handler it returns*, never in its own ``intercept_service``, which runs before the identity is
set (interceptors 2 and 3 wrap the handler they are given once per method, and read it in the
wrapper). Calls to ``grpc.health.v1`` (and to reflection when ``reflection_open``) pass
interceptor 1 untouched: ``current_identity`` is unset there, which readers take as
``User:ANONYMOUS``; interceptor 2 lets them through too.
"""
