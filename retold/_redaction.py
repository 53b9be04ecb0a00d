"""SR-1: the single gate that replaces secrets with ``[REDACTED:<secretId>]`` before any write.

Detection runs on a normalised view of the text (per-character NFKC, invisible format
characters such as U+200B removed), so a key split by a zero-width space or typed in
fullwidth letters is still caught. Each match is mapped back to the original characters and
replaced there; text outside secrets keeps its exact bytes.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ._text_caches import register

__all__ = [
    "DETECTOR_FAMILIES",
    "Redactor",
    "find_secrets",
    "has_secret",
    "normalise",
    "redaction_processor",
    "strip_secrets",
]

#: A value that is already a placeholder, quoted or not, is no secret: without the quote
#: here, ``password is "[REDACTED:...]`` matched again on every pass (a new digest each
#: time, so redacting twice changed the text).
_NOT_REDACTED = r"(?![\"']?\[REDACTED:)"


@dataclass(frozen=True, slots=True)
class _Detector:
    family: str
    pattern: re.Pattern[str]
    # Lower-case literals, one of which every match (or, for a detector with a ``check``,
    # the context it needs) contains: text holding none of any detector's anchors is clean
    # without running the patterns (see ``_may_hold_secret``).
    anchors: tuple[str, ...]
    group: int = 0  # which group holds the secret (0: the whole match)
    # Whether a match (view, start, end of the group) is a secret: the context a pattern
    # cannot check in linear time, or a checksum.
    check: Callable[[str, int, int], bool] | None = None


def _d(
    family: str,
    pattern: str,
    anchors: tuple[str, ...],
    group: int = 0,
    flags: int = 0,
    check: Callable[[str, int, int], bool] | None = None,
) -> _Detector:
    return _Detector(family, re.compile(pattern, flags), anchors, group, check)


def _spelled(*parts: str) -> tuple[str, ...]:
    """Every spelling of an ``a[_ -]?b`` name: ``ab``, ``a_b``, ``a-b`` and ``a b``."""
    head, tail = parts
    return (head + tail, head + "_" + tail, head + "-" + tail, head + " " + tail)


_ASSIGNED_NAMES = (
    r"password|passwd|passphrase|pwd|pw|psw|secret[_ -]?key|secret|client[_ -]?secret|api[_ -]?key|"
    r"access[_ -]?token|auth[_ -]?token|refresh[_ -]?token|bearer[_ -]?token|private[_ -]?key|"
    r"token"
)
# What every one of those names contains ("client_secret" holds "secret", every token name
# "token").
_ASSIGNED_ANCHORS = (
    "passw",
    "passphrase",
    "pw",  # pw, pwd
    "psw",
    "secret",
    *_spelled("api", "key"),
    *_spelled("private", "key"),
    "token",
)

# Linear time, by construction. Python's ``re`` backtracks, so every detector is written so
# that no input position is scanned more than a constant number of times:
#
# * an unbounded run is possessive (``*+``/``++``), so a failed attempt never re-scans it;
# * a family whose body runs to the end of a maximal run of its characters starts only at
#   the start of that run (a look-behind), and an atomic group jumps to the first place in
#   the run where the family's prefix can begin. Every later start inside the same run
#   would reach the same run end and the same continuation, so it could only fail too;
# * everything else is bounded ({0,20}, {16}, {30,255}).
#
# ``tests/test_redaction.py`` checks this with a property test over long adversarial
# strings, and ``retold bench redaction`` measures it.
_JWT_CHARS = r"[A-Za-z0-9_-]"
# What a sentence names as a secret it states: a password, a passcode, the answer to a
# security question, a Wi-Fi network's key.
_STATED_NAME = (
    r"(?:password|passphrase|passcode|pin\s++code|security\s++answer|secret\s++answer|"
    r"answer\s++to\s++(?:my|the)\s++security\s++question|(?:private|recovery)\s++key|"
    r"(?:wi-?fi|wlan|network)\s++(?:key|passkey))"
)
# How a sentence states a secret, up to its value: the name, at most four words saying
# what it opens ("for the router", "to my bank account"), then "is"/"was"/"has been"/"'s",
# "=", ":" or an arrow, an optional colon, "now"/"still", and "set/changed/reset/updated
# to".
_STATED_OPENER = (
    # No "[" in those words: a placeholder's own colon is never the statement's.
    r"(?:\s++(?:for|of|to|on|at)(?:\s++[^\s:=\[]{1,30}+){1,4}?)?"
    r"(?:['\u2019]s|\s++(?:is|was|has\s++been)|\s*+(?:=|:|->|=>|\u2192))(?:\s*+:)?+"
    # Possessive: a placeholder after "now" is not the chance to take "now" for the value.
    r"(?:\s++(?:now|still)\b)?+(?:\s++(?:set|changed|reset|updated)\s++to\b)?+\s++"
)
_STATED = r"(?i)\b" + _STATED_NAME + _STATED_OPENER
# "I changed my password to ...", "set the wifi passcode to ...".
_CHANGED_TO = (
    r"(?i)\b(?:set|change|changed|reset|update|updated)\s++(?:(?:my|the|your|our)\s++)?"
    r"(?:[^\s:=]{1,30}+\s++)?" + _STATED_NAME + r"\s++to\s++"
)
# A possessive or "the", at most two words naming what it opens ("my wifi password", "the
# router admin passcode"), the name, then the value with nothing between: "my wifi password
# Sunflower88! stopped working". Without the copula, only a value shaped like a credential
# counts: 6 to 64 characters holding a letter and a digit, or 6 to 12 digits; the words
# that follow a name in prose ("manager", "reset", "2FA", "123") are none of those. A
# sentence's closing punctuation after it is not part of it.
_STATED_BARE = (
    r"(?i)\b(?:my|our|your|his|her|their|the)\s++(?:[^\s:=\[\d]{1,30}+\s++){0,2}?"
    r"(?:password|passphrase|passcode)\s++"
)
_BARE_VALUE = (
    r"((?=[^\s\"']{0,63}\d)(?=[^\s\"']{0,63}[A-Za-z])[^\s\"']{5,63}[^\s\"'.,;:?)]"
    r"(?=[.,;:?)]*+(?:\s|$))"
    r"|\d{6,12}+(?![^\s.,;!?]))"
)
# Quoted, the value runs to its closing quote (a passphrase has spaces); bare, to the
# first space.
_STATED_VALUE = r"(\"[^\"\n]{3,}+\"|'[^'\n]{3,}+'|[\"']?+[^\s\"']{3,}+)"
_STATED_NAMES = (
    "password",
    "passphrase",
    "passcode",
    "pin code",
    "security answer",
    "secret answer",
    "private key",
    "recovery key",
    "security question",
    "fi key",
    "fi passkey",
    "wlan key",
    "wlan passkey",
    "network key",
    "network passkey",
)
# The same statement in the other languages the model-free rules read: the word for
# password (German, Dutch, French, Spanish, Portuguese, Polish, Danish, Norwegian, Swedish,
# Turkish, Russian and Ukrainian), at most four words after a preposition, then a copula
# of any of them or a colon; Italian says "password è". Chinese, Japanese and Korean write
# the name, a particle or a colon, and the value without a space.
_ELSEWHERE_NAMES = (
    "passwort",
    "kennwort",
    "wachtwoord",
    "passe",  # "mot de passe", whatever spaces it is written with
    "contraseña",
    "senha",
    "hasło",
    "adgangskode",
    "kodeord",
    "passord",
    "lösenord",
    "şifre",
    "пароль",
)
_STATED_ELSEWHERE = (
    r"(?i)(?:\b(?:passwort|kennwort|wachtwoord|mot\s++de\s++passe|contraseña|senha|hasło|"
    r"adgangskode(?:n)?|kodeord(?:et)?|passord(?:et)?|lösenord(?:et)?|şifre(?:m|si|niz)?|"
    r"пароль)"
    # Scandinavian possessives follow the noun: "passordet mitt er ...".
    r"(?:\s++(?:mitt|min|mit|mina|mine|vårt|vores|ditt|din))?"
    r"(?:\s++(?:für|zum|zur|voor|van|pour|du|de|para|do|da|del|dla|til|for|för|till|için|"
    r"от|для|від)(?:\s++[^\s:=\[]{1,30}+){1,4}?)?"
    r"(?:\s++(?:ist|lautet|war|is|was|est|était|es|era|é|to|jest|er|var|är|это|є)\b|"
    r"\s*+[:=\u2014])"
    r"|\bpassword\s++(?:è|era)\b"
    # Arabic: "كلمة المرور" / "كلمة السر" / "رمز المرور", at most three words, then
    # "هي"/"هو" or a colon.
    r"|(?:كلمة\s++(?:المرور|السر)|رمز\s++المرور)(?:\s++[^\s:=\[]{1,20}+){0,3}?"
    r"\s*+(?:هي|هو|:)"
    r"|(?:密码|密碼|口令|パスワード|暗証番号|비밀번호)\s*+(?:是|为|為|は|는|은|:|：))"
    r"(?:\s*+:)?+\s*+"
)
_ELSEWHERE_ANCHORS = (
    *_ELSEWHERE_NAMES,
    *("password", "密码", "密碼", "口令", "パスワード", "暗証番号", "비밀번호"),
    *("المرور", "السر"),
)
# Hindi puts the value between the name and the verb ("मेरा पासवर्ड X है"), or after "है"
# or a colon; a value is taken only in Latin letters, digits and ASCII symbols, as
# passwords are typed, so a Hindi sentence about the password is not one.
_HINDI_STATED = r"(?:पासवर्ड|पासकोड)\s*+(?:(?:है|:|=)\s*+)?"

# A payment card number: 13 to 19 digits, written whole or in the groups cards print
# (4-4-4-4, or 4-6-5 and 4-6-4), one separator throughout. It counts only when its Luhn
# check digit holds and a word for a card stands in the 64 characters before it.
_CARD_WORDS = (
    "card",
    "visa",
    "amex",
    "american express",
    "maestro",
    "diners",
    "discover",
    "credit",
    "debit",
    "karte",
    "tarjeta",
    "carte",
    "cartão",
    "carta",
    "kaart",
    "kort",
)
_CARD_CONTEXT = re.compile(r"(?i)\b(?:" + "|".join(_CARD_WORDS) + r")")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_number(view: str, start: int, end: int) -> bool:
    digits = "".join(c for c in view[start:end] if c.isdigit())
    window = view[max(0, start - _CONTEXT_WINDOW) : start]
    return _luhn(digits) and bool(_CARD_CONTEXT.search(window))


# A secret that is a run of words: a passphrase, quoted or up to eight words to the end of
# its clause, and a wallet's seed (recovery) phrase, twelve to twenty-four words.
_PHRASE_VALUE = r"(\"[^\"\n]{3,}+\"|'[^'\n]{3,}+'|[^\s.,;!?\"']++(?:[ \t]++[^\s.,;!?\"']++){0,7})"
_SEED_WORDS = r"((?:[A-Za-z]{3,8}+[ \t,]++){11,23}[A-Za-z]{3,8}+)"
_SCHEME = r"[A-Za-z0-9+.-]"

# A one-time or backup code after its name: "OTP: 482913", "my 2FA backup codes are
# 8d3f-2k1p, 9x8w-5v4u and 7t6s-3r2q". Each code is 3 to 12 letters and digits (a hyphen may
# join two parts) with a digit among its first 25 characters; a list runs on over commas,
# semicolons, "and" and line breaks, at most 16 codes. The ``check`` wants 4 digits in all,
# so "login code 404" stays.
_CODE_NAME = (
    r"(?i)\b(?:(?:(?:2fa|mfa|two[- ]factor)\s++)?+"
    r"(?:backup|recovery|verification|login|sign[- ]?in|auth(?:entication)?|one[- ]time|2fa|mfa|"
    r"two[- ]factor|t?otp)\s++codes?|t?otp|one[- ]time\s++(?:password|passcode|pin))\b"
)
_CODE = r"(?=[A-Za-z-]{0,24}\d)[A-Za-z0-9]{3,12}+(?:-[A-Za-z0-9]{2,12}+)?+(?![A-Za-z0-9])"
_CODE_LIST = _CODE + r"(?:(?:\s*+[,;]\s*+|\s++(?:and\s++)?+)" + _CODE + r"){0,15}+"


def _enough_digits(view: str, start: int, end: int) -> bool:
    return sum(c.isdigit() for c in view[start:end]) >= 4


_DETECTORS: tuple[_Detector, ...] = (
    _d(
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
        ("-----begin ",),
        flags=re.DOTALL | re.IGNORECASE,
    ),
    _d(
        "jwt",
        rf"(?<!{_JWT_CHARS})(?>{_JWT_CHARS}*?(?=\b(?i:eyj)))"
        rf"((?i:eyj){_JWT_CHARS}{{8,}}+\.(?i:eyj){_JWT_CHARS}{{8,}}+\.{_JWT_CHARS}{{8,}}+)",
        ("eyj",),
        group=1,
    ),
    # An opaque token after "Bearer" (an Authorization header pasted whole): at least 16
    # token characters, one a digit at least, so "the bearer of this letter" is prose.
    _d(
        "bearer_token",
        r"\b(?i:bearer)\s++"
        + _NOT_REDACTED
        + r"((?=[A-Za-z._~+/-]*+[0-9])[A-Za-z0-9._~+/-]{16,}+=*+)",
        ("bearer",),
        group=1,
    ),
    # AWS key ids are upper case by definition: a lower-cased one is not matched here (the
    # gap planners strip secrets before they lower-case anything).
    _d(
        "aws_access_key",
        r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b",
        ("akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "anpa"),
    ),
    # The 40-character secret is found first (bounded, at the start of its run); the
    # "aws ... secret/key ... =" context before it is checked on a bounded window.
    _d(
        "aws_secret_key",
        r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        ("aws",),
        check=lambda view, start, _end: _aws_context(view, start),
    ),
    _d(
        "github_token",
        r"\b(?i:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,255}\b",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    _d("github_token", r"\b(?i:github_pat_)[A-Za-z0-9_]{22,255}", ("github_pat_",)),
    _d(
        "slack_token",
        r"\b(?i:xox[abposr])-[A-Za-z0-9-]{10,}+",
        tuple(f"xox{c}-" for c in "abposr"),
    ),
    _d(
        "slack_webhook",
        r"(?i:https://hooks\.slack\.com/services/)[A-Za-z0-9/_-]++",
        ("hooks.slack.com/services/",),
    ),
    _d("google_api_key", r"\b(?i:aiza)[0-9A-Za-z_-]{35}", ("aiza",)),
    _d("sk_key", r"\b(?i:sk-(?:ant-|proj-|live-|test-)?)[A-Za-z0-9_-]{20,}+", ("sk-",)),
    _d(
        "url_password",
        rf"(?<!{_SCHEME})(?>[0-9+.-]*+)[A-Za-z]{_SCHEME}*+://[^/\s:@]++:"
        + _NOT_REDACTED
        + r"([^/\s@]++)@",
        ("://",),
        1,
    ),
    # Before the assignments, which take one word: "passphrase: correct horse battery".
    _d(
        "passphrase",
        r"(?i)\bpass\s?phrase" + _STATED_OPENER + _NOT_REDACTED + _PHRASE_VALUE,
        ("passphrase", "pass phrase"),
        1,
    ),
    _d(
        "seed_phrase",
        r"(?i)\b(?:seed|recovery|mnemonic|backup|secret)\s++(?:phrase|words)\b"
        r"(?:[^\n\d\[]{0,40}?[:=\s])??\s*+" + _NOT_REDACTED + _SEED_WORDS,
        (
            "seed phrase",
            "seed words",
            "recovery phrase",
            "recovery words",
            "mnemonic",
            "backup phrase",
            "backup words",
            "secret phrase",
            "secret words",
        ),
        1,
    ),
    _d(
        "payment_card",
        r"(?<![\d.,/-])(\d{4}([ -]?)\d{4}\2\d{4}\2\d{4}|\d{4}([ -]?)\d{6}\3\d{4,5}|"
        r"\d{13,19})(?![\d.,/]\d|\d)",
        _CARD_WORDS,
        1,
        check=_card_number,
    ),
    _d(
        "card_security_code",
        r"(?i)\b(?:cvv2?|cvc2?|card\s++security\s++code|security\s++code)\b"
        r"(?:\s++(?:is|was)|\s*+[:=#])?+\s*+" + _NOT_REDACTED + r"(\d{3,4}+)(?!\d)",
        ("cvv", "cvc", "security code"),
        1,
    ),
    # A PIN is digits: "my PIN is 4821", "the PIN for my card: 4821", "PIN 4821".
    _d(
        "pin",
        r"(?i)\bpin(?:\s++(?:number|code|no\.?))?+"
        r"(?:\s++(?:for|of|to|on|at)(?:\s++[^\s\d:=\[]{1,30}+){1,4}?)?"
        r"(?:['\u2019]s|\s++(?:is|was|has\s++been)|\s*+[:=#])?+(?:\s++(?:now|still)\b)?+\s*+"
        + _NOT_REDACTED
        + r"(\d{4,12}+)(?![\d.,]\d|\d)",
        ("pin",),
        1,
    ),
    # A code that opens something: "the door code is 4455#", "code for the alarm: 7741".
    _d(
        "access_code",
        r"(?i)\b(?:(?:door|gate|alarm|garage|entry|access|lock|keypad|safe|building|lockbox|"
        r"locker)(?:\s++(?:opener|door|keypad|lock|box))?\s++code|"
        r"code\s++(?:for|to|of)\s++(?:(?:the|my|our|your)\s++)?(?:front\s++|back\s++)?"
        r"(?:door|gate|alarm|garage|entry|building|lockbox|locker|safe|keypad)|"
        # A lock's combination: "the combination to my bike lock is 3719", "locker combo".
        r"(?:combination|combo)(?:\s++(?:for|to|of|on)(?:\s++[^\s\d:=\[]{1,30}+){1,4}?)?)\b"
        r"(?:\s++(?:is|was)|\s*+[:=])?+\s*+"
        + _NOT_REDACTED
        + r"([0-9#*](?:[0-9#*]|[- ](?=\d)){2,15}+)(?![\d.,]\d)",
        ("code", "combination", "combo"),
        1,
    ),
    # A US social security number after its name.
    _d(
        "ssn",
        r"(?i)\b(?:ssn|social\s++security\s++(?:number|no\.?|#))(?:\s++(?:is|was)|\s*+[:=#])?+"
        r"\s*+" + _NOT_REDACTED + r"(\d{3}([- ]?)\d{2}\2\d{4})(?!\d)",
        ("ssn", "social security"),
        1,
    ),
    _d(
        "one_time_code",
        _CODE_NAME
        + r"(?:\s++(?:for|of|to|on)(?:\s++[^\s\d:=\[]{1,30}+){1,4}?)?"
        + r"(?:\s++(?:is|are|was|were)|\s*+[:=])?+\s*+"
        + _NOT_REDACTED
        + "("
        + _CODE_LIST
        + ")",
        ("code", "otp", "one-time", "one time"),
        1,
        check=_enough_digits,
    ),
    _d(
        "assigned_secret",
        # An environment variable's prefix counts: OPENAI_API_KEY=, DB_PASSWORD=.
        r"(?i)(?<![A-Za-z0-9])(?:"
        + _ASSIGNED_NAMES
        + r")\b[\"']?\s*+[:=]\s*+"
        + _NOT_REDACTED
        + r"(\"[^\"\n]{3,}+\"|'[^'\n]{3,}+'|[^\s,;\"']{3,}+)",
        _ASSIGNED_ANCHORS,
        1,
    ),
    _d(
        "stated_password",
        _STATED + _NOT_REDACTED + _STATED_VALUE,
        _STATED_NAMES,
        1,
    ),
    _d(
        "stated_password",
        _CHANGED_TO + _NOT_REDACTED + _STATED_VALUE,
        _STATED_NAMES,
        1,
    ),
    _d(
        "stated_password",
        _STATED_ELSEWHERE + _NOT_REDACTED + _STATED_VALUE,
        _ELSEWHERE_ANCHORS,
        1,
    ),
    _d(
        "stated_password",
        _STATED_BARE + _NOT_REDACTED + _BARE_VALUE,
        ("password", "passphrase", "passcode"),
        1,
    ),
    _d(
        "stated_password",
        _HINDI_STATED + _NOT_REDACTED + r"([!-~]{3,}+)",
        ("पासवर्ड", "पासकोड"),
        1,
    ),
)

_SECRET_NAME = re.compile(r"(?i)\s*[\"']?(?:" + _ASSIGNED_NAMES + r")[\"']?\s*")

# The context an AWS secret key needs just before it (checked on at most 64 characters).
_AWS_SECRET_CONTEXT = re.compile(
    r"(?i)aws.{0,20}?(?:secret|key).{0,20}?[:=\s]\s{0,8}[\"']?\Z", re.DOTALL
)
_CONTEXT_WINDOW = 64


def _aws_context(view: str, start: int) -> bool:
    return bool(_AWS_SECRET_CONTEXT.search(view[max(0, start - _CONTEXT_WINDOW) : start]))


DETECTOR_FAMILIES: tuple[str, ...] = tuple(sorted({d.family for d in _DETECTORS}))

_ANCHORS: tuple[str, ...] = tuple(dict.fromkeys(a for d in _DETECTORS for a in d.anchors))
# The letters outside ASCII that ``re.IGNORECASE`` matches to an ASCII letter and that NFKC
# leaves as they are (the normalised view already turned the long s and the Kelvin sign
# into ``s`` and ``K``).
_IGNORECASE_TO_ASCII = str.maketrans({"\u0130": "i", "\u0131": "i"})


def _may_hold_secret(view: str) -> bool:
    """Whether some detector can match ``view`` (a normalised view): False when it holds
    none of the detectors' anchors, compared ignoring case as the patterns do.

    A few substring searches in C, where the patterns are a dozen scans in ``re``: most
    text written (ids, codes, timestamps, prose) holds no anchor and is done here.
    """
    folded = view if view.isascii() else view.translate(_IGNORECASE_TO_ASCII)
    folded = folded.lower()
    return any(anchor in folded for anchor in _ANCHORS)


# Characters that break a line without being "\n": the normaliser maps them to "\n", so a
# pasted web page that uses U+2028 reads as separate lines to every rule.
_LINE_BREAKS = frozenset("\u0085\u2028\u2029\x0b\x0c")


_Index = tuple[list[int], list[int]]  # per view character: source start, source end

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t", "r": "\r", "b": " ", "f": "\n"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _unescape_at(text: str, i: int) -> tuple[str, int] | None:
    """The character a JSON escape at ``text[i]`` (a backslash) stands for, and its length."""
    nxt = text[i + 1 : i + 2]
    if nxt in _ESCAPES and nxt:
        return _ESCAPES[nxt], 2
    if nxt == "u" and len(text) >= i + 6 and all(c in _HEX for c in text[i + 2 : i + 6]):
        code = int(text[i + 2 : i + 6], 16)
        if 0xD800 <= code < 0xDC00 and text[i + 6 : i + 8] == "\\u":
            low = text[i + 8 : i + 12]
            if len(low) == 4 and all(c in _HEX for c in low) and 0xDC00 <= int(low, 16) < 0xE000:
                pair = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                return chr(pair), 12
        return chr(code), 6
    return None


def _normalise(text: str) -> tuple[str, _Index | None]:
    """Return the detection view of ``text`` and, per view character, its source span.

    The view: per character NFKC, format characters (Cf) dropped, line breaks as ``"\n"``,
    and JSON string escapes (``\\"``, ``\\u200b``, ``\\uff41``) decoded, so a secret in
    JSON text that was encoded before it reached the redactor is still seen. ASCII text
    without a backslash is its own view (None: positions map one to one), the common case.
    """
    if text.isascii() and "\\" not in text and "\x0b" not in text and "\x0c" not in text:
        return text, None
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        ch, width = text[i], 1
        if ch == "\\":
            decoded = _unescape_at(text, i)
            if decoded is not None:
                ch, width = decoded
        if ch in _LINE_BREAKS:
            ch = "\n"
        if ch.isascii():
            out.append(ch)
            starts.append(i)
            ends.append(i + width)
        elif unicodedata.category(ch) != "Cf":
            for c in unicodedata.normalize("NFKC", ch):
                if unicodedata.category(c) != "Cf":
                    out.append(c)
                    starts.append(i)
                    ends.append(i + width)
        i += width
    return "".join(out), (starts, ends)


def normalise(text: str) -> str:
    """The one normalised view of text that redaction and activation both read.

    Per character: NFKC (fullwidth letters become ASCII), invisible format characters
    (category Cf: U+200B, U+2060, U+FEFF, bidi marks, ...) removed, and the line breaks
    U+0085, U+2028, U+2029, VT and FF turned into ``"\n"``. Linear in the text's length.
    """
    return _normalise(text)[0]


def _candidate_spans(view: str) -> list[tuple[int, int, str]]:
    """Every detector's matches as (start, end, family), first detector first."""
    return _scan(view) if _may_hold_secret(view) else []


def _scan(view: str) -> list[tuple[int, int, str]]:
    """:func:`_candidate_spans` without the anchor check: every detector runs."""
    found: list[tuple[int, int, str]] = []
    for det in _DETECTORS:
        for m in det.pattern.finditer(view):
            start, end = m.span(det.group)
            if start < 0 or end <= start:
                continue
            if det.check is not None and not det.check(view, start, end):
                continue
            found.append((start, end, det.family))
    return found


#: Passes :meth:`Redactor.redact` makes at most; each later pass runs only when the one
#: before it redacted something (over random chains of every detector's anchors, two
#: passes always reached a text that a further pass leaves unchanged).
_REDACT_PASSES = 4


def _non_overlapping(found: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Keep each span unless it overlaps one kept before it (detector order wins).

    O(k log k) in the number of matches: kept spans are disjoint, so they stay sorted by
    start and one bisection finds the only neighbours that can overlap.
    """
    starts: list[int] = []
    kept: list[tuple[int, int, str]] = []
    for start, end, family in found:
        i = bisect.bisect_right(starts, start)
        if i > 0 and kept[i - 1][1] > start:
            continue
        if i < len(kept) and kept[i][0] < end:
            continue
        starts.insert(i, start)
        kept.insert(i, (start, end, family))
    return kept


#: Characters a key's token runs on with (letters, digits and the joiners keys use).
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_\-/+]")


def _secret_spans(view: str) -> list[tuple[int, int, str]]:
    """The secrets in ``view``: disjoint spans, each running on to the end of its token.

    A detector that stops inside a token ("AIza" and exactly 35 characters, with more
    glued on) would leave the rest of the token in clear, where a placeholder's edge can
    open a word boundary the text did not have and make the rest a key of its own
    ("AIza...sk-..."). The whole token goes instead. Linear: spans are disjoint and
    sorted, and a span that the one before it grew over is dropped.
    """
    out: list[tuple[int, int, str]] = []
    for start, end, family in _non_overlapping(_candidate_spans(view)):
        if out and start < out[-1][1]:
            continue
        while end < len(view) and _TOKEN_CHAR.match(view, end):
            end += 1
        out.append((start, end, family))
    return out


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Spans ``(start, end, family)`` of the secrets in ``text`` (source indices), in order."""
    if not text:
        return []
    view, index = _normalise(text)
    spans = _secret_spans(view)
    if index is None:
        return spans
    starts, ends = index
    return [(starts[s], ends[e - 1], f) for s, e, f in spans]


def strip_secrets(text: str, replacement: str = " ") -> str:
    """``text`` with every detected secret replaced by ``replacement`` (no key needed).

    For components that derive new text from a turn (a gap planner lower-casing it into a
    search query): strip first, so no transformed copy of a secret exists to be stored.
    """
    spans = find_secrets(text)
    if not spans:
        return text
    pieces: list[str] = []
    cursor = 0
    for start, end, _family in spans:
        if start < cursor:
            continue
        pieces.append(text[cursor:start])
        pieces.append(replacement)
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


def has_secret(text: str) -> bool:
    """Whether any detector finds a secret in ``text``."""
    return bool(find_secrets(text))


#: Bounds of a :class:`Redactor`'s set of strings known to hold no secret.
_CLEAN_MAX_CHARS = 256
_CLEAN_MAX_ENTRIES = 4096


class Redactor:
    """Replaces secrets with ``[REDACTED:<family>-<id>]``.

    The id is a keyed hash (HMAC-SHA256) prefix of the normalised secret, so the same secret
    gets the same id within one store and the id reveals nothing without the key. A store
    redacts each tenant's rows with :meth:`for_tenant`, whose key is derived from the store
    key and the tenant id, so ids never correlate one secret across tenants.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("redaction key must be at least 16 bytes")
        self._key = key
        self._tenants: dict[str, Redactor] = {}
        # Short strings already found to hold no secret (codes, ids, policy names repeat on
        # every audit row): redacting them again would find nothing again. Strings with a
        # secret are never kept, so the set holds no secret; it may hold a person's short
        # message, so an erasure empties it (:mod:`retold._text_caches`).
        self._clean: set[str] = set()
        register(self)

    def clear_text_cache(self) -> None:
        """Forget the strings found clean (a tenant's redactor registers on its own)."""
        self._clean = set()

    def for_tenant(self, tenant: str) -> Redactor:
        """The redactor of one tenant: same detectors, a key derived for that tenant."""
        found = self._tenants.get(tenant)
        if found is None:
            derived = hmac.new(
                self._key, b"retold-tenant\0" + tenant.encode("utf-8", "surrogatepass"), "sha256"
            ).digest()
            found = Redactor(derived)
            if len(self._tenants) < 4096:  # bounded cache; deriving again is cheap
                self._tenants[tenant] = found
        return found

    def secret_id(self, family: str, secret: str) -> str:
        digest = hmac.new(
            self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256
        ).hexdigest()
        return f"{family}-{digest[:12]}"

    def redact(self, text: str) -> str:
        """Return ``text`` with every detected secret replaced. Linear in ``len(text)``.

        The result is redacted again until nothing more is found (at most
        :data:`_REDACT_PASSES` passes): where two detectors' spans overlap, the one that
        loses ("token=" and a URL holding a password) is found once the winner is
        replaced. A text with no secret costs one pass; one with secrets costs one more
        over the output. Keys glued to more token characters are redacted to the end of
        the token (:func:`_secret_spans`), so no placeholder edge starts a new key.
        """
        out = self._redact_once(text)
        for _ in range(_REDACT_PASSES - 1):
            if out is text:
                break
            text, out = out, self._redact_once(out)
        return out

    def _redact_once(self, text: str) -> str:
        """One pass of :meth:`redact`; returns ``text`` itself when it holds no secret."""
        if not text or text in self._clean:
            return text
        view, index = _normalise(text)
        spans = _secret_spans(view)
        if not spans:
            if len(text) <= _CLEAN_MAX_CHARS:
                if len(self._clean) >= _CLEAN_MAX_ENTRIES:
                    self._clean.clear()
                self._clean.add(text)
            return text
        pieces: list[str] = []
        cursor = 0
        for start, end, family in spans:
            src_start, src_end = (
                (start, end) if index is None else (index[0][start], index[1][end - 1])
            )
            if src_start < cursor:
                continue
            pieces.append(text[cursor:src_start])
            pieces.append(f"[REDACTED:{self.secret_id(family, view[start:end])}]")
            cursor = src_end
        pieces.append(text[cursor:])
        return "".join(pieces)

    def redact_value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (dict keys and values, lists, tuples).

        Runs on the values themselves, before any encoding: a secret inside a JSON string
        is seen with its quotes and escapes decoded.
        """
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                if isinstance(k, str) and isinstance(v, str) and _SECRET_NAME.fullmatch(k):
                    # {"password": "..."} is the assignment password=... written as JSON.
                    v = self.redact(f"{k}={v}")[len(k) + 1 :]
                out[self.redact(k) if isinstance(k, str) else k] = self.redact_value(v)
            return out
        if isinstance(value, list | tuple):
            return type(value)(self.redact_value(v) for v in value)
        return value

    def redact_encoded(self, text: str) -> str:
        """Redact a string that may itself be encoded JSON (``'["a", {"q": "..."}]'``).

        The text is redacted as it is; when it also decodes as a JSON array, object or
        string, the decoded values are redacted and, if that found a secret the encoded
        form hid (an escaped quote, ``\\u200b``, a fullwidth escape), the value is
        re-encoded from the redacted values.
        """
        plain = self.redact(text)
        head = text.lstrip()[:1]
        if head not in ("[", "{", '"'):
            return plain
        try:
            decoded = json.loads(text)
        except (ValueError, RecursionError):
            return plain
        cleaned = self.redact_value(decoded)
        if cleaned != decoded:
            return json.dumps(cleaned, ensure_ascii=False)
        # Nothing inside the values; a secret seen only in the encoded form (across
        # values) is still removed, at the price of the encoding.
        return plain


def redaction_processor(redactor: Redactor) -> Any:
    """A structlog processor a host may add so log lines pass the same gate.

    Retold never configures logging itself; this is for the host's own configuration.
    """

    def processor(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> Any:
        return {k: redactor.redact_value(v) for k, v in event_dict.items()}

    return processor
