"""Candidate generation: scope and lifecycle filters, stages, fusion, dedup, rerank, sessions."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from retold import Principal, RecordDraft, RecordKind, SQLiteStore, StoreError, token_counter
from retold._packing import pack, parse_reader
from retold._retrieval import (
    HybridRetriever,
    RetrievalConfig,
    _Hit,
    extract_entities,
    query_terms,
)
from retold._retrieval_sql import RetrievalSQL, retrieval_sql
from retold._store import scoped_match
from retold._typing import Retriever

pytestmark = pytest.mark.anyio

LEXICAL = RetrievalConfig(dense=False, session_window=0)


class HashEmbedder:
    """Test double: a deterministic bag-of-words hash embedding (no model)."""

    def __init__(self, model_id: str = "test-hash-v1", dims: int = 64) -> None:
        self._id, self._dims = model_id, dims
        self.calls = 0

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        out = []
        for text in texts:
            vec = [0.0] * self._dims
            for word in query_terms(text):
                h = int(hashlib.sha256(f"{self._id}:{word}".encode()).hexdigest(), 16)
                vec[h % self._dims] += 1.0
            out.append(vec)
        return out


class ReverseReranker:
    """Test double: scores texts so that the longest text ranks first."""

    @property
    def model_id(self) -> str:
        return "test-length"

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        return [float(len(t)) for t in texts]


def add(store: SQLiteStore, scope: Principal, text: str, **kw: object) -> str:
    return store.add(scope, RecordDraft.model_validate({"text": text, **kw})).id


async def test_is_a_retriever_and_scope_is_enforced(
    store: SQLiteStore, alice: Principal, bob: Principal
) -> None:
    """Another principal's or tenant's records are never returned, whatever the query says."""
    mine = add(store, alice, "Alice's dentist appointment is on Friday")
    add(store, bob, "Bob's dentist appointment is on Monday")
    add(store, Principal(tenant="other", principal="alice"), "dentist appointment elsewhere")
    retriever = HybridRetriever(store, config=LEXICAL)
    assert isinstance(retriever, Retriever)
    got = await retriever.retrieve(alice, "dentist appointment bob monday")
    assert [c.record.id for c in got] == [mine]
    assert got[0].paths == ("lexical",) and got[0].query == "dentist appointment bob monday"


async def test_tenant_scoping_changes_what_is_packed(
    store: SQLiteStore, alice: Principal, bob: Principal
) -> None:
    """A packed context holds only the asking principal's records."""
    add(store, alice, "I keep my bike in the garage")
    add(store, bob, "I keep my bike at the office")
    retriever = HybridRetriever(store, config=LEXICAL)
    for scope, text in ((alice, "garage"), (bob, "office")):
        result = await retriever.search(scope, "where is the bike kept")
        out = pack(result.candidates, budget=500, counter=token_counter())
        assert [p.text for p in parse_reader(out.text)] == [
            f"I keep my bike in the {text}" if text == "garage" else f"I keep my bike at the {text}"
        ]


async def test_superseded_and_expired_are_excluded_by_default(
    store: SQLiteStore, alice: Principal, clock: object
) -> None:
    """Superseded and expired records are filtered in SQL; opting in returns superseded ones."""
    old = add(store, alice, "My phone number ends in 1234")
    new = add(store, alice, "My phone number ends in 9876", supersedes=old)
    now = store.clock()
    add(store, alice, "My temporary phone number ends in 5555", expires_at=now - timedelta(days=1))
    add(
        store,
        alice,
        "My old work phone number ends in 7777",
        valid_from=now - timedelta(days=9),
        valid_to=now - timedelta(days=2),
    )
    got = await HybridRetriever(store, config=LEXICAL).retrieve(alice, "phone number", limit=10)
    assert [c.record.id for c in got] == [new]
    with_old = HybridRetriever(
        store, config=LEXICAL.model_copy(update={"include_superseded": True})
    )
    ids = {c.record.id for c in await with_old.retrieve(alice, "phone number", limit=10)}
    assert ids == {old, new}
    result = await with_old.search(alice, "phone number")
    out = pack(result.candidates, budget=500, counter=token_counter())
    tags = {p.text: p.tags for p in parse_reader(out.text)}
    assert tags["My phone number ends in 1234"] == ("superseded",)
    assert tags["My phone number ends in 9876"] == ()


