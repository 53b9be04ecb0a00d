"""SR-1: secrets never reach the database file, its WAL, the FTS index, the events or logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retold import (
    DETECTOR_FAMILIES,
    Principal,
    RecordDraft,
    Redactor,
    Role,
    SQLiteStore,
    TranscriptTurn,
)
from retold._redaction import _ANCHORS, find_secrets

from .conftest import FixedClock

# Built by concatenation so no scanner mistakes the test file for a leak.
PLANTED: dict[str, tuple[str, str]] = {
    # family: (text containing the secret, the secret itself)
    "aws_access_key": ("key id AKIA" + "Q7XK2M4P9RZT3WVB in prod", "AKIA" + "Q7XK2M4P9RZT3WVB"),
    "aws_secret_key": (
        "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "Q7XK2M4P9R",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "Q7XK2M4P9R",
    ),
    "sk_key": (
        "use sk-" + "proj-T3st9kQ2xVbN7mLp4RwZ8yHc",
        "sk-" + "proj-T3st9kQ2xVbN7mLp4RwZ8yHc",
    ),
    "github_token": (
        "token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    ),
    "slack_token": (
        "bot xoxb-" + "2417-99887766-QwErTyUiOpAs",
        "xoxb-" + "2417-99887766-QwErTyUiOpAs",
    ),
    "slack_webhook": (
        "hook https://hooks.slack.com/services/" + "T000/B000/XXXXsecretXXXX",
        "T000/B000/XXXXsecretXXXX",
    ),
    "google_api_key": (
        "maps AIza" + "SyD3xQk9vLm2Np8Rt4Wz7Yb1Hc6Jf0Gs5Ke",
        "AIza" + "SyD3xQk9vLm2Np8Rt4Wz7Yb1Hc6Jf0Gs5Ke",
    ),
    "jwt": (
        "bearer eyJ"
        + "hbGciOiJIUzI1NiJ9.eyJ"
        + "zdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    ),
    "pem_private_key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzQ9secretbody\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAzQ9secretbody",
    ),
    "url_password": ("db postgres://admin:" + "Sup3rS3cretPw@db.internal/app", "Sup3rS3cretPw"),
    "assigned_secret": ("config api_key=" + "Zx9Qw8Er7Ty6Ui5O", "Zx9Qw8Er7Ty6Ui5O"),
    "stated_password": ("my password is " + "CorrectHorse42", "CorrectHorse42"),
    "bearer_token": ("Authorization: Bearer " + "x7Kq2mP9vL4nR8tW1zY6", "x7Kq2mP9vL4nR8tW1zY6"),
    "passphrase": ("my passphrase is " + "velvet otter sings", "velvet otter sings"),
    "seed_phrase": (
        "wallet seed phrase: " + "abandon ability able about above absent absorb abstract "
        "absurd abuse access accident",
        "absurd abuse access accident",
    ),
    "payment_card": ("my visa card 4111 1111 " + "1111 1111 exp 09/27", "4111 1111 " + "1111 1111"),
    # A short number is no unique byte string (a timestamp holds "737" as well): these
    # secrets are written with their label, which only the unredacted text has before them.
    "card_security_code": ("the CVV is " + "737", "CVV is 737"),
    "pin": ("my bank PIN is " + "4821", "PIN is 4821"),
    "access_code": ("the gate code is " + "2580#", "code is 2580"),
    "ssn": ("my SSN is " + "078-05-" + "1120", "078-05-1120"),
    "one_time_code": ("my backup codes are 8d3f-" + "2k1p, 9x8w-5v4u", "9x8w-5v4u"),
}


def _zero_width(secret: str) -> str:
    return secret[:3] + "\u200b" + secret[3:6] + "\u2060" + secret[6:]


def _fullwidth(secret: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in secret)


def test_every_family_is_planted() -> None:
    """The planted corpus covers every detector family the redactor has."""
    assert set(PLANTED) == set(DETECTOR_FAMILIES)


@pytest.mark.parametrize("family", sorted(PLANTED))
def test_redactor_replaces_each_family(family: str) -> None:
    """Each detector family's secret is replaced by a stable [REDACTED:<id>] marker."""
    text, secret = PLANTED[family]
    r = Redactor(b"k" * 32)
    out = r.redact(text)
    assert secret not in out
    assert "[REDACTED:" in out
    assert r.redact(text) == out  # stable id
    assert r.redact(out) == out  # idempotent


