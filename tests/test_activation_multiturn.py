"""Activation on multi-turn development histories (tests/data/activation_multiturn).

Thirty personas state 117 answer-style, language and accessibility preferences in the middle
of ordinary sessions: after a game that has ended, after a translation or a quoted note,
after someone else's preference, as a relative clause ("Which is why I want you to ..."),
in a list about themselves beside their occupation (which a later occupation must not
supersede), as a dislike ("I hate it when you use emojis"), with the reason that suggests it ("English
isn't my first language, so please keep your wording simple", "I have ADHD, so one idea per
paragraph helps me a lot"), as a request-question ("Would you mind using metric with me?"),
at the end of a long message about something else, in chat spellings and terse chat style ("shorter answers going forward ty"), as the
answer to the assistant's question, as praise of a reply with "Do that every time", in
misspelled chat ("plz allways anwser in portugese": only the ``local`` bundle, which places
claims by meaning, reads it; the keyword rules of ``offline-reference`` do not), as a
change ("switch to numbered lists instead of bullets", "go back to English for your
replies"), which must also take the earlier bullets and Italian out of force (and "more detail again
from now on", "my vision is fine now, so you can drop the low-vision formatting" those of
an earlier session), "Don't bother with greetings at the start of your answers. Ever.", answer styles and access
needs stated in Spanish, German, Italian, French and Portuguese ("Respuestas cortas, por
favor, siempre.", "Benutze bitte immer metrische Einheiten.", "Sou daltónica, por isso nunca
uses só cores ...", "Ik heb liever korte antwoorden, altijd.", "Wolę krótkie odpowiedzi",
"Gebruik voortaan genummerde lijsten als je stappen uitlegt"), beside an access need that names another format ("I
use a screen reader, so no tables" after "Numbered lists, always"), in a list about themselves, said again after a lead-in ("I've said it
before: short answers, always."), with a condition stated as their reason, and a language
of reply asked for in Spanish, German, Portuguese, Italian (as a question), Dutch and Polish.
Beside them, 205 one-session histories that must not be promoted: a game, quiz or interview
practice set up earlier in the session, a test announced in the same turn, someone else at
the device (also when they say who they are or that they borrowed it), answers read to a
class, quoted, relayed, reported, sarcastic, future, past and hypothetical wishes, a
question about the assistant's habits, a family rule, material being
written, a rule for one topic or for the next couple of hours, and the same in Spanish,
German, Portuguese, Italian, French, Dutch and Polish (a son's or boss's wish, replies for
a grandmother, a friend on the principal's phone); a bot's persona, a brainstorm, meeting
notes, another voice assistant, the speaker's own plan to write in Italian, a bare "Test:",
access needs that are someone else's or for one document, and a rule for a class of the
principal's own writing ("For all my emails to the landlord, keep the tone polite"), a rule
for a repository, a teacher's rule for the class, a pasted system prompt, sarcasm, and a change of language for a while, for one answer, for
someone else or for a team's documents; and in those languages one-off requests that name
a style ("Bitte erkläre mir kurz, wie ...", "Dammi un elenco puntato ...", "Resume este
texto en tres frases cortas"), a rule within one document, a game, a boss's wish and a
need that is a daughter's or a friend's.

Written for development, never taken from the test split. Run through the real pipeline
of the ``offline-reference`` bundle and of the ``local`` one (whose classifier also places
claims by meaning, so it is the one more likely to promote).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from retold import _fitness

CASES = Path(__file__).parent / "data" / "activation_multiturn"


# What a bundle is known to miss, by design (see the module doc).
KNOWN_MISSES = {
    "offline-reference": ["pref-dana-001", "pref-yusuf-003"],
    "local": ["pref-yusuf-003"],
}


@pytest.mark.parametrize("name", ["offline-reference", "local"])
def test_every_preference_is_kept_and_nothing_framed_is_promoted(name: str) -> None:
    if name == "local":
        pytest.importorskip("sentence_transformers")
    bundle = _fitness.load_bundle(name)
    result = anyio.run(lambda: _fitness.run_fitness(bundle, CASES, review_owner="tests"))
    run = result.runs["ambient"]
    assert run.ambient_preferences == 117, run.misses
    assert sorted(run.misses.get("ambient_missed", [])) == KNOWN_MISSES[name], run.misses
    assert run.ambient_hits == 117 - len(KNOWN_MISSES[name]), run.misses
    assert run.withdrawn_preferences == 4 and run.withdrawn_in_force == 0, run.misses
    assert run.safety == 205 and run.unsafe_promotions == 0, run.misses
