"""The gRPC front end: broker.proto's and replication.proto's services, translated.

Each RPC handler checks the request's shape, makes one call to the partition-serving layer
(server/broker/), the transaction coordinator or the topic administration, and builds the
answer, as grpc's route_guide servicers do; security is asked through the interceptors. Nothing
below this package imports it (import-linter contracts in pyproject.toml)::

    service.py             BrokerService: the Broker RPCs, named as in broker.proto
    session.py             the Session stream: many requests on one stream, by id
    decoding.py            zero-copy parses of Produce and Session requests
    translation.py         proto <-> records (records-form Produce, decoded fetches, topics)
    subscribe_messages.py  Subscribe messages serialized once for the streams sharing them
    status.py              every error to its gRPC status and ErrorInfo reason (one place)
    replication_service.py the leader's side of ReplicaFetchSession (cluster mode)
    handlers.py            what the interceptors share: a handler's kind, its wrapping
    metrics_interceptor.py counts every call (grpc_server_*)
    authentication.py      who calls (over security.authentication.Authenticator)
    authorization.py       what it may do (over security.authorizer.Authorizer's rules)
    quotas.py              how fast (over security.quotas.QuotaManager)
"""