@pytest.mark.parametrize("obfuscate", [_zero_width, _fullwidth], ids=["zero-width", "fullwidth"])
@pytest.mark.parametrize("family", ["sk_key", "github_token", "aws_access_key", "google_api_key"])
def test_obfuscated_secrets_are_caught(family: str, obfuscate: object) -> None:
    """A key split by invisible characters or typed in fullwidth letters is still redacted."""
    text, secret = PLANTED[family]
    hidden = obfuscate(secret)  # type: ignore[operator]
    out = Redactor(b"k" * 32).redact(text.replace(secret, hidden))
    assert hidden not in out
    assert "[REDACTED:" in out


def test_text_without_secrets_keeps_its_exact_bytes() -> None:
    """Ordinary multilingual text, including zero-width joiners, is untouched."""
    text = "Ich heiße Zoë 👩\u200d💻; password hints are fine; tokens matter; 東京"
    assert Redactor(b"k" * 32).redact(text) == text


def _db_bytes(path: Path) -> bytes:
    blob = b""
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            blob += p.read_bytes()
    return blob


def _variants(secret: str) -> list[bytes]:
    forms = {secret, _zero_width(secret), _fullwidth(secret)}
    out: list[bytes] = []
    for form in forms:
        out.append(form.encode())
        out.append(json.dumps(form).encode())
    return out


def test_no_secret_survives_any_write_path(tmp_path: Path, clock: FixedClock) -> None:
    """Records, turns, events and extension rows written with secrets leave none in the files."""
    path = tmp_path / "secrets.db"
    store = SQLiteStore(path, clock=clock)
    scope = Principal(tenant="t1", principal="p1")
    store.ensure_schema("ext", ["CREATE TABLE ext_rows (body TEXT NOT NULL)"])
    for i, (text, secret) in enumerate(PLANTED.values()):
        for variant_text in (text, text.replace(secret, _zero_width(secret))):
            store.add(
                scope,
                RecordDraft(
                    text=variant_text,
                    speaker=text,
                    tags=(text,),
                    attribute=text if len(text) <= 120 else None,
                ),
            )
            store.add_turn(
                scope,
                TranscriptTurn(
                    session_id="s1",
                    turn_index=store.next_turn_index(scope, "s1"),
                    role=Role.USER,
                    text=variant_text,
                    time=clock(),
                ),
            )
        store.append_event(scope, "test.secret", actor="test", data={"note": text, "n": i})
        with store.write() as w:
            w.insert("ext_rows", {"body": text})
    store.close()
    blob = _db_bytes(path)
    assert blob, "database files must exist"
    for family, (_text, secret) in PLANTED.items():
        for needle in _variants(secret):
            assert needle not in blob, f"{family} secret found in database bytes"


def test_deleted_text_leaves_fts_and_file(tmp_path: Path, clock: FixedClock) -> None:
    """Deleting a record erases its text from the row and the FTS index."""
    path = tmp_path / "delete.db"
    store = SQLiteStore(path, clock=clock)
    scope = Principal(tenant="t1", principal="p1")
    rec = store.add(scope, RecordDraft(text="the quixotic zeppelin codeword"))
    assert store.search(scope, "zeppelin")
    store.delete(scope, rec.id)
    assert store.search(scope, "zeppelin") == []
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    assert b"quixotic zeppelin" not in _db_bytes(path)


# -- linear time over adversarial strings ---------------------------------------------------

