"""The relation path: a question that names someone by relation ("What does Mei's brother
do?") reaches the records that call them by name ("Luis got hired as a vet.")."""

from __future__ import annotations

import pytest

from retold import Principal, RecordDraft, Store
from retold._lexicon import introductions
from retold._retrieval import (
    HybridRetriever,
    RetrievalConfig,
    asked_relations,
    extract_entities,
    people_named,
)

pytestmark = pytest.mark.anyio

LEXICAL = RetrievalConfig(dense=False, session_window=0)
SCOPE = Principal(tenant="t", principal="chat")

# Mei and Tomas each talk about their own brother; small talk about work and moving fills
# the rest, so "work" and "moving" alone do not find the facts.
TURNS = [
    ("Mei", "I had lunch with my brother Luis on Sunday."),
    ("Tomas", "My brother Omar says hi, by the way!"),
    *[("Tomas", f"My work shift changed again, week {k}.") for k in range(12)],
    ("Mei", "I might be moving to a bigger flat next year."),
    ("Tomas", "Omar got hired as a bus driver, finally!"),
    ("Mei", "Luis just started working as a paramedic."),
    ("Mei", "Luis is moving to Bergen next month."),
    # Later turns that match "work" as well as Luis's job does (equal scores go newest first).
    *[("Mei", f"Work has been hectic again, week {k}.") for k in range(12)],
    *[("Mei", f"Work wants me to travel more, trip {k}.") for k in range(8)],
]


def introduced(text: str) -> list[tuple[str, str]]:
    return [(name, relation) for name, relation, own in introductions(text) if own]


def fill(store: Store, turns: list[tuple[str, str]] = TURNS) -> None:
    """The (speaker, text) turns, one session each."""
    for k, (speaker, text) in enumerate(turns):
        store.add(SCOPE, RecordDraft(text=text, speaker=speaker, session_id=f"s{k}"))


async def texts(store: Store, query: str, config: RetrievalConfig, **kw: str) -> list[str]:
    found = await HybridRetriever(store, config=config).retrieve(SCOPE, query, limit=8, **kw)
    return [c.record.text for c in found]


async def test_a_relation_reaches_the_records_that_use_the_name(any_store: Store) -> None:
    """Without the path neither of Luis's facts is among the 8; with it both are, beside the
    introduction, and Tomas's brother's are not (the owner is who said "my brother")."""
    fill(any_store)
    query = "What does Mei's brother do for work now?"
    off = await texts(any_store, query, LEXICAL.model_copy(update={"relation_path": False}))
    assert "Luis just started working as a paramedic." not in off
    found = await texts(any_store, query, LEXICAL)
    assert "Luis just started working as a paramedic." in found
    assert "I had lunch with my brother Luis on Sunday." in found
    assert "Omar got hired as a bus driver, finally!" not in found
    about_omar = await texts(any_store, "What does Tomas's brother do for work now?", LEXICAL)
    assert "Omar got hired as a bus driver, finally!" in about_omar
    assert "Luis just started working as a paramedic." not in about_omar


async def test_a_gap_query_takes_the_owner_from_the_turn(any_store: Store) -> None:
    """A planner's gap query keeps "brother" but not "my": the turn says whose brother. A
    relation word only the turn has is not followed."""
    any_store.add(SCOPE, RecordDraft(text="My brother Luis lives in Porto."))
    for k in range(20):
        any_store.add(SCOPE, RecordDraft(text=f"The new job starts soon, note {k}."))
    any_store.add(SCOPE, RecordDraft(text="Luis got a new job as a paramedic."))
    cfg = LEXICAL
    found = await texts(any_store, "brother job", cfg, context="What's my brother's job now?")
    assert found[0] == "My brother Luis lives in Porto."
    assert "Luis got a new job as a paramedic." in found
    plain = await texts(any_store, "new job", cfg, context="What's my brother's job now?")
    assert "My brother Luis lives in Porto." not in plain


