"""Which later statement replaces which earlier one: extraction keys a record by subject,
attribute and, for things a person has several of, the item (``allergy/peanut``,
``diet/meat``, ``budget/trip``), and only a statement of the same key supersedes.

Each case is two sessions, one sentence each, through :func:`extract_session` and the offline
extractor. The phrasings were written before the rules that read them, and not tuned on a
scenario set.
"""

from __future__ import annotations

import pytest

from retold import LifecycleState, Principal, Role, SQLiteStore, TranscriptTurn
from retold._extraction import OfflineExtractor, extract_session

from .conftest import FixedClock

SCOPE = Principal(tenant="acme", principal="maya")

# (earlier statement, later statement): an update of the same thing.
REPLACES = [
    ("I live in Munich.", "We moved to Hamburg last month."),
    ("I live in Munich.", "I'm living in Vienna now."),
    ("I work at Siemens.", "I work for Bosch now."),
    ("I'm a nurse.", "I'm a paramedic now."),
    ("I'm an architect.", "I'm a teacher these days."),
    ("I'm allergic to peanuts.", "Turns out I'm not allergic to peanuts after all."),
    ("I have a peanut allergy.", "I'm no longer allergic to peanuts."),
    ("I'm vegetarian.", "I've gone vegan."),
    ("I'm vegan.", "I'm not vegan anymore."),
    ("My budget for the trip is 2000 euros.", "My budget for the trip is now 2500 euros."),
    ("My budget is 500 a month.", "My budget is 600 a month now."),
    ("My favourite band is Radiohead.", "My favourite band is Wilco these days."),
    ("My car is a 2015 Golf.", "My car is a Tesla now."),
    ("My son is allergic to eggs.", "My son isn't allergic to eggs anymore."),
    ("Please keep your answers short.", "Actually, longer answers are fine now."),
    ("My birthday is March 3.", "Sorry, my birthday is actually March 13."),
    ("My favourite food is ramen.", "My favourite food is sushi, not ramen, I misspoke."),
    ("I work as a nurse.", "My new job at the clinic is as a midwife."),
    ("I'm allergic to shellfish.", "Turns out I'm allergic to sesame, not shellfish."),
    ("I live in Munich.", "We moved to the Netherlands in June."),
    ("I live in Lisbon.", "we moved to porto last spring"),
    ("I'm a junior developer.", "I'm a senior developer now."),
    ("I'm vegetarian.", "I eat meat again, I'm not vegetarian anymore."),
    ("My budget for the wedding is 20k.", "Our wedding budget is 25k now."),
    ("I have a mild peanut allergy.", "My peanut allergy got worse, it's severe now."),
    (
        "My daughter is allergic to nuts.",
        "My daughter has outgrown it, she's not allergic to nuts anymore.",
    ),
    ("My favourite colour is blue.", "My favourite colour is green now."),
    ("I live in Munich.", "We moved to the US in 2019."),
    ("My budget is 500.", "My monthly budget is 600 now."),
    ("I work at Siemens.", "I just started a new job at Bosch."),
    ("I'm a teacher.", "I got a new job as a school librarian."),
    ("I work for a bank.", "I got hired by a startup last week."),
    ("I work as a waiter.", "I've started working as a barista."),
    ("I work at Siemens.", "I now work for Bosch."),
    ("I work at Siemens.", "I quit my job at Siemens."),
    ("I work at Siemens.", "I'm now working at Bosch."),
    ("I work as a nurse.", "I work as a midwife now."),
    ("I'm a nurse at the city hospital.", "I'm a primary school teacher now."),
    ("I work as a pharmacist in town.", "I'm a full-time carer for my dad now."),
    ("I work as a pharmacist in town.", "I'm a data analyst at a bank now."),
    ("I work as a pharmacist in town.", "I'm a sous chef at a hotel now."),
    ("I'm a nurse at the city hospital.", "I'm an electrician."),
]