# Fragments that made the old detectors backtrack (letter runs before "://", "eyJ-" chains,
# assignment names without values, PEM headers, AWS context words), plus pieces of secrets.
_ADVERSARIAL_PIECES = [
    "a",
    "Z9",
    "eyJ",
    "-",
    ".",
    "_",
    ":",
    "://",
    "@",
    "/",
    " ",
    "\n",
    "\u200b",
    "\u2028",
    "ｘ",
    '"',
    "'",
    "=",
    "token",
    "password ",
    " is ",
    "aws key ",
    "-----BEGIN ",
    "PRIVATE KEY-----",
    "AKIA",
    "ghp_",
    "xoxb-",
    "AIza",
    "sk-",
    "[REDACTED:",
    "password for a b c d ",
    " now",
    "set my x password ",
    "the a b passcode ",
    "1a2b3c",
    "Bearer ",
    "_API_KEY",
]


@st.composite
def _adversarial(draw: st.DrawFn) -> tuple[str, str]:
    """A long string of repeated adversarial fragments with one planted secret inside."""
    pieces = draw(st.lists(st.sampled_from(_ADVERSARIAL_PIECES), min_size=1, max_size=6))
    unit = "".join(pieces)
    repeats = draw(st.integers(min_value=2_000, max_value=20_000)) // max(1, len(unit))
    family = draw(st.sampled_from(sorted(PLANTED)))
    text, secret = PLANTED[family]
    cut = draw(st.integers(min_value=0, max_value=repeats))
    body = unit * cut + " " + text + " \n" + unit * (repeats - cut)
    return body, secret


@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_adversarial())
def test_long_adversarial_strings_are_redacted_and_terminate(case: tuple[str, str]) -> None:
    """Long strings built from backtracking-prone fragments finish (a quadratic detector
    would blow the timeout), lose the planted secret and keep everything else."""
    text, secret = case
    r = Redactor(b"k" * 32)
    out = r.redact(text)
    assert secret not in out
    assert r.redact(out) == out
    for start, end, _family in find_secrets(text):
        assert start < end <= len(text)


def test_case_insensitive_families_and_case_sensitive_aws_ids() -> None:
    """Token prefixes match in any case; AWS key ids stay upper-case only, as defined."""
    r = Redactor(b"k" * 32)
    for text, secret in (PLANTED["github_token"], PLANTED["slack_token"], PLANTED["jwt"]):
        shouted = text.upper()
        assert secret.upper() not in r.redact(shouted), text
    assert "[REDACTED:" not in r.redact("akia" + "q7xk2m4p9rzt3wvb")


# -- the anchor check ------------------------------------------------------------------------

_ANCHOR_PIECES = [
    *(piece for text, secret in PLANTED.values() for piece in (text, secret)),
    *_ADVERSARIAL_PIECES,
    "pwd=",
    "client-secret: ",
    "Api-Key=",
    "private_key ",
    "refresh_token=",
    "passcode is ",
    "pin code was ",
    "AWS secret key = ",
    "github_pat_",
    "hooks.slack.com/services/",
    "https://",
    "\u0130",  # capital I with a dot: IGNORECASE matches it to "i"
    "\u0131",  # dotless i
    "\u017f",  # long s (NFKC: "s")
    "\u212a",  # Kelvin sign (NFKC: "K")
    "\uff53\uff4b-",  # fullwidth "sk-"
    "Q7XK2M4P9RZT3WVB",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCY",
]


@st.composite
def _mixed_case(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.sampled_from(_ANCHOR_PIECES), min_size=1, max_size=8))
    text = "".join(pieces)
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips, strict=True))


@settings(max_examples=400, deadline=None)
@given(text=_mixed_case())
def test_text_without_an_anchor_holds_no_secret(text: str) -> None:
    """The anchor check is only a shortcut: whatever any detector finds in a text (in any
    case, with the letters IGNORECASE folds), the check lets through to the detectors."""
    from retold._redaction import _may_hold_secret, _scan, normalise

    view = normalise(text)
    if _scan(view):
        assert _may_hold_secret(view), view


