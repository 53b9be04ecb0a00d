"""The deterministic reference policies: the lexical gap planner and admission judge."""

from __future__ import annotations

from datetime import UTC, datetime

from retold import EvidenceRef, ProfileBlock, ReasonCode, Record
from retold.policy.lexical import (
    LexicalAdmissionJudge,
    LexicalGapPlanner,
    content_terms,
    people_asked_about,
    people_introduced,
    stem,
    turn_reach,
)

INVENTORY = ["constraint", "relationship_or_event"]
EMPTY = ProfileBlock.empty()


def _record(
    rid: str,
    text: str,
    session: str = "s1",
    turn: int = 0,
    day: int = 1,
    attribute: str | None = None,
) -> Record:
    when = datetime(2026, 1, day, 12, 0, tzinfo=UTC)
    return Record.model_validate(
        {
            "id": rid,
            "tenant": "t",
            "principal": "p",
            "kind": "fact",
            "text": text,
            "evidence": [EvidenceRef(session_id=session, turn_index=turn)],
            "session_id": session,
            "event_time": when,
            "created_at": when,
            "updated_at": when,
            "attribute": attribute,
        }
    )


def test_stem_and_content_terms() -> None:
    """Stemming strips plurals and -ing; content terms drop stopwords."""
    assert stem("cavities") == "cavity" and stem("running") == "runn"
    assert content_terms("What was the name of my dentist again?") == ["dentist"]


def test_general_knowledge_plans_no_gap() -> None:
    """An impersonal question needs no memory: no gap."""
    planner = LexicalGapPlanner()
    for turn in (
        "What's the capital of Australia?",
        "What is mochi made of?",
        "Why is the sky blue?",
    ):
        assert planner.plan(turn, None, EMPTY, INVENTORY).gaps == ()


def test_empty_inventory_and_small_talk_plan_no_gap() -> None:
    """No stored memory, or pure small talk, plans nothing."""
    planner = LexicalGapPlanner()
    assert planner.plan("What was my dentist's name?", None, EMPTY, []).gaps == ()
    assert planner.plan("thanks for all my help, good night", None, EMPTY, INVENTORY).gaps == ()


def test_personal_recall_plans_a_gap_from_the_turns_own_words() -> None:
    """A question about the user's own things plans one gap; its query adds no topic words."""
    decision = LexicalGapPlanner().plan("What was the name of my dentist?", None, EMPTY, INVENTORY)
    assert len(decision.gaps) == 1
    assert decision.gaps[0].query.split() == ["dentist"]
    assert decision.policy.endswith("offline@6")


def test_a_request_to_the_assistant_plans_no_gap() -> None:
    """ "Me" as the object of a request ("tell me", "write me") and the "I" of a how-to are
    anybody's; a first person elsewhere, or a possessive that opens the turn, plans a gap."""
    planner = LexicalGapPlanner()
    for turn in (
        "Tell me a fun fact about peanuts.",
        "Write me a jazz haiku.",
        "Give me a vegetarian lasagne recipe.",
        "How do I say 'thank you' in Japanese?",
        "What's the capital of Peru?",
    ):
        assert planner.plan(turn, None, EMPTY, INVENTORY).gaps == (), turn
    for turn in (
        "Is peanut butter okay for me?",
        "What should we cook tonight?",
        "Noor's school wants a snack list, what can she have?",
        "When is Carla's birthday?",
    ):
        assert len(planner.plan(turn, None, EMPTY, INVENTORY).gaps) == 1, turn


def test_turn_reach_an_opening_possessive_counts_for_a_name_the_memory_uses() -> None:
    """A possessive that opens the turn may be any capitalised word: it makes the turn
    personal only for a name a candidate writes capitalised inside a sentence."""
    turn = "Finn's party is on Friday, any cake ideas?"
    assert turn_reach(turn, ["My nephew Finn turns six."]) == (True, True)
    assert turn_reach(turn, ["Finn turns six."]) == (False, False)
    assert turn_reach("Today's plan is a hike, any tips?", ["Today I hike with Ana."])[0] is False
    assert turn_reach("How do I fix my bike?", []) == (True, True)
    assert turn_reach("How do I fix a bike?", []) == (False, False)
    assert turn_reach("How do I fix the bike?", []) == (False, True)


