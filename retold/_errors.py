"""Retold's exception tree.

::

    RetoldError
    ├── UsageError                 the caller asked for something invalid; fix the call
    │   ├── InvalidInputError      a value failed validation; ``.field`` names it
    │   ├── BundleMismatchError    the declared bundle does not describe this host
    │   │   └── UnfittedBundleError  no passing fitness result is recorded for the bundle
    │   └── TokenizerUnavailableError  a token-counter encoding cannot be loaded
    └── RuntimeFailure             something outside the caller's control failed
        ├── StoreError             the database refused or failed a read or write
        │   ├── StoreIntegrityError  a write broke a uniqueness or integrity rule
        │   └── DeadlineExceeded   a read or lock wait on the turn path hit its deadline
        ├── PolicyError            a policy timed out, raised, or returned garbage
        └── AdapterHTTPError       a provider answered with an error status
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = [
    "AdapterHTTPError",
    "BundleMismatchError",
    "DeadlineExceeded",
    "InvalidInputError",
    "PolicyError",
    "RetoldError",
    "RuntimeFailure",
    "StoreError",
    "StoreIntegrityError",
    "TokenizerUnavailableError",
    "UnfittedBundleError",
    "UsageError",
]


class RetoldError(Exception):
    """Root of every exception Retold raises on purpose."""


class UsageError(RetoldError):
    """The caller asked for something invalid; the message says what to change."""


class InvalidInputError(UsageError):
    """A value failed validation at a boundary.

    Attributes:
        field: dotted name of the first offending field ("" when not field-specific).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)

    @classmethod
    def from_validation_error(cls, exc: ValidationError) -> InvalidInputError:
        """Turn pydantic's error into one line naming the first bad field."""
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        return cls(field, str(first.get("msg", "invalid value")))


class BundleMismatchError(UsageError):
    """The declared policy bundle's manifest does not match what this host runs."""


class UnfittedBundleError(BundleMismatchError):
    """The bundle has no passing fitness result recorded in the host's store."""


class TokenizerUnavailableError(UsageError):
    """A token-counter encoding could not be loaded (no network, no cache)."""


class RuntimeFailure(RetoldError):
    """Something outside the caller's control failed."""


class StoreError(RuntimeFailure):
    """The database refused or failed a read or write."""


class StoreIntegrityError(StoreError):
    """A write broke a uniqueness or integrity rule (a duplicate key, an append-only table).

    Raised the same way by every store: the driver's own error (``sqlite3.IntegrityError``,
    ``psycopg.IntegrityError``) is its ``__cause__``, and the message names its type.
    """


def store_error(what: str, exc: BaseException) -> StoreError:
    """The store-neutral error for a database driver's ``exc`` raised while doing ``what``.

    Integrity violations become :class:`StoreIntegrityError`, everything else
    :class:`StoreError`; the message names the driver's error type, so logs and tests can
    still tell a ``UNIQUE`` failure from a lock timeout.
    """
    name = type(exc).__name__
    integrity = any(k.__name__ == "IntegrityError" for k in type(exc).__mro__)
    if integrity and name != "IntegrityError":
        name += " (IntegrityError)"  # psycopg's UniqueViolation, ForeignKeyViolation, ...
    cls = StoreIntegrityError if integrity else StoreError
    return cls(f"{what} failed: {name}: {exc}")


def store_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not take the statement at all (a lock held
    past the timeout, a lost connection, a full disk, a cancelled statement, a deadline):
    the driver's ``OperationalError`` family, SQLite's and psycopg's alike, rather than a
    refusal of what was sent (an integrity rule, a value too big)."""
    if isinstance(exc, DeadlineExceeded):
        return True
    cause = exc.__cause__ if isinstance(exc, StoreError) else exc
    return cause is not None and any(k.__name__ == "OperationalError" for k in type(cause).__mro__)


def store_rolled_back(exc: BaseException) -> bool:
    """Whether the database rolled back ``exc``'s transaction to resolve a conflict with
    another (PostgreSQL's SQLSTATE class 40: a deadlock, a serialization failure): the same
    transaction may simply run again."""
    cause = exc.__cause__ if isinstance(exc, StoreError) else exc
    return str(getattr(cause, "sqlstate", None) or "").startswith("40")


class DeadlineExceeded(StoreError):
    """A read, a write or a lock wait on the turn path was cut short at its deadline.

    Attributes:
        kind: which deadline: ``"budget"`` (the turn's latency budget) or ``"timeout"``
            (a stage's own timeout).
    """

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class PolicyError(RuntimeFailure):
    """A policy timed out, raised, or returned output that failed validation.

    Attributes:
        stage: the pipeline stage ("gap", "retrieval", "admission", ...).
        reason: a short machine-readable reason ("timeout", "exception", "malformed", ...).
    """

    def __init__(self, stage: str, reason: str, detail: str = "") -> None:
        self.stage = stage
        self.reason = reason
        self.detail = detail
        super().__init__(f"{stage} failed: {reason}" + (f" ({detail})" if detail else ""))


class AdapterHTTPError(RuntimeFailure):
    """A provider answered with an error status.

    Attributes:
        status_code: the HTTP status (0 when no response arrived).
        body: the response body, truncated to 500 characters and redacted.
    """

    def __init__(self, status_code: int, body: str, message: str = "") -> None:
        self.status_code = status_code
        self.body = body[:500]
        super().__init__(message or f"provider returned HTTP {status_code}: {self.body}")