def test_every_planted_secret_passes_the_anchor_check_and_plain_text_skips_it() -> None:
    """Each family's example reaches the detectors, also upper-cased or with its i's
    written as letters IGNORECASE folds to i; ids, codes and timestamps do not."""
    from retold._redaction import _may_hold_secret, _scan, normalise

    for family, (text, _secret) in PLANTED.items():
        for form in (text, text.upper(), text.replace("i", "\u0131"), text.replace("i", "\u0130")):
            view = normalise(form)
            assert _may_hold_secret(view) or not _scan(view), (family, form)
        assert _may_hold_secret(normalise(text)), family
    for plain in ("d3f1c0ffee", "2026-12-02T08:30:00+00:00", '["r1", "r2"]', "regenerated"):
        assert not _may_hold_secret(plain)


@pytest.mark.parametrize("repeats", [9, 10, 57, 300])
def test_a_key_that_runs_on_from_a_redacted_one_is_redacted_in_the_same_call(
    repeats: int,
) -> None:
    """In "AIzask-AIzask-..." every "sk-" follows a letter, so no sk- key starts there; once
    the Google key before it is replaced, the placeholder opens a boundary and the rest is
    a key. redact finds it in the same call, so redacting its output changes nothing."""
    r = Redactor(b"k" * 32)
    text = "config api_key=Zx9Qw8Er7Ty6Ui5O \n" + "AIzask-" * repeats
    out = r.redact(text)
    assert "Zx9Qw8Er7Ty6Ui5O" not in out and "[REDACTED:google_api_key-" in out
    assert r.redact(out) == out
    # What is left in clear is too short to be any key.
    clear = re.split(r"\[REDACTED:[^\]]*\]", out)[1:]
    assert clear and max(len(part) for part in clear) < 20


def test_a_key_with_more_token_glued_on_is_redacted_to_the_token_end() -> None:
    """Google keys are "AIza" and exactly 35 characters. In a run of them glued together
    the next "AIza" follows a letter, so it is no key until its neighbour is replaced: the
    whole token is one secret, in one pass, and what follows it stays."""
    r = Redactor(b"k" * 32)
    text = "key " + "AIzaxxxxxAIza" * 16 + " and the rest."
    out = r.redact(text)
    assert out.startswith("key [REDACTED:google_api_key-") and out.endswith("] and the rest.")
    assert out.count("[REDACTED:") == 1
    assert r.redact(out) == out
    (span,) = find_secrets(text)
    assert text[span[0] : span[1]] == "AIzaxxxxxAIza" * 16


_PLACEHOLDER = re.compile(r"[\"'\s]*\[REDACTED:[a-z_]+-[0-9a-f]{12}\]")


@settings(max_examples=1000, deadline=None)
@given(
    pieces=st.lists(
        st.sampled_from(
            [
                *_ANCHORS,
                *("token=", " is ", "=", ": ", '"', "'", " ", "@h.io/", "https://u:", "."),
                *("Zx9Qw8Er7Ty6Ui5OpLk3", "0123456789abcdefABCDEF", "hunter2", "two words"),
                *("my password is ", "passphrase was ", "password = ", "api_key: ", "secret="),
                *("password for the wifi is ", "changed my password to ", " now ", "Bearer "),
                *("OPENAI_API_KEY=", "api key: ", " set to "),
                *("Das Passwort für den Router ist ", "密码是", "пароль: ", "lösenordet mitt är "),
                *("visa ", "4111 1111 1111 1111", "4111111111111111", "5555-5555-5555-4444"),
                *("the PIN is ", "4821", "cvv ", "door code is ", "SSN: ", "078-05-1120"),
                *("seed phrase: ", "abandon ", "ability able ", "my passphrase is ", "#"),
                *("كلمة المرور هي ", "पासवर्ड ", " है"),
            ]
        ),
        min_size=2,
        max_size=16,
    )
)
def test_redacting_chained_anchors_reaches_a_fixpoint(pieces: list[str]) -> None:
    """Detectors' anchors, values and quotes glued in any order: the output is redacted as
    far as it goes (redacting it again changes nothing), and what any detector still finds
    in it is a placeholder, never a value."""
    r = Redactor(b"k" * 32)
    out = r.redact("".join(pieces))
    assert r.redact(out) == out
    assert all(_PLACEHOLDER.fullmatch(out[a:b]) for a, b, _ in find_secrets(out)), out


