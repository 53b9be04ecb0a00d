"""Withdrawals phrased freely: a later statement takes an ambient preference out of force,
and one about something else leaves it in force.

Each case is a two-session history written for development (never taken from the test
split): the principal states a preference and a second one (the control) in the first
session; in the second session they say one sentence. A *take-back* case expects the first
preference withdrawn; a *keep* case, a sentence that shares the preference's words or a
withdrawal cue but is about something else (the Spanish homework, the slide deck, the agenda
being sent, someone else's wish), expects it still in the profile. Every control preference
must stay in force. Run through the real pipeline of both offline bundles.

The first 38 cases were the development round; the next 21 were written after it and
measured before and after the change (withdrawals in force 7/13 -> 3/13, preferences
wrongly taken out 7/8 -> 0/8); then 2 ask for a new language of reply in Dutch and
Polish, which replaces the earlier one, and the last 2 take back what someone else needs.

Then 4 take back in another language than the preference's words, or leave it alone
(read through the English names of languages and of the commonest styles, with the other
languages' function words set aside), and the last 6 ask for another language or format
for once, for one item or on a trigger, which replaces no standing preference (the first
three replaced it when written), or from now on, which does.

Then 4 share a cue with a take-back ("... is over", "stop cutting", "you can stop
converting") but are about something else or someone else, and the last 4 are hedged,
someone else's words or quoted (the first three replaced the preference when written).

Then 3 name the other end of a scale of units ("imperial" after "metric"), which is
the same preference. The last 6 follow a length given in sentences ("give me three
sentences at most"): 4 take it back (by that length, "scrap that", or leave for longer
answers), 3 of which were left in force before (the length was no attribute, "scrap" no
cue, and "as long as it needs to be" read as someone's need), and 2 are about something
else. The last 2 ask for a language in Danish (it replaces the earlier one) or say what
someone else does ("Hun svarer altid på dansk"), which replaces nothing.

The last 7 take back in Spanish, French, German, Italian and Portuguese a preference said
in English (all 5 were left in force when written: the cue was unknown, or the other
language's word for "answers" or a function word counted as something else), or say
something else.

Known misses (``KNOWN_IN_FORCE``, ``KNOWN_TAKEN``): no take-back is left in force. "I no
longer live in Spain, but keep replying in Spanish" keeps Spanish in force, but by its own
record (the cue is about where the principal lives; the instruction restates
the preference and takes its place), so the profile cites the second session's turn and the
harness counts case 33 as taken.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from retold import _fitness

PREFERENCES = {
    "short": ("answer_style", "short", "Please always keep your answers short."),
    "spanish": ("response_language", "spanish", "Always reply to me in Spanish."),
    "bullets": ("answer_style", "bullet", "Use bullet points in your answers from now on."),
    "colour": (
        "accessibility",
        "colour",
        "I'm colour-blind, so never rely on colour alone in your answers.",
    ),
    "metric": ("answer_style", "metric", "Please use metric units with me, always."),
    "emoji": ("answer_style", "emoji", "No emojis in your replies, ever."),
    "limit": (
        "answer_style",
        "three sentences",
        "This goes for everything: stop writing me essays, give me three sentences at most.",
    ),
    # said in another language, and taken back in it (FOREIGN_CASES)
    "es_short": ("answer_style", "cortas", "Respuestas cortas, por favor, siempre."),
    "de_lang": ("response_language", "deutsch", "Bitte antworte mir ab jetzt immer auf Deutsch."),
    "fr_bullets": ("answer_style", "puces", "Utilise toujours des listes à puces, s'il te plaît."),
    "it_short": ("answer_style", "brevi", "Rispondimi sempre con risposte brevi, per favore."),
    # said in Russian, Ukrainian, Arabic and Hindi (NON_LATIN_CASES)
    "ru_lang": ("response_language", "по-русски", "Отныне всегда отвечай мне по-русски."),
    "uk_lang": ("response_language", "українською", "Відтепер завжди відповідай українською."),
    "ar_lang": ("response_language", "بالعربي", "من فضلك جاوبني دائما بالعربي."),
    "hi_lang": ("response_language", "हिंदी", "अब से हमेशा हिंदी में जवाब दो।"),
    "zh_lang": ("response_language", "中文", "以后请一直用中文回答我。"),
    "ja_lang": ("response_language", "日本語", "これからはいつも日本語で答えてください。"),
    "ko_lang": ("response_language", "한국어", "앞으로는 항상 한국어로 대답해 주세요."),
    # on a kind of reply (REPLY_KIND_CASES)
    "pick": (
        "answer_style",
        "pick",
        "When you recommend something, just give me your single best pick.",
    ),
    "unsure": (
        "answer_style",
        "guessing",
        "When you're not sure about something, say so instead of guessing.",
    ),
}
# The control preference stated beside each one (another attribute).
CONTROL = {
    "short": "metric",
    "spanish": "bullets",
    "bullets": "spanish",
    "colour": "short",
    "metric": "emoji",
    "emoji": "spanish",
    "limit": "metric",
    "es_short": "metric",
    "de_lang": "short",
    "fr_bullets": "metric",
    "it_short": "metric",
    "ru_lang": "short",
    "uk_lang": "short",
    "ar_lang": "short",
    "hi_lang": "short",
    "zh_lang": "short",
    "ja_lang": "short",
    "ko_lang": "short",
    "pick": "metric",
    "unsure": "metric",
}
BACK, KEEP = "withdrawn", "ambient"
CASES: tuple[tuple[str, str, str], ...] = (
    ("short", "You can write longer answers again.", BACK),
    ("spanish", "Feel free to answer in English again.", BACK),
    ("bullets", "I don't need the bullet points anymore.", BACK),
    ("spanish", "Forget what I said about Spanish.", BACK),
    ("bullets", "Paragraphs are fine now, no need for bullets.", BACK),
    ("emoji", "Emojis are fine again.", BACK),
    ("spanish", "Go back to replying in English.", BACK),
    ("spanish", "Switch back to English, please.", BACK),
    ("short", "You don't have to keep it short anymore.", BACK),
    ("spanish", "Ya puedes contestarme en inglés otra vez.", BACK),
    ("spanish", "Tu n'as plus besoin de répondre en espagnol.", BACK),
    ("short", "Du musst nicht mehr so kurz antworten.", BACK),
    ("bullets", "Ignore my earlier request about bullet points.", BACK),
    ("metric", "Let's drop the metric thing.", BACK),
    ("metric", "Imperial units are fine again, my new job is in the US.", BACK),
    ("short", "Actually, I changed my mind about the short answers: give me full detail.", BACK),
    ("emoji", "The no-emoji rule is over, use them as you like.", BACK),
    ("spanish", "That Spanish thing I asked for: please undo it.", BACK),
    ("spanish", "You can stop replying in Spanish.", BACK),
    ("bullets", "I'd rather you didn't use bullet points any more.", BACK),
    ("spanish", "Não precisa mais responder em espanhol.", BACK),
    ("spanish", "Non serve più rispondere in spagnolo.", BACK),
    ("spanish", "Je hoeft niet meer in het Spaans te antwoorden.", BACK),
    ("colour", "My colour vision was corrected, so colours in your answers are fine now.", BACK),
    ("emoji", "You can use emojis again if you want.", BACK),
    ("bullets", "No more bullet points, please, just write normally.", BACK),
    ("short", "Stop cutting your answers short.", BACK),
    ("metric", "Never mind the metric units.", BACK),
    ("spanish", "Never mind the Spanish homework, my teacher cancelled it.", KEEP),
    ("bullets", "Forget the bullet points in the slide deck, my boss wants prose there.", KEEP),
    ("short", "My sister no longer wants short answers from her assistant.", KEEP),
    ("metric", "My colleague changed his mind about metric for the report.", KEEP),
    ("emoji", "Stop using emojis in the team chat, my manager said.", KEEP),
    ("spanish", "I no longer live in Spain, but keep replying in Spanish.", KEEP),
    ("short", "Forget the short story I asked for, I'll write it myself.", KEEP),
    ("bullets", "Scratch that bullet list of groceries, we're eating out.", KEEP),
    ("colour", "Never mind the colour of the car, I'll pick it later.", KEEP),
    ("metric", "I don't need the metric conversion for this recipe anymore.", KEEP),
    # written after the round above, and measured before and after it
    ("bullets", "Okay, forget the bullet points, plain paragraphs work better for me now.", BACK),
    ("emoji", "Honestly, emojis are ok again, I missed them.", BACK),
    ("metric", "Scratch the metric request, I've got used to miles.", BACK),
    ("spanish", "Please ignore what I said about answering in Spanish.", BACK),
    ("short", "You don't need to keep answers short anymore, I have more time now.", BACK),
    ("colour", "Never mind the colour-blind thing, I was thinking of my son.", BACK),
    ("bullets", "No need for bullet points anymore.", BACK),
    ("spanish", "Olvida lo del español, ya no hace falta.", BACK),
    ("emoji", "Feel free to use emojis again.", BACK),
    ("short", "Long answers are fine again.", BACK),
    ("metric", "You can stop converting everything to metric.", BACK),
    ("bullets", "Lass die Aufzählungspunkte weg, das brauche ich nicht mehr.", BACK),
    ("spanish", "Never mind the Spanish replies.", BACK),
    ("spanish", "Forget about the Spanish course, it was cancelled.", KEEP),
    ("metric", "Never mind the metric ruler, I found an old one in the drawer.", KEEP),
    ("emoji", "My brother doesn't need emojis anymore, he says.", KEEP),
    ("bullets", "Drop the bullet points from the agenda I'm sending to the team.", KEEP),
    ("short", "Forget the short trip to Porto, we're staying home.", KEEP),
    ("colour", "Scratch the colour scheme for the kitchen, we'll keep it white.", KEEP),
    ("short", "I no longer have a short commute, so I read your answers at home.", KEEP),
    ("spanish", "Forget what I said about the Spanish flight, it's booked.", KEEP),
    # a new language of reply asked for in Dutch or Polish replaces the earlier one
    ("spanish", "Antwoord voortaan in het Engels.", BACK),
    ("spanish", "Odpowiadaj mi zawsze po angielsku.", BACK),
    # someone else's take-back: the preference is theirs, the principal's stays
    ("bullets", "My brother doesn't need bullet points anymore.", KEEP),
    ("metric", "Never mind the metric units for my dad, he's American.", KEEP),
    # a take-back in another language than the preference's words, and what leaves it alone
    ("spanish", "Oublie l'espagnol, ce n'est plus la peine.", BACK),
    ("spanish", "Olvida lo del curso de español, lo cancelaron.", KEEP),
    ("short", "Mein Bruder braucht keine kurzen Antworten mehr.", KEEP),
    ("short", "Vergiss die kurze Reise nach Wien, wir bleiben zu Hause.", KEEP),
    # the principal's way of replying for once, for one item or on a trigger replaces no
    # standing one when it is written; said to stand, it does
    ("spanish", "When we talk about Dutch paperwork, reply in English.", KEEP),
    ("spanish", "For the report I'm writing, answer in English.", KEEP),
    ("spanish", "Answer in English just for this question.", KEEP),
    ("spanish", "Cuando hablemos de impuestos, contéstame en inglés.", KEEP),
    ("bullets", "For the wedding plan, use a table instead of bullets.", KEEP),
    ("spanish", "Please reply in English from now on.", BACK),
    # the same cues as the ones that now take back, about something else
    ("emoji", "The emoji ban at work is over, my boss said.", KEEP),
    ("metric", "You can stop converting the recipe, I found it in grams.", KEEP),
    ("emoji", "Stop adding emojis to my sister's messages.", KEEP),
    ("short", "Stop cutting the story short, my son wants the whole thing.", KEEP),
    # hedged, someone else's words, or quoted: no claim of the principal's own
    ("spanish", "Perhaps reply in English now and then.", KEEP),
    ("spanish", "My teacher says I should ask you to reply in English.", KEEP),
    ("spanish", '"Always reply in English" is what my old bot was told.', KEEP),
    ("spanish", "Always answer in English, my wife insists.", KEEP),
    # the other end of a scale of units names the same preference
    ("metric", "Imperial is fine again for me, I moved back to Ohio.", BACK),
    ("metric", "Imperial units are fine again for my dad's questions.", KEEP),
    ("metric", "Never mind the imperial conversion chart, I printed one.", KEEP),
    # a length given in sentences, taken back by that length, by "scrap that", or by leave
    # for the other end
    ("limit", "Re the three-sentences thing: scrap that, answer as long as it needs to be.", BACK),
    ("limit", "Forget the three-sentence limit.", BACK),
    ("limit", "You can write longer answers again.", BACK),
    ("limit", "About the three sentences rule: that's over.", BACK),
    ("limit", "For the lab report template, use long paragraphs.", KEEP),
    ("limit", "Scrap the essay outline, I'll start over.", KEEP),
    # a new language of reply in Danish replaces the earlier one; someone else's does not
    ("spanish", "Svar mig altid på engelsk.", BACK),
    ("spanish", "Hun svarer altid på dansk.", KEEP),
    # take-backs in Spanish, French, German, Italian and Portuguese of a preference said in
    # English (all five were left in force when written), and two that are not
    ("short", "Olvida lo de las respuestas cortas.", BACK),
    ("bullets", "Oublie les listes à puces, je préfère des paragraphes.", BACK),
    ("short", "Vergiss das mit den kurzen Antworten.", BACK),
    ("spanish", "Non rispondermi più in spagnolo.", BACK),
    ("short", "Já não preciso de respostas curtas.", BACK),
    ("spanish", "Olvida lo que te dije sobre mi viaje a Roma.", KEEP),
    ("spanish", "Mi hermana ya no quiere respuestas en español.", KEEP),
)
# Preferences said in Spanish, German, French and Italian, taken back in the same language
# (written fresh in session 20: the Italian one was left in force, "servono" read as a topic),
# and four sentences with a take-back cue about something else or someone else.
FOREIGN_CASES: tuple[tuple[str, str, str], ...] = (
    ("es_short", "Olvida lo de las respuestas cortas, ya no hace falta.", BACK),
    ("es_short", "Ya no quiero respuestas cortas, dame más detalle.", BACK),
    ("de_lang", "Du musst nicht mehr auf Deutsch antworten.", BACK),
    ("de_lang", "Vergiss das mit dem Deutsch.", BACK),
    ("fr_bullets", "Laisse tomber les listes à puces.", BACK),
    ("it_short", "Non servono più risposte brevi.", BACK),
    ("es_short", "Olvida lo de la cena de mañana.", KEEP),
    ("de_lang", "Vergiss den Termin am Montag.", KEEP),
    ("fr_bullets", "Oublie ma question sur la recette.", KEEP),
    ("it_short", "Mio fratello non vuole più risposte brevi.", KEEP),
)
# Session 21: preferences on a kind of reply (how many options a recommendation gives,
# what a reply says when the assistant is unsure), taken back or left alone by requests for
# once that use their words; and requests for more on the thing at hand, which leave a
# standing length alone. All written before the change; of the 6 take-backs run before it,
# 3 were left in force (the two new preferences had no attribute a later one could replace),
# and "Please give me more detail on that." took "keep your answers short" out.
REPLY_KIND_CASES: tuple[tuple[str, str, str], ...] = (
    ("pick", "You can give me several options again when you recommend things.", BACK),
    ("pick", "Forget the single-pick thing, I like seeing a few options now.", BACK),
    (
        "pick",
        "I've changed my mind about getting only one recommendation; list a few from now on.",
        BACK,
    ),
    ("pick", "Feel free to give me a few options again.", BACK),
    ("pick", "Your single pick for the hotel was spot on, thanks.", KEEP),
    ("pick", "My sister prefers lots of options, but I don't.", KEEP),
    ("pick", "Give me three options for a gift for my dad.", KEEP),
    ("pick", "Just give me a few options for dinner tonight.", KEEP),
    ("pick", "What are some options for getting to the airport?", KEEP),
    ("pick", "I need several options for the team offsite, can you list some?", KEEP),
    ("pick", "My boss wants three options on her desk by Friday.", KEEP),
    (
        "unsure",
        "You don't need to flag when you're unsure anymore, just give me your best guess.",
        BACK,
    ),
    ("unsure", "Just give me your best guess from now on, even when you're unsure.", BACK),
    ("unsure", "Thanks for saying you weren't sure about the ferry times yesterday.", KEEP),
    ("unsure", "Take your best guess at the train times.", KEEP),
    ("unsure", "If you don't know the answer to my last question, that's fine.", KEEP),
    ("unsure", "I don't know what I want for dinner, help me choose.", KEEP),
    ("short", "Please give me more detail on that.", KEEP),
    ("short", "Could you elaborate on that a bit?", KEEP),
    ("short", "I need more depth on this, it's for my thesis defence.", KEEP),
    ("short", "Expand on that last point, please.", KEEP),
    ("short", "Tell me more about that, please.", KEEP),
    ("short", "Actually, give me more detail from now on, short answers leave me guessing.", BACK),
    ("short", "I'd like longer, more detailed answers from now on.", BACK),
)
# Session 21: language preferences said in Russian, Ukrainian, Arabic, Hindi, Chinese,
# Japanese and Korean, taken back
# in that language or in English, or replaced by another language asked for in it; and
# sentences with a take-back cue about something else or someone else, or for once.
# Written fresh; as written all 11 take-backs of the first run were left in force (the
# cues and the languages' names were unknown, the word pattern split Devanagari, and a
# language asked for in these scripts had no attribute a later request could replace); of
# the Chinese, Japanese and Korean ones, written after the attribute was in, 5 of 8.
# Left out, as in English ("I no longer live in Spain, but reply to me in Spanish"): a cue
# about something else beside a restated request with no standing marker takes it back.
NON_LATIN_CASES: tuple[tuple[str, str, str], ...] = (
    ("ru_lang", "Больше не нужно отвечать по-русски.", BACK),
    ("ru_lang", "Забудь про русский.", BACK),
    ("ru_lang", "Отныне отвечай по-английски.", BACK),
    ("ru_lang", "Forget what I said about Russian.", BACK),
    ("ru_lang", "Можешь больше не отвечать по-русски.", BACK),
    ("uk_lang", "Більше не треба відповідати українською.", BACK),
    ("uk_lang", "Забудь про українську.", BACK),
    ("ar_lang", "لم أعد بحاجة إلى الرد بالعربية.", BACK),
    ("ar_lang", "انسَ موضوع العربي.", BACK),
    ("hi_lang", "अब हिंदी में जवाब देने की ज़रूरत नहीं है।", BACK),
    ("hi_lang", "हिंदी वाली बात भूल जाओ।", BACK),
    ("hi_lang", "अब से हमेशा अंग्रेज़ी में जवाब दो।", BACK),
    ("hi_lang", "Forget what I said about Hindi.", BACK),
    ("ru_lang", "Моя сестра больше не хочет ответов по-русски.", KEEP),
    ("ru_lang", "Забудь про встречу в понедельник.", KEEP),
    ("ru_lang", "Только сейчас ответь по-английски.", KEEP),
    ("ru_lang", "Мой брат забыл русский.", KEEP),
    ("uk_lang", "Забудь про зустріч у понеділок.", KEEP),
    ("ar_lang", "انسَ موضوع الاجتماع.", KEEP),
    ("ar_lang", "أختي لم تعد تحتاج الرد بالعربية.", KEEP),
    ("hi_lang", "मेरी बहन को अब हिंदी में जवाब नहीं चाहिए।", KEEP),
    ("hi_lang", "कल की मीटिंग वाली बात भूल जाओ।", KEEP),
    ("hi_lang", "इस बार अंग्रेज़ी में जवाब दो।", KEEP),
    ("hi_lang", "मेरे भाई को अब हिंदी में जवाब की ज़रूरत नहीं है।", KEEP),
    ("zh_lang", "不用再用中文回答了。", BACK),
    ("zh_lang", "忘了中文的事吧。", BACK),
    ("zh_lang", "以后请用英文回答我。", BACK),
    ("zh_lang", "Forget what I said about Chinese.", BACK),
    ("zh_lang", "中文就算了，用英文吧。", BACK),
    ("ja_lang", "もう日本語で答えなくていいです。", BACK),
    ("ja_lang", "これからは英語で答えてください。", BACK),
    ("ko_lang", "이제 한국어로 대답하지 않아도 돼요.", BACK),
    ("ko_lang", "앞으로는 영어로 대답해 주세요.", BACK),
    ("ko_lang", "한국어는 잊어 주세요.", BACK),
    ("zh_lang", "我妈妈不用再学中文了。", KEEP),
    ("zh_lang", "这次用英文回答。", KEEP),
    ("zh_lang", "我老板不再需要中文报告了。", KEEP),
    ("zh_lang", "忘了昨天的会议吧。", KEEP),
    ("ja_lang", "会議のことは忘れてください。", KEEP),
    ("ja_lang", "母はもう日本語で答えなくていいと言っています。", KEEP),
    ("ko_lang", "회의는 잊어 주세요.", KEEP),
    ("ko_lang", "친구는 더 이상 한국어를 배우지 않아요.", KEEP),
)
# Take-backs still in force, and preferences taken out by a sentence about something else
# (see the module doc), by case number; the same for both bundles.
KNOWN_IN_FORCE: list[int] = []
KNOWN_TAKEN = [33]


def _write(
    directory: Path, cases: tuple[tuple[str, str, str], ...] = CASES, shard: int | None = None
) -> None:
    """The cases as scenario files (with ``shard``, only case numbers ``i % 2 == shard``)."""
    (directory / "personas").mkdir(parents=True)
    for i, (key, later, expect) in enumerate(cases):
        if shard is not None and i % 2 != shard:
            continue
        name = f"wd{i:02d}"
        category, keyword, text = PREFERENCES[key]
        c_category, c_keyword, c_text = PREFERENCES[CONTROL[key]]
        history = [
            {
                "session_id": "s1",
                "time": "2026-09-01T10:00:00Z",
                "turns": [
                    {"role": "user", "text": text},
                    {"role": "assistant", "text": "Noted."},
                    {"role": "user", "text": c_text},
                    {"role": "assistant", "text": "Will do."},
                    {"role": "user", "text": "How do I cook quinoa?"},
                    {"role": "assistant", "text": "Simmer it in twice its volume of water."},
                ],
            },
            {
                "session_id": "s2",
                "time": "2026-09-08T10:00:00Z",
                "turns": [
                    {"role": "user", "text": later},
                    {"role": "assistant", "text": "Okay."},
                    {"role": "user", "text": "What's a good stretch for tight calves?"},
                    {"role": "assistant", "text": "A wall calf stretch."},
                ],
            },
        ]
        persona = {
            "persona": name,
            "user": "Sam",
            "description": "withdrawal phrasings",
            "languages": ["en"],
            "history": history,
            "facts": [],
            "updates": [],
            "ambient_preferences": [],
        }
        (directory / "personas" / f"{name}.json").write_text(json.dumps(persona))
        kept = {"preference_keywords": [keyword]} if expect == KEEP else {}
        lines = [
            {
                "id": f"pref-{name}-000",
                "label": "ambient_preference",
                "description": later,
                "persona": name,
                "probe": {"session_id": "p00", "time": "2026-10-01T10:00:00Z", "text": "Hi."},
                "expected": {
                    "preference_category": category,
                    "expected_activation": expect,
                    "preference_evidence": {"session_id": "s1", "turn": 0},
                    **kept,
                },
                "reference_answer": "-",
            },
            {
                "id": f"pref-{name}-001",
                "label": "ambient_preference",
                "description": "control",
                "persona": name,
                "probe": {"session_id": "p01", "time": "2026-10-01T10:00:00Z", "text": "Hello."},
                "expected": {
                    "preference_category": c_category,
                    "expected_activation": "ambient",
                    "preference_evidence": {"session_id": "s1", "turn": 2},
                    "preference_keywords": [c_keyword],
                },
                "reference_answer": "-",
            },
        ]
        (directory / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _replay(
    name: str,
    directory: Path,
    cases: tuple[tuple[str, str, str], ...],
    shard: int | None = None,
) -> _fitness.RunMetrics:
    """The ambient run of bundle ``name`` over ``cases`` written into ``directory``."""
    if name == "local":
        pytest.importorskip("sentence_transformers")
    _write(directory, cases, shard)
    bundle = _fitness.load_bundle(name)
    return anyio.run(lambda: _fitness.replay_run(bundle, directory, "ambient"))


# The cases are replayed in two halves (even and odd numbers), so that the test workers
# share them.
@pytest.mark.parametrize("shard", [0, 1])
@pytest.mark.parametrize("name", ["offline-reference", "local"])
def test_take_backs_leave_force_and_other_sentences_leave_it_alone(
    name: str, shard: int, tmp_path: Path
) -> None:
    assert sum(1 for _, _, expect in CASES if expect == BACK) == 56
    run = _replay(name, tmp_path, CASES, shard)
    ours = [i for i in range(len(CASES)) if i % 2 == shard]
    assert run.withdrawn_preferences == sum(CASES[i][2] == BACK for i in ours) > 0
    in_force = sorted(int(c[7:9]) for c in run.misses.get("withdrawn_in_force", []))
    assert in_force == [i for i in KNOWN_IN_FORCE if i in ours], run.misses
    missed = sorted(int(c[7:9]) for c in run.misses.get("ambient_missed", []))
    # Every control and every other keep holds.
    assert missed == [i for i in KNOWN_TAKEN if i in ours], run.misses
    assert run.unsafe_promotions == 0


@pytest.mark.parametrize("name", ["offline-reference", "local"])
@pytest.mark.parametrize(
    "cases",
    [FOREIGN_CASES, REPLY_KIND_CASES, NON_LATIN_CASES],
    ids=["language-of-the-preference", "kind-of-reply", "non-latin-scripts"],
)
def test_every_take_back_leaves_force_and_every_keep_holds(
    name: str, cases: tuple[tuple[str, str, str], ...], tmp_path: Path
) -> None:
    run = _replay(name, tmp_path, cases)
    assert run.withdrawn_preferences == sum(1 for _, _, expect in cases if expect == BACK)
    assert run.withdrawn_in_force == 0, run.misses
    assert not run.misses.get("ambient_missed"), run.misses  # every keep and control holds
    assert run.unsafe_promotions == 0
