"""Security at the edge of the servicer: who a caller is, and what it may do.

The storage engine and the coordinator know nothing of callers; every check happens before a
request reaches the servicer's methods, in gRPC server interceptors (one place), as DESIGN.md
decision 11 asks. docs/security.md has the threat model, the settings and how to make test
certificates.

| module | what it holds |
|---|---|
| ``principal.py`` | :class:`Principal` (Kafka's ``KafkaPrincipal``), the identity of one call |
"""