@pytest.mark.parametrize(
    "text",
    [
        "export OPENAI_API_KEY=Zx9Qw8Er7Ty6Ui5O",
        "DB_PASSWORD: Zx9Qw8Er7Ty6Ui5O",
        "my api key: Zx9Qw8Er7Ty6Ui5O",
        "SECRET_KEY = 'Zx9Qw8Er7Ty6Ui5O'",
        "curl -H 'Authorization: Bearer Zx9Qw8Er7Ty6Ui5O' https://api.example.com",
        "the password is: Zx9Qw8Er7Ty6Ui5O",
        "my password's Zx9Qw8Er7Ty6Ui5O",
        "The password for the router is Zx9Qw8Er7Ty6Ui5O, ok?",
        "my password was set to Zx9Qw8Er7Ty6Ui5O",
        "the passcode has been changed to Zx9Qw8Er7Ty6Ui5O",
        "my wifi password is now Zx9Qw8Er7Ty6Ui5O",
        "I changed my email password to Zx9Qw8Er7Ty6Ui5O yesterday",
        "my password for netflix: Zx9Qw8Er7Ty6Ui5O",
        "password -> Zx9Qw8Er7Ty6Ui5O",
        "my security answer is Zx9Qw8Er7Ty6Ui5O",
        "the answer to my security question is Zx9Qw8Er7Ty6Ui5O",
        "the wi-fi key is Zx9Qw8Er7Ty6Ui5O",
        "our network key: Zx9Qw8Er7Ty6Ui5O",
        "my bitcoin private key is Zx9Qw8Er7Ty6Ui5O",
        "recovery key: Zx9Qw8Er7Ty6Ui5O",
        "login: maya / pw: Zx9Qw8Er7Ty6Ui5O",
        "psw=Zx9Qw8Er7Ty6Ui5O",
        "my wifi password Zx9Qw8Er7Ty6Ui5O stopped working",
        "Try the router admin passcode Zx9Qw8Er7Ty6Ui5O.",
        "their password Zx9Qw8Er7Ty6Ui5O, I think",
    ],
)
def test_secrets_as_people_paste_or_say_them(text: str) -> None:
    """Environment variables with a prefix, names with a space, bearer headers, and a
    password stated with what it opens, a colon, "now" or "set to", or right after its
    name: the value goes, and redacting again changes nothing."""
    r = Redactor(b"k" * 32)
    out = r.redact(text)
    assert "Zx9Qw8Er7Ty6Ui5O" not in out and r.redact(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "Mein Passwort ist Zx9Qw8Er7Ty6Ui5O",
        "Das Kennwort für den Router lautet Zx9Qw8Er7Ty6Ui5O.",
        "Passwort: Zx9Qw8Er7Ty6Ui5O",
        "Mijn wachtwoord is Zx9Qw8Er7Ty6Ui5O",
        "le mot de passe du wifi est Zx9Qw8Er7Ty6Ui5O",
        "la contraseña del banco es 'dos palabras Zx9Qw8Er7Ty6Ui5O'",
        "Minha senha é Zx9Qw8Er7Ty6Ui5O",
        "La mia password è Zx9Qw8Er7Ty6Ui5O",
        "Moje hasło to Zx9Qw8Er7Ty6Ui5O",
        "Adgangskoden min er Zx9Qw8Er7Ty6Ui5O",
        "Passordet mitt er Zx9Qw8Er7Ty6Ui5O",
        "Lösenordet till routern är Zx9Qw8Er7Ty6Ui5O",
        "Şifre: Zx9Qw8Er7Ty6Ui5O",
        "Мой пароль — Zx9Qw8Er7Ty6Ui5O",
        "我的密码是Zx9Qw8Er7Ty6Ui5O",
        "パスワードはZx9Qw8Er7Ty6Ui5Oです",
        "비밀번호는 Zx9Qw8Er7Ty6Ui5O",
        "كلمة المرور هي Zx9Qw8Er7Ty6Ui5O",
        "كلمة السر الخاصة بي: Zx9Qw8Er7Ty6Ui5O",
        "मेरा पासवर्ड Zx9Qw8Er7Ty6Ui5O है",
        "पासवर्ड: Zx9Qw8Er7Ty6Ui5O",
    ],
)
def test_a_password_stated_in_another_language_is_redacted(text: str) -> None:
    """The languages the model-free rules read: the word for password, what it opens, a
    copula or a colon (a particle in Chinese, Japanese and Korean), then the value."""
    r = Redactor(b"k" * 32)
    out = r.redact(text)
    assert "Zx9Qw8Er7Ty6Ui5O" not in out and r.redact(out) == out
    assert out.count("[REDACTED:") == 1