def test_judge_an_impersonal_turn_needs_more_than_one_shared_word() -> None:
    """A turn about nobody's life ("Recommend a podcast for the bus") shares one topic word
    with "I take the bus to work" and gets nothing; a personal turn needs one, an impersonal
    turn that asks for advice two."""
    cands = [_record("a", "I take the bus to work every morning.")]
    judge = LexicalAdmissionJudge()
    assert judge.admit("Recommend a podcast for the bus.", None, EMPTY, "draft", cands).is_empty
    assert judge.admit("Tell me about the bus.", None, EMPTY, "draft", cands).is_empty
    personal = judge.admit("What can I listen to on the bus?", None, EMPTY, "draft", cands)
    assert personal.admitted == ("a",)
    two = judge.admit("Recommend a podcast for the bus to work.", None, EMPTY, "draft", cands)
    assert two.admitted == ("a",)
    strict = LexicalAdmissionJudge(min_shared_impersonal=3)
    assert strict.admit(
        "Recommend a podcast for the bus to work.", None, EMPTY, "d", cands
    ).is_empty


def test_judge_admits_related_and_rejects_unrelated() -> None:
    """A candidate sharing the turn's terms is helpful; an unrelated one is insufficient."""
    cands = [_record("a", "my dentist is Dr. Patel"), _record("b", "I planted basil", "s2")]
    decision = LexicalAdmissionJudge().admit("who is my dentist?", None, EMPTY, "draft", cands)
    assert decision.admitted == ("a",)
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert reasons == {"a": ReasonCode.HELPFUL, "b": ReasonCode.INSUFFICIENT}


def test_judge_prefers_the_later_session_on_the_same_topic() -> None:
    """An earlier session's statement on the same terms is stale when a later one exists."""
    old = _record("old", "my rent is 1,850", session="s1", day=1)
    new = _record("new", "the rent is now 1,780", session="s2", day=9)
    decision = LexicalAdmissionJudge().admit("what's my rent?", None, EMPTY, "draft", [old, new])
    assert decision.admitted == ("new",)
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert reasons["old"] is ReasonCode.STALE_OR_CONFLICTING


def test_judge_keeps_both_items_of_a_keyed_list() -> None:
    """Two allergies the store keys apart (allergy/peanut, allergy/shellfish) are no update of
    each other: both are admitted, though a later session's statement answers the same terms;
    unkeyed, the older still gives way; one admitted item brings the list's other items."""
    peanut, shellfish = "I'm allergic to peanuts.", "I'm also allergic to shellfish."
    keyed = [
        _record("old", peanut, session="s1", day=1, attribute="allergy/peanut"),
        _record("new", shellfish, session="s2", day=9, attribute="allergy/shellfish"),
    ]
    unkeyed = [
        _record("old", peanut, session="s1", day=1),
        _record("new", shellfish, session="s2", day=9),
    ]
    judge = LexicalAdmissionJudge()
    decision = judge.admit("What am I allergic to?", None, EMPTY, "draft", keyed)
    assert sorted(decision.admitted) == ["new", "old"]
    assert judge.admit("What am I allergic to?", None, EMPTY, "draft", unkeyed).admitted == ("new",)
    hers = [
        _record(
            "mila",
            "My daughter is allergic to strawberries.",
            session="s3",
            day=12,
            attribute="daughter:allergy/strawberry",
        ),
        _record(
            "egg",
            "Eggs are out too for her.",
            session="s4",
            day=15,
            attribute="daughter:allergy/egg",
        ),
    ]
    decision = judge.admit("Is my daughter allergic to strawberries?", None, EMPTY, "", hers)
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert decision.admitted == ("mila", "egg")
    assert reasons["egg"] is ReasonCode.JOINTLY_HELPFUL
    # two budgets are for two purposes: one does not bring the other
    budgets = [
        _record(
            "trip",
            "My budget for the trip is 2000 euros.",
            session="s5",
            day=20,
            attribute="budget/trip",
        ),
        _record(
            "food",
            "Groceries: 80 a week at most.",
            session="s6",
            day=22,
            attribute="budget/grocery",
        ),
    ]
    decision = judge.admit("What's my budget for the trip?", None, EMPTY, "", budgets)
    assert decision.admitted == ("trip",)


