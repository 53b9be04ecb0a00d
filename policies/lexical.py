"""Deterministic reference policies: a lexical gap planner and a lexical admission judge.

They need no model, so the demo, the fitness suite and the tests run offline. They are
honest baselines, labelled as such in their ``policy_id`` ("lexical-…-offline"): the gap
planner looks for requests that depend on what the user told us before (memory cues,
questions about the user's own people, things and plans, requests whose answer depends on
the user's constraints), and the judge admits a candidate only when it shares specific
terms with the turn and adds something the draft does not already say. Their vocabulary is
general and documented where it is defined: function words (per language), pronouns, recall
and request phrasing, time words. No topical word lists: the baseline matches words, the
``local`` bundle matches meaning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from retold._lexicon import TITLE, introductions
from retold._policies import (
    AdmissionDecision,
    CandidateVerdict,
    Gap,
    GapCategory,
    GapDecision,
    ReasonCode,
)
from retold._records import EpistemicState, ProfileBlock, Record
from retold._redaction import strip_secrets
from retold._retrieval import asked_relations, relation_tie

__all__ = [
    "NAMED_POSSESSIVE",
    "QUOTED_SPAN",
    "LexicalAdmissionJudge",
    "LexicalGapPlanner",
    "content_terms",
    "distinct_things",
    "items_of_one_list",
    "names_any",
    "people_asked_about",
    "people_introduced",
    "personal_turn",
    "relation_aliases",
    "stem",
    "turn_reach",
]

_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further had hadn't has hasn't have haven't having
    he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm
    i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor not
    of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves
    then there there's these they they'd they'll they're they've this those through to too under
    until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves also just please thanks thank hi hello hey ok okay yeah
    yes really quite any anything something tell know think want need like get got go going make
    give can could would will shall may might must one two lot lots thing things way ever still
    again remind remember recall name again told said mention mentioned us
    """.split()
)

# Function words of the other languages the offline rules read (Spanish, Portuguese,
# French, German, Hindi in Latin script): articles, prepositions, pronouns, copulas and
# question words carry no topic, so they never make a match on their own.
_FOREIGN_STOPWORDS = frozenset(
    """
    el la los las un una unos unas lo del al de en y o que qué con por para es fue
    ser estar está están estaba me te se mi mis tu tus su sus yo nosotros cuándo cuando dónde
    donde cuál cual cuáles quién quien cómo cuánto cuántos cuánta cuántas hay muy más
    otra vez nuevo le les nos
    o os as um uma uns umas do da dos das no na nos nas em e é são foi meu minha meus
    minhas teu tua seu sua eu você voce nós quando onde qual quem quanto quantos quantas
    le les une des du au aux et ou est sont était je j' tu il elle nous vous mon mes
    ta tes sa ses moi quand où quel quelle quels quelles qui combien encore fois avec pour
    der das dem des ein eine einen einem einer und oder ist sind waren ich du er
    sie es wir ihr mein meine meinen meinem meiner mich mir dein deine wann wo wer wie was
    welche welcher welches wieviel viele nochmal noch mal wieder am im zum zur mit für von zu
    soll sollte kann
    hai hain tha thi the ka ki ke ko se mein aur ya kya kab kahan kaun kaise kitna kitne
    kitni mera meri mujhe mujhko hum hamara hamari humara humari tum aap tera teri phir
    dobara abhi bhi nahi nahin ho raha rahi rahe
    """.split()
)
_STOPWORDS = _STOPWORDS | _FOREIGN_STOPWORDS

# Letters of any script (accented words stay whole: "mecánico", "Meeresfrüchte").
_WORD = re.compile(r"[^\W_](?:[^\W_]|['\-])*")


def stem(word: str) -> str:
    """A light, deterministic suffix stripper (plural, -ing, -ed) for matching terms."""
    w = word.lower().strip("'-")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not w.endswith("ss"):
            w = w[: len(w) - len(suffix)] + keep
            break
    if len(w) >= 4 and w.endswith("e") and not w.endswith(("ee", "ie")):
        w = w[:-1]  # write / writing, move / moved
    return w


