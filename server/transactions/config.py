"""The transaction coordinator's settings, by Kafka's broker config names, with defaults::

    transaction.max.timeout.ms                                   900000 (15 min)
    transactional.id.expiration.ms                               604800000 (7 days)
    transaction.abort.timed.out.transaction.cleanup.interval.ms  10000
    transaction.remove.expired.transaction.cleanup.interval.ms   3600000 (1 hour)
    transaction.partitions.max (stratalog's own)                 1000

The last is stratalog's limit on the partitions of one transaction: a state record lists them
all and must fit in one batch of the state log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from stratalog.server.storage.errors import InvalidConfigError

__all__ = ["DEFAULT_TRANSACTION_TIMEOUT_MS", "TransactionConfig"]

#: The producer's transaction.timeout.ms default (Kafka's ProducerConfig).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

_NAMES = {
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "abort_timed_out_interval_ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "remove_expired_interval_ms",
    "transaction.partitions.max": "transaction_partitions_max",
}


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Validated coordinator settings (every value >= 1). Immutable."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    transaction_partitions_max: int = 1000

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                name = next(k for k, v in _NAMES.items() if v == spec.name)
                raise InvalidConfigError(f"{name} must be an integer >= 1, got {value!r}")

    @classmethod
    def from_mapping(cls, settings: Mapping[str, str | int]) -> TransactionConfig:
        """Settings by their Kafka names (values as ints or decimal strings).

        Raises:
            InvalidConfigError: an unknown name, or a value that is not an integer >= 1.
        """
        values: dict[str, int] = {}
        for name, raw in settings.items():
            field_name = _NAMES.get(name)
            if field_name is None:
                raise InvalidConfigError(
                    f"unknown transaction setting {name!r}; known: {sorted(_NAMES)}"
                )
            try:
                values[field_name] = int(raw)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"{name} must be an integer, got {raw!r}") from None
        return cls(**values)
