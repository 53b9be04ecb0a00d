"""The gateway's client keys: a JSON file holding only sha256 hashes, each bound to a scope.

A key is shown once, when :meth:`KeyFile.add` creates it; the file keeps its sha256, an id
(for listing and revoking), the tenant and principal it authenticates as, and timestamps.
The principal of a request comes from its key and nothing else. Writes go to a temporary
file in the same directory and are renamed over the old one, so a crash never leaves a
half-written file, and the file is created readable by its owner only. A change reads,
changes and rewrites the file under an operating-system lock (``.<name>.lock`` beside it),
so ``retold keys add`` run by several processes at once keeps every key; readers (the
gateway) take no lock.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from retold._errors import InvalidInputError
from retold._files import exclusive, write_private
from retold._records import Principal

__all__ = ["KEY_PREFIX", "ApiKeyEntry", "KeyFile", "hash_key"]

KEY_PREFIX = "rtd-"
_FORMAT_VERSION = 1


def hash_key(key: str) -> str:
    """The hex sha256 of a client key, as the keys file stores it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKeyEntry(BaseModel):
    """One key as the file holds it: never the key itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    """Short public id, used by ``retold keys list`` and ``retold keys revoke``."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The hex sha256 of the key."""
    tenant: str = Field(min_length=1)
    """The tenant the key authenticates as."""
    principal: str = Field(min_length=1)
    """The principal the key authenticates as."""
    created_at: datetime
    """When the key was created (UTC)."""
    revoked_at: datetime | None = None
    """When the key was revoked; a revoked key is refused."""

    @property
    def scope(self) -> Principal:
        """The trusted scope this key grants."""
        return Principal(tenant=self.tenant, principal=self.principal)

    def public(self) -> dict[str, Any]:
        """The listing view (no hash)."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "principal": self.principal,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


class _KeysDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = _FORMAT_VERSION
    keys: list[ApiKeyEntry] = Field(default_factory=list)


class KeyFile:
    """The keys file: create, list, revoke and look up keys.

    A running gateway calls :meth:`lookup` per request; it rereads the file when its
    modification time or size changed, so ``retold keys revoke`` takes effect without a
    restart.

    Args:
        path: the JSON file (created on the first :meth:`add`).
        clock: returns the current UTC time (injected in tests).
        token: returns the random part of a new key (injected in tests).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], datetime] | None = None,
        token: Callable[[], str] | None = None,
    ) -> None:
        self.path = Path(path)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._token = token or (lambda: secrets.token_urlsafe(32))
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._by_hash: dict[str, ApiKeyEntry] = {}

    # -- reading ------------------------------------------------------------------------

    def _read(self) -> _KeysDocument:
        if not self.path.exists():
            return _KeysDocument()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return _KeysDocument.model_validate(raw)
        except (ValueError, ValidationError) as exc:
            raise InvalidInputError(
                "keys", f"{str(self.path)!r} is not a Retold keys file ({exc.__class__.__name__})"
            ) from exc

    def entries(self) -> list[ApiKeyEntry]:
        """Every key in the file, oldest first."""
        return list(self._read().keys)

    def lookup(self, key: str) -> ApiKeyEntry | None:
        """The active entry for a presented key, or None (unknown, revoked or malformed)."""
        if not key or len(key) > 512:
            return None
        digest = hash_key(key)
        with self._lock:
            self._refresh()
            entry = self._by_hash.get(digest)
        if entry is None or entry.revoked_at is not None:
            return None
        # The dict lookup already matched; compare again in constant time out of habit.
        return entry if hmac.compare_digest(entry.sha256, digest) else None

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._by_hash = None, {}
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        doc = self._read()
        self._by_hash = {e.sha256: e for e in doc.keys}
        self._stamp = stamp

    # -- writing ------------------------------------------------------------------------

    def _write(self, doc: _KeysDocument) -> None:
        text = json.dumps(doc.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
        write_private(self.path, text)

    def _exclusive(self) -> AbstractContextManager[None]:
        """The file's inter-process lock, for a read, change and rewrite."""
        if not self.path.parent.exists():
            raise InvalidInputError("keys", f"directory {str(self.path.parent)!r} does not exist")
        return exclusive(self.path)

    def add(self, tenant: str, principal: str) -> tuple[str, ApiKeyEntry]:
        """Create a key for ``tenant``/``principal``; returns (the key, its entry).

        The key is returned here and never again: the file keeps only its hash.

        Raises:
            InvalidInputError: an empty tenant or principal, or an unreadable keys file.
            RuntimeFailure: another process kept the file locked for 10 s.
        """
        try:
            scope = Principal(tenant=tenant, principal=principal)
        except ValidationError as exc:
            raise InvalidInputError.from_validation_error(exc) from exc
        key = KEY_PREFIX + self._token()
        digest = hash_key(key)
        with self._lock, self._exclusive():
            doc = self._read()
            entry = ApiKeyEntry(
                id="key_" + digest[:12],
                sha256=digest,
                tenant=scope.tenant,
                principal=scope.principal,
                created_at=self._clock(),
            )
            if any(e.sha256 == digest or e.id == entry.id for e in doc.keys):
                raise InvalidInputError("keys", "generated a key that already exists; retry")
            doc.keys.append(entry)
            self._write(doc)
            self._stamp = None
        return key, entry

    def revoke(self, key_id: str) -> ApiKeyEntry:
        """Revoke the key with id ``key_id`` (idempotent); returns its entry.

        Raises:
            InvalidInputError: no key has that id.
            RuntimeFailure: another process kept the file locked for 10 s.
        """
        with self._lock, self._exclusive():
            doc = self._read()
            for index, entry in enumerate(doc.keys):
                if entry.id == key_id:
                    if entry.revoked_at is None:
                        entry = entry.model_copy(update={"revoked_at": self._clock()})
                        doc.keys[index] = entry
                        self._write(doc)
                        self._stamp = None
                    return entry
        raise InvalidInputError("id", f"no key with id {key_id!r} in {str(self.path)!r}")