def content_terms(text: str) -> list[str]:
    """Stemmed content words of ``text`` in order of first appearance (stopwords removed)."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower()):
        if raw in _STOPWORDS or len(raw) < 2:
            continue
        s = stem(raw)
        if s and s not in out:
            out.append(s)
    return out


# Cues that the user is asking about something they told us before.
_RECALL_CUES = re.compile(
    r"\b(again|remind me|remember|recall|i told you|i mentioned|as i said|last time|we discussed|"
    r"we talked|you know my|did i|have i|when did i|where did i|what did i|how long ago|"
    r"how long has it been|how long have i|how many (?:days|weeks|months) until|"
    r"what was (?:my|the name)|what's my|what is my|who is my|who's my|where do i|where does my|"
    r"when is my|when's my|how old is my|how many .{1,30} do i|which .{1,30} did i|my usual|"
    r"still|anymore|these days|currently|my current|my new|my old|am i due|"
    r"the \w+'s (?:number|phone|address|email|name))\b",
    re.I,
)
# The same cues in the other languages the offline rules read (Spanish, Portuguese,
# French, German, Hindi in Latin script): "again", "remember", "I told you", "how many days
# until", and a question about something in the past ("¿a qué hora era ...?").
_FOREIGN_RECALL_CUES = re.compile(
    r"\b(otra vez|de nuevo|outra vez|de novo|encore une fois|à nouveau|nochmal|noch ?mal|"
    r"schon wieder|phir se|dobara|"
    r"recuerdas|te acuerdas|acuérdate|lembra|lembras|te souviens|tu te rappelles|rappelle-moi|"
    r"erinnerst du|erinnere mich|yaad hai|yaad dilao|"
    r"te dije|te conté|te comenté|eu te disse|te falei|je t'ai dit|hab(?:e)? dir (?:gesagt|erzählt)|"
    r"bataya tha|"
    r"cuántos días|cuantos dias|cuánto falta|quantos dias|quanto falta|combien de jours|"
    r"wie viele tage|wie lange noch|kitne din|kitna time|"
    r"(?:qué|que|cuándo|cuando|dónde|donde|cuál|cual|quién|quien|cómo|como|a qué hora|"
    r"quando|onde|qual|quem|a que horas|quand|où|quel|quelle|qui|wann|wo|wer|wie|welche[rs]?|"
    r"um wie viel uhr)\s+(?:era|eran|fue|fueron|foi|eram|était|c'était|war|waren)|"
    r"(?:kab|kahan|kya|kaun|kitne|kitni|kaisa|kaisi)\b.{0,30}\b(?:tha|thi|the)"
    r")\b",
    re.I,
)
# First-person pronouns and possessives in those languages ("mi", "meu", "mon", "mein",
# "mera"); "main" and "mere" are left out because they are ordinary English words.
_FOREIGN_FIRST_PERSON = re.compile(
    r"\b(yo|mi|mis|mío|mía|míos|mías|conmigo|nosotros|nosotras|nuestro|nuestra|nuestros|"
    r"nuestras|eu|meu|minha|meus|minhas|comigo|nós|nosso|nossa|nossos|nossas|"
    r"je|j'|moi|mon|ma|mes|nous|notre|nos|"
    r"ich|mein|meine|meinen|meinem|meiner|mich|mir|wir|unser|unsere|unseren|unserem|uns|"
    r"mera|meri|mujhe|mujhko|hum|hamara|hamari|humara|humari|hamare|humare)\b",
    re.I,
)
# Requests whose best answer depends on the user's own constraints and circumstances: the
# general vocabulary of asking for advice or a plan ("recommend", "what should I", "for
# me"), and near-future time words ("tonight", "this weekend"). No topic words: which
# subjects matter is for the store's contents to say, not for a list here.
_PERSONALISE_CUES = re.compile(
    r"\b(recommend|suggest|suggestion|ideas? for|what should i|should i|can you plan|plan (?:a|my|our)|"
    r"help me (?:plan|pick|choose|decide)|pick (?:a|one|something)|book (?:a|me)|for me|for us|"
    r"my (?:next|upcoming)|tonight|tomorrow|this weekend|next week)\b",
    re.I,
)
# A follow-up that leans on the conversation: an anaphor ("fix it", "write it") or a
# continuation ("go ahead", "what's next") in a short turn that names nothing itself.
_ANAPHOR = re.compile(
    r"\b(it|them|go ahead|continue|carry on|what's next|what is next|next step|same again)\b"
    r"|\b(that|this)\b(?=\s*(?:[?.!,]|$))",
    re.I,
)
_SELF_WORDS = ("i", "i'm", "my", "me", "we", "our")
_NAMED = re.compile(r"(?<!^)(?<![.!?] )\b[A-Z][A-Za-z]+")
# A named person's or thing's possessive after the first word ("When is Carla's birthday?").
NAMED_POSSESSIVE = re.compile(r"(?<!^)(?<![.!?] )\b[A-Z][a-z]+'s\b")
# Turns about the assistant itself or pure small talk never need the user's memory.
_SMALL_TALK = re.compile(
    r"^\s*(thanks|thank you|good (?:morning|night|evening)|hi|hello|hey|ok that's all|bye)\b",
    re.I,
)
# Words in the turn that point at a category of stored information: general verbs of
# deciding, progressing and preferring, and of limits ("afford", "allowed", "can't"), not
# topics.
_CATEGORY_CUES: tuple[tuple[GapCategory, re.Pattern[str]], ...] = (
    (
        GapCategory.CONSTRAINT,
        re.compile(
            r"\b(afford|allowed|can't|cannot|safe (?:for|to)|okay for|ok for|limit\w*|avoid)\b",
            re.I,
        ),
    ),
    (
        GapCategory.PRIOR_DECISION,
        re.compile(
            r"\b(decid\w*|chose|choose|picked|settled|go with|went with|plan(?:ned)?|agreed)\b",
            re.I,
        ),
    ),
    (
        GapCategory.TASK_STATE,
        re.compile(
            r"\b(progress|status|where was i|next step|todo|to-do|finish\w*|working on|deadline|due|"
            r"left to|still need)\b",
            re.I,
        ),
    ),
    (
        GapCategory.PREFERENCE,
        re.compile(r"\b(prefer\w*|favou?rite|like|love|enjoy|hate|usual|style)\b", re.I),
    ),
)


def _raw_terms(text: str) -> list[str]:
    """Content words of ``text`` as written (the store's full-text index stems them)."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower()):
        w = raw.strip("'-")
        if w.endswith("'s"):
            w = w[:-2]
        if w in _STOPWORDS or len(w) < 2 or w in out:
            continue
        out.append(w)
    return out


def _follow_up(turn: str) -> bool:
    """A short turn that points back at the conversation instead of naming its subject."""
    return (
        bool(_ANAPHOR.search(turn))
        and len(content_terms(turn)) <= 3
        and not _NAMED.search(turn)
        and not _SMALL_TALK.search(turn)
    )


# The principal as subject or owner: "I", "my", "we", "our" (not "me", which a request
# to the assistant carries as often as a question about the user: "tell me a joke").
_OWN = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|mine|myself|we|we're|we've|we'd|our|ours)\b", re.I)
# "me"/"us" outside a request to the assistant ("is it okay for me", "what falls on us") is
# about the principal; as the object of a request verb ("tell me", "give us") it is not.
_OBJECT_PRONOUN = re.compile(r"\b(?:me|us)\b", re.I)
_REQUEST_OBJECT = re.compile(
    r"\b(?:tell|give|show|help|let|send|teach|explain to|write|make|find|get|recommend|"
    r"suggest|translate|describe|walk|talk to|bring|ask|answer|call)\s+(?:me|us)\b",
    re.I,
)


# A quoted stretch of at least two words is mentioned, not said: "my" in "Is it 'affect' or
# 'effect' in 'the weather will affect my mood'?" is nobody's.
QUOTED_SPAN = re.compile(
    r"(?<!\w)'[^'\n]*\s[^'\n]*'(?!\w)|\"[^\"\n]*\s[^\"\n]*\"|\u201c[^\u201d\n]*\u201d|"
    r"\u2018[^\u2019\n]*\s[^\u2019\n]*\u2019"
)


def personal_turn(turn: str) -> bool:
    """Whether ``turn`` is about the principal's own life: a first-person subject or
    possessive (in the languages the rules read), "me"/"us" other than as the object of a
    request verb ("okay for me", not "tell me"), a named person's possessive, or a recall
    phrase ("again", "remind me", "what's my ..."). Quoted text does not count."""
    turn = QUOTED_SPAN.sub(" ", turn)
    return bool(
        _OWN.search(turn)
        or _OBJECT_PRONOUN.search(_REQUEST_OBJECT.sub(" ", turn))
        or _FOREIGN_FIRST_PERSON.search(turn)
        or NAMED_POSSESSIVE.search(turn)
        or _RECALL_CUES.search(turn)
        or _FOREIGN_RECALL_CUES.search(turn)
    )


# In a how-to question the first person is anyone's: "How do I say 'thank you' in Greek?"
# asks what anybody would ask, and says nothing about the principal's own life.
_GENERIC_HOW_TO = re.compile(r"\bhow (?:do|can|should|could|would) (?:i|we)\b", re.I)
# A definite reference: "the removals", "this bike", "those tickets".
_DEFINITE = re.compile(r"\b(?:the|this|that|these|those)\s+[^\W\d_]", re.I)


_OPENING_POSSESSIVE = re.compile(r"([A-Z][a-z]+)'s\b")
# A capitalised word where a question names a person: its subject after an auxiliary ("What
# does Jonas do?", "Is Mrs. Li ...?") or the object of a preposition ("a gift for Ines").
_MAY_NAME = re.compile(
    r"\b(?i:does|did|is|was|has|had|will|would|can|could|should|do|are|were|for|with|to|"
    rf"about|from|and)\s+{TITLE}([A-Z][a-z]+)\b"
)


def people_introduced(candidates: Sequence[str]) -> dict[str, str]:
    """The names the ``candidates`` give the principal's people, each with the relation it
    names ("my partner Jonas" -> ``{"Jonas": "partner"}``, "my kids Mia and Leo" -> both
    kids; the first one given wins). "your sister Ana" is left out: whose sister she is
    depends on who said it, which the texts do not tell."""
    found: dict[str, str] = {}
    for text in candidates:
        for name, relation, own in introductions(text):
            if own:
                found.setdefault(name, relation)
    return found


def turn_reach(turn: str, candidates: Sequence[str]) -> tuple[bool, bool]:
    """(personal, reaches memory) of ``turn``, as both offline judges read it.

    Personal: about the principal's own life (:func:`personal_turn`), where quoted text is
    only mentioned, the first person of a how-to question is generic, and a named possessive
    ("Newton's laws") counts only for a name one of the ``candidates`` texts uses. A turn
    reaches memory when it is personal or makes a definite reference ("What did the
    removals cost?"); "How far is Odense from Copenhagen?" asks what anybody would.
    """
    unquoted = QUOTED_SPAN.sub(" ", turn)
    text = _GENERIC_HOW_TO.sub(" ", unquoted)
    personal = personal_turn(NAMED_POSSESSIVE.sub(" ", text))
    if not personal and NAMED_POSSESSIVE.search(text):
        words = {w.casefold() for c in candidates for w in re.findall(r"[^\W\d_]+", c)}
        personal = any(m.group(0)[:-2].casefold() in words for m in NAMED_POSSESSIVE.finditer(text))
    if not personal and (opener := _OPENING_POSSESSIVE.match(text.strip())):
        # A capitalised possessive that opens the turn ("Finn's birthday is next week, ...")
        # may be any capitalised word ("Today's plan"): it counts for a name a candidate
        # writes capitalised inside a sentence ("My nephew Finn ...").
        personal = opener.group(1) in {m.group(0) for c in candidates for m in _NAMED.finditer(c)}
    return personal, personal or bool(_DEFINITE.search(unquoted))


def relation_aliases(records: Sequence[Record], people: Mapping[str, str]) -> dict[str, str]:
    """Each record's text with the first name of one of the principal's ``people`` (as
    :func:`people_introduced` reads them) it writes replaced by their relation ("Sara changed
    jobs" -> "my wife changed jobs", given "my wife Sara"), by record id; records naming none
    are left out. A record naming someone is about "my wife" as much as about Sara."""
    out: dict[str, str] = {}
    for record in records:
        for name, relation in people.items():
            pattern = re.compile(rf"\b{re.escape(name)}\b")
            if pattern.search(record.text) and f" {relation} " not in f" {record.text.lower()} ":
                out[record.id] = pattern.sub(f"my {relation}", record.text, count=1)
                break
    return out


def people_asked_by_relation(turn: str, people: Mapping[str, str]) -> set[str]:
    """The names of the principal's ``people`` (:func:`people_introduced`) that ``turn`` asks
    about by relation ("What does my wife do now?" -> ``{"Sara"}``, given "my wife Sara"; "my
    other half" and "my partner" name the same tie), as retrieval's relation path reads them."""
    ties = {tie for owner, tie in asked_relations(turn) if owner is None}
    if not ties:
        return set()
    return {name for name, relation in people.items() if relation_tie(relation) in ties}


def people_asked_about(turn: str, people: Mapping[str, str]) -> set[str]:
    """The names of the principal's ``people`` (:func:`people_introduced`) that ``turn`` asks
    about ("What does Jonas do?"), given "my partner Jonas": not a name anybody may ask about
    ("What did Einstein discover?"). A turn that asks about them reaches memory for the
    records that name them."""
    asked = {m.group(1) for m in _MAY_NAME.finditer(QUOTED_SPAN.sub(" ", turn))}
    return asked & set(people) if asked else set()


def names_any(text: str, names: set[str]) -> bool:
    """Whether ``text`` writes one of ``names`` as a word."""
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in names)