def test_judge_admits_message_mates_jointly() -> None:
    """Another sentence of the admitted record's message is jointly helpful; another message
    of its session, about something else, is not."""
    a = _record("a", "building a recipe app for my portfolio", turn=0)
    b = _record("b", "decided on Supabase for auth", turn=0)
    c = _record("c", "I visited the Eiffel Tower last year", turn=2)
    decision = LexicalAdmissionJudge().admit("add login to my app", None, EMPTY, "draft", [a, b, c])
    assert decision.admitted == ("a", "b")
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert (reasons["b"], reasons["c"]) == (ReasonCode.JOINTLY_HELPFUL, ReasonCode.INSUFFICIENT)


def test_judge_redundant_and_empty() -> None:
    """What the draft already says is redundant; no candidates is EMPTY."""
    judge = LexicalAdmissionJudge()
    cand = _record("a", "dentist Patel")
    decision = judge.admit("my dentist?", None, EMPTY, "Your dentist is Patel.", [cand])
    assert decision.is_empty
    assert decision.verdicts[0].reason is ReasonCode.REDUNDANT
    assert judge.admit("my dentist?", None, EMPTY, "draft", []).is_empty


def test_stem_folds_a_silent_e() -> None:
    """write / writing and move / moved stem alike."""
    assert stem("writing") == stem("write") and stem("moved") == stem("move")


def test_follow_up_plans_a_task_state_gap() -> None:
    """A short anaphoric follow-up plans a task_state gap; a named subject does not."""
    planner = LexicalGapPlanner()
    gaps = planner.plan("how do I fix it?", None, EMPTY, INVENTORY).gaps
    assert len(gaps) == 1 and gaps[0].category.value == "task_state"
    assert "it" in gaps[0].query.split() and "my" in gaps[0].query.split()
    assert planner.plan("When is the winter solstice this year?", None, EMPTY, INVENTORY).gaps == ()
    assert LexicalGapPlanner.policy_id.endswith("offline@6")


def test_judge_follow_up_admits_the_latest_conversation() -> None:
    """A follow-up admits the newest session's statements, not an older session's."""
    old = _record("old", "I planted basil", session="s0", day=1)
    a = _record("a", "docker run fails: port 5432 is already allocated", session="s1", day=5)
    b = _record("b", "postgres is installed via brew", session="s1", turn=2, day=5)
    decision = LexicalAdmissionJudge().admit("how do I fix it?", None, EMPTY, "d", [old, a, b])
    assert set(decision.admitted) == {"a", "b"}


def test_judge_change_words_never_mark_an_unrelated_record_stale() -> None:
    """A later "actually we moved the trip" leaves the job record admitted (no cue-word staleness)."""
    job = _record("job", "my job at Deloitte is analyst", session="s1", day=1)
    trip = _record(
        "trip", "actually we moved the trip to June, I left it late", session="s2", day=9
    )
    decision = LexicalAdmissionJudge().admit(
        "what's my job at Deloitte called?", None, EMPTY, "d", [job, trip]
    )
    assert decision.admitted == ("job",)
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert reasons["trip"] is ReasonCode.INSUFFICIENT


def test_judge_admits_statements_that_share_a_subject_jointly() -> None:
    """Two sessions' statements about the same trip, one of them naming the turn's terms, are
    admitted together (joint evidence)."""
    judge = LexicalAdmissionJudge()
    land = _record("land", "off to Reykjavik for work, I land on June 9", session="s1", day=1)
    back = _record(
        "back", "Reykjavik trip extended, I now fly home June 16 instead of the 12th", "s2", day=5
    )
    decision = judge.admit("how many nights of hotel for my trip?", None, EMPTY, "d", [land, back])
    assert set(decision.admitted) == {"land", "back"}


def test_judge_a_name_is_not_the_common_word() -> None:
    """ "my mum Rose" does not answer a question about pruning roses."""
    cand = _record("a", "my mum Rose is turning 70 next month")
    decision = LexicalAdmissionJudge().admit("When should I prune roses?", None, EMPTY, "d", [cand])
    assert decision.is_empty