async def test_one_tie_has_several_words_and_a_deleted_introduction_names_nobody(
    any_store: Store,
) -> None:
    """ "my partner" and "my other half" ask about the person introduced as "my wife"; once
    that introduction is deleted, the path has no name to follow."""
    intro = any_store.add(SCOPE, RecordDraft(text="I live in Turin with my wife Sara."))
    for k in range(20):
        any_store.add(SCOPE, RecordDraft(text=f"Shift work at the plant is tiring, day {k}."))
    any_store.add(SCOPE, RecordDraft(text="Sara changed jobs: she runs a pharmacy now."))
    query = "Where does my partner work these days?"
    assert "Sara changed jobs: she runs a pharmacy now." in await texts(any_store, query, LEXICAL)
    other_half = await texts(any_store, "Is my other half still at the plant?", LEXICAL)
    assert "Sara changed jobs: she runs a pharmacy now." in other_half
    any_store.delete(SCOPE, intro.id, actor="test")
    assert "Sara changed jobs: she runs a pharmacy now." not in await texts(
        any_store, query, LEXICAL
    )


def test_asked_relations_read_the_owner() -> None:
    assert asked_relations("What does Mei's older brother do?") == (
        ("Mei", frozenset({"brother"})),
    )
    ((owner, tie),) = asked_relations("How are my kids doing?")
    assert owner is None and {"son", "daughter", "kid"} <= tie
    assert asked_relations("What is the capital of France?") == ()
    # A plural relation word reads as its singular (the relation index's key), "boss" as itself.
    assert asked_relations("How are my Nieces?") == ((None, frozenset({"niece"})),)
    assert asked_relations("Did Mei's in-laws visit?") == (("Mei", frozenset({"in-law"})),)
    assert asked_relations("Is my boss in?") == ((None, frozenset({"boss"})),)
    assert asked_relations("job", "What's my brother's job?") == ()
    ((_, spouse),) = asked_relations("half employed now", "Where is my other half employed?")
    assert {"wife", "husband", "partner"} <= spouse


def test_introductions_are_read_from_apposition_and_not_from_sentence_openers() -> None:
    """A name is a capitalised word beside "my <relation>" (even one spelled like a word:
    "Will", "May"); before it, not a function word or a day that opens the sentence, and an
    apposition is closed by a comma or the sentence."""
    assert introduced("My wife Sara works nights.") == [("Sara", "wife")]
    assert introduced("Jonas, my partner, is a carpenter.") == [("Jonas", "partner")]
    assert introduced("I met Jonas, my partner.") == [("Jonas", "partner")]
    assert introduced("Jonas is my partner and we cook.") == [("Jonas", "partner")]
    assert introduced("Our neighbour Mrs. Li waved.") == [("Li", "neighbour")]
    assert introduced("My brother (Luis) came too.") == [("Luis", "brother")]
    assert introduced("Honestly, my boss, Tom, is great.") == [("Tom", "boss")]
    assert introduced("Maybe my students could volunteer.") == []
    assert introduced("This is my sister.") == []
    assert introduced("Yesterday, my sister called.") == []
    assert introduced("Monday, my boss, yelled.") == []
    assert introduced("My brother Will and my daughter May came.") == [
        ("Will", "brother"),
        ("May", "daughter"),
    ]


def test_a_plural_relation_introduces_every_name_joined_by_and() -> None:
    """ "my kids Mia and Leo" introduces both; a singular relation only its first name, as
    the next name may be anyone ("my brother Luis and Ana went out")."""
    assert introduced("My kids Mia and Leo start school.") == [("Mia", "kids"), ("Leo", "kids")]
    assert introduced("Our parents Ana, José, and Eva came.") == [
        ("Ana", "parents"),
        ("José", "parents"),
        ("Eva", "parents"),
    ]
    assert introduced("My friends Sam & Kai visited.") == [("Sam", "friends"), ("Kai", "friends")]
    assert introduced("My brother Luis and Ana went out.") == [("Luis", "brother")]
    assert introduced("My boss Tom and Jane argued.") == [("Tom", "boss")]
    assert introduced("My kids Mia, Monday was fun.") == [("Mia", "kids")]
    ten = ["Mia", "Leo", "Ana", "Eva", "Tom", "Kai", "Sam", "Noa", "Ida", "Max"]
    listed = f"My kids {', '.join(ten[:-1])} and {ten[-1]} came."
    assert introduced(listed) == [(name, "kids") for name in ten]
    eleven = f"My kids {', '.join([*ten[:-1], 'Ole'])} and {ten[-1]} came."
    assert introduced(eleven) == [("Mia", "kids")]