def _personal_or_named(turn: str) -> bool:
    """Whether ``turn`` is personal, or has a possessive or a question's subject or object
    that may name someone the principal told us about ("When is Carla's birthday?", "Finn's
    party is Friday, ...", "What does Jonas do?"; not "What's ..."): the judge checks the
    name against the candidates (:func:`turn_reach`)."""
    unquoted = QUOTED_SPAN.sub(" ", turn)
    opener = _OPENING_POSSESSIVE.match(unquoted.strip())
    return (
        turn_reach(turn, ())[0]
        or bool(NAMED_POSSESSIVE.search(unquoted))
        or (opener is not None and opener.group(0).casefold() not in _STOPWORDS)
        or bool(_MAY_NAME.search(unquoted))
    )


class LexicalGapPlanner:
    """Deterministic lexical gap planner (offline reference policy, no model).

    Plans one gap when the turn is about the user (:func:`turn_reach`: a first person that
    is not the object of a request ("tell me") or a how-to's anybody ("how do I ..."), a
    recall phrase, or a named person's possessive) or asks for a recommendation that
    depends on their constraints, and only when the store holds anything for the principal
    (``inventory``). Its query is the
    turn's content words: a lexical baseline finds only statements that share a word with
    the turn (the ``local`` bundle matches on meaning). The judge, not the planner, decides
    what is used.

    A short follow-up that points back at the conversation instead of naming its subject
    ("how do I fix it?", "go ahead and write it", "what's next?") plans a ``task_state``
    gap whose query is the turn as written, function words included: the retriever then
    finds the user's recent statements, and the judge admits the latest conversation's.
    """

    policy_id = "lexical-gap-planner-offline@6"

    def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision:
        if not inventory or _SMALL_TALK.search(turn):
            return GapDecision(policy=self.policy_id)
        # SR-1: the query is built from the turn lower-cased and re-tokenised, a copy of the
        # text no redactor recognises (a lower-cased AWS key id); secrets go first.
        turn = strip_secrets(turn)
        if _follow_up(turn):
            # The turn as written plus the first-person words the user's own statements
            # carry: the recent statements become candidates.
            words = [w.strip("'-") for w in _WORD.findall(turn.lower())]
            query = " ".join(dict.fromkeys([*words, *_SELF_WORDS]))
            gap = Gap(category=GapCategory.TASK_STATE, query=query)
            return GapDecision(gaps=(gap,), policy=self.policy_id)
        if not (_personal_or_named(turn) or _PERSONALISE_CUES.search(turn)):
            return GapDecision(policy=self.policy_id)
        query = " ".join(_raw_terms(turn))
        if not query.strip():
            return GapDecision(policy=self.policy_id)
        categories = [cat for cat, pattern in _CATEGORY_CUES if pattern.search(turn)]
        if not categories:
            categories = [GapCategory.RELATIONSHIP_OR_EVENT]
        gaps = tuple(Gap(category=cat, query=query) for cat in categories[:1])
        return GapDecision(gaps=gaps, policy=self.policy_id)