@pytest.mark.parametrize(
    "text",
    [
        "The bearer of bad news arrived.",
        "The Bearer 2024 report is out",
        "I use a password manager for the family.",
        "I forgot my password again",
        "my password manager is great",
        "the password reset link expired",
        "your password must have 8 characters",
        "reset the password 3 times",
        "the password 2FA setup",
        "the password 1234 is weak",
        "the password change on 2024-05-01",
        "the passcode rules since 2019",
        "Set the api key to the new one",
        "the token ring network",
        "Ich habe mein Passwort vergessen.",
        "Je dois changer mon mot de passe demain",
        "La contraseña no funciona",
        "Il mio password manager è ottimo",
        "the pin on my jacket is loose",
        "pin 3 of the header goes to ground",
        "I pinned 1234 posts",
        "my PIN changed last week",
        "code review is at 10",
        "the door code changed yesterday",
        "my credit score is 720",
        "order 4111111111111111 shipped",
        "Order 1234 5678 9012 3456 for the card",
        "my card ends in 1234",
        "my card number is 1234 5678 9012 3456",  # its check digit is wrong
        "card 4111 1111 1111 1112",
        "card game for 4 players",
        "my visa expires 2027-05-01",
        "security code of conduct",
        "a combination of 3 drugs",
        "combo meal for 12",
        "the pwm signal is at 50%",
        "the security code is 482913",
        "The SSN field is optional",
        "seed phrase words are important",
        "I never got the verification code",
        "the login code 404 came back",
        "2FA codes are annoying",
        "backup code review at 10 am",
        "OTP 2 sent",
        "मेरा पासवर्ड बदल गया है",
        "نسيت كلمة المرور",
    ],
)
def test_prose_about_secrets_is_kept(text: str) -> None:
    """Words around secrets without a value in the form the detectors know stay as they are."""
    assert Redactor(b"k" * 32).redact(text) == text


def test_payment_and_access_secrets_lose_every_digit() -> None:
    """A card number in any of the groupings cards print, its security code, a PIN, a code
    that opens a door and a social security number: each is replaced whole, once."""
    r = Redactor(b"k" * 32)
    for text, digits in [
        ("Card: 4111111111111111, CVC 123", ["4111111111111111", "123"]),
        ("amex 3782 822463 10005 exp 11/26", ["3782", "822463", "10005"]),
        ("my debit card is 5555-5555-5555-4444", ["5555-5555-5555-4444"]),
        ("the PIN for my card: 0042", ["0042"]),
        ("PIN 7311", ["7311"]),
        ("the code for the front door is 1984*", ["1984"]),
        ("garage opener code 5512", ["5512"]),
        ("the combination to my bike lock is 3719", ["3719"]),
        ("my locker combo is 12-34-56", ["12", "34", "56"]),
        ("social security number 078 05 1120", ["078 05 1120"]),
    ]:
        out = r.redact(text)
        assert not any(d in out for d in digits), out
        assert r.redact(out) == out


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ("OTP: 482913", ["482913"]),
        ("your verification code is 482913.", ["482913"]),
        ("the one-time password was 774411", ["774411"]),
        ("TOTP code: 123 456", ["123", "456"]),
        ("my 2FA backup codes are 8d3f-2k1p, 9x8w-5v4u and 7t6s-3r2q.", ["2k1p", "5v4u", "3r2q"]),
        ("GitHub recovery codes:\n1a2b3-c4d5e\n6f7g8-h9i0j\n", ["c4d5e", "h9i0j"]),
        ("my backup codes for the bank are 12345678 87654321", ["12345678", "87654321"]),
    ],
)
def test_one_time_and_backup_codes_lose_every_code(text: str, codes: list[str]) -> None:
    """A one-time code or a list of backup codes after its name: every code goes, in one
    placeholder, and the words after the list stay."""
    r = Redactor(b"k" * 32)
    out = r.redact(text)
    assert not [c for c in codes if c in out], out
    assert out.count("[REDACTED:one_time_code-") == 1 and r.redact(out) == out


