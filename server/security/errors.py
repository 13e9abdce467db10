"""The security package's errors: one small tree, mapped to statuses by server/rpc/status.py only.

    SecurityError                        base of every refusal this package decides
    ├── AuthenticationFailedError        UNAUTHENTICATED + AUTHENTICATION_FAILED: the call's
    │                                    credentials are wrong, missing where required, or sent
    │                                    where they may not be
    ├── AuthenticationThrottledError     RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED (retriable):
    │                                    the credential checks are too many (all clients, or
    │                                    this host's recent failures); nothing was checked
    ├── NotAuthorizedError               PERMISSION_DENIED + NOT_AUTHORIZED: the caller's
    │   │                                principal may not do this operation on this resource
    │   └── NotABrokerError              the same, for a server-to-server call: the caller is
    │                                    not one of the broker principals, or not the node it
    │                                    says it is (server/cluster/broker_identity.py)
    ├── InvalidAclError                  INVALID_ARGUMENT + INVALID_REQUEST: an ACL binding or
    │                                    filter in CreateAcls/DeleteAcls/DescribeAcls is malformed
    ├── AclLimitError                    RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED: the ACL
    │                                    set or one request would exceed a limit (``limit``)
    ├── SecurityDisabledError            INVALID_ARGUMENT + INVALID_REQUEST: an ACL request to a
    │                                    server without an authorizer (Kafka's SECURITY_DISABLED)
    ├── QuotaBacklogExceededError        RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED (retriable):
    │                                    a throttled client already has its limit of Produce
    │                                    bytes waiting or being served (``limit``)
    └── SecurityConfigError              the TLS, credential or ACL files will not load (a
                                         start-up or SIGHUP-reload failure; never sent to a
                                         client)

Messages of :class:`AuthenticationFailedError` go to the client, so they never say whether a user
exists (that would let a client list the users) nor name a file on the server. Messages of
:class:`NotAuthorizedError` go to the client too: they name the operation and the resource the
client asked about (which it already knows), never whether a topic exists, so a principal
without DESCRIBE cannot probe for topic names (Kafka answers TOPIC_AUTHORIZATION_FAILED for an
unknown topic too).
"""

from __future__ import annotations

__all__ = [
    "AUTHENTICATION_FAILURES",
    "AclLimitError",
    "AuthenticationFailedError",
    "AuthenticationThrottledError",
    "InvalidAclError",
    "NotABrokerError",
    "NotAuthorizedError",
    "QuotaBacklogExceededError",
    "SecurityConfigError",
    "SecurityDisabledError",
    "SecurityError",
]


class SecurityError(Exception):
    """Base of the security package's errors."""


#: What an :class:`AuthenticationFailedError` was, for the server's metrics (never told to the
#: client, whose message is the same for an unknown user and a wrong password):
#: ``wrong_credentials`` (an unknown user or token, a wrong password), ``malformed_credentials``
#: (the ``authorization`` metadata is not Basic or Bearer, not base64, not text, or given
#: twice), ``credentials_not_accepted`` (sent to a server without a credential file) and
#: ``credentials_required`` (none sent where anonymous access is refused).
AUTHENTICATION_FAILURES = (
    "wrong_credentials", "malformed_credentials", "credentials_not_accepted",
    "credentials_required",
)


class AuthenticationFailedError(SecurityError):
    """The call is refused before it reaches the servicer: who is asking is not established.
    ``failure`` is which of :data:`AUTHENTICATION_FAILURES` it was."""

    def __init__(self, message: str, *, failure: str) -> None:
        assert failure in AUTHENTICATION_FAILURES, failure
        super().__init__(message)
        self.failure = failure


class AuthenticationThrottledError(SecurityError):
    """New credentials not checked, for now: ``authentication_queue_max`` checks are waiting
    or running, or the client's host has ``authentication_failures_per_host_max`` checks
    waiting, running or failed in the window (authentication.py). ``limit`` names the
    setting, ``retry_after_ms`` when to try again. The message says nothing of the
    credentials: they were not looked at."""

    def __init__(self, message: str, *, limit: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_ms = retry_after_ms


class NotAuthorizedError(SecurityError):
    """The authorizer refused the call: ``operation`` (Kafka's name, e.g. ``"WRITE"``) on
    ``resource`` (``"Topic:orders"``, ``"Cluster:kafka-cluster"``,
    ``"TransactionalId:t1"``); ``topic`` is set for topic resources. All three travel to the
    client in the ErrorInfo metadata."""

    def __init__(
        self, message: str, *, operation: str, resource: str, topic: str | None = None
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.resource = resource
        if topic is not None:
            self.topic = topic


class NotABrokerError(NotAuthorizedError):
    """A server-to-server call (the Replication service) from a caller that is not a server of
    the cluster, or from one that names another node than its own. Always CLUSTER_ACTION on
    the cluster, as Kafka's inter-broker requests; refused whether or not an authorizer is
    configured."""

    def __init__(self, message: str) -> None:
        super().__init__(message, operation="CLUSTER_ACTION", resource="Cluster:kafka-cluster")


class InvalidAclError(SecurityError):
    """An ACL binding or filter that cannot be stored or applied; the message names the field
    (``creations[2].host``) and what is wrong with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class AclLimitError(SecurityError):
    """Creating these ACLs would exceed ``acl_bindings_max``, or a request carries more
    entries than ``acl_request_entries_max``; ``limit`` names the setting."""

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class SecurityDisabledError(SecurityError):
    """CreateAcls, DeleteAcls or DescribeAcls on a server with ``authorizer = "none"``: ACLs
    would have no effect there, so none are stored (Kafka answers SECURITY_DISABLED)."""


class QuotaBacklogExceededError(SecurityError):
    """A Produce refused before it was served: its client, whose principal has a produce
    quota, already has ``quota_produce_bytes_in_flight_max`` bytes of Produce requests waiting
    for the quota or being served (quotas.py). ``limit`` names that setting. Retriable: the
    backlog drains at the quota's rate, in ``retry_after_ms`` (sent in the ErrorInfo metadata,
    as Kafka's ``throttle_time_ms``: a client should send its principal nothing more before)."""

    def __init__(self, message: str, *, limit: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_ms = retry_after_ms


class SecurityConfigError(SecurityError):
    """A TLS, credential or ACL file is missing, unreadable or malformed; the message names it."""