# Words that name a time or a quantity rather than a subject: two statements that share
# only these are not about the same thing.
_GENERIC = frozenset(
    stem(w)
    for w in """
    today tomorrow yesterday week weeks month months year years day days time times morning
    evening night weekend january february march april may june july august september october
    november december monday tuesday wednesday thursday friday saturday sunday new old now
    first last next good great big small little much many every everything anything lol
    """.split()
)


def _subject(record: Record) -> set[str]:
    """The specific content terms of a record (no dates, numbers or filler)."""
    return {
        t
        for t in content_terms(record.text)
        if t not in _GENERIC and not any(ch.isdigit() for ch in t) and len(t) >= 3
    }


def _turn_of(record: Record) -> int:
    return max((e.turn_index for e in record.evidence), default=-1)


class LexicalAdmissionJudge:
    """Deterministic lexical admission judge (offline reference policy, no model).

    A candidate is ``helpful`` when it shares at least ``min_shared`` content terms with
    the turn and adds something the draft, the public context and the profile do not
    already say. The turn must reach memory (:func:`turn_reach`: personal, or a definite
    reference) or ask for advice that depends on the user (the planner's recommendation
    cues), and a turn that is not about the user's own life needs
    ``min_shared_impersonal`` shared terms: "Recommend a novel to read on a train" shares
    one topic word with "I take the train to work" and asks for nobody's memory.
    ``redundant`` when it adds nothing; ``potentially_harmful`` when it is
    hypothetical or redacted; ``insufficient`` otherwise. There are no topical word lists:
    a statement that names the turn's subject in other words is not found (that is what the
    ``local`` bundle's meaning-based judge is for).

    ``stale_or_conflicting`` comes from the store: a candidate with an unresolved conflict
    link, and (as superseded records are not live, they never get here) of two helpful
    statements from different sessions that answer the same terms of the turn, the older,
    unless the store keys them as different things (:func:`distinct_things`). No change
    word ("now", "moved", "actually") found in the session marks anything stale.

    Other statements from the message of an admitted record (its sentences, which may lean
    on each other), statements that share a specific term with an admitted one (joint
    evidence), and the other items of a keyed list of constraints one of them is an item of
    (:func:`items_of_one_list`), are ``jointly_helpful``; a session's other messages are
    not, being about anything. A short follow-up that points back at the conversation ("how
    do I fix it?") admits the statements of the latest conversation among the candidates.
    At most ``max_admitted`` records are admitted directly, best overlap first; an
    inconclusive set is EMPTY. A question about one of the principal's people by name
    (:func:`people_asked_about`) is personal for the records that name them, and only they
    may be admitted.
    """

    policy_id = "lexical-admission-judge-offline@9"

    def __init__(
        self, *, min_shared: int = 1, min_shared_impersonal: int = 2, max_admitted: int = 3
    ) -> None:
        self.min_shared = min_shared
        self.min_shared_impersonal = min_shared_impersonal
        self.max_admitted = max_admitted

    def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> AdmissionDecision:
        own = set(content_terms(turn))
        wanted = own
        known = set(content_terms(" ".join([draft, public_context or "", ambient_profile.text])))
        reasons: dict[str, ReasonCode] = {}
        shared_of: dict[str, set[str]] = {}
        usable: list[Record] = []
        turn_names, turn_lower = _names(turn), _lower_words(turn)
        texts = [r.text for r in candidates]
        personal, reach = turn_reach(turn, texts)
        # A question about one of the principal's people by name ("What does Jonas do?") is
        # personal for the records that name them.
        asked = set() if personal else people_asked_about(turn, people_introduced(texts))
        personal, reach = personal or bool(asked), reach or bool(asked)
        reach = reach or bool(_PERSONALISE_CUES.search(turn))
        needed = self.min_shared if personal else self.min_shared_impersonal
        for record in candidates:
            terms = set(content_terms(record.text))
            # A name in one text and a common word in the other ("Rose" / "roses") is no match.
            clash = (_names(record.text) & turn_lower) | (turn_names & _lower_words(record.text))
            shared = (terms & wanted) - clash
            novel = terms - known - wanted
            if record.conflicts_with:
                reasons[record.id] = ReasonCode.STALE_OR_CONFLICTING
                continue
            if record.epistemic is EpistemicState.HYPOTHETICAL or "[REDACTED:" in record.text:
                reasons[record.id] = ReasonCode.POTENTIALLY_HARMFUL
                continue
            usable.append(record)
            if not reach or len(shared) < needed or (asked and not names_any(record.text, asked)):
                reasons[record.id] = ReasonCode.INSUFFICIENT
            elif terms and not novel and terms <= known | wanted and terms & known >= shared:
                reasons[record.id] = ReasonCode.REDUNDANT
            else:
                reasons[record.id] = ReasonCode.HELPFUL
                shared_of[record.id] = shared
        by_id = {r.id: r for r in candidates}
        follow_up = _follow_up(turn)
        if follow_up and usable:
            latest = max(usable, key=_when).session_id
            for record in usable:
                if record.session_id == latest and reasons[record.id] is not ReasonCode.REDUNDANT:
                    reasons[record.id] = ReasonCode.HELPFUL
                    shared_of.setdefault(record.id, set())
        # Two statements from different sessions that answer the same terms of the turn:
        # the newer one is what holds now (superseded records never get here: the store
        # closed them when the update was written), unless their keys say they are about
        # different things ("allergic to peanuts", "also allergic to shellfish").
        for rid, shared in list(shared_of.items()):
            older = by_id[rid]
            for oid, other_shared in shared_of.items():
                newer = by_id[oid]
                if (
                    oid != rid
                    and newer.session_id != older.session_id
                    and _when(newer) > _when(older)
                    and shared & other_shared
                    and not distinct_things(older, newer)
                ):
                    reasons[rid] = ReasonCode.STALE_OR_CONFLICTING
                    break
        scored = sorted(
            (
                (len(shared & own), len(shared), rid)
                for rid, shared in shared_of.items()
                if reasons[rid] is ReasonCode.HELPFUL
            ),
            key=lambda item: (-item[0], -item[1], item[2]),
        )
        limit = self.max_admitted + (2 if follow_up else 0)
        admitted = [rid for *_, rid in scored[:limit]]
        for *_, rid in scored[limit:]:
            reasons[rid] = ReasonCode.INSUFFICIENT
        # Statements of the same message as an admitted record complete it, and so do
        # statements that share a specific term with one without being updated by it, and
        # the other items of a list one of them is an item of.
        turns = {(by_id[rid].session_id, _turn_of(by_id[rid])) for rid in admitted}
        subjects = [_subject(by_id[rid]) for rid in admitted]
        chosen = [by_id[rid] for rid in admitted]
        for record in usable:
            if (
                record.id not in admitted
                and reasons[record.id] in (ReasonCode.INSUFFICIENT, ReasonCode.HELPFUL)
                and len(admitted) < self.max_admitted + 2
                and (
                    (record.session_id, _turn_of(record)) in turns
                    or any(_subject(record) & s for s in subjects)
                    or any(items_of_one_list(record, c) for c in chosen)
                )
            ):
                reasons[record.id] = ReasonCode.JOINTLY_HELPFUL
                admitted.append(record.id)
        verdicts = tuple(CandidateVerdict(record_id=r.id, reason=reasons[r.id]) for r in candidates)
        return AdmissionDecision(admitted=tuple(admitted), verdicts=verdicts, policy=self.policy_id)