def test_names_listed_before_a_relation_are_introduced_by_it() -> None:
    """ "Mia and Leo are my kids" and the apposition "Mia and Leo, my kids," introduce both;
    a singular relation introduces one name, the first of "... are my brother and sister"
    or the one next to an apposition. "are" after one name, or a relation that owns the next
    word ("my neighbour's kids"), introduces nobody."""
    assert introduced("Mia and Leo are my kids.") == [("Mia", "kids"), ("Leo", "kids")]
    assert introduced("Yesterday Mia, Leo & Ana are my guests!") == [
        ("Mia", "guests"),
        ("Leo", "guests"),
        ("Ana", "guests"),
    ]
    assert introduced("Mia and Leo, my kids, love it.") == [("Mia", "kids"), ("Leo", "kids")]
    assert introduced("Luis and Ana are my brother and sister.") == [("Luis", "brother")]
    assert introduced("Ana and Luis, my brother, came.") == [("Luis", "brother")]
    assert introduced("Kids are my joy, and Paris and Rome are my favourite cities.") == []
    assert introduced("Tom and Ana are my neighbours' kids.") == []
    assert introduced("Tom is my neighbour's kid.") == []
    assert introduced("Mia and Leo. They are my kids.") == []


def test_your_relation_belongs_to_whom_the_speaker_talks_to() -> None:
    """ "your sister Ana" is the listener's sister: read, but not as the speaker's own."""
    assert introductions("How is your sister Ana doing?") == [("Ana", "sister", False)]
    assert introductions("Luis, your brother, called.") == [("Luis", "brother", False)]
    assert introduced("How is your sister Ana doing?") == []


async def test_the_other_speaker_can_introduce_the_owners_people(any_store: Store) -> None:
    """In a conversation between two people, Tomas asking about "your sister Ana" tells who
    Mei's sister is; Mei's own "my sister" introduces nobody here. The second of her kids is
    found too. Tomas's "your" never makes Ana his sister."""
    turns = [
        ("Tomas", "How is your sister Ana settling in?"),
        ("Mei", "My kids Mia and Leo love the new park."),
        *[("Mei", f"My sister says hi, and work is busy, week {k}.") for k in range(10)],
        *[("Tomas", f"Work is busy for me too, week {k}.") for k in range(10)],
        ("Mei", "Ana got hired as a pharmacist."),
        ("Mei", "Leo got a Saturday job at a bakery."),
    ]
    fill(any_store, turns)
    off = LEXICAL.model_copy(update={"relation_path": False})
    sister = "What does Mei's sister do for work?"
    assert "Ana got hired as a pharmacist." not in await texts(any_store, sister, off)
    assert "Ana got hired as a pharmacist." in await texts(any_store, sister, LEXICAL)
    son = "What does Mei's son do for work?"
    assert "Leo got a Saturday job at a bakery." not in await texts(any_store, son, off)
    assert "Leo got a Saturday job at a bakery." in await texts(any_store, son, LEXICAL)
    tomas = await texts(any_store, "What does Tomas's sister do for work?", LEXICAL)
    assert "Ana got hired as a pharmacist." not in tomas


def relation_rows(store: Store) -> list[tuple[str, str, int]]:
    rows = store.query(
        "SELECT relation, name, own FROM retrieval_relations WHERE tenant = ? AND principal = ? "
        "ORDER BY seq, name",
        [SCOPE.tenant, SCOPE.principal],
    )
    return [(r["relation"], r["name"], int(r["own"])) for r in rows]