def test_a_seed_phrase_and_a_passphrase_lose_every_word() -> None:
    """A wallet's seed phrase (twelve to twenty-four words) and a passphrase (to the end of
    its clause, at most eight words) are secrets made of words."""
    r = Redactor(b"k" * 32)
    seed = " ".join(["legal", "winner", "thank", "year", "wave", "sausage"] * 2)
    out = r.redact(f"My recovery phrase is {seed}. Keep it safe.")
    assert out.startswith("My recovery phrase is [REDACTED:seed_phrase-")
    assert out.endswith("]. Keep it safe.") and "winner" not in out
    out = r.redact("my passphrase is correct horse battery staple, don't share it")
    assert "horse" not in out and out.endswith("], don't share it")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('my password is "hunter2-hunter2", ok?', ["hunter2"]),
        ("the passphrase was 'correct horse battery'", ["correct", "horse", "battery"]),
        ('My PIN code is "4417 9902" for the card', ["4417", "9902"]),
        ('my password is "unterminated', ["unterminated"]),
        ('api_key: "Zx9Qw8Er7Ty6Ui5O"', ["Zx9Qw8Er7Ty6Ui5O"]),
        ("secret='Zx9 Qw8' and password='Ab12Cd34Ef'", ["Zx9", "Qw8", "Ab12Cd34Ef"]),
    ],
)
def test_a_quoted_secret_is_replaced_whole_and_once(text: str, words: list[str]) -> None:
    """A quoted value is replaced to its closing quote, quotes included (a passphrase has
    spaces); the placeholder is no new secret, so redacting the output changes nothing,
    and each secret's id is its own."""
    r = Redactor(b"k" * 32)
    out = r.redact(text)
    assert not [w for w in words if w in out], out
    assert "[REDACTED:" in out and r.redact(out) == out
    ids = re.findall(r"\[REDACTED:([a-z_]+-[0-9a-f]{12})\]", out)
    assert ids == [r.secret_id(family, text[a:b]) for a, b, family in find_secrets(text)]


def test_a_secret_a_longer_span_hid_is_redacted_in_the_same_call() -> None:
    """ "token=..." overlaps the URL password before it, so the URL's password wins the
    first pass; the assignment after it is found once the password is replaced."""
    r = Redactor(b"k" * 32)
    out = r.redact("xoxb-token=https://u:p@ xoxb-token=https://u:p@ ")
    assert r.redact(out) == out
    assert "[REDACTED:assigned_secret-" in out


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("my wifi password Sunflower88! stopped working", "stopped working"),
        ("the password 483920 works", " works"),
        ("Try the password abc12345, ok", ", ok"),
        ("our router admin password Hx7wq2Lp.", "."),
    ],
)
def test_a_password_right_after_its_name_goes_and_the_sentence_stays(text: str, kept: str) -> None:
    """Without "is" or a colon, a credential-shaped value right after the name is the
    secret: it goes whole ("!" included), the punctuation that closes the sentence stays."""
    out = Redactor(b"k" * 32).redact(text)
    assert out.count("[REDACTED:stated_password-") == 1 and out.endswith(kept)
    assert not any(ch.isdigit() for ch in out.split("[REDACTED:")[0])