# (earlier statement, later statement): both stay true; the later one replaces nothing.
ADDS_UP = [
    ("I work at Siemens.", "I'm a Londoner."),
    # an instruction is not keyed by the fact it gives as its reason
    ("Please always cite your sources, I'm a journalist.", "I'm a nurse at the clinic now."),
    ("Use kilometres instead of miles from now on, I live in Germany.", "We moved to Spain."),
    ("I'm vegan.", "They're vegetarian, so no meat dishes, please."),
    ("I'm allergic to peanuts.", "I'm also allergic to shellfish."),
    ("I'm allergic to penicillin.", "My daughter is allergic to cats."),
    ("I work at Siemens.", "I'm a big fan of jazz."),
    ("I'm a nurse.", "I'm a morning person."),
    ("I'm vegetarian.", "I'm gluten intolerant."),
    ("I'm vegan.", "I'm trying keto for a month."),
    ("My budget for the trip is 2000 euros.", "My budget for groceries is 80 euros a week."),
    ("My sister is a nurse in Leeds.", "My sister is coming to visit in May."),
    ("My car is a 2015 Golf.", "My car is making a weird noise."),
    ("I live in Munich.", "We moved to Tuesday evenings for choir."),
    ("I live in Munich.", "We moved to a new office downtown."),
    ("I live in Munich.", "I moved to the night shift in March."),
    ("My favourite band is Radiohead.", "My favourite food is ramen."),
    ("I work as a nurse.", "My job is stressing me out this week."),
    ("I'm allergic to peanuts.", "My allergies are acting up with all this pollen."),
    ("My sister lives in Porto.", "My sister is a nurse."),
    ("I'm allergic to cats.", "My boyfriend is allergic to cats too."),
    ("My daughter is vegetarian.", "I'm vegetarian too."),
    ("I'm a software engineer at Google.", "I'm a huge Arsenal fan."),
    ("My budget is 500 a month.", "My budget for the wedding is 20k."),
    ("My car is a 2015 Golf.", "My car was stolen last night."),
    ("I'm allergic to peanuts and tree nuts.", "I'm allergic to shellfish as well."),
    ("I'm a vegetarian.", "I'm a nurse."),
    ("I work at Siemens.", "I'm a bit of a perfectionist."),
    ("I'm a teacher.", "I'm a mum of two."),
    ("I have a dog allergy.", "I'm allergic to pollen too."),
    ("I live in Munich.", "We moved to a different gym."),
    ("My favourite band is Radiohead.", "My favourite band's new album is out."),
    ("I'm allergic to latex.", "I'm allergic to the pollen in spring too."),
    ("I'm allergic to peanuts.", "I'm not sure if I'm allergic to kiwi."),
    ("I'm allergic to peanuts.", "I'm allergic to cats, not dogs."),
    ("I'm a nurse.", "I'm a little nervous about tomorrow."),
    ("I'm a nurse.", "I'm a huge believer in routines."),
    ("I live in Munich.", "We moved to next week's slot."),
    ("I live in Munich.", "I moved to the back row at choir."),
    ("My budget for food is 300 a month.", "My budget for rent is 1200."),
    ("My car is a Golf.", "My car is in the shop this week."),
    ("My car is a Golf.", "My car is still making that noise."),
    ("My favourite band is Radiohead.", "My favourite band is playing in Berlin next week."),
    ("My favourite band is Radiohead.", "My favourite band is not touring this year."),
    ("My best friend is Anna.", "My best friend is a vet."),
    ("My boss is Greg.", "My boss is on holiday."),
    ("I'm vegan.", "My son is vegan too."),
    ("I'm vegetarian.", "I'm halal as well, so no pork either."),
    ("I'm lactose intolerant.", "I'm vegan."),
    ("I work at Siemens.", "My husband just started a new job at Bosch."),
    ("I work at Siemens.", "I started a new job search."),
    ("I work at Siemens.", "I had a job interview at Bosch."),
    ("I work at Siemens.", "I'm working at home today."),
    ("I work at Siemens.", "I work at night mostly."),
    ("I work at Siemens.", "I work for hours without a break."),
    ("I work as a nurse.", "I work as hard as anyone."),
    ("I work at Siemens.", "I'm working at the moment, talk later."),
    ("I'm a nurse.", "My sister got a new job as a nurse too."),
    ("I work at Siemens.", "I work at my desk until six."),
    # "I'm a/an" a habit, a verdict, a stage of life, a family tie or a status: no new job
    ("I'm a nurse at the city hospital.", "I'm an early riser, usually up by 5."),
    ("I'm a nurse at the city hospital.", "I'm an adult, I can handle it."),
    ("I'm a nurse at the city hospital.", "I'm a light sleeper."),
    ("I'm a nurse at the city hospital.", "I'm a terrible cook."),
    ("I'm a nurse at the city hospital.", "I'm a new mum."),
    ("I'm a nurse at the city hospital.", "I'm an introvert."),
    ("I'm a nurse at the city hospital.", "I'm a homeowner now."),
    ("I work as a pharmacist in town.", "I'm a sound sleeper, nothing wakes me."),
    ("I work as a pharmacist in town.", "I'm a hopeless romantic."),
    ("I work as a pharmacist in town.", "I'm a single parent."),
    ("I work as a pharmacist in town.", "I'm a grandad now!"),
    ("I work as a pharmacist in town.", "I'm a regular at that cafe."),
    ("I work as a pharmacist in town.", "I'm a keen gardener."),
    ("I work as a pharmacist in town.", "I'm a good listener."),
    ("I work as a pharmacist in town.", "I'm a dual citizen."),
    ("I work as a pharmacist in town.", "I'm a, um, bit lost today."),
    ("I work as a pharmacist in town.", "Work is odd, I'm a these days."),
]


async def _later_supersedes(
    store: SQLiteStore, clock: FixedClock, earlier: str, later: str
) -> bool:
    """Write ``earlier`` then, a day later, ``later``, each in its own session; whether the
    second extraction superseded the first statement's record (checked in the store too)."""
    first = None
    for session, text in (("s1", earlier), ("s2", later)):
        store.add_turn(
            SCOPE,
            TranscriptTurn(
                session_id=session, turn_index=0, role=Role.USER, text=text, time=clock()
            ),
        )
        result = await extract_session(store, SCOPE, session, OfflineExtractor())
        assert result.failure is None and result.records, (session, text)
        first = first or result.records[0].id
        clock.advance(days=1)
    assert first is not None
    old = store.get(SCOPE, first)
    assert old is not None
    replaced = old.lifecycle is LifecycleState.SUPERSEDED
    assert replaced == (result.superseded == (first,))
    return replaced


@pytest.mark.anyio
@pytest.mark.parametrize(("earlier", "later"), REPLACES)
async def test_an_update_of_the_same_thing_supersedes(
    store: SQLiteStore, clock: FixedClock, earlier: str, later: str
) -> None:
    assert await _later_supersedes(store, clock, earlier, later)


@pytest.mark.anyio
@pytest.mark.parametrize(("earlier", "later"), ADDS_UP)
async def test_a_second_thing_of_a_kind_supersedes_nothing(
    store: SQLiteStore, clock: FixedClock, earlier: str, later: str
) -> None:
    assert not await _later_supersedes(store, clock, earlier, later)