async def test_an_introduction_stays_found_behind_many_uses_of_the_relation_word(
    any_store: Store,
) -> None:
    """The path reads introductions, not the records that use the word: a hundred later turns
    saying "my brother" without a name do not push "my brother Luis" out of reach (it read
    the newest 64 such records once)."""
    intro = any_store.add(
        SCOPE, RecordDraft(text="I had lunch with my brother Luis on Sunday.", speaker="Mei")
    )
    for k in range(100):
        any_store.add(
            SCOPE, RecordDraft(text=f"My brother and I argued again, round {k}.", speaker="Mei")
        )
    fact = any_store.add(
        SCOPE, RecordDraft(text="Luis just started as a paramedic.", speaker="Mei")
    )
    found = await HybridRetriever(any_store, config=LEXICAL).search(
        SCOPE, "What does Mei's brother do?", limit=8
    )
    paths = {c.record.id: c.paths for c in found.candidates}
    assert "relation" in paths[intro.id]
    assert "relation" in paths[fact.id]
    assert relation_rows(any_store) == [("brother", "luis", 1)]


async def test_the_relation_index_catches_up_from_the_first_record(any_store: Store) -> None:
    """A store indexed before the relation table existed has an entity watermark and no
    relation one: the next search reads its records once more for introductions only (the
    entity names are not written twice), and a deleted introduction leaves no row."""
    from retold._retrieval import index_entities

    intro = any_store.add(SCOPE, RecordDraft(text="My kids Mia and Leo love the new park."))
    for k in range(20):
        any_store.add(SCOPE, RecordDraft(text=f"Work is busy again, week {k}."))
    any_store.add(SCOPE, RecordDraft(text="Leo got a Saturday job at a bakery."))
    assert index_entities(any_store, SCOPE) == 22
    entities = any_store.query("SELECT COUNT(*) AS n FROM retrieval_entities", [])[0]["n"]
    assert relation_rows(any_store) == [("kid", "leo", 1), ("kid", "mia", 1)]
    with any_store.write() as w:
        w.execute("DELETE FROM retrieval_relations", [])
        w.execute("DELETE FROM retrieval_watermarks WHERE stage = 'relation@1'", [])
    son = "What does my son do for work?"
    assert "Leo got a Saturday job at a bakery." in await texts(any_store, son, LEXICAL)
    assert relation_rows(any_store) == [("kid", "leo", 1), ("kid", "mia", 1)]
    assert any_store.query("SELECT COUNT(*) AS n FROM retrieval_entities", [])[0]["n"] == entities
    assert index_entities(any_store, SCOPE) == 0
    any_store.delete(SCOPE, intro.id, actor="test")
    assert relation_rows(any_store) == []
    gone = "SELECT COUNT(*) AS n FROM retrieval_entities WHERE record_id = ?"
    assert any_store.query(gone, [intro.id])[0]["n"] == 0


