"""Retold: utility-aware memory for LLM assistants.

Decides, turn by turn, whether stored memory will improve an answer and injects only what
helps, within the token and latency budget the host sets.
"""

from __future__ import annotations

from ._errors import (
    AdapterHTTPError,
    BundleMismatchError,
    InvalidInputError,
    PolicyError,
    RetoldError,
    RuntimeFailure,
    StoreError,
    TokenizerUnavailableError,
    UsageError,
)
from ._records import (
    SEMANTIC_KINDS,
    Activation,
    Candidate,
    EpistemicState,
    Event,
    EvidenceRef,
    LifecycleState,
    Principal,
    ProfileBlock,
    Record,
    RecordDraft,
    RecordKind,
    Role,
    SourceType,
    TranscriptTurn,
    WriteOrigin,
)
from ._redaction import DETECTOR_FAMILIES, Redactor, redaction_processor
from ._store import AsyncStore, SQLiteStore, Store, Writer
from ._tokens import (
    TOKEN_UNITS,
    CharCounter,
    HostDefinedCounter,
    TiktokenCounter,
    TokenCounter,
    TokenUnit,
    token_counter,
)

__version__ = "0.1.0"

__all__ = [
    "DETECTOR_FAMILIES",
    "SEMANTIC_KINDS",
    "TOKEN_UNITS",
    "Activation",
    "AdapterHTTPError",
    "AsyncStore",
    "BundleMismatchError",
    "Candidate",
    "CharCounter",
    "EpistemicState",
    "Event",
    "EvidenceRef",
    "HostDefinedCounter",
    "InvalidInputError",
    "LifecycleState",
    "PolicyError",
    "Principal",
    "ProfileBlock",
    "Record",
    "RecordDraft",
    "RecordKind",
    "Redactor",
    "RetoldError",
    "Role",
    "RuntimeFailure",
    "SQLiteStore",
    "SourceType",
    "Store",
    "StoreError",
    "TiktokenCounter",
    "TokenCounter",
    "TokenUnit",
    "TokenizerUnavailableError",
    "TranscriptTurn",
    "UsageError",
    "WriteOrigin",
    "Writer",
    "__version__",
    "redaction_processor",
    "token_counter",
]
