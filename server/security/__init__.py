"""Security at the edge of the servicer: who a caller is, and what it may do.

The storage engine and the coordinator know nothing of callers; every check happens before a
request reaches the servicer's methods, in gRPC server interceptors (one place), as DESIGN.md
decision 11 asks. docs/security.md has the threat model, the settings and how to make test
certificates.

The interceptors, in call order (the first listed runs first)::

    authentication   who is calling: sets principal.current_identity   (issue 13, part 4)
    authorization    authorizer.py: may this identity make this call?  (authorizer = "acl")
    quotas           quotas.py: delay answers past a byte-rate quota    (always; idle if none)

| module | what it holds |
|---|---|
| ``principal.py`` | :class:`Principal` (Kafka's ``KafkaPrincipal``), the identity of one call |
| ``acls.py`` | Kafka's ACL model (bindings, filters, enums) and its matching rules |
| ``acl_store.py`` | the ACL file (``acls.json`` in a log dir), replaced atomically |
| ``acl_messages.py`` | broker.proto's ACL messages to the model and back |
| ``authorizer.py`` | the decisions (cached), the RPC -> (operation, resource) table, the interceptor |
| ``quotas.py`` | byte rates per principal, throttle times, the interceptor that delays answers |
| ``errors.py`` | the package's error tree (server/status.py maps it) |
"""