async def test_conflicts_are_packed_as_an_annotated_pair(
    store: SQLiteStore, alice: Principal
) -> None:
    """Contradicting stored records come out of retrieval and packing annotated as a pair."""
    a = add(store, alice, "My favourite colour is green")
    b = add(store, alice, "My favourite colour is purple", conflicts_with=[a])
    result = await HybridRetriever(store, config=LEXICAL).search(alice, "favourite colour")
    out = pack(result.candidates, budget=500, counter=token_counter())
    assert out.conflicts == (tuple(sorted((a, b))),)
    assert all(p.tags == ("conflict",) for p in parse_reader(out.text))


async def test_dedup_folds_identical_and_near_identical_keeping_provenance(
    store: SQLiteStore, alice: Principal
) -> None:
    """Identical and near-identical text folds into one candidate that lists the others."""
    text = "we booked the cabin at Lake Tahoe for the first week of August this year"
    first = add(store, alice, text, speaker="Ana")
    second = add(store, alice, text, speaker="Ana")
    third = add(store, alice, text + "!", speaker="Ana")
    other_speaker = add(store, alice, text, speaker="Ben")
    result = await HybridRetriever(store, config=LEXICAL).search(alice, "cabin Tahoe August")
    ids = [c.record.id for c in result.candidates]
    assert len(ids) == 2 and other_speaker in ids
    survivor = next(i for i in ids if i != other_speaker)
    assert sorted([survivor, *result.folded[survivor]]) == sorted([first, second, third])
    off = HybridRetriever(store, config=LEXICAL.model_copy(update={"dedup": False}))
    assert len(await off.retrieve(alice, "cabin Tahoe August", limit=10)) == 4


async def test_entity_stage_matches_names(store: SQLiteStore, alice: Principal) -> None:
    """Names indexed at write are matched against the query; deleted records leave no names."""
    named = add(store, alice, "Lunch with Okonkwo went well")
    for i in range(6):
        add(store, alice, f"filler note number {i}")
    cfg = LEXICAL.model_copy(update={"lexical": False})
    got = await HybridRetriever(store, config=cfg).retrieve(alice, "what about okonkwo?")
    assert [(c.record.id, c.paths) for c in got] == [(named, ("entity",))]
    store.delete(alice, named)
    assert list(await HybridRetriever(store, config=cfg).retrieve(alice, "okonkwo")) == []
    rows = store.query("SELECT * FROM retrieval_entities WHERE record_id = ?", [named])
    assert rows == []
    assert extract_entities("Then Maria met Dr. Okafor in New York.") == {
        "maria",
        "dr",
        "okafor",
        "new",
        "york",
    }


async def test_fusion_rrf_and_weighted_reward_multi_path(
    store: SQLiteStore, alice: Principal
) -> None:
    """A record found by two stages outranks one found by one, under both fusions."""
    both = add(store, alice, "Quentin recommended the ramen place downtown")
    add(store, alice, "the ramen place downtown has long queues")
    for fusion in ("rrf", "weighted"):
        cfg = LEXICAL.model_copy(update={"fusion": fusion, "speaker_boost": 0.0})
        got = await HybridRetriever(store, config=cfg).retrieve(alice, "Quentin ramen downtown")
        assert got[0].record.id == both and got[0].paths == ("entity", "lexical")


async def test_dense_stage_and_model_change_is_detected_not_mixed(
    store: SQLiteStore, alice: Principal
) -> None:
    """Vectors are stored per model id; a new model's search ignores old vectors and reports them."""
    target = add(store, alice, "sourdough starter feeding schedule")
    add(store, alice, "quarterly tax paperwork")
    cfg = RetrievalConfig(lexical=False, entity=False, session_window=0)
    v1 = HashEmbedder("test-hash-v1")
    result = await HybridRetriever(store, config=cfg, embedder=v1).search(
        alice, "sourdough starter"
    )
    assert result.candidates[0].record.id == target and result.candidates[0].paths == ("dense",)
    assert result.stale_embedding_models == ()
    v2 = HashEmbedder("test-hash-v2")
    result = await HybridRetriever(store, config=cfg, embedder=v2).search(
        alice, "sourdough starter"
    )
    assert result.stale_embedding_models == ("test-hash-v1",)
    assert result.candidates[0].record.id == target
    models = store.query("SELECT model_id, COUNT(*) AS n FROM vectors GROUP BY model_id")
    assert {r["model_id"]: r["n"] for r in models} == {"test-hash-v1": 2, "test-hash-v2": 2}