async def test_a_store_from_before_the_relation_index_upgrades_in_place(
    any_store: Store,
) -> None:
    """A store whose retrieval schema predates the relation index (its first four
    migrations, the entity names indexed up to the last record) gets the table and the new
    purge trigger on the next search, which reads its introductions once; deleting an
    introduction then removes its rows and its entity names together."""
    from retold._retrieval_index import _RETRIEVAL_MIGRATIONS

    any_store.ensure_schema("retrieval", _RETRIEVAL_MIGRATIONS[:4])
    intro = any_store.add(SCOPE, RecordDraft(text="I live in Turin with my wife Sara."))
    for k in range(20):
        any_store.add(SCOPE, RecordDraft(text=f"Shift work at the plant is tiring, day {k}."))
    any_store.add(SCOPE, RecordDraft(text="Sara changed jobs: she runs a pharmacy now."))
    # What the entity indexer wrote before the relation index existed.
    rows = any_store.query("SELECT rowid, id, text FROM records ORDER BY rowid", [])
    with any_store.write() as w:
        for row in rows:
            for entity in extract_entities(row["text"]):
                w.execute(
                    "INSERT INTO retrieval_entities (tenant, principal, entity, record_id) "
                    "VALUES (?, ?, ?, ?)",
                    [SCOPE.tenant, SCOPE.principal, entity, row["id"]],
                )
        w.execute(
            "INSERT INTO retrieval_watermarks (tenant, principal, stage, last_rowid) "
            "VALUES (?, ?, 'entity', ?)",
            [SCOPE.tenant, SCOPE.principal, rows[-1]["rowid"]],
        )
    names = any_store.query("SELECT COUNT(*) AS n FROM retrieval_entities", [])[0]["n"]
    query = "Where does my partner work these days?"
    assert "Sara changed jobs: she runs a pharmacy now." in await texts(any_store, query, LEXICAL)
    assert relation_rows(any_store) == [("wife", "sara", 1)]
    assert any_store.query("SELECT COUNT(*) AS n FROM retrieval_entities", [])[0]["n"] == names
    any_store.delete(SCOPE, intro.id, actor="test")
    assert relation_rows(any_store) == []
    gone = "SELECT COUNT(*) AS n FROM retrieval_entities WHERE record_id = ?"
    assert any_store.query(gone, [intro.id])[0]["n"] == 0


async def test_a_name_reaches_what_its_owner_says_by_relation_only(any_store: Store) -> None:
    """ "What does Luis do now?" reaches "My brother got hired as a vet." by Mei, who
    introduced "my brother Luis", and not Tomas's own brother's news; "your sister Ana",
    said to Mei by Tomas, makes Mei's "my sister" Ana. Without the path neither is among the
    8. A speaker's own name is no one's relation."""
    turns = [
        ("Mei", "I had lunch with my brother Luis on Sunday."),
        ("Tomas", "How is your sister Ana settling in?"),
        *[("Mei", f"Luis says hi, and the weather is grey, week {k}.") for k in range(6)],
        *[("Tomas", f"Work is busy for me too, week {k}.") for k in range(10)],
        ("Tomas", "My brother got hired as a bus driver."),
        ("Tomas", "My sister got a job at the harbour."),
        ("Mei", "My brother got hired as a vet."),
        ("Mei", "My sister got a job at the pharmacy."),
    ]
    fill(any_store, turns)
    off = LEXICAL.model_copy(update={"relation_path": False})
    luis = "What does Luis do now?"
    assert "My brother got hired as a vet." not in await texts(any_store, luis, off)
    found = await texts(any_store, luis, LEXICAL)
    assert "My brother got hired as a vet." in found
    assert "My brother got hired as a bus driver." not in found
    ana = "Where does Ana work these days?"
    assert "My sister got a job at the pharmacy." not in await texts(any_store, ana, off)
    found = await texts(any_store, ana, LEXICAL)
    assert "My sister got a job at the pharmacy." in found
    assert "My sister got a job at the harbour." not in found
    result = await HybridRetriever(any_store, config=LEXICAL).search(SCOPE, "What does Mei do?")
    assert "relation_named" not in result.stage_counts


async def test_a_gap_query_keeps_a_name_lower_cased_and_the_turn_says_it_is_one(
    any_store: Store,
) -> None:
    """A planner's query "luis job now" keeps the name lower-cased; the turn it came from
    capitalises it, so the way back runs. A word the turn does not capitalise is no name."""
    assert people_named("luis job now", "What is Luis's job now?") == {"luis"}
    assert people_named("luis job now") == frozenset()
    assert people_named("job now", "What is Luis's job now?") == frozenset()
    fill(
        any_store,
        [
            ("Mei", "I had lunch with my brother Luis on Sunday."),
            *[("Mei", f"Luis says hi, and the weather is grey, week {k}.") for k in range(6)],
            ("Mei", "My brother got hired as a vet."),
        ],
    )
    found = await texts(any_store, "luis job now", LEXICAL, context="What is Luis's job now?")
    assert "My brother got hired as a vet." in found
    assert "My brother got hired as a vet." not in await texts(any_store, "luis job now", LEXICAL)
