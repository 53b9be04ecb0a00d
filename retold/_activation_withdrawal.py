"""Withdrawal and contradiction: a later direct statement by the principal takes back an earlier preference."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ._activation_classifier import _is_withdrawal, reply_categories
from ._activation_evidence import verify_evidence
from ._activation_rules import (
    _CLAUSE_PARTS,
    _about_principal,
    _content_stems,
    _names_people,
    _negated,
    _stem,
    _words,
)
from ._activation_schema import _DIRECT_EPISTEMIC
from ._lexicon import (
    CJK_CHAR,
    CJK_LANGUAGE_IN_ENGLISH,
    CJK_SOMEONE,
    LANGUAGE_IN_ENGLISH,
    STYLE_IN_ENGLISH,
)
from ._records import (
    SEMANTIC_KINDS,
    Principal,
    Record,
    SourceType,
)
from ._store import Store

__all__ = []

# -- withdrawal and contradiction ----------------------------------------------------------

#: Words that say how or that something is answered, not what the preference is about; a
#: withdrawal must share a topic word beyond these with the preference it takes back.
_GENERIC_TOPIC = frozenset(
    _stem(w)
    for w in """
    answer answers reply replies respond response responses write writing use using give keep
    make talk speak thing things stuff now again anymore any more actually just let let's ok
    okay said say mind forget drop scratch stop cancel undo disregard longer need want go back
    normal normally everything anything something every time please thanks thank instead
    wait change changed plan me you your thing for time one way can could
    ask asked request requested rule rules told tell earlier before previous previously
    rather prefer preferred about what that those i'd i'll regarding fine ok okay alright
    again if feel free go ahead convert converting include including put putting add
    adding show showing cut cutting over them it they
    """.split()
    # the same function words and take-back words in the other languages the rules read
    # (es, pt, fr, de, it, nl, pl), so that "Olvida lo del español, ya no hace falta" is
    # about Spanish alone
    + """
    lo la el los las de del al un una que ya mi tu su en con por para es esto eso hace falta
    más mas otra vez olvida olvídalo déjalo deja
    o os as do da dos das um uma já meu minha em na com é precisa mais esquece
    le les du une ne pas te se mon ma mes dans avec pour est besoin oublie laisse
    tomber der das den dem ein eine einen und nicht mehr mir mich dich du ich zu musst muss
    brauchst brauche lass weg vergiss il gli di della che non più ti si per serve het een en
    niet meer mij je ik met voor hoeft te nie już mnie się na n'as plus die
    contesta contestar contestarme contestes responde responder respondas répondre réponds
    antworte antworten antwortest rispondi rispondere rispondermi antwoord antwoorden
    odpowiadaj odpowiadać odpowiadał
    respuesta respuestas réponse réponses antwort antworten risposta risposte resposta respostas
    antwoorden odpowiedź odpowiedzi svar svaret svaren cevap cevaplar
    liste listes lista listas listen elenco elenchi lijst lijsten
    preciso quiero quero veux will voglio wil chcę vil vill
    des à au aux mit não nao préfère préfere prefiero prefiro
    servono sirve sirven
    больше не нужно надо отвечать отвечай ответь ответ ответы ответов мне меня про о об это
    что я ты уже по пожалуйста забудь забудьте більше треба потрібно відповідати відповідай
    мені вже
    لم أعد اعد يعد بحاجة إلى الى الرد رد انس انسى انسَ موضوع عن لا داعي
    अब में जवाब देने की ज़रूरत जरूरत नहीं है वाली बात भूल जाओ से हमेशा दो मुझे को
    """.split()
)
#: A language's name or a common style word as the other languages write it, as the stem of
#: its English word; and the other end of a scale of units, as the end a preference names
#: ("Imperial units are fine again" takes back "use metric units").
_IN_ENGLISH = {
    _stem(word): _stem(english)
    for word, english in (
        LANGUAGE_IN_ENGLISH | STYLE_IN_ENGLISH | {"imperial": "metric", "fahrenheit": "celsius"}
    ).items()
}
_CANDIDATE_LIMIT = 200


@dataclass(frozen=True, slots=True)
class _Claim:
    """A record's host-verified claim and where it was said (for ordering)."""

    text: str
    order: tuple[datetime, str, int, int]


# An elided article or pronoun of French or Italian ("l'espagnol", "d'emojis", "n'as").
_ELISION = re.compile(r"\b(?:l|d|n|qu|j|m|t|s|c)'(?=[^\W\d_])", re.I)


