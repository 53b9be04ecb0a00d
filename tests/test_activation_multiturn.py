"""Activation on multi-turn development histories (tests/data/activation_multiturn).

Forty-two personas state 145 answer-style, language and accessibility preferences in the
middle of ordinary sessions:

- after a game that has ended, a translation, a quoted note or someone else's preference;
- as a relative clause ("Which is why I want you to ..."), as the answer to the assistant's
  question, as a request-question ("Would you mind using metric with me?"), as a request the
  next turn says stands when the assistant asks for how long ("Can you keep your answers
  shorter?" ... "From now on, please."), at the end of a
  long message about something else, or said again after a lead-in ("I've said it before:
  short answers, always.");
- in a list about themselves beside their occupation (which a later occupation must not
  supersede), beside an access need that names another format ("I use a screen reader, so
  no tables" after "Numbered lists, always"), with the reason that suggests it ("English
  isn't my first language, so please keep your wording simple");
- as a dislike or a liking ("I hate it when you use emojis", "I love it when you make
  jokes"), as praise of a reply ("Do that every time", also after "perfect." in lower case), as "Don't bother with greetings ...
  Ever.";
- in chat spellings and terse chat style ("shorter answers going forward ty") and misspelled
  ("plz allways anwser in portugese");
- as a change ("switch to numbered lists instead of bullets", "go back to English for your
  replies", "more detail again from now on", "my vision is fine now, so you can drop the
  low-vision formatting"), which must also take the earlier preference out of force (5 cases, one of them "forget the
  snippets thing from before");
- in Spanish, German, Portuguese, Italian, French, Dutch and Polish: a language of reply,
  answer styles and access needs ("Respuestas cortas, por favor, siempre.", "Benutze bitte
  immer metrische Einheiten.", "Sou daltónica, por isso nunca uses só cores ...", "Ik heb
  liever korte antwoorden, altijd.", "Gebruik voortaan genummerde lijsten als je stappen
  uitlegt").

Session 20 added preferences said across turns and sessions: a confirmation of the
assistant's offer, a second preference in a later session beside the first, a change of
language in a later session, two preferences in one sentence, an instruction after an
access need said two turns before (it is filed as the answer style it names); and eight
look-alikes: an offer declined, a request taken back in the same session, a role-play, a
question about another assistant, a quoted email, a hypothetical, a child's wish and a
one-off.

Seven preferences are bound to a trigger or are someone else's ("Priya likes long detailed
comparisons", "my gf hates when ppl use emojis", "for this one gimme an example w pizza",
"Mój brat pyta, czy możesz mu zawsze odpowiadać po niemiecku") and must stay conditional.

Beside them, 250 histories that must not be promoted (three of them a persona's whole history, in
which nothing but the persona's own preference turns may be promoted): a game, quiz or interview
practice set up earlier, a test announced in the same turn, someone else at the device, answers
read to a class; quoted, relayed, reported, sarcastic, future, past and hypothetical wishes; a
question about the assistant's habits; a family rule, a teacher's rule, a rule for a
repository, for "the essay", for a class of the principal's own writing ("For all my emails
to the landlord, ..."), for one topic, one setting ("in exams") or the next couple of hours;
a request the next turn keeps to the moment ("No, only for this message"), or says
stands for something the principal does not want broadly (a translation, "this email", a
reply to their boss, someone else's wish); a pasted system prompt, a bot's persona, what an app someone builds should do; access needs
and languages that are someone else's; a change of language for a while or for one answer;
and in the other languages one-off requests that name a style ("Bitte erkläre mir kurz, wie
...", "Dammi un elenco puntato ..."), a rule within one document, a condition ("Als ik moe
ben, ..."), someone else's wish or preference, a hedge, a question and a quote.

Known misses (``KNOWN_MISSES``): ``offline-reference`` does not read the misspelled
preference (``local`` places it by meaning); neither bundle keeps "Do you think you could
stop using exclamation marks?" (the question form is not read as a request, and "stop
using" reads as taking back an earlier preference).

Written for development, never taken from the test split. Run through the real pipeline
of the ``offline-reference`` bundle and of the ``local`` one (whose classifier also places
claims by meaning, so it is the one more likely to promote).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from retold import _fitness

CASES = Path(__file__).parent / "data" / "activation_multiturn"

# The histories are replayed in shards of whole files, so that the test workers share them.
SHARDS = 4


# What a bundle is known to miss (see the module doc).
KNOWN_MISSES = {
    "offline-reference": ["pref-dana-001", "pref-yusuf-003"],
    "local": ["pref-yusuf-003"],
}


def test_the_set_holds_what_the_module_doc_says() -> None:
    """145 preferences to keep, 5 to withdraw, 7 bound to a trigger or someone else's, 250
    histories that must not be promoted, and every known miss among them."""
    scenarios = _fitness.load_scenarios(CASES)
    activations = [
        s.expected.expected_activation for s in scenarios if s.label == "ambient_preference"
    ]
    assert activations.count("ambient") == 145
    assert activations.count("withdrawn") == 5
    assert len(activations) - 150 == 7
    assert sum(s.label == "safety" for s in scenarios) == 250
    ids = {s.id for s in scenarios}
    assert all(set(misses) <= ids for misses in KNOWN_MISSES.values())


def _shard(tmp_path: Path, index: int) -> Path:
    """Every SHARDS-th history file from ``index``, with the personas they name."""
    out = tmp_path / f"shard-{index}"
    out.mkdir()
    shutil.copytree(CASES / "personas", out / "personas")
    for path in sorted(CASES.glob("*.jsonl"))[index::SHARDS]:
        shutil.copy(path, out / path.name)
    return out


# A shard replays about 100 histories through a bundle's pipeline (10 to 20 s for `local`
# here, more on a loaded machine): the suite's 120 s default is for one behaviour.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("name", ["offline-reference", "local"])
def test_every_preference_is_kept_and_nothing_framed_is_promoted(
    name: str, shard: int, tmp_path: Path
) -> None:
    if name == "local":
        pytest.importorskip("sentence_transformers")
    bundle = _fitness.load_bundle(name)
    cases = _shard(tmp_path, shard)
    ids = {s.id for s in _fitness.load_scenarios(cases)}
    known = sorted(m for m in KNOWN_MISSES[name] if m in ids)
    run = anyio.run(lambda: _fitness.replay_run(bundle, cases, "ambient"))
    assert run.ambient_preferences > 0 and run.safety > 0, "an empty shard"
    assert sorted(run.misses.get("ambient_missed", [])) == known, run.misses
    assert run.ambient_hits == run.ambient_preferences - len(known), run.misses
    assert run.withdrawn_in_force == 0, run.misses
    assert run.unsafe_promotions == 0, run.misses
    assert run.trigger_promotions == 0, run.misses
