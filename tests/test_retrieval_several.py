"""Questions that ask for several things (``several_diversity``): their evidence often lies in
several sessions, so the tail of a small cap is spread over sessions for them, and only them."""

from __future__ import annotations

import pytest

from retold import Principal, RecordDraft, Store
from retold._retrieval import HybridRetriever, RetrievalConfig, _asks_several

pytestmark = pytest.mark.anyio

LEXICAL = RetrievalConfig(dense=False, session_window=0, entity=False)
SCOPE = Principal(tenant="t", principal="chat")


@pytest.mark.parametrize(
    "question",
    [
        "What activities does Melanie partake in?",
        "What roles does Jordan have at his school?",
        "Which of Mei's hobbies involve food?",
        "What are Caroline's plans for the summer?",
        "What kind of food does Amara enjoy?",
        "Who is Amara's partner and what are they training for?",
        "Which marathon training sessions went well?",
        "Which children came to the party?",
    ],
)
def test_questions_that_ask_for_several_things(question: str) -> None:
    assert _asks_several(question)


@pytest.mark.parametrize(
    "question",
    [
        "What is Mei's job?",
        "What does Mei do at the food bank?",
        "Which bus does she take?",
        "What does Mei's cousin do for work?",
        "Where has Melanie camped?",
        "What are you doing?",
        "How many more days do we have Dad here?",
        "What was his address?",
        "What did the children build?",
        "Which marathon training session went well?",
        "Tom and Ana are coming over",
    ],
)
def test_questions_that_ask_for_one_thing(question: str) -> None:
    assert not _asks_several(question)


def fill(store: Store) -> tuple[list[str], str]:
    """Six turns of one session match the question better than one turn of another."""
    crowd = [
        store.add(
            SCOPE,
            RecordDraft(text=f"marathon training went well on {day}", session_id="s1"),
        ).id
        for day in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
    ]
    other = store.add(
        SCOPE, RecordDraft(text="the marathon was tough on my knee", session_id="s2")
    ).id
    return crowd, other


async def top(store: Store, config: RetrievalConfig, query: str) -> list[str]:
    result = await HybridRetriever(store, config=config).search(SCOPE, query, limit=5)
    return [c.record.id for c in result.candidates]


async def test_a_question_for_several_things_reaches_another_session(any_store: Store) -> None:
    """By score alone the cap of five is all one session. Asked for several sessions'
    worth ("sessions"), the fifth pick goes to the other session's turn; asked for one, the
    list is the score order, and with several_diversity at 1 the plural changes nothing."""
    crowd, other = fill(any_store)
    several = "Which marathon training sessions went well?"
    one = "Which marathon training session went well?"
    plain = await top(any_store, LEXICAL, one)
    assert set(plain) <= set(crowd) and len(plain) == 5
    spread = await top(any_store, LEXICAL, several)
    assert spread[:4] == plain[:4]  # session_diversity_after: the first picks by score
    assert spread[4] == other
    off = LEXICAL.model_copy(update={"several_diversity": 1.0})
    assert await top(any_store, off, several) == plain


async def test_session_diversity_below_several_diversity_still_applies(any_store: Store) -> None:
    """The lower of session_diversity and several_diversity applies: a host that spreads
    every question keeps doing so for single questions."""
    _, other = fill(any_store)
    everywhere = LEXICAL.model_copy(update={"session_diversity": 0.5})
    assert other in await top(any_store, everywhere, "Which marathon training session went well?")
