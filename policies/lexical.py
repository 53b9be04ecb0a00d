"""Deterministic reference policies: a lexical gap planner and a lexical admission judge.

They need no model, so the demo, the fitness suite and the tests run offline. They are
honest baselines, labelled as such in their ``policy_id`` ("lexical-…-offline"): the gap
planner looks for requests that depend on what the user told us before (memory cues,
questions about the user's own people, things and plans, requests whose answer depends on
the user's constraints), and the judge admits a candidate only when it shares specific
terms with the turn and adds something the draft does not already say.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from retold._policies import (
    AdmissionDecision,
    CandidateVerdict,
    Gap,
    GapCategory,
    GapDecision,
    ReasonCode,
)
from retold._records import EpistemicState, ProfileBlock, Record

__all__ = ["LexicalAdmissionJudge", "LexicalGapPlanner", "content_terms", "stem"]

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
# Requests whose best answer depends on the user's own constraints and circumstances.
_PERSONALISE_CUES = re.compile(
    r"\b(recommend|suggest|suggestion|ideas? for|what should i|should i|can you plan|plan (?:a|my|our)|"
    r"help me (?:plan|pick|choose|decide)|pick (?:a|one|something)|recipe|dinner|lunch|breakfast|meal|"
    r"restaurant|gift|present|trip|vacation|holiday|weekend|workout|book (?:a|me)|for me|for us|"
    r"my (?:next|upcoming)|tonight|tomorrow|this weekend)\b",
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
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|we|we're|we've|our|ours|us)\b", re.I)
# A named person's or thing's possessive after the first word ("When is Carla's birthday?").
_NAMED_POSSESSIVE = re.compile(r"(?<!^)(?<![.!?] )\b[A-Z][a-z]+'s\b")
# Turns about the assistant itself or pure small talk never need the user's memory.
_SMALL_TALK = re.compile(
    r"^\s*(thanks|thank you|good (?:morning|night|evening)|hi|hello|hey|ok that's all|bye)\b",
    re.I,
)
_PERSONAL_NOUNS = frozenset(
    stem(w)
    for w in """
    wife husband partner boyfriend girlfriend fiance fiancee son daughter kid kids child children
    baby mom mother dad father parents sister brother sibling grandma grandmother grandpa
    grandfather aunt uncle cousin niece nephew friend friends boss manager colleague coworker
    team roommate neighbor neighbour landlord dog cat pet puppy kitten dentist doctor therapist
    vet trainer teacher tutor coach car bike apartment flat house home rent mortgage salary job
    work office company employer school university college class course project deadline
    appointment meeting flight trip vacation holiday wedding birthday anniversary party plan
    plans budget diet allergy allergies medication garden band gym hobby
    """.split()
)
# Words in the turn that point at a category of stored information.
_CATEGORY_CUES: tuple[tuple[GapCategory, re.Pattern[str]], ...] = (
    (
        GapCategory.CONSTRAINT,
        re.compile(
            r"\b(allerg\w*|diet|vegan|vegetarian|budget|afford|cheap|price|cost|recipe|dinner|lunch|"
            r"breakfast|meal|eat|food|restaurant|snack)\b",
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
# Semantic fields: a turn that names one member of a field may be answered by a stored
# statement that names another ("my dentist" / "the cleaning found two cavities"). These are
# general-purpose everyday domains, not tuned to any scenario.
_FIELD_GROUPS: tuple[str, ...] = (
    "dentist dental teeth tooth cavity cavities filling cleaning orthodontist",
    "doctor gp physician physio physiotherapist clinic hospital appointment prescription "
    "medication blood pressure diagnosed surgery operation recovery",
    "medicine medication pill pills painkiller painkillers ibuprofen aspirin paracetamol "
    "acetaminophen headache migraine pain dose allergic allergy",
    "vet pet pets dog dogs cat cats puppy kitten adopted greyhound beagle labrador terrier "
    "spaniel poodle collie retriever",
    "car vehicle drive driving mileage oil mechanic garage tyre tire clutch",
    "address live living moved move flat apartment house rent landlord street neighbourhood",
    "job work working company office employer role position hired interview salary boss "
    "manager coworker colleague meeting meetings career background degree phd unemployed "
    "applying application applications",
    "trip flight fly flying travel hotel booked airport vacation holiday itinerary",
    "recipe dinner lunch breakfast meal menu cook cooking eat food snack vegan vegetarian "
    "pescatarian allergic allergy diet gluten dairy roast turkey potatoes",
    "milk dairy lactose cheese cream creamy butter yogurt latte cappuccino coffee",
    "drink drinks drinking alcohol wine beer cocktail cocktails sober pregnant",
    "budget spend spending afford price cost money saving",
    "wife husband partner son daughter kid kids baby born pregnant expecting due grandson "
    "granddaughter grandkids",
    "boyfriend girlfriend partner dating seeing broke",
    "birthday born anniversary party hosting guests",
    "school class course exam study studying university college lesson lessons tutor teacher",
    "run running workout gym exercise training injury knee back marathon physio stronger "
    "strength routine lifting weights disc",
    "laptop computer phone router wifi internet install installed iphone android samsung "
    "galaxy pixel ios mac macbook windows screen",
    "code coding script program programming language python rust javascript bug error",
    "wedding venue guests ceremony reception",
    "trial subscription membership renewal renew insurance insurer insurers policy cancel "
    "cancelled",
    "invest investing investment market markets stocks shares bonds fund funds index pension "
    "portfolio rebalance retirement savings",
    "paint painted painting colour color walls wall nursery decorate decorating wallpaper",
    "thesis dissertation chapter chapters essay draft writing",
    "language languages learning practise practice fluent reading level",
    "plant plants garden repot repotted soil",
    "size fit shoes boots order ordered",
    "smoking quit drinking sober",
    "move moving packing boxes",
    "password account login manager",
    "diy drill drilling nail nails screw screws hammer hang hanging mount mounting shelf "
    "shelves mirror picture frame hook hooks wall walls",
)
_FIELDS: tuple[frozenset[str], ...] = tuple(
    frozenset(stem(w) for w in group.split()) for group in _FIELD_GROUPS
)
# Expansions from a request type to the kind of stored facts that would change the answer.
_EXPANSIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"\b(recipe|dinner|lunch|breakfast|meal|cook\w*|eat|food|snack|restaurant|bake|baking)\b",
            re.I,
        ),
        "vegan vegetarian allergic allergy diet eat food cook",
    ),
    (
        re.compile(r"\b(trip|vacation|holiday|travel\w*|flight|weekend)\b", re.I),
        "trip travel flight vacation budget wheelchair accessible access dog pet",
    ),
    (
        re.compile(r"\b(drink|drinks|cocktail\w*|wine|beer|party)\b", re.I),
        "alcohol drink drinking wine pregnant sober",
    ),
    (
        re.compile(r"\b(call|meeting|schedule|time zone|timezone)\b", re.I),
        "live living moved based",
    ),
    (re.compile(r"\b(plants?|flowers?)\b", re.I), "cat cats dog dogs pet pets"),
    (re.compile(r"\b(bio|about me)\b", re.I), "job work role"),
    (
        re.compile(r"\b(gift|present|birthday|anniversary)\b", re.I),
        "gift birthday like love favorite",
    ),
    (
        re.compile(
            r"\b(workout|exercise|gym|run|running|training|stronger|strength|routine)\b", re.I
        ),
        "injury knee back disc physio lifting workout gym run",
    ),
    (re.compile(r"\b(budget|afford|price|cost|spend)\b", re.I), "budget afford spend"),
)


_FIELD_WORDS: tuple[tuple[str, ...], ...] = tuple(tuple(g.split()) for g in _FIELD_GROUPS)


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


def _field_words(terms: Sequence[str]) -> list[str]:
    """Every word (as written) of the semantic fields a term of the turn belongs to."""
    out: list[str] = []
    for group, words in zip(_FIELDS, _FIELD_WORDS, strict=True):
        if any(t in group for t in terms):
            out.extend(words)
    return out


def _expansion_words(turn: str) -> list[str]:
    return [w for pattern, extra in _EXPANSIONS if pattern.search(turn) for w in extra.split()]


def _field_terms(terms: Sequence[str]) -> list[str]:
    """Stems of every semantic field a term of the turn belongs to."""
    out: list[str] = []
    for group in _FIELDS:
        if any(t in group for t in terms):
            out.extend(sorted(group))
    return out


def _expansion_terms(turn: str) -> list[str]:
    return [
        stem(w) for pattern, extra in _EXPANSIONS if pattern.search(turn) for w in extra.split()
    ]


def _follow_up(turn: str) -> bool:
    """A short turn that points back at the conversation instead of naming its subject."""
    return (
        bool(_ANAPHOR.search(turn))
        and len(content_terms(turn)) <= 3
        and not _NAMED.search(turn)
        and not _SMALL_TALK.search(turn)
    )


def _personal(turn: str) -> bool:
    return bool(
        _FIRST_PERSON.search(turn)
        or _FOREIGN_FIRST_PERSON.search(turn)
        or _NAMED_POSSESSIVE.search(turn)
    )


class LexicalGapPlanner:
    """Deterministic lexical gap planner (offline reference policy, no model).

    Plans one gap when the turn is about the user (first person, or a named person's
    possessive) or asks for a recommendation that depends on their constraints, and only
    when the store holds anything for the principal (``inventory``). Its query is the
    turn's content words plus the request-type expansions and the everyday semantic fields
    they belong to, so a stored statement that names the same thing in other words can
    still be found; the judge, not the planner, decides what is used.

    A short follow-up that points back at the conversation instead of naming its subject
    ("how do I fix it?", "go ahead and write it", "what's next?") plans a ``task_state``
    gap whose query is the turn as written, function words included: the retriever then
    finds the user's recent statements, and the judge admits the latest conversation's.
    """

    policy_id = "lexical-gap-planner-offline@3"

    def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision:
        if not inventory or _SMALL_TALK.search(turn):
            return GapDecision(policy=self.policy_id)
        if _follow_up(turn):
            # The turn as written plus the first-person words the user's own statements
            # carry, and its expansions: the recent statements become candidates.
            words = [w.strip("'-") for w in _WORD.findall(turn.lower())]
            expansion = _expansion_words(turn)
            fields = _field_words([*content_terms(turn), *(stem(w) for w in expansion)])
            query = " ".join(dict.fromkeys([*words, *_SELF_WORDS, *expansion, *fields]))
            gap = Gap(category=GapCategory.TASK_STATE, query=query)
            return GapDecision(gaps=(gap,), policy=self.policy_id)
        terms = content_terms(turn)
        personal = _personal(turn)
        recall = bool(_RECALL_CUES.search(turn) or _FOREIGN_RECALL_CUES.search(turn))
        personalise = bool(_PERSONALISE_CUES.search(turn))
        if not (personal or recall or personalise):
            return GapDecision(policy=self.policy_id)
        expansion = _expansion_words(turn)
        query = " ".join(
            dict.fromkeys(
                [
                    *_raw_terms(turn),
                    *expansion,
                    *_field_words([*terms, *(stem(w) for w in expansion)]),
                ]
            )
        )
        if not query.strip():
            return GapDecision(policy=self.policy_id)
        categories = [cat for cat, pattern in _CATEGORY_CUES if pattern.search(turn)]
        if not categories:
            categories = [GapCategory.RELATIONSHIP_OR_EVENT]
        gaps = tuple(Gap(category=cat, query=query) for cat in categories[:1])
        return GapDecision(gaps=gaps, policy=self.policy_id)


# A later statement that changes an earlier one ("I left X", "now", "switched to", "gave up",
# a birth that ends an "expecting").
_CHANGE_CUES = re.compile(
    r"\b(now|new|no longer|anymore|instead|switch\w*|moved|left|quit|chang\w*|cancel\w*|"
    r"actually|update\w*|broke up|again|start\w*|gave up|replac\w*|down to|up to|"
    r"took over|not any ?more|got the|born)\b",
    re.I,
)
# A correction of what the user just said in the same conversation.
_CORRECTION = re.compile(r"^\W*(sorry|wait|actually|correction|oops|i mean|no,|no wait)\b", re.I)
# "instead of X": the change concerns X, so an earlier statement without X still stands.
_INSTEAD_OF = re.compile(r"\binstead of (?:the |a |an |my )?([\w'-]+)", re.I)
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


def _fields_of(terms: set[str]) -> set[int]:
    return {i for i, group in enumerate(_FIELDS) if terms & group}


def _turn_of(record: Record) -> int:
    return max((e.turn_index for e in record.evidence), default=-1)


class LexicalAdmissionJudge:
    """Deterministic lexical admission judge (offline reference policy, no model).

    A candidate is ``helpful`` when it shares at least ``min_shared`` terms with the turn,
    its request-type expansions or the everyday semantic fields of those words, and adds
    something the draft, the public context and the profile do not already say;
    ``redundant`` when it adds nothing; ``potentially_harmful`` when it is hypothetical or
    redacted; ``insufficient`` otherwise.

    ``stale_or_conflicting`` covers unresolved conflict links and updates. A later
    candidate updates an earlier one when (a) it comes from a later session, shares a
    specific term or an everyday semantic field with it and says that something changed
    ("left", "now", "switched", "gave up", ...), unless it says the change is "instead of"
    something the earlier one never mentioned; or (b) it corrects, in the same
    conversation, the statement just before it ("sorry, he's 9"); or (c) both are helpful,
    from different sessions, and share turn terms. An update of a record the turn needs is
    admitted in its place.

    Other statements from the session of an admitted record (the same conversation), and
    earlier statements that share a specific term with an admitted one without being
    updated by it (joint evidence), are ``jointly_helpful``. A short follow-up that points
    back at the conversation ("how do I fix it?") admits the statements of the latest
    conversation among the candidates. At most ``max_admitted`` records are admitted
    directly, best overlap first; an inconclusive set is EMPTY.
    """

    policy_id = "lexical-admission-judge-offline@3"

    def __init__(self, *, min_shared: int = 1, max_admitted: int = 3) -> None:
        self.min_shared = min_shared
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
        expansion = set(_expansion_terms(turn))
        wanted = own | expansion | set(_field_terms(sorted(own | expansion)))
        known = set(content_terms(" ".join([draft, public_context or "", ambient_profile.text])))
        reasons: dict[str, ReasonCode] = {}
        shared_of: dict[str, set[str]] = {}
        usable: list[Record] = []
        turn_names, turn_lower = _names(turn), _lower_words(turn)
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
            if len(shared) < self.min_shared:
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
        # Updates: walk the usable candidates oldest first; a record the turn needs passes
        # its need on to the statement that updates it.
        ordered = sorted(usable, key=lambda r: (_when(r), _turn_of(r), r.id))
        updated_by: dict[str, str] = {}
        for i, newer in enumerate(ordered):
            earlier = ordered[:i]
            if _CORRECTION.search(newer.text):
                same = [r for r in earlier if r.session_id == newer.session_id]
                same = [r for r in same if _turn_of(r) < _turn_of(newer)]
                if same:  # corrects the statement just before it in the conversation
                    updated_by[max(same, key=_turn_of).id] = newer.id
            for older in earlier:
                if older.session_id != newer.session_id and _updates(newer, older):
                    updated_by[older.id] = newer.id
        for older in ordered:
            newer_id = updated_by.get(older.id)
            if newer_id is None:
                continue
            if reasons[older.id] is ReasonCode.HELPFUL and reasons[newer_id] is not (
                ReasonCode.REDUNDANT
            ):
                reasons[newer_id] = ReasonCode.HELPFUL
                shared_of[newer_id] = shared_of.get(newer_id, set()) | shared_of[older.id]
            reasons[older.id] = ReasonCode.STALE_OR_CONFLICTING
            shared_of.pop(older.id, None)
        # A later session's statement about the same turn terms updates an earlier one.
        for rid, shared in list(shared_of.items()):
            older = by_id[rid]
            for oid, other_shared in shared_of.items():
                newer = by_id[oid]
                if (
                    oid != rid
                    and newer.session_id != older.session_id
                    and _when(newer) > _when(older)
                    and shared & other_shared
                    and not _complements(newer, older)
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
        # Statements of the same conversation as an admitted record complete it, and so do
        # statements that share a specific term with one without being updated by it.
        sessions = {by_id[rid].session_id for rid in admitted}
        subjects = [_subject(by_id[rid]) for rid in admitted]
        for record in usable:
            if (
                record.id not in admitted
                and reasons[record.id] in (ReasonCode.INSUFFICIENT, ReasonCode.HELPFUL)
                and len(admitted) < self.max_admitted + 2
                and (
                    record.session_id in sessions
                    or (record.id not in updated_by and any(_subject(record) & s for s in subjects))
                )
            ):
                reasons[record.id] = ReasonCode.JOINTLY_HELPFUL
                admitted.append(record.id)
        verdicts = tuple(CandidateVerdict(record_id=r.id, reason=reasons[r.id]) for r in candidates)
        return AdmissionDecision(admitted=tuple(admitted), verdicts=verdicts, policy=self.policy_id)


def _names(text: str) -> set[str]:
    """Stems of capitalised words not at the start of a sentence (names, places, brands)."""
    return {stem(m.group(0)) for m in _NAMED.finditer(text)}


def _lower_words(text: str) -> set[str]:
    """Stems of the words written in lower case (common words, not names)."""
    return {stem(w) for w in re.findall(r"\b[a-z][a-z'-]*", text)}


def _complements(newer: Record, older: Record) -> bool:
    """The newer statement changes something "instead of" a value the older never mentions."""
    m = _INSTEAD_OF.search(newer.text)
    return m is not None and m.group(1).lower() not in older.text.lower()


def _updates(newer: Record, older: Record) -> bool:
    """Whether ``newer``, from a later session, changes what ``older`` said."""
    if _when(newer) <= _when(older) or not _CHANGE_CUES.search(newer.text):
        return False
    if _complements(newer, older):
        return False
    a, b = _subject(newer), _subject(older)
    return bool(a & b) or bool(_fields_of(a) & _fields_of(b))


def _when(record: Record) -> datetime:
    return record.event_time or record.created_at