# Chinese, Japanese and Korean run their words together: a run of them is no topic word,
# but a language it names is ("不用再用中文回答了" is about Chinese).
_CJK = re.compile(CJK_CHAR)
_CJK_LANGUAGE = re.compile("|".join(CJK_LANGUAGE_IN_ENGLISH))
_CJK_PEOPLE = re.compile(CJK_SOMEONE)


def _topic(text: str) -> set[str]:
    words = {w for w in _content_stems(_ELISION.sub("", text)) if not _CJK.search(w)}
    named = {_stem(CJK_LANGUAGE_IN_ENGLISH[m.group(0)]) for m in _CJK_LANGUAGE.finditer(text)}
    return ({_IN_ENGLISH.get(w, w) for w in words} | named) - _GENERIC_TOPIC


def _withdraws(newer: _Claim, older: _Claim) -> bool:
    """Whether the principal's claim ``newer`` takes back their earlier claim ``older``.

    Both are host-verified sentences from the principal's own turns, and ``newer`` was said
    after ``older``. ``older`` must be a response preference (its sentence names an
    allowlisted category) and the two must share a topic word (generic answer/withdrawal
    words aside). Then ``newer`` withdraws ``older`` when it carries a withdrawal cue
    (:func:`_is_withdrawal`), or contradicts it: the same category and topic (the shared
    words are at least 60% of the smaller topic) with the opposite negation.
    """
    if newer.order <= older.order or not reply_categories(older.text):
        return False
    new_topic, old_topic = _topic(newer.text), _topic(older.text)
    shared = new_topic & old_topic
    if not shared:
        return False
    if _is_withdrawal(newer.text):
        return _takes_back(newer.text, old_topic)
    new_cats = set(reply_categories(newer.text))
    old_cats = set(reply_categories(older.text))
    if not new_cats or new_cats != old_cats:
        return False
    if len(shared) < 0.6 * min(len(new_topic), len(old_topic)):
        return False
    return _negated(_words(newer.text)) != _negated(_words(older.text))


def _takes_back(sentence: str, old_topic: set[str]) -> bool:
    """Whether what ``sentence`` takes back is the preference of ``old_topic``: the clause
    that carries the withdrawal (or, when none does alone, the sentence) is mostly about it.

    "Never mind the metric units" and "forget what I said about Spanish" take a preference
    back; "never mind the Spanish homework", "forget the bullet points in the slide deck"
    and "never mind the colour of the car" name something else, whose words are at least
    as many as those they share with the preference.
    """
    clauses = [(c, _topic(c)) for c in _CLAUSE_PARTS.split(sentence) if c and c.strip()]
    # a clause that names nothing ("please undo it") takes back what the sentence names
    holding = [(c, t) for c, t in clauses if t and _is_withdrawal(c)]
    for clause, topic in holding or [(sentence, _topic(sentence))]:
        if _names_people(_words(clause)) or _CJK_PEOPLE.search(clause):
            continue  # "my brother doesn't need emojis anymore": his, not the principal's
        shared = topic & old_topic
        if shared and 2 * len(shared) > len(topic):
            return True
    return False


def _direct_claim(store: Store, scope: Principal, record: Record) -> _Claim | None:
    """The record's host-verified claim with its position, when it is a direct statement."""
    if (
        record.kind not in SEMANTIC_KINDS
        or not _about_principal(record, scope)
        or record.source_type is not SourceType.USER_STATED
        or record.epistemic not in _DIRECT_EPISTEMIC
    ):
        return None
    evidence = verify_evidence(store, scope, record)
    if evidence is None:
        return None
    turn = store.get_turn(scope, evidence.ref)
    if turn is None:
        return None
    order = (turn.time, turn.session_id, turn.turn_index, evidence.sentence_index)
    return _Claim(text=evidence.claim, order=order)


def _live_preference_candidates(store: Store, scope: Principal, *, exclude: str) -> list[Record]:
    """Live direct semantic records of the principal that may withdraw or be withdrawn."""
    now = store.clock()
    out: list[Record] = []
    for record in store.list_records(scope, limit=_CANDIDATE_LIMIT):
        if record.id == exclude or record.superseded_by or not record.is_live(now):
            continue
        if record.kind not in SEMANTIC_KINDS or record.source_type is not SourceType.USER_STATED:
            continue
        if record.epistemic not in _DIRECT_EPISTEMIC or not _about_principal(record, scope):
            continue
        out.append(record)
    return out