async def test_reranker_reorders_the_head(store: SQLiteStore, alice: Principal) -> None:
    """The optional reranker reorders the top candidates and marks them."""
    short = add(store, alice, "garden tomatoes")
    long = add(store, alice, "garden tomatoes and basil and a very long list of herbs")
    cfg = LEXICAL.model_copy(update={"entity": False})
    plain = await HybridRetriever(store, config=cfg).retrieve(alice, "garden tomatoes")
    assert plain[0].record.id == short
    got = await HybridRetriever(store, config=cfg, reranker=ReverseReranker()).retrieve(
        alice, "garden tomatoes"
    )
    assert [c.record.id for c in got] == [long, short]
    assert "rerank" in got[0].paths


async def test_session_neighbours_are_added_with_decayed_scores(
    store: SQLiteStore, alice: Principal
) -> None:
    """Turns around a hit in the same session join on the session path, nearer ones first."""
    ids = [
        add(store, alice, text, session_id="s1", kind=RecordKind.MESSAGE)
        for text in ["hello there", "did you go anywhere", "I went to Lisbon", "nice", "bye"]
    ]
    add(store, alice, "unrelated other session", session_id="s2")
    cfg = RetrievalConfig(dense=False, entity=False, session_window=1)
    got = await HybridRetriever(store, config=cfg).retrieve(alice, "lisbon", limit=10)
    assert got[0].record.id == ids[2]
    assert {c.record.id for c in got[1:]} == {ids[1], ids[3]}
    assert all(c.paths == ("session",) and c.score < got[0].score for c in got[1:])
    wide = cfg.model_copy(update={"session_window": 2})
    got = await HybridRetriever(store, config=wide).retrieve(alice, "lisbon", limit=10)
    assert len(got) == 5 and got[-1].score < got[1].score


async def test_backfill_fills_with_newest_when_few_found(
    store: SQLiteStore, alice: Principal
) -> None:
    """Backfill (opt-in) adds the newest live records after the found ones, scored 0."""
    hit = add(store, alice, "the quokka photo")
    add(store, alice, "note one")
    add(store, alice, "note two")
    cfg = LEXICAL.model_copy(update={"backfill": True})
    got = await HybridRetriever(store, config=cfg).retrieve(alice, "quokka", limit=10)
    assert got[0].record.id == hit and len(got) == 3
    assert all(c.paths == ("backfill",) and c.score == 0 for c in got[1:])
    assert list(await HybridRetriever(store, config=cfg).retrieve(alice, "zebra")) == []


def test_config_is_frozen_with_stable_canonical_json_and_hash() -> None:
    """RetrievalConfig is frozen; its canonical JSON and SHA-256 are stable and field-sensitive."""
    a, b = RetrievalConfig(), RetrievalConfig()
    assert a.canonical_json() == b.canonical_json()
    assert a.sha256() == hashlib.sha256(a.canonical_json().encode()).hexdigest()
    assert a.sha256() != RetrievalConfig(rrf_k=61).sha256()
    assert '"schema":"retold.retrieval-config/1"' in a.canonical_json()
    with pytest.raises(ValidationError):
        a.rrf_k = 5  # type: ignore[misc]
    with pytest.raises(ValidationError):
        RetrievalConfig(unknown=1)  # type: ignore[call-arg]


def test_query_terms_drop_function_words_but_never_empty() -> None:
    """Function words leave the lexical query unless nothing else is left."""
    assert query_terms("What did Caroline do with the kids?") == ["caroline", "kids"]
    assert query_terms("what did you do") == ["what", "did", "you", "do"]


def test_delete_purges_entities_and_vectors_in_the_same_write(tmp_path: Path) -> None:
    """Deleting a record removes its entity names and vectors at once, even via the plain store."""
    from retold._retrieval import ensure_retrieval_schema, index_entities
    from retold._vectors import write_vectors

    store = SQLiteStore(tmp_path / "purge.db")
    scope = Principal(tenant="acme", principal="alice")
    ensure_retrieval_schema(store)
    rec = store.add(scope, RecordDraft(text="Dinner with Margarethe Vasquez in Lisbon"))
    index_entities(store, scope)
    write_vectors(store, scope, "m", [rec.id], [[1.0, 0.0]])
    assert store.query("SELECT 1 FROM vectors WHERE record_id = ?", [rec.id])
    assert store.query("SELECT 1 FROM retrieval_entities WHERE record_id = ?", [rec.id])
    SQLiteStore(tmp_path / "purge.db").delete(scope, rec.id)  # another connection, no retriever
    assert store.query("SELECT 1 FROM retrieval_entities WHERE record_id = ?", [rec.id]) == []
    assert store.query("SELECT 1 FROM vectors WHERE record_id = ?", [rec.id]) == []