def test_other_languages_plan_gaps_from_first_person_and_recall_cues() -> None:
    """Possessives, pronouns and recall cues in Spanish, Portuguese, French, German and
    Hindi in Latin script plan a gap; accented words stay whole in the query."""
    planner = LexicalGapPlanner()
    for turn in (
        "¿A qué hora era lo del mecánico?",
        "Was soll ich am Samstag kochen?",
        "kitne din bache hain exam mein?",
        "¿Cuándo es la cita de mi hija?",
        "qual é o endereço da minha irmã?",
        "c'est quand, mon rendez-vous chez le dentiste?",
        "wann ist der Termin nochmal?",
        "mera flight kab hai?",
        "dime otra vez el nombre del restaurante",
    ):
        assert len(planner.plan(turn, None, EMPTY, INVENTORY).gaps) == 1, turn
    query = planner.plan("¿A qué hora era lo del mecánico?", None, EMPTY, INVENTORY).gaps[0].query
    assert "mecánico" in query.split() and "del" not in query.split()
    assert content_terms("mein Kumpel verträgt keine Meeresfrüchte") == [
        "kumpel",
        "verträgt",
        "kein",
        "meeresfrücht",
    ]


def test_english_words_are_not_taken_for_foreign_cues() -> None:
    """ "main", "mere" and "war" stay ordinary English words: no gap, still content terms."""
    planner = LexicalGapPlanner()
    for turn in ("What's the main cause of the French Revolution?", "Is a mere cold contagious?"):
        assert planner.plan(turn, None, EMPTY, INVENTORY).gaps == ()
    assert "war" in content_terms("the cats declared war on the tree")


def test_judge_a_conflict_link_rejects_the_record() -> None:
    """A candidate the store links to a conflicting record is stale_or_conflicting."""
    old = _record("old", "my wife and I are expecting our first, due August 22", "s1", day=1)
    linked = old.model_copy(update={"conflicts_with": ("other",)})
    decision = LexicalAdmissionJudge().admit("when is my wife due?", None, EMPTY, "d", [linked])
    assert decision.admitted == ()
    assert decision.verdicts[0].reason is ReasonCode.STALE_OR_CONFLICTING


def test_the_planner_carries_no_topical_expansion() -> None:
    """Every word of a planned query comes from the turn itself: no topical word list."""
    turn = "How do I hang a big mirror in my hallway?"
    query = LexicalGapPlanner().plan(turn, None, EMPTY, INVENTORY).gaps[0].query.split()
    assert query and all(word in turn.lower() for word in query)
    assert "drilling" not in query


def test_a_question_about_one_of_the_principals_people_by_name() -> None:
    """ "What does Jonas do?" plans a gap, and the judge admits the records that name Jonas
    once a candidate introduces him as the principal's ("my partner Jonas"); a name nobody
    introduced ("What did Einstein discover?") stays impersonal and admits nothing."""
    planner, judge = LexicalGapPlanner(), LexicalAdmissionJudge()
    assert planner.plan("What does Jonas do?", None, EMPTY, INVENTORY).gaps
    partner = _record("a", "I live in Munich with my partner Jonas.", turn=0)
    job = _record("b", "Jonas is a carpenter.", turn=2)
    book = _record("c", "I'm reading a biography of Einstein.", turn=4)
    hiking = _record("d", "I love hiking in the Alps.", turn=6)
    cands = [partner, job, book, hiking]
    assert judge.admit("What does Jonas do?", None, EMPTY, "", cands).admitted == ("a", "b")
    assert judge.admit("What did Einstein discover?", None, EMPTY, "", cands).admitted == ()
    # a name is not enough without the introduction: Jonas could be anyone
    assert judge.admit("What does Jonas do?", None, EMPTY, "", [job, book]).admitted == ()
    # the name, not the topic, decides which records a question about someone reaches
    decision = judge.admit("Does Jonas like hiking?", None, EMPTY, "", cands)
    assert "d" not in decision.admitted and "a" in decision.admitted


def test_people_introduced_reads_every_name_of_a_plural_relation_and_only_the_users() -> None:
    """ "my kids Mia and Leo" gives both names; "your sister Ana" is someone else's sister,
    so a question about Ana does not reach memory through it."""
    texts = ["My kids Mia and Leo start school.", "How is your sister Ana doing?"]
    people = people_introduced(texts)
    assert people == {"Mia": "kids", "Leo": "kids"}
    assert people_asked_about("What does Leo like for lunch?", people) == {"Leo"}
    assert people_asked_about("What does Ana do now?", people) == set()
