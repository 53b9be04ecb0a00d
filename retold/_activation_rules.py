"""Deterministic text rules of activation: sentences, negation, hypotheticals, the claim match.

The matching rule of step 2 (:func:`find_supporting_claim`) is lexical and deterministic:
the turn is split into sentences; a sentence is skipped when it is a question (unless it is
a standing request such as "can you always ...?" or "could you ... from now on?"),
hypothetical ("if", "suppose", "imagine", ...; idioms such as "if needed" do not count),
about a third party (third-person pronouns other than "I find them ...", or a subject
other than "I" before a reporting/preference verb such as "wants" or "said"), or differs
from the record in negation. The record's content words (stop words and generic preference
verbs removed, light suffix stemming) must then be found in the sentence: at least
``min(2, n)`` of the ``n`` words and at least 60% of them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from ._records import (
    Principal,
    Record,
    Role,
    TranscriptTurn,
)

__all__ = [
    "ClaimMatch",
    "find_supporting_claim",
]


class ClaimMatch(BaseModel):
    """Where a record's claim was found inside one turn's text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sentence_index: int
    sentence: str
    matched: int
    of: int


# -- deterministic text rules -----------------------------------------------------------

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;])\s+|\n+|[\u0085\u2028\u2029]+")
_NEGATIONS = frozenset({"not", "no", "never", "nor", "without", "cannot"})
_HYPOTHETICAL = frozenset(
    {
        "if",
        "suppose",
        "supposing",
        "imagine",
        "imagining",
        "hypothetically",
        "hypothetical",
        "pretend",
        "pretending",
        "unless",
        "whether",
    }
)
_THIRD_PERSON = frozenset(
    {"he", "she", "they", "his", "her", "hers", "him", "them", "their", "theirs"}
)
# "If needed", "if possible", ...: idiomatic qualifiers of an instruction, not hypotheticals.
_IF_IDIOM = re.compile(
    r"\bif (?:needed|necessary|possible|relevant|appropriate|applicable|useful|helpful|any)\b|"
    # a condition on the reply's own form ("if the answer is long"), not a hypothetical
    r"\bif (?:the|your|an?|my) (?:answers?|repl(?:y|ies)|responses?|explanations?|lists?) "
    r"(?:is|are|gets?|runs?) (?:long|longer|lengthy|complex|detailed)\b"
)
# "I find them distracting": an object pronoun for the thing the principal judges, not a
# third party (who would be "I want them to ...", which stays disqualified).
_THING_PRONOUN = re.compile(
    r"\bi\s+(?:really\s+|just\s+|honestly\s+)?(?:find|found|hate|dislike|like|love|"
    r"(?:ca|can) not stand|cannot stand|ignore|skip|miss|skim)\s+them\b(?!\s+to\b)|"
    # "them" as the object of an instruction about the reply's parts ("when you list steps,
    # number them"): a thing, not a third party
    r"\b(?:number|keep|make|put|list|break|split|format|label|order|sort|bold|shorten)\s+them\b"
)
# A polite request phrased as a question ("can you generally ...?", "could you answer me in
# Japanese from now on?") is a direct instruction when it says the request is standing.
_REQUEST_QUESTION = re.compile(
    r"^\W*(?:(?:hey|hi|ok|okay|so|also|and|but|actually|please|btw|oh|well)\W+)*"
    r"(?:can|could|would|will)\s+you\b"
)
_STANDING = re.compile(
    r"\b(?:always|generally|in general|from now on|from here on|going forward|by default|"
    r"every time|all the time|in (?:the )?future|as a rule|for everything|in every answer|"
    r"in all (?:your )?(?:answers|replies|responses))\b"
)
_REPORTING_VERBS = (
    "wants|prefers|likes|needs|asks|asked|says|said|told|tells|thinks|loves|hates|requires|"
    "required|wrote|writes|wanted|preferred|liked|needed"
)
_REPORTED = re.compile(rf"\b([^\W_]+)\s+(?:{_REPORTING_VERBS})\b")
_STOPWORDS = frozenset(
    """
    a an the and or but of to in on at by for from with as is are was were be been being am
    it its this that these those there here i me my mine we us our you your yours user users
    user's principal principal's prefers prefer preferred preference preferences wants want
    wanted likes like liked would should please always also just really very do does did
    so than then to too all any some s
    """.split()
)


def _normalise_text(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    # "don't" -> "do not", "can't" -> "ca not": negation parity sees one "not" either way.
    return re.sub(r"n't\b", " not", text)


def _words(text: str) -> list[str]:
    return _WORD.findall(_normalise_text(text))


def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ly", "ing", "ed", "ies", "es", "s"):
        # "ly" keeps a 4-letter stem so "reply" is not cut to "rep".
        if word.endswith(suffix) and len(word) - len(suffix) >= (4 if suffix == "ly" else 3):
            word = word[: -len(suffix)] + ("i" if suffix == "ies" else "")
            break
    if word.endswith("y"):
        word = word[:-1] + "i"
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def _content_stems(text: str) -> set[str]:
    return {_stem(w) for w in _words(text) if w not in _STOPWORDS and w not in _NEGATIONS}


def _negated(words: Iterable[str]) -> bool:
    return any(w in _NEGATIONS for w in words)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


def _standing_request(sentence: str) -> bool:
    """A request-question that states a standing instruction ("can you always ...?")."""
    text = _normalise_text(sentence)
    return bool(_REQUEST_QUESTION.search(text)) and bool(_STANDING.search(text))


def _disqualified(sentence: str, words: Sequence[str]) -> str | None:
    """Why a sentence cannot be the principal's own direct claim (None when it can)."""
    if sentence.rstrip().endswith("?") and not _standing_request(sentence):
        return "question"
    unidiomatic = _IF_IDIOM.sub(" ", " ".join(words)).split()
    if any(w in _HYPOTHETICAL for w in unidiomatic) or "what if" in " ".join(words):
        return "hypothetical"
    pronouns = _THING_PRONOUN.sub(" ", " ".join(words)).split()
    if any(w in _THIRD_PERSON for w in pronouns):
        return "third_party"
    for m in _REPORTED.finditer(_IF_IDIOM.sub(" ", _normalise_text(sentence))):
        if m.group(1) != "i":
            return "third_party"
    return None


def find_supporting_claim(record_text: str, turn_text: str) -> ClaimMatch | None:
    """The first sentence of ``turn_text`` that states ``record_text`` directly, or None.

    Deterministic and lexical; see the module docstring for the exact rule.
    """
    wanted = _content_stems(record_text)
    if not wanted:
        return None
    record_negated = _negated(_words(record_text))
    need = min(2, len(wanted))
    for index, sentence in enumerate(_sentences(turn_text)):
        words = _words(sentence)
        if _disqualified(sentence, words) is not None:
            continue
        if _negated(words) != record_negated:
            continue
        matched = len(wanted & {_stem(w) for w in words})
        if matched >= need and matched / len(wanted) >= 0.6:
            return ClaimMatch(
                sentence_index=index, sentence=sentence, matched=matched, of=len(wanted)
            )
    return None


def _is_principal_turn(turn: TranscriptTurn, scope: Principal) -> bool:
    if turn.role is not Role.USER:
        return False
    return turn.speaker is None or turn.speaker.casefold() == scope.principal.casefold()


def _about_principal(record: Record, scope: Principal) -> bool:
    return record.speaker is None or record.speaker.casefold() == scope.principal.casefold()
