"""SR-1: the single gate that replaces secrets with ``[REDACTED:<secretId>]`` before any write.

Detection runs on a normalised view of the text (per-character NFKC, invisible format
characters such as U+200B removed), so a key split by a zero-width space or typed in
fullwidth letters is still caught. Each match is mapped back to the original characters and
replaced there; text outside secrets keeps its exact bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DETECTOR_FAMILIES", "Redactor", "redaction_processor"]

_NOT_REDACTED = r"(?!\[REDACTED:)"


@dataclass(frozen=True, slots=True)
class _Detector:
    family: str
    pattern: re.Pattern[str]
    group: int = 0  # which group holds the secret (0: the whole match)


def _d(family: str, pattern: str, group: int = 0, flags: int = 0) -> _Detector:
    return _Detector(family, re.compile(pattern, flags), group)


_ASSIGNED_NAMES = (
    r"password|passwd|passphrase|pwd|secret|client[_-]?secret|api[_-]?key|apikey|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token|bearer[_-]?token|private[_-]?key|token"
)

_DETECTORS: tuple[_Detector, ...] = (
    _d(
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
        flags=re.DOTALL,
    ),
    _d("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    _d("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b"),
    _d(
        "aws_secret_key",
        r"(?i)aws.{0,20}?(?:secret|key).{0,20}?[:=\s]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        group=1,
    ),
    _d("github_token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,255}\b"),
    _d("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,255}"),
    _d("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    _d("slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    _d("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    _d("sk_key", r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{20,}"),
    _d("url_password", r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:" + _NOT_REDACTED + r"([^/\s@]+)@", 1),
    _d(
        "assigned_secret",
        r"(?i)\b(?:"
        + _ASSIGNED_NAMES
        + r")\b[\"']?\s*[:=]\s*"
        + _NOT_REDACTED
        + r"(\"[^\"\n]{3,}\"|'[^'\n]{3,}'|[^\s,;\"']{3,})",
        1,
    ),
    _d(
        "stated_password",
        r"(?i)\b(?:password|passphrase|passcode|pin code)\s+(?:is|was|=)\s+"
        + _NOT_REDACTED
        + r"[\"']?([^\s\"']{3,})",
        1,
    ),
)

DETECTOR_FAMILIES: tuple[str, ...] = tuple(sorted({d.family for d in _DETECTORS}))


def _normalise(text: str) -> tuple[str, list[int] | None]:
    """Return the detection view of ``text`` and, per view character, its source index.

    ASCII text is its own view (index None: positions map one to one), the common case.
    """
    if text.isascii():
        return text, None
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        if ch.isascii():
            out.append(ch)
            index.append(i)
            continue
        if unicodedata.category(ch) == "Cf":
            continue
        for n in unicodedata.normalize("NFKC", ch):
            if unicodedata.category(n) != "Cf":
                out.append(n)
                index.append(i)
    return "".join(out), index


class Redactor:
    """Replaces secrets with ``[REDACTED:<family>-<id>]``.

    The id is a keyed hash (HMAC-SHA256) prefix of the normalised secret, so the same secret
    gets the same id within one store and the id reveals nothing without the key.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("redaction key must be at least 16 bytes")
        self._key = key

    def secret_id(self, family: str, secret: str) -> str:
        digest = hmac.new(self._key, secret.encode(), hashlib.sha256).hexdigest()
        return f"{family}-{digest[:12]}"

    def _spans(self, view: str) -> Iterator[tuple[int, int, str, str]]:
        taken: list[tuple[int, int]] = []
        for det in _DETECTORS:
            for m in det.pattern.finditer(view):
                start, end = m.span(det.group)
                if start < 0 or end <= start:
                    continue
                if any(s < end and start < e for s, e in taken):
                    continue
                taken.append((start, end))
                yield start, end, det.family, view[start:end]

    def redact(self, text: str) -> str:
        """Return ``text`` with every detected secret replaced."""
        if not text:
            return text
        view, index = _normalise(text)
        spans = sorted(self._spans(view))
        if not spans:
            return text
        pieces: list[str] = []
        cursor = 0
        for start, end, family, secret in spans:
            src_start, src_end = (
                (start, end) if index is None else (index[start], index[end - 1] + 1)
            )
            if src_start < cursor:
                continue
            pieces.append(text[cursor:src_start])
            pieces.append(f"[REDACTED:{self.secret_id(family, secret)}]")
            cursor = src_end
        pieces.append(text[cursor:])
        return "".join(pieces)

    def redact_value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (dicts, lists, tuples)."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {k: self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.redact_value(v) for v in value)
        return value


def redaction_processor(redactor: Redactor) -> Any:
    """A structlog processor a host may add so log lines pass the same gate.

    Retold never configures logging itself; this is for the host's own configuration.
    """

    def processor(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> Any:
        return {k: redactor.redact_value(v) for k, v in event_dict.items()}

    return processor