def distinct_things(a: Record, b: Record) -> bool:
    """Whether the store says ``a`` and ``b`` are about different things: both carry an
    attribute key (subject, attribute and item: ``allergy/peanut``, ``allergy/shellfish``,
    ``son:allergy/egg``) and the keys differ. One is then no update of the other, however
    alike their words (a later statement of the same key superseded the earlier when it was
    written, so it never reaches a judge)."""
    return bool(a.attribute and b.attribute and a.attribute != b.attribute)


# The keyed lists whose items constrain an answer together: half a list of allergies, diets
# or access needs misleads (two budgets, for two purposes, do not).
_CONSTRAINT_LISTS = frozenset({"allergy", "diet", "accessibility"})


def items_of_one_list(a: Record, b: Record) -> bool:
    """Whether ``a`` and ``b`` are items of one list of constraints the store keys: the same
    subject and attribute with different items (``allergy/peanut`` and ``allergy/shellfish``).
    A judge that admits one admits the other with it."""
    if not (a.attribute and b.attribute) or a.attribute == b.attribute:
        return False
    key, slash, _ = a.attribute.partition("/")
    return (
        bool(slash)
        and key.rpartition(":")[2] in _CONSTRAINT_LISTS
        and b.attribute.partition("/")[0] == key
        and "/" in b.attribute
    )


def _names(text: str) -> set[str]:
    """Stems of capitalised words not at the start of a sentence (names, places, brands)."""
    return {stem(m.group(0)) for m in _NAMED.finditer(text)}


def _lower_words(text: str) -> set[str]:
    """Stems of the words written in lower case (common words, not names)."""
    return {stem(w) for w in re.findall(r"\b[a-z][a-z'-]*", text)}


def _when(record: Record) -> datetime:
    return record.event_time or record.created_at