async def test_session_neighbours_never_bring_back_ambient_records(
    store: SQLiteStore, alice: Principal
) -> None:
    """A neighbour the ambient profile already carries is not added by session expansion."""
    ambient = add(store, alice, "Always answer briefly", session_id="s1", activation="ambient")
    hit = add(store, alice, "I went to Lisbon", session_id="s1")
    after = add(store, alice, "it was sunny", session_id="s1")
    cfg = RetrievalConfig(dense=False, entity=False, session_window=2)
    got = [c.record.id for c in await HybridRetriever(store, config=cfg).retrieve(alice, "lisbon")]
    assert got[0] == hit and after in got and ambient not in got
    # Found directly, an ambient record is still a candidate (the orchestrator drops it).
    got = [c.record.id for c in await HybridRetriever(store, config=cfg).retrieve(alice, "briefly")]
    assert ambient in got


async def test_records_are_built_only_for_the_returned_top_k(
    store: SQLiteStore, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranking runs on plain rows: Record models are built for the returned candidates only."""
    import retold._retrieval as retrieval

    for i in range(40):
        add(store, alice, f"garden note {i} about tomatoes and basil", session_id=f"s{i % 4}")
    built: list[str] = []
    real = retrieval._row_to_record

    def counting(row: dict[str, object]) -> object:
        built.append(str(row["id"]))
        return real(row)  # type: ignore[arg-type]

    monkeypatch.setattr(retrieval, "_row_to_record", counting)
    got = await HybridRetriever(store).retrieve(alice, "tomatoes basil garden", limit=3)
    assert len(got) == 3 and sorted(built) == sorted(c.record.id for c in got)


async def test_dense_vectors_are_embedded_once_per_record(
    store: SQLiteStore, alice: Principal
) -> None:
    """A watermark makes later searches embed only the query and records written since."""
    add(store, alice, "sourdough starter feeding schedule")
    embedder = HashEmbedder()
    retriever = HybridRetriever(store, config=RetrievalConfig(session_window=0), embedder=embedder)
    await retriever.search(alice, "sourdough")
    first = embedder.calls
    await retriever.search(alice, "starter")
    assert embedder.calls == first + 1  # the query only
    new = add(store, alice, "rye starter notes")
    got = await retriever.retrieve(alice, "rye")
    assert embedder.calls == first + 3 and got[0].record.id == new


async def test_common_words_leave_the_lexical_match_when_a_rarer_word_remains(
    store: SQLiteStore, alice: Principal, bob: Principal
) -> None:
    """A word found in more than lexical_common_postings records is dropped from the match
    when a rarer word remains, and bounds the match to the newest matches when none does
    (the newest in scope: another principal's matches, older, newer or in between, are
    neither scored nor counted)."""
    add(store, bob, "bob's weekend before")
    rare = add(store, alice, "the weekend pottery fair")
    common = []
    for i in range(6):
        common.append(add(store, alice, f"weekend note {i}"))
        add(store, bob, f"bob's weekend {i}")
    for i in range(5):
        add(store, bob, f"bob's later weekend {i}")
    cfg = LEXICAL.model_copy(update={"entity": False, "lexical_common_postings": 3})
    got = await HybridRetriever(store, config=cfg).search(alice, "pottery weekend")
    assert [c.record.id for c in got.candidates] == [rare]
    only_common = await HybridRetriever(store, config=cfg).search(alice, "weekend")
    # Every word is common: the newest three matches (rowid order) are the ones scored.
    assert {c.record.id for c in only_common.candidates} == set(common[-3:])
    wide = cfg.model_copy(update={"lexical_common_postings": 100})
    got = await HybridRetriever(store, config=wide).search(alice, "pottery weekend")
    assert got.candidates[0].record.id == rare and len(got.candidates) == 7


async def test_other_principals_rows_never_make_a_word_common_for_this_one(
    store: SQLiteStore, alice: Principal, bob: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a shared store (alice holds under a quarter of the rows) whether a word is common
    is counted in her own records: bob writing "weekend" a hundred times leaves it a
    selective word of hers, which keeps ranking her weekend notes; her lexical match reads
    only her postings (scope token AND). Bob, who holds most rows, reads plainly."""
    plans = [add(store, alice, "weekend hike with Ada"), add(store, alice, "weekend market")]
    other = add(store, alice, "pottery class on Tuesday")
    for i in range(100):
        add(store, bob, f"bob's weekend pottery {i}")
    cfg = LEXICAL.model_copy(update={"entity": False, "lexical_common_postings": 3})
    retriever = HybridRetriever(store, config=cfg)
    assert retriever._common_terms(["weekend", "pottery"], alice) == frozenset()
    assert retriever._common_terms(["weekend", "pottery"], None) == {"weekend", "pottery"}
    scoped: list[bool] = []

    class Spy(RetrievalSQL):
        def lexical(self, *args: Any, **kwargs: Any) -> list[tuple[str, float]]:
            scoped.append(kwargs["scoped"])
            return super().lexical(*args, **kwargs)

    monkeypatch.setattr(retriever, "dialect", Spy())
    got = await retriever.search(alice, "weekend pottery", limit=10)
    assert {c.record.id for c in got.candidates} == {*plans, other}
    assert all(c.record.principal == "alice" for c in got.candidates)
    # alice holds 3 of 103 rows: her reads are scoped; bob's (100 of 103) are plain
    assert scoped == [True]
    await retriever.search(bob, "weekend pottery", limit=10)
    assert scoped[1:] and not any(scoped[1:])
    # the index itself holds the scope: alice's token ANDed with the word finds her two
    rows = store.query_tuples(
        "SELECT rowid FROM records_fts WHERE records_fts MATCH ?",
        [scoped_match(alice, '"weekend"')],
    )
    assert len(rows) == 2


async def test_entity_stage_reads_the_rarest_names_while_their_postings_fit(
    store: SQLiteStore, alice: Principal, bob: Principal
) -> None:
    """Names are taken rarest first while their record lists fit in entity_postings; a
    name read alone keeps its newest entity_limit records (they all tie)."""
    both = add(store, alice, "Ngozi and Tobiah went to Lagos")
    rare = add(store, alice, "Ngozi called")
    common = [add(store, alice, f"Tobiah note {i}") for i in range(5)]
    for i in range(4):
        add(store, alice, f"filler line {i}")
        add(store, bob, f"Ngozi in another scope {i}")
    cfg = LEXICAL.model_copy(
        update={"lexical": False, "entity_postings": 3, "entity_max_share": 1.0}
    )
    got = await HybridRetriever(store, config=cfg).search(alice, "ngozi tobiah", limit=20)
    # Tobiah's six records do not fit after Ngozi's two: only Ngozi's are read.
    assert {c.record.id for c in got.candidates} == {both, rare}
    wide = cfg.model_copy(update={"entity_postings": 100})
    got = await HybridRetriever(store, config=wide).search(alice, "ngozi tobiah", limit=20)
    ids = [c.record.id for c in got.candidates]
    assert ids[0] == both and set(ids) == {both, rare, *common}
    # One name alone: the newest entity_limit of its records, scope kept. They tie, so
    # they come newest written first.
    alone = cfg.model_copy(update={"entity_limit": 4})
    got = await HybridRetriever(store, config=alone).search(alice, "tobiah", limit=20)
    assert [c.record.id for c in got.candidates] == common[1:][::-1]


async def test_speaker_only_matches_rank_below_topic_matches(
    store: SQLiteStore, alice: Principal
) -> None:
    """Turns that match only through a speaker's name (greetings) fuse at a low weight."""
    greet = [
        add(store, alice, f"Hey Amara! {t}", speaker="Clara", session_id=f"g{i}")
        for i, t in enumerate(("Long time.", "Good to hear from you.", "How are you?"))
    ]
    topic = add(store, alice, "My physio says the knee is fine.", speaker="Amara", session_id="t")
    cfg = RetrievalConfig(dense=False, session_window=0)
    got = await HybridRetriever(store, config=cfg).retrieve(alice, "Amara's physio?", limit=4)
    assert got[0].record.id == topic
    assert {c.record.id for c in got[1:]} == set(greet)
    assert all(c.score < got[0].score / 2 for c in got[1:])


class RecordingEmbedder(HashEmbedder):
    """HashEmbedder that remembers every text it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return await super().embed(texts)


async def test_dense_query_is_embedded_without_speaker_names(
    store: SQLiteStore, alice: Principal
) -> None:
    """The dense stage embeds the query without the scope's speaker names (others remain)."""
    add(store, alice, "We called the puppy Biscuit.", speaker="Amara")
    embedder = RecordingEmbedder()
    retriever = HybridRetriever(store, embedder=embedder)
    await retriever.search(alice, "What is the name of Amara's dog?")
    assert embedder.texts[-1] == "What is the name of dog?"
    await retriever.search(alice, "Amara?")
    assert embedder.texts[-1] == "Amara?"
    keep = HybridRetriever(
        store, config=RetrievalConfig(dense_skip_speakers=False), embedder=embedder
    )
    await keep.search(alice, "What is the name of Amara's dog?")
    assert embedder.texts[-1] == "What is the name of Amara's dog?"


class WaitingEmbedder(HashEmbedder):
    """Embeds a query only once the stages that do not read its vector have run (the
    record texts it embeds at once); ``fail`` makes that query's embedding raise."""

    def __init__(self, query: str, fail: bool = False) -> None:
        super().__init__()
        self.query, self.fail = query, fail
        self.stages_done = anyio.Event()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if list(texts) == [self.query]:
            with anyio.fail_after(5):  # the stages ran first, one after the other
                await self.stages_done.wait()
            if self.fail:
                raise ConnectionError("embedding service unreachable")
        return await super().embed(texts)


async def test_the_query_embedding_overlaps_the_stages_that_do_not_read_it(
    store: SQLiteStore, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lexical, entity and relation stages run while the query is embedded; the dense
    stage and fusion wait for both. An embedding error is raised as itself (not inside an
    exception group), and so is a stage's."""
    passport = add(store, alice, "Alice keeps her passport in the blue drawer.")
    add(store, alice, "The garden needs watering.")
    query = "Where is the passport?"
    embedder = WaitingEmbedder(query)
    retriever = HybridRetriever(store, embedder=embedder)
    stages = retriever._stages_sync

    def marked(*args: object, **kw: object) -> object:
        try:
            return stages(*args, **kw)  # type: ignore[arg-type]
        finally:
            anyio.from_thread.run_sync(embedder.stages_done.set)

    monkeypatch.setattr(retriever, "_stages_sync", marked)
    result = await retriever.search(alice, query, limit=2)
    assert result.candidates[0].record.id == passport
    assert {"lexical", "dense"} <= set(result.stage_counts)
    assert "embed" in result.timings_ms and "lexical" in result.timings_ms

    embedder.fail = True
    with pytest.raises(ConnectionError, match="unreachable"):
        await retriever.search(alice, query)

    def broken(*args: object, **kw: object) -> object:
        raise StoreError("database is locked")

    # A stage's error cancels the query's embedding (still waiting here) and is raised.
    embedder.fail = False
    monkeypatch.setattr(retriever, "_stages_sync", broken)
    with pytest.raises(StoreError, match="locked"):
        await retriever.search(alice, query)


async def test_summed_neighbours_lift_the_turn_inside_a_relevant_exchange(
    store: SQLiteStore, alice: Principal
) -> None:
    """In sum mode a turn between two found turns outranks a neighbour of one found turn,
    and only the window around each trigger is read."""
    texts = [
        "filler one",
        "I applied for the charge nurse job",
        "When do you start?",
        "charge nurse shifts are long",
        "On the fifteenth of May.",
        "filler two",
        "filler three",
    ]
    ids = [add(store, alice, t, session_id="s", kind=RecordKind.MESSAGE) for t in texts]
    cfg = RetrievalConfig(dense=False, entity=False, session_window=1, session_mode="sum")
    got = await HybridRetriever(store, config=cfg).retrieve(alice, "charge nurse", limit=10)
    order = [c.record.id for c in got]
    # ids[2] sits between both found turns and gains from both: it joins them at the top,
    # above ids[0] and ids[4], each beside one found turn only.
    assert set(order[:3]) == {ids[1], ids[2], ids[3]}
    assert set(order[3:5]) == {ids[0], ids[4]}
    # Beyond the window of every found turn: never read, never returned.
    assert ids[5] not in order and ids[6] not in order
    maxed = cfg.model_copy(update={"session_mode": "max"})
    got = await HybridRetriever(store, config=maxed).retrieve(alice, "charge nurse", limit=10)
    scores = {c.record.id: c.score for c in got}
    best = max(scores[ids[1]], scores[ids[3]])
    assert scores[ids[2]] == pytest.approx(best * cfg.session_decay)


async def test_a_when_question_lifts_the_turn_that_carries_the_date(
    store: SQLiteStore, alice: Principal
) -> None:
    """Asked when, a turn with a date or time phrase gains temporal_boost; otherwise not."""
    plain = add(store, alice, "I start the charge nurse job soon", session_id="a")
    dated = add(store, alice, "The charge nurse job starts on 15 May", session_id="b")
    cfg = RetrievalConfig(dense=False, entity=False, session_window=0, temporal_boost=0.5)
    got = await HybridRetriever(store, config=cfg).search(alice, "When does the nurse job start?")
    scores = {c.record.id: c.score for c in got.candidates}
    off = cfg.model_copy(update={"temporal_boost": 0.0})
    base = await HybridRetriever(store, config=off).search(alice, "When does the nurse job start?")
    before = {c.record.id: c.score for c in base.candidates}
    assert scores[dated] == pytest.approx(before[dated] * 1.5)
    assert scores[plain] == pytest.approx(before[plain])
    other = await HybridRetriever(store, config=cfg).search(alice, "the nurse job start")
    assert {c.record.id: c.score for c in other.candidates} == before


async def test_session_windows_are_read_only_where_they_can_change_the_top_limit(
    store: SQLiteStore, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipping the windows of sessions that cannot reach the top ``limit`` changes nothing:
    the same candidates, scores and paths as reading every trigger's window, in fewer reads."""
    words = ["lisbon", "tram", "harbour", "pastry", "fado", "tiles", "river", "castle"]
    for s in range(12):
        for t in range(8):
            picked = [words[(s * 3 + t * 5 + k) % len(words)] for k in range((s + t) % 3 + 1)]
            speaker = "Ann" if t % 2 else "Bo"
            text = " ".join(picked) + ("?" if t % 3 == 0 else ".")
            add(store, alice, text, session_id=f"s{s}", kind=RecordKind.MESSAGE, speaker=speaker)
    retriever = HybridRetriever(store, config=RetrievalConfig(dense=False, session_window=3))
    queries = ["lisbon tram", "when was the fado night", "castle river pastry", "tiles"]
    reads: list[int] = []
    real = store.query_tuples

    def spy(sql: str, params: object = ()) -> list[tuple[object, ...]]:
        if "AS trig" in sql:
            reads.append(sql.count("AS trig"))
        return real(sql, params)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "query_tuples", spy)

    async def run() -> list[list[tuple[str, float, tuple[str, ...]]]]:
        out = []
        for q in queries:
            for limit in (1, 3, 8):
                got = await retriever.retrieve(alice, q, limit=limit)
                out.append([(c.record.id, c.score, c.paths) for c in got])
        return out

    pruned = await run()
    pruned_reads = sum(reads)
    reads.clear()
    monkeypatch.setattr(
        HybridRetriever, "_sessions_that_matter", lambda self, hits, triggers, *a: triggers
    )
    assert await run() == pruned
    assert pruned_reads < sum(reads)


async def test_searches_of_one_event_loop_share_the_cpu_worker_threads(
    store: SQLiteStore, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retrieval's CPU-bound stages run on at most RETRIEVAL_THREADS threads per event loop
    (cores - 1), so concurrent searches never take every core from the loop's thread."""
    import threading
    import time

    import anyio

    import retold._retrieval as retrieval

    assert retrieval.RETRIEVAL_THREADS >= 1
    monkeypatch.setattr(retrieval, "RETRIEVAL_THREADS", 2)
    assert retrieval._cpu_limiter().total_tokens == 2  # made on first use in this loop
    add(store, alice, "Alice keeps her passport in the blue drawer.")
    retriever = HybridRetriever(store, config=LEXICAL)
    running = 0
    peak = 0
    lock = threading.Lock()
    inner = retriever._search_sync

    def counted(*args: object, **kw: object) -> object:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            time.sleep(0.02)  # long enough for the other searches to start meanwhile
            return inner(*args, **kw)  # type: ignore[arg-type]
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(retriever, "_search_sync", counted)
    found: list[int] = []

    async def one() -> None:
        found.append(len(await retriever.retrieve(alice, "passport drawer")))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
    assert found == [1, 1, 1, 1]
    assert 1 <= peak <= 2  # four at once without the shared limiter


async def test_session_diversity_spreads_the_cap_over_sessions(
    store: SQLiteStore, alice: Principal
) -> None:
    """With session_diversity, turns of an already-picked session are discounted after the
    first picks, so a weaker match in another session reaches a small cap; off, it does not."""
    crowd = [
        add(store, alice, f"marathon training {word} marathon", session_id="s1")
        for word in ("monday", "tuesday", "wednesday", "thursday")
    ]
    other = add(store, alice, "the marathon was tough on my knee", session_id="s2")
    cfg = LEXICAL.model_copy(update={"entity": False})
    plain = await HybridRetriever(store, config=cfg).retrieve(alice, "marathon training", limit=3)
    assert {c.record.id for c in plain} <= set(crowd)
    spread = cfg.model_copy(update={"session_diversity": 0.5, "session_diversity_after": 1})
    got = await HybridRetriever(store, config=spread).retrieve(alice, "marathon training", limit=3)
    ids = [c.record.id for c in got]
    assert ids[0] == plain[0].record.id  # the first pick goes by score alone
    assert other in ids and len(ids) == 3
    scores = [c.score for c in got]
    assert scores == sorted(scores, reverse=True)
    # Picks before session_diversity_after are never discounted.
    late = spread.model_copy(update={"session_diversity_after": 3})
    got = await HybridRetriever(store, config=late).retrieve(alice, "marathon training", limit=3)
    assert [c.record.id for c in got] == [c.record.id for c in plain]


def test_session_diversity_counts_the_picks_made_by_score_alone(store: SQLiteStore) -> None:
    """The first session_diversity_after picks go by score alone but still count as picks of
    their session: after two from one session, its next hit is discounted twice."""
    cfg = RetrievalConfig(session_diversity=0.5, session_diversity_after=2)

    def hit(rid: str, session: str, score: float) -> _Hit:
        return _Hit(row={"id": rid, "session_id": session}, score=score)

    ranked = [hit("a1", "a", 1.0), hit("a2", "a", 0.99), hit("a3", "a", 0.98), hit("b1", "b", 0.3)]
    got = HybridRetriever(store, config=cfg)._select(ranked, 3)
    # a3 would be 0.98 * 0.5**2 = 0.245 < 0.3: the other session's hit is picked.
    assert [(h.id, h.score) for h in got] == [("a1", 1.0), ("a2", 0.99), ("b1", 0.3)]


def test_rows_after_a_watermark_seek_to_the_scope_past_other_principals(
    store: SQLiteStore, alice: Principal, bob: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watermark read (entity indexing, embedding) returns the scope's newer rows only,
    in rowid order, through the scope's rowid index: it does not walk the rows other
    principals wrote after the mark."""
    first = add(store, alice, "Alice booked the flight")
    for i in range(5):
        add(store, bob, f"Bob note {i}")
    later = [add(store, alice, f"Alice note {i}") for i in range(3)]
    dialect = retrieval_sql(store)
    rows = dialect.records_after(store, alice, 0)
    assert [r["id"] for r in rows] == [first, *later]
    mark = rows[0]["rowid"]
    assert [r["id"] for r in dialect.records_after(store, alice, mark, 2)] == later[:2]
    assert dialect.records_after(store, alice, rows[-1]["rowid"]) == []
    # The plan of the statement records_after itself runs.
    statements: list[tuple[str, Any]] = []
    query = store.query

    def recording(sql: str, params: Any = ()) -> Any:
        statements.append((sql, params))
        return query(sql, params)

    monkeypatch.setattr(store, "query", recording)
    dialect.records_after(store, alice, mark)
    monkeypatch.undo()
    [(sql, params)] = statements
    plan = store.query("EXPLAIN QUERY PLAN " + sql, params)
    assert "USING INDEX records_scope_rowid (tenant=? AND principal=? AND rowid>?)" in str(plan)
