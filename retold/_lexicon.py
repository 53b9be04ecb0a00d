"""Vocabulary shared by the offline (rule-based) extractor and activation classifier, and the
function words and calendar names retrieval reads too."""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "ACCESSIBILITY",
    "CHOICE_GIVEN",
    "CJK_CHAR",
    "CJK_INSTRUCTION",
    "CJK_LANGUAGES",
    "CJK_LANGUAGE_IN_ENGLISH",
    "CJK_SOMEONE",
    "CJK_SOMEONE_ELSE",
    "CJK_TRIGGERS",
    "CJK_WITHDRAWAL",
    "COMBINING_MARKS",
    "CONCESSIONS",
    "FOREIGN_ACCORDING_TO",
    "FOREIGN_ALL_MY",
    "FOREIGN_ALWAYS",
    "FOREIGN_ANSWER_STYLE",
    "FOREIGN_FOR_THEM",
    "FOREIGN_FROM_NOW_ON",
    "FOREIGN_IMPERATIVES",
    "FOREIGN_IN_THIS",
    "FOREIGN_NEEDS",
    "FOREIGN_ONE_OFF",
    "FOREIGN_PREFER",
    "FOREIGN_RESPONSE_FORM",
    "FOREIGN_SOMEONE_OF_MINE",
    "FOREIGN_STANDING",
    "FOREIGN_TIME_BOUND",
    "FOREIGN_TRIGGERS",
    "FOREIGN_WHEN_YOU_ANSWER",
    "FOREIGN_WITHDRAWAL",
    "FUNCTION_WORDS",
    "HINDI_SOMEONE_ELSE",
    "HINDI_WITHDRAWAL",
    "LANGUAGE",
    "LANGUAGE_IN_ENGLISH",
    "LANGUAGE_NAMES",
    "LANGUAGE_PREPOSITION",
    "LENGTH_LIMIT",
    "MONTH_NAMES",
    "NAME",
    "NON_LATIN_LANGUAGES",
    "NOT_A_NAME",
    "PERSON_INTRODUCED",
    "RELATIONS",
    "STYLE_IN_ENGLISH",
    "TITLE",
    "TURKISH_REPLY_VERB",
    "WEEKDAY_NAMES",
    "WORD_CHAR",
    "introductions",
    "noun_singular",
]

# Function words that carry no topic (retrieval drops them from a query, so FTS5 does not
# score half the store; the extractor skips them when naming an item).
FUNCTION_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t don ve ll re m d also ever did get got go going went like really yeah oh hey hi thanks
    thank wow just much many kind sort lot lots thing things""".split()
)
#: Kin and social roles, the people of someone's life: the people an instruction may be
#: about ("answer my sister in Italian"), and whom a pronoun may stand for.
RELATIONS = (
    r"(?:mum|mom|mother|dad|father|parents?|sisters?|brothers?|siblings?|wife|husband|"
    r"partner|spouse|boyfriend|girlfriend|fianc[ée]e?|sons?|daughters?|kids?|children|child|"
    r"baby|grand(?:ma|pa|mother|father|parents?|son|daughter|kids?|children)|aunt|uncle|"
    r"cousins?|nieces?|nephews?|family|in-laws?|boss|manager|colleagues?|coworkers?|"
    r"co-workers?|team|clients?|customers?|students?|pupils?|teachers?|friends?|flatmates?|"
    r"roommates?|neighbou?rs?|guests?|readers?|audience|patients?|doctor|landlord|tenants?)"
)
#: Month and weekday names, as regex alternations.
MONTH_NAMES = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
)
WEEKDAY_NAMES = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
#: A capitalised word that opens a sentence and is no name: a function word ("Maybe my
#: students ...", "This is my sister"), a day or a month ("Monday, my boss ...").
NOT_A_NAME = (
    "(?!(?i:"
    + "|".join(sorted(FUNCTION_WORDS, key=lambda w: (-len(w), w)))
    + f"|{MONTH_NAMES}|{WEEKDAY_NAMES}"
    + r")\b)"
)
#: A courtesy title before a name, with its space, or nothing: "Mrs. Li", "Dr Haddad".
TITLE = r"(?:(?:Mr|Mrs|Ms|Dr)\.?\s+)?"
#: A name as the patterns below read one: a capital letter, then letters.
NAME = r"[A-Z][^\W\d_]+"
#: One of the speaker's people named with the relation they hold, as a regex: "my partner
#: Jonas", "my best friend, Sam,", "our neighbour Mrs. Li", "my brother (Luis)", "my sister -
#: Ana -", "my brother Will", "my kids Mia and Leo" (groups ``whose1``, ``rel1``, ``name1``
#: and, for up to ten names joined by "and", ``more1``: a longer list gives its first name
#: only, which keeps the pattern's work per match bounded); "Jonas is my partner", and
#: "Jonas, my partner" as an apposition that a comma or the sentence closes (``name2``,
#: ``whose2`` and ``rel2``), where the name is no word that may open a sentence
#: (:data:`NOT_A_NAME`). ``whose`` is "my", "our" or "your" (someone the speaker talks to:
#: "your sister Ana"). Case-sensitive where it reads a name. Read it with
#: :func:`introductions`.
PERSON_INTRODUCED = (
    rf"\b(?P<whose1>(?i:my|our|your))\s+(?:(?i:[a-z]+)\s+)?(?P<rel1>(?i:{RELATIONS}))"
    rf"(?:,\s*|\s+[—–-]\s*|\s+\(|\s+){TITLE}"
    rf"(?P<name1>{NAME})"
    rf"(?P<more1>(?:,\s*{NOT_A_NAME}{NAME}){{0,8}},?(?:\s+and\s+|\s*&\s*)"
    rf"{NOT_A_NAME}{NAME}\b)?"
    rf"|\b(?=[A-Z]){NOT_A_NAME}(?P<name2>{NAME})"
    rf"(?:\s+(?:is|(?P<are>are))\s+|,\s*(?=(?i:my|our|your)\s+(?:[a-z]+\s+)?(?i:{RELATIONS})\b"
    rf"\s*(?:[.;:!?)]|$|,(?!\s*{TITLE}[A-Z]))))"
    rf"(?P<whose2>(?i:my|our|your))\s+(?:(?i:[a-z]+)\s+)?(?P<rel2>(?i:{RELATIONS}))\b(?!['’])"
)
_PERSON_INTRODUCED = re.compile(PERSON_INTRODUCED)
_NAME = re.compile(NAME)
#: The names listed just before ``name2`` ("Mia, Leo and " before "Ana are my kids"), read
#: back over at most :data:`_LIST_REACH` characters, so a record's length never multiplies
#: the work (a list inside the main pattern is tried at every capitalised word).
_LIST_BEFORE = re.compile(
    rf"\b(?=[A-Z]){NOT_A_NAME}{NAME}(?:,\s*(?=[A-Z]){NOT_A_NAME}{NAME}){{0,8}},?"
    r"(?:\s+and\s+|\s*&\s*)$"
)
_LIST_REACH = 160


def noun_singular(word: str) -> str:
    """A plural noun's singular, by its ending (peanuts -> peanut, berries -> berry); a
    word that does not read as a plural is returned as it is (boss, bus, this)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "oes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def introductions(text: str) -> list[tuple[str, str, bool]]:
    """Each person ``text`` introduces by relation (:data:`PERSON_INTRODUCED`), in order, as
    (name, relation lower-cased, the speaker's own): own for "my" and "our", not for "your"
    (the person belongs to whom the speaker talks to).

    A plural relation introduces every name of a list joined by "and": "my kids Mia and
    Leo", "Mia and Leo are my kids", "Mia and Leo, my kids,". A singular one introduces only
    the name next to it ("my brother Luis and Ana went", "Ana and Luis, my brother,": Ana is
    not his brother), or the first of "Luis and Ana are my brother and sister". "are" after a
    single name introduces nobody ("Kids are my joy")."""
    found: list[tuple[str, str, bool]] = []
    for m in _PERSON_INTRODUCED.finditer(text):
        relation = (m.group("rel1") or m.group("rel2")).lower()
        own = (m.group("whose1") or m.group("whose2")).lower() != "your"
        # A plural relation ("kids", "in-laws", "children", not "boss") names them all.
        plural = noun_singular(relation) != relation or relation.endswith("children")
        if m.group("name1"):
            names = [m.group("name1")]
            if m.group("more1") and plural:
                names += _NAME.findall(m.group("more1"))
        else:
            listed = _LIST_BEFORE.search(text, max(0, m.start() - _LIST_REACH), m.start())
            before = _NAME.findall(listed.group()) if listed else []
            if m.group("are") and not before:
                continue
            if plural:
                names = [*before, m.group("name2")]
            else:
                names = [before[0] if m.group("are") else m.group("name2")]
        found.extend((name, relation, own) for name in names)
    return found


def _mark_ranges() -> str:
    """The combining marks of the Basic Multilingual Plane (categories Mn, Mc, Me) as the
    body of a regex character class (``\\u0300-\\u036f...``)."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x10000):
        if unicodedata.category(chr(code)).startswith("M"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(f"\\u{a:04x}-\\u{b:04x}" if a != b else f"\\u{a:04x}" for a, b in ranges)


#: Combining marks, which Python's ``\w`` leaves out: the vowel signs inside Devanagari
#: words ("हिंदी", "बार"), Arabic and Hebrew vowel points, decomposed Latin accents.
COMBINING_MARKS = _mark_ranges()
#: A character of a word, marks included: a word pattern built on ``[^\W_]`` alone would
#: split "इस बार" into "इस", "ब", "र".
WORD_CHAR = rf"(?:[^\W_]|[{COMBINING_MARKS}])"


#: Access needs named in Spanish, Portuguese, French, German, Italian, Dutch and Polish.
FOREIGN_NEEDS = (
    "disl[eé]xic[oa]s?|dislexia|dislessic[oa]|dislessia|dyslexique|legasthen\\w*|dyslektyk\\w*|"
    "dysleksj\\w*|dal?t[oó]nic[oa]s?|daltonismo|daltonien(?:ne)?|daltonisme|daltonist\\w*|"
    "farbenblind\\w*|kleurenblind\\w*|sehbehindert\\w*|malvoyant\\w*|ipovedente|slechtziend\\w*|"
    "baja visi[oó]n|baixa vis[aã]o|ciego|ciega|cego|cega|aveugle|cieco|cieca|niewidom\\w*|"
    "sordo|sorda|sourde?|gehörlos\\w*|schwerhörig\\w*|malentendant\\w*|slechthorend\\w*|"
    "niesłysz\\w*|lector(?:es)? de pantalla|leitor(?:es)? de tela|lecteur d'écran|"
    "screenreader|bildschirmleser|letra grande|texto grande|gro(?:ß|ss)e schrift|"
    "gros caract[eè]res"
)

#: Access needs and what they call for, as a regex (the activation category
#: ``accessibility``, and what a principal may sign in as: "colour blind here").
ACCESSIBILITY = (
    r"\b(?:screen ?readers?|dyslexi[ac]\w*|dyscalcul\w*|dysprax\w*|dysgraph\w*|"
    r"large (?:print|font|text)|bigger (?:font|text)|"
    r"colou?r ?blind\w*|colou?r vision|"
    r"(?:can't|can ?not|cannot|ca not) (?:tell|distinguish|see) (?:red|green|blue|colou?rs?)\b|"
    r"visually impaired|visual(?:ly)? impairment|vision impair\w*|"
    r"low vision|partially sighted|sight loss|macular degeneration|blind|deaf|"
    r"hard of hearing|alt text|captions?|subtitles|sign language|plain language|"
    r"easy[- ]read|adhd|high contrast|text[- ]to[- ]speech|speech[- ]to[- ]text|"
    r"voice ?over|talkback|magnif\w*|braille|epilep\w*|photosensitiv\w*|seizures?|"
    r"autis\w*|neurodivergen\w*|hearing (?:loss|aids?|impair\w*)|deafness|"
    r"motor impairment|tremors?|one[- ]handed|cognitive impairment|"
    r"(?:light|noise) sensitiv\w*|migraines?|low literacy|learning disabilit\w*|"
    r"aphasi\w*|brain injur\w*|(?:processing|attention) disorder|memory (?:loss|problems)|"
    r"tinnitus|nystagmus|cataracts?|glaucoma|"
    r"eyesight|(?:poor|bad|weak|failing) (?:eyes|vision)|"
    # the same needs as the principal may state them in Spanish, Portuguese, French, German,
    # Italian, Dutch and Polish
    f"{FOREIGN_NEEDS})\\b"
)

#: A length asked for in sentences, lines or words, or essays complained of: "give me three
#: sentences at most", "the three-sentence limit", "under 100 words", "stop writing me
#: essays".
LENGTH_LIMIT = (
    r"(?:two|three|four|five|a few|\d+)[ -](?:sentences?|lines?)|"
    r"(?:under|within|at most|max(?:imum)?|no more than|fewer than|less than) \d+ words|"
    r"(?:writ(?:e|ing)|send(?:ing)?|giv(?:e|ing)) me essays|no (?:more )?essays|"
    r"not (?:an? )?(?:essay|novel)s?|(?:just |only )?the gist"
)

#: How a choice is given in a reply: "your single best pick", "one option", "just pick one"
#: (answer style, and the key of such a preference).
CHOICE_GIVEN = (
    "(?:single|top|best|final|one) (?:pick|choice|option|suggestion|recommendation)s?|pick one"
)

#: What answer-style preferences name in Spanish, Portuguese, French, German, Italian,
#: Dutch and Polish: length, detail, lists, units, jargon and plain words, tone. Words an
#: English sentence also uses ("court", "ton") are left out.
FOREIGN_ANSWER_STYLE = (
    # short, concise, detailed
    "cort[oa]s|corta|breves?|brevi|concis[oa]s?|concisi|courtes?|brèves?|brefs?|concises?|"
    "curt[oa]s?|kurze?[nr]?|knapp(?:e[nr]?)?|kort|korte|beknopte?|krótk\\w*|krotk\\w*|"
    "zwięzł\\w*|zwięźl\\w*|korta|kısa|kisa|al grano|direto ao ponto|droit au but|auf den punkt|"
    "detallad[oa]s?|detalhad[oa]s?|ausführlich\\w*|détaillée?s?|dettagliat[oeai]|"
    "uitgebreide?|szczegółow\\w*|"
    # lists and numbering
    "viñetas|vinetas|listas?|listes?|elenchi|elenco|lijst(?:en|jes)?|opsomming\\w*|"
    "aufzählung\\w*|stichpunkt\\w*|puces|puntat[oeai]|numerad[oa]s|numerat[oeai]|"
    "numérotée?s?|nummeriert\\w*|genummerde?|numerowan\\w*|wypunktowan\\w*|tópicos|"
    # units
    "métric[oa]s?|metrisch\\w*|métriques?|metric[oa]|metrici|metriche|metryczn\\w*|"
    # jargon, plain words, short sentences
    "jerga|tecnicismos|jarg[aã]o|fachbegriff\\w*|fachjargon|fachsprache|gergo|"
    "termini tecnici|vakjargon|żargon\\w*|palabras sencillas|lenguaje sencillo|"
    "palavras simples|linguagem simples|einfache[nr]? (?:wörter|worte|sprache)|"
    "mots simples|langage simple|parole semplici|linguaggio semplice|eenvoudige (?:woorden|taal)|"
    "prost(?:e|ym|ymi) (?:słow\\w*|język\\w*)|frases (?:cortas|curtas|sencillas|simples)|"
    "kurze[nr]? sätze[n]?|phrases courtes|frasi brevi|korte zinnen|krótkie zdania|"
    # tone and greetings
    "formal(?:es)?|informal(?:es)?|förmlich\\w*|tutear|tutoyer|vouvoyer|duzen|siezen|"
    # formal in French, German, Italian, Dutch, Polish and the Scandinavian languages
    "formel(?:le)?s?|informel(?:le)?s?|formell\\w*|formal[ei]|formeel|formele|formaln\\w*|"
    "saludos|saudações|salutations|begrüßung\\w*|saluti|disculpas|desculpas|"
    "entschuldigung\\w*|scuse|"
    # examples
    "ejemplos?|exemplos?|exemples?|beispiel(?:e[n]?)?|esempi[o]?|voorbeeld(?:en)?|przykład\\w*|"
    # a summary, and how a choice is given: "una sola opción", "deine beste Wahl",
    # "limite-toi à trois"
    "resumen|resumo|résumé|zusammenfassung|riassunto|samenvatting|podsumowani\\w*|"
    "(?:una|une|eine|un'|uma|één|jedn\\w*|dos|deux|zwei|due|duas|twee|dwie|tres|trois|drei|tre|"
    "três|drie|trzy)\\s+(?:sola\\s+|seule\\s+|einzige\\s+|unica\\s+|única\\s+)?"
    "(?:opci[oó]n(?:es)?|options?|optionen|opzion[ei]|opç(?:ão|ões)|opties?|opcj\\w*)|"
    "beste wahl|mejor opción|meilleure option|migliore opzione|melhor opção|beste optie|"
    "limite[sz]?-(?:toi|vous)|beschränk(?:e)? dich|limítate|limitati|limita-te|"
    # candour when unsure
    "nicht sicher|no (?:estás|estés) segur[oa]|n'es pas sûre?|non sei sicur[oa]|"
    "não (?:tens|tiveres) certeza|niet zeker|nie jesteś pew(?:ien|na)|"
    # casual, relaxed
    "décontracté\\w*|locker|lässig|relajad[oa]|rilassat[oa]|descontraíd[oa]"
)

#: "In/for this ..." in those languages: a rule for the item at hand ("in diesem Dokument",
#: "para este informe", "dans ce texte", "neste e-mail").
FOREIGN_IN_THIS = (
    "(?:en|in|dans|w|para|für|fur|pour|voor|dla|per) (?:este|esta|estos|estas|ese|esa|esos|esas|"
    "diesem|dieser|diesen|dieses|ce|cet|cette|ces|questo|questa|questi|queste|dit|deze|tym|"
    "tej|tych)|neste|nesta|nestes|nestas|nesse|nessa"
)

_FOREIGN_QUESTION_WORDS = (
    "cómo|como|qué|por qué|cuál|cuánto|cuánta|dónde|cuándo|porque|quanto|quanta|onde|quando|"
    "wie|was|warum|wieso|welche[rsnm]?|wann|wo|comment|pourquoi|quel(?:le)?s?|combien|"
    "come|perché|perche|cosa|quale|hoe|wat|waarom|welke|wanneer|jak|dlaczego|co|który|która|"
    "które|ile|kiedy|gdzie"
)
#: A one-off request in those languages, never a standing rule by itself: to explain or
#: tell how/what/why, one piece of content to give, make or write ("dame una lista",
#: "écris un e-mail", "daj mi listę"), or work on a text at hand ("resume este texto").
FOREIGN_ONE_OFF = (
    r"\b(?:expl[ií]ca(?:me)?|explique(?:-moi)?|expliquez(?:-moi)?|erkl[äa]r(?:e|en)?|spiega(?:mi)?|"
    r"leg(?: me| mij)?(?: [^\W\d_]+)? uit|wyja[śs]nij|wyt[łl]umacz|d[ií]me|dimmi|dis-moi|"
    r"dites-moi|sag mir|sagen sie mir|diz-me|diga-me|cu[ée]ntame|conta-me|vertel|powiedz)\b"
    # (a bounded gap: an unbounded one is quadratic on a long sentence)
    rf"[^.!?]{{0,160}}?\b(?:{_FOREIGN_QUESTION_WORDS})\b|"
    r"\b(?:d[aá]me|d[aá]-me|dammi|donne-moi|donnez-moi|gib mir|geben sie mir|geef me|geef mij|"
    r"daj mi|fais-moi|faites-moi|hazme|haz|faz-me|fammi|maak|zr[óo]b|escribe|escreve|[ée]cris|"
    r"[ée]crivez|schreib(?:e)?|scrivi|schrijf|napisz|prepara|redacta|r[ée]dige|verfasse)\b"
    r"(?:\s+(?:me|mi|moi|mir))?\s+(?:un|una|uno|une|ein|eine|einen|um|uma|een|"
    r"(?:kr[óo]tk|d[łl]ug|prost)\w*\s+\w+)\b|"
    r"\b(?:resume|resuma|r[ée]sume|fasse\s+\w+\s+zusammen|riassumi|vat\s+\w+\s+samen|stre[śs][ćc]|"
    r"traduce|traduz|traduis|[üu]bersetze?|traduci|vertaal|przet[łl]umacz|corrige|korrigiere?|"
    r"correggi|corrigeer|popraw|acorta|encurta|raccourcis|k[üu]rze|accorcia|verkort|skr[óo][ćc]|"
    r"overs[æa]t|[öo]vers[äa]tt|oversett)\b"
    r"\s+(?:este|esta|esto|estos|estas|ese|esa|eso|ce|cet|cette|ces|[çc]a|diesen|dieses|diese|das|"
    r"questo|questa|dit|deze|ten|t[eę]|to|o|a|os|as|el|la|los|las|le|les|den|die|il|lo|"
    r"det h[äa]r|den h[äa]r|dette|denne|detta|denna|det)\b|"
    # a thing at hand to write ("escribe este correo", "skriv det här mejlet"), not "the
    # answers" ("Escribe las respuestas siempre en inglés")
    r"\b(?:escribe|escreve|[ée]cris|schreib(?:e)?|scrivi|schrijf|napisz|skriv)\s+"
    r"(?:este|esta|esto|ese|esa|eso|ce|cet|cette|ces|diesen|dieses|diese|questo|questa|dit|"
    r"deze|det h[äa]r|den h[äa]r|dette|denne|detta|denna|det)\b|"
    r"\b(?:bu|şu)\s+[^.!?,;]{1,40}?\b(?:yaz|çevir|cevir|kısalt|özetle)\b"
)

# Turkish says "my mother" in one word ("annem"): kin and roles with the first-person
# possessive ending.
_TURKISH_KIN = (
    "annem|babam|kardeşim|kardesim|ablam|abim|eşim|esim|karım|karim|kocam|patronum|müdürüm|"
    "arkadaşım|arkadasim|oğlum|oglum|kızım|kizim|çocuklarım|meslektaşım"
)
# Arabic kin with the possessive in the word ("أختي", my sister).
_ARABIC_KIN = "أمي|امي|أبي|ابي|أختي|اختي|أخي|اخي|زوجتي|زوجي|ابني|ابنتي|بنتي|مديري|صديقي|صديقتي"
# Russian, Ukrainian and Hindi kin and roles (Russian and Ukrainian by their stems).
_OTHER_RELATIONS = (
    "сестр\\w*|брат\\w*|мам(?:а|ы|е|у|ой)|мать|матер\\w*|пап(?:а|ы|е|у|ой)|отец|отц\\w*|жена|жены|муж|мужа|сын\\w*|"
    "доч\\w*|начальни\\w*|подруг\\w*|друг|друз\\w*|коллег\\w*|дети|бабушк\\w*|дедушк\\w*|"
    "тато|батьк\\w*|дружин\\w*|чоловік\\w*|донь\\w*|колег\\w*|діти|бабус\\w*|дідус\\w*|"
    "माँ|मां|माता|पिता|पापा|भाई|बहन|पति|पत्नी|बेटा|बेटी|बेटे|दोस्त|बॉस|सहकर्मी|बच्चे|दादी|दादा|"
    "नानी|नाना"
)
# Kin and social roles in Spanish, French, Portuguese, Italian, Dutch, German, Polish,
# Danish, Swedish, Norwegian and Turkish.
_FOREIGN_RELATIONS = (
    "madre|padre|mam[áa]|pap[áa]|hermanas?|hermanos?|hij[oa]s?|jef[ea]|espos[oa]|marido|mujer|"
    "novi[oa]|amig[oa]s?|abuel[oa]s?|clientes?|alumn[oa]s?|"
    "m[èe]re|p[èe]re|maman|papa|s(?:œ|oe)urs?|fr[èe]res?|fils|filles?|patron(?:ne)?|femme|mari|"
    "copine|copain|amie?s?|grand-m[èe]re|grand-p[èe]re|clients?|[ée]l[èe]ves|enfants|"
    "m[ãa]e|pai|irm[ãa]o?s?|filh[oa]s?|chefe|namorad[oa]|av[óô]|"
    "sorella|fratello|figli[oa]?|capo|moglie|marito|ragazz[oa]|nonn[oa]|studenti|"
    "moeder|vader|zus|broer|zoon|dochter|baas|vrouw|man|vriendin|vriend|oma|opa|kinderen|"
    "coll[èe]gues?|colegas?|colleg(?:a|he|hi)|collega's|"
    "chef(?:in)?|mutter|vater|mama|schwester|bruder|sohn|tochter|frau|mann|freundin|freund|"
    "kunden|kolleg(?:e|en|in)|kinder|"
    "brat|siostra|tata|syn|c[óo]rka|szef(?:owa)?|[żz]ona|m[ąa][żz]|dziewczyna|ch[łl]opak|"
    "babcia|dziadek|przyjaciel(?:ka)?|kolega|kole[żz]anka|dzieci|"
    # Danish, Swedish, Norwegian
    "s[øo]ster|syster|bror|mor|far|sjef|kone|fru|hustru|mand|k[æj]reste|flickv[äa]n|pojkv[äa]n|"
    "datter|dotter|s[øo]n|b[øo]rn|barn|venn|ven|v[äa]n|veninde|v[äa]ninna|kollega|kolleger|"
    "chefen|mamma|pappa|" + _TURKISH_KIN + "|" + _ARABIC_KIN + "|" + _OTHER_RELATIONS
)
#: Someone of the speaker's as the subject of a sentence: "mi hermano", "mon frère", "meu
#: irmão", "mio fratello", "mijn broer", "mein Bruder", "mój brat" (the relation is group 1).
FOREIGN_SOMEONE_OF_MINE = (
    r"(?<!\w)(?:(?:mi|mis|mon|ma|mes|meu|meus|minha|minhas|mio|mia|miei|mie|mijn|mein|meine|"
    r"m[óo]j|moja|moi|moje|min|mitt|mine|mina|"
    # Russian, Ukrainian, Hindi
    r"моя|мой|мои|моё|мое|моего|моей|мій|мої|моє|мого|моєї|मेरी|मेरे|मेरा|हमारी|हमारे|हमारा)\s+"
    # (Turkish and Arabic: the possessive is in the word)
    rf"|(?=(?:{_TURKISH_KIN}|{_ARABIC_KIN})(?!\w)))({_FOREIGN_RELATIONS})(?!\w)"
)
#: Replies for someone else in those languages: "für sie", "para ella", "pour lui".
FOREIGN_FOR_THEM = (
    r"\b(?:f[üu]r (?:sie|ihn)|para (?:ella|él|ellos|ellas)|pour (?:elle|lui|eux|elles)|"
    r"per (?:lei|lui|loro)|voor (?:haar|hem|hen)|(?:dla|do) (?:niej|niego|nich)|"
    r"quand tu lui|quando gli|cuando le (?:respondas|respondes|contestes|escribas)|"
    r"wenn du (?:ihr|ihm) (?:antwortest|schreibst)|als je (?:haar|hem) (?:antwoordt|schrijft))\b|"
    # to someone of the speaker's: "à ma mère", "a mi jefe", "ao meu pai", "aan mijn zus" (a
    # relation, so not "à mon avis" or "a mi pregunta"; never a bare "a", an article or "has")
    r"(?<!\w)(?:à (?:ma|mon|mes)|a (?:mi|mis|mia|mio|miei|mie)|ao meus?|aos meus|"
    r"à minhas?|às minhas|aan mijn|"
    # or for them: "für meinen Chef", "para mi madre", "pour ma collègue", "voor mijn baas"
    r"f[üu]r (?:meinen|meine|meiner|meinem|unseren|unsere|unserem)|para (?:mi|mis|minhas?|meus?|"
    r"a minha|o meu)|pour (?:ma|mon|mes)|per (?:mia|mio|miei|mie|la mia|il mio)|voor (?:mijn|onze))"
    rf"\s+(?:{_FOREIGN_RELATIONS})(?!\w)"
)

#: "I prefer", "I'd like" in the first person of those languages (a preference stated).
FOREIGN_PREFER = (
    "prefiero|me gustar[ií]a|quisiera|prefiro|gostaria|je pr[ée]f[èe]re|je pr[ée]f[ée]rerais|"
    "j'aimerais|je voudrais|ich h[äa]tte (?:gerne?|lieber)|ich bevorzuge|mir ist lieber|"
    "ich m[öo]chte|(?:das |es )?ist mir lieber|preferisco|vorrei|mi piacerebbe|ik heb liever|"
    "ik wil graag|ik zou graag|"
    "wol[ęe]|wola[łl]bym|wola[łl]abym|chcia[łl]bym|chcia[łl]abym|"
    # "I like it when you ...": what the assistant does, liked
    "j'aime (?:bien |beaucoup )?quand (?:tu|vous)|me gusta (?:mucho )?cuando|"
    "gosto (?:muito )?quando|mi piace (?:molto )?quando|ich mag es,? wenn du|"
    "ik vind het fijn als je|jeg foretrækker|jeg foretrekker|jag föredrar|jeg vil helst|"
    "jag vill helst|tercih ederim"
)

#: What a reply is made of, named in those languages: answers, steps, lists, examples.
FOREIGN_RESPONSE_FORM = (
    "pasos|instrucciones|listas?|ejemplos|respuestas?|passos|instru[çc][õo]es|exemplos|"
    "respostas?|[ée]tapes|instructions|listes?|exemples|r[ée]ponses?|schritte|anleitungen|"
    "listen|beispiele|antworten|passaggi|istruzioni|elenchi|esempi|risposte|stappen|"
    "instructies|lijsten|voorbeelden|antwoorden|kroki|instrukcje|listy|przyk[łl]ady|odpowiedzi|"
    # Danish, Swedish, Norwegian (the answer, to answer) and Turkish (answer, reply)
    "svar|svaret|svarene|svaren|svarer|svarar|cevap(?:lar[ıi]?)?|yan[ıi]t(?:lar[ıi]?)?|"
    # options offered
    "opciones|options|optionen|opzioni|opç(?:ões|oes)|opties|opcje"
)

#: "When you answer me" in those languages: a condition on every reply, not a trigger; also
#: on every reply of a kind ("als je stappen uitlegt", "cuando me des ejemplos").
FOREIGN_WHEN_YOU_ANSWER = (
    r"(?:cuando|quando|quand|wenn|als|kiedy|gdy)\s+(?:(?:tu|du|je|jij)\s+)?"
    r"(?:(?:me|mi|mir|mij|mnie)\s+|m')?(?:[^\W\d_]+\s+)?(?:(?:des|die|de|dei|delle|degli|los|las|"
    rf"os|as|les|un|una|une|een)\s+)?(?:{FOREIGN_RESPONSE_FORM}|"
    # or anything recommended or explained: "cuando me recomiendes algo"
    r"algo|quelque chose|etwas|qualcosa|iets|coś)(?!\w)|"
    "cuando me (?:respondas|respondes|contestas|contestes|escribes|escribas)|"
    "quando (?:me )?(?:respondes|responderes|responder|me escreves)|"
    # (with "me" or none, but not on a topic: "quand tu réponds sur la politique")
    "(?:quand tu (?:me )?(?:réponds|reponds|écris)|quand vous (?:me )?(?:répondez|repondez)|"
    "wenn du (?:mir )?(?:antwortest|schreibst)|quando (?:mi )?(?:rispondi|scrivi)|"
    "als je (?:me )?(?:antwoordt|antwoord geeft|schrijft)|kiedy (?:mi )?(?:odpowiadasz|odpisujesz)|"
    "(?:når|när) du (?:svarer|svarar|skriver)(?: (?:mig|meg))?|"
    # when the assistant is unsure ("wenn du dir nicht sicher bist", "si no estás seguro")
    "(?:(?:wenn|falls) du dir nicht sicher bist|(?:si|cuando) no (?:estás|estes|estés) segur[oa]|"
    "(?:si|quand) tu n'es pas sûre?|(?:se|quando) non sei sicur[oa]|"
    "(?:se|quando) não (?:tens|tiveres) certeza|(?:se|quando) não estás segur[oa]|"
    "als je het niet zeker weet|(?:jeśli|gdy) nie jesteś pew(?:ien|na))"
    # (of anything: "si no estás seguro de algo")
    "(?:\\s+(?:de|über|di|van)\\s+(?:algo|quelque chose|etwas|qualcosa|iets|czegoś))?)"
    "(?!\\s+(?:sur|à propos|au sujet|concernant|de|des|du|sobre|acerca|über|zu|su|di|riguardo|"
    "over|o|na temat|om)\\b)"
)

#: Language names as a regex alternation, in English and as their speakers write them
#: (Spanish, Portuguese, French, German, Italian, Dutch, Polish, Danish, Swedish, Norwegian,
#: Turkish; Hindi in Latin script).
LANGUAGE_NAMES = (
    "english|hindi|spanish|french|german|italian|portuguese|dutch|russian|ukrainian|polish|"
    "czech|swedish|norwegian|danish|finnish|greek|turkish|arabic|hebrew|persian|farsi|urdu|"
    "bengali|tamil|telugu|marathi|gujarati|punjabi|chinese|mandarin|cantonese|japanese|korean|"
    "vietnamese|thai|indonesian|malay|tagalog|swahili|romanian|hungarian|catalan|welsh|irish|"
    # the same languages as their speakers write them (es, pt, fr, de, it, hi in Latin script)
    "español|espanol|castellano|inglés|ingles|francés|frances|alemán|aleman|italiano|"
    "portugués|portugues|japonés|japones|chino|português|francês|alemão|espanhol|inglês|"
    "japonês|français|francais|anglais|espagnol|allemand|italien|portugais|japonais|chinois|"
    "deutsch|englisch|spanisch|französisch|franzosisch|italienisch|portugiesisch|japanisch|"
    "chinesisch|hindustani|"
    "nederlands|néerlandais|neerlandais|niederländisch|olandese|holandés|polski|polsku|"
    "inglese|francese|tedesco|spagnolo|portoghese|engels|frans|duits|spaans|angielsku|"
    "hiszpańsku|francusku|niemiecku|włosku|"
    # Danish, Swedish, Norwegian and Turkish
    "dansk|danska|svensk|svenska|norsk|engelsk|engelska|tysk|tyska|fransk|franska|spansk|"
    "spanska|italiensk|italienska|türkçe|turkce|ingilizce|i̇ngilizce|almanca|fransızca|"
    "fransizca|ispanyolca|i̇spanyolca|danca|i̇sveççe|isveççe"
)


def _in_english(words_of: dict[str, str]) -> dict[str, str]:
    """Each word of ``words_of``'s space-separated values, mapped to its English key."""
    return {word: english for english, words in words_of.items() for word in words.split()}


#: The English name of a language as its speakers write it in the other languages the rules
#: read (see ``LANGUAGE_NAMES``): "Olvida lo del español" takes back "Always reply to me in
#: Spanish".
LANGUAGE_IN_ENGLISH: dict[str, str] = _in_english(
    {
        "spanish": "español espanol castellano espanhol espagnol spanisch spagnolo spaans "
        "hiszpańsku spansk spanska ispanyolca i̇spanyolca",
        "english": "inglés ingles inglês anglais englisch inglese engels angielsku engelsk "
        "engelska ingilizce i̇ngilizce английски английский английском английским "
        "англійською англійська англійську "
        "الإنجليزية بالإنجليزي بالانجليزي بالإنجليزية بالانجليزية अंग्रेज़ी अंग्रेजी इंग्लिश",
        "french": "francés frances francês français francais französisch franzosisch francese "
        "frans francusku fransk franska fransızca fransizca",
        "german": "alemán aleman alemão allemand deutsch tedesco duits niemiecku tysk tyska "
        "almanca",
        "italian": "italiano italien italienisch włosku italiensk italienska",
        "portuguese": "portugués portugues português portugais portugiesisch portoghese",
        "japanese": "japonés japones japonês japonais japanisch",
        "chinese": "chino chinois chinesisch",
        "dutch": "nederlands néerlandais neerlandais niederländisch olandese holandés",
        "polish": "polski polsku",
        "danish": "dansk danska danca",
        "swedish": "svensk svenska i̇sveççe isveççe",
        "norwegian": "norsk",
        "turkish": "türkçe turkce",
        # in Russian, Ukrainian, Arabic and Hindi ("по-русски" is read as "по" "русски")
        "russian": "русский русски русском русского русскому русским російською російська "
        "російську",
        "ukrainian": "українською українська української українську украинский украински "
        "украинском",
        "arabic": "العربية العربي بالعربي بالعربية عربي",
        "hindi": "हिंदी हिन्दी",
    }
)

#: The English word for the commonest answer styles as the other languages the rules read
#: name them (length and lists; see ``FOREIGN_ANSWER_STYLE``): "Du musst nicht mehr so kurz
#: antworten" takes back "Please always keep your answers short".
STYLE_IN_ENGLISH: dict[str, str] = _in_english(
    {
        "short": "corto corta cortos cortas breve breves court courte courtes kurz kurze kurzen "
        "kort korte krótko krótkie krótkich curto curta curtos curtas korta kısa kisa",
        "bullet": "viñetas vinetas puces aufzählungspunkte stichpunkte stichpunkten puntato "
        "puntati opsommingstekens tópicos wypunktowania",
    }
)

#: The word before a language asked for as the reply's: "in", "en", "auf", "in het" (Dutch),
#: "po" (Polish), "på" (Danish, Swedish, Norwegian).
LANGUAGE_PREPOSITION = r"in(?: het)?|into|en|em|auf|na|po|på"
#: Turkish names the language before the verb: "Türkçe cevap ver", "İngilizce yaz".
TURKISH_REPLY_VERB = "cevap|yanıt|yanit|yaz|konuş|konus"

#: A language named with its variety or script: "Brazilian Portuguese", "Latin American
#: Spanish", "Simplified Chinese", "Swiss German" (a regex matching a bare name too).
LANGUAGE = (
    r"(?:(?:brazilian|european|latin american|mexican|castilian|argentin(?:e|ian)|canadian|"
    r"quebec(?:ois)?|belgian|swiss|austrian|simplified|traditional|(?:modern )?standard|"
    r"egyptian|levantine|moroccan|gulf|flemish|british|american|australian|indian|irish|scottish)\s+)?"
    # (not a spelling convention: "Canadian English spelling" is a style)
    rf"(?:{LANGUAGE_NAMES})(?!\s+spelling)"
)

#: How a reply language is named in Arabic, Russian, Ukrainian and Hindi (Devanagari), with
#: the preposition or case ending those languages attach to it ("بالعربي", "по-русски",
#: "українською", "हिंदी में"): each names the language of the reply on its own.
NON_LATIN_LANGUAGES = (
    "بالعربي|بالعربية|باللغة العربية|بالإنجليزي|بالانجليزي|بالإنجليزية|بالانجليزية|"
    "باللغة الإنجليزية|باللغة الانجليزية|بالفرنسي|بالفرنسية|"
    "по-русски|на русском|по-английски|на английском|по-украински|на украинском|"
    "українською|англійською|російською|"
    "हिंदी में|हिन्दी में|अंग्रेज़ी में|अंग्रेजी में|इंग्लिश में"
)

#: The same in Chinese, Japanese and Korean, matched without word boundaries (their words
#: are not separated by spaces).
CJK_LANGUAGES = "中文|汉语|漢語|普通话|英文|英语|英語|日本語|日本语|日语|한국어|영어|중국어|일본어"

#: Imperatives addressed to the assistant in the other languages the rules read (Spanish,
#: Portuguese, French, German, Italian, Dutch, Polish, Danish, Swedish, Norwegian, Turkish,
#: Arabic, Russian, Ukrainian; Hindi in Latin script and in Devanagari): "answer me",
#: "write", "speak".
FOREIGN_IMPERATIVES = (
    "respóndeme|respondeme|contéstame|contestame|háblame|hablame|escríbeme|escribeme|"
    "responde|contesta|habla|escribe|fala|fale|responda|escreve|escreva|réponds|reponds|"
    "répondez|repondez|parle|parlez|écris|ecris|écrivez|antworte|antworten|sprich|schreib|"
    "schreibe|jawab do|baat karo|likho|bolo|rispondi|rispondimi|rispondetemi|scrivi|scrivimi|"
    "parla|parlami|antwoord|schrijf|spreek|praat|odpowiadaj|odpowiedz|odpisuj|pisz|mów|mow|"
    # and the verbs of how to answer: "use", "avoid", "be", "keep", "give me", "explain"
    # ("usa" not after a word that makes it the country: "in the USA")
    "(?<!the )(?<!in )(?<!to )usa|utiliza|evita|evite|no uses|não uses|não use|"
    "mantén|manten|mantém|mantenha|sé breve|sê|seja|dame|dáme|explícame|explicame|explica|"
    "explique|utilisez|évite|évitez|sois|soyez|garde|gardez|expliquez|"
    "donne-moi|donnez-moi|fais|faites|benutze|benutz|verwende|nutze|vermeide|halte|"
    "erkläre|erklär|gib mir|fasse dich|fass dich|utilizza|sii|tieni|spiega|dammi|non usare|"
    # name, limit yourself to: "nenne nur deine beste Wahl", "limite-toi à trois"
    "nenne|nenn|beschränke dich|beschränk dich|limite-toi|limitez-vous|limítate|limitati|"
    "limita-te|"
    "gebruik|vermijd|wees|houd|hou|leg uit|geef|używaj|uzywaj|unikaj|bądź|badz|stosuj|"
    "wyjaśniaj|wyjasniaj|(?:nunca|não) (?:uses|use|utilizes|utilize)|nunca utilices|"
    # Danish, Swedish, Norwegian, Turkish
    "svar|svara|skriv|brug|bruk|använd|undgå|undvik|unngå|håll|giv mig|ge mig|gi meg|forklar|"
    "förklara|cevap ver|yanıt ver|yanit ver|yaz|kullan|kullanma|açıkla|acikla|konuş|"
    # Arabic (standard and spoken), Russian, Ukrainian, Hindi
    "جاوبني|جاوب|جاوبيني|أجبني|اجبني|أجب|اجب|رد علي|رد عليّ|ردي علي|ترد علي|ترد عليّ|"
    "احكي معي|احكيلي|اكتبلي|اكتب لي|كلمني|تكلم معي|"
    "отвечай|отвечайте|ответь|ответьте|пиши|пишите|говори|говорите|"
    "відповідай|відповідайте|пишіть|говоріть|"
    "जवाब दो|जवाब दें|जवाब दीजिए|जवाब दिया करो|लिखो|लिखें|बोलो|बात करो"
)

#: "Always" in the same languages: it says a statement stands, but alone it is no
#: instruction ("Моя мама всегда отвечает мне по-русски" is someone's habit).
FOREIGN_ALWAYS = (
    "siempre|sempre|toujours|immer|altijd|zawsze|hamesha|دائما|دائماً|دايما|دايماً|всегда|завжди|हमेशा|"
    # and "never", which stands too
    "nunca|jamais|nooit|nigdy|"
    # Danish, Swedish, Norwegian, Turkish: always, never
    "altid|alltid|aldrig|aldri|her zaman|hiçbir zaman|asla|"
    # and "every time" (not "every time that ...", which is "whenever")
    "(?:(?:à )?chaque fois|cada vez|jedes mal|ogni volta|elke keer|za każdym razem|toda vez)"
    "(?!,?\\s+(?:que|qu'|wenn|che|als|gdy|kiedy)\\b)"
)

#: "Please", "from now on" and "I'd like you to" in the same languages: each makes a
#: request of the assistant.
#: "From now on" in the other languages the rules read.
FOREIGN_FROM_NOW_ON = (
    "a partir de ahora|de ahora en adelante|à partir de maintenant|"
    "a partir de maintenant|désormais|dorénavant|ab jetzt|von nun an|ab sofort|"
    "a partir de agora|de agora em diante|daqui (?:pra|para) frente|d'ora in poi|"
    "da ora in poi|da adesso in poi|voortaan|vanaf nu|od teraz|od tej pory|ab se|"
    "fra nu af|fremover|fra nå av|framöver|från och med nu|hädanefter|bundan sonra|"
    "bundan böyle|من الآن|من هلق|من هلأ|с этого момента|отныне|впредь|відтепер|अब से"
)
FOREIGN_STANDING = (
    "je préfère que|je voudrais que|je veux que|prefiero que|quiero que|prefiro que|"
    "quero que|ich möchte,? dass|ich will,? dass|preferisco che|vorrei che|voglio che|"
    "ik wil dat|ik heb liever dat|wolę,? żeby|chcę,? żeby|я хочу,? чтобы|я предпочитаю|"
    "أفضل أن|أفضّل أن|بدي ياك|"
    "por favor|s'il te plaît|s'il vous plaît|bitte|per favore|alsjeblieft|alstublieft|proszę|"
    "prosze|venligst|vennligst|är du snäll|lütfen|lutfen|jeg vil gerne have,? at|"
    "jag vill att|jeg vil at|"
    "من فضلك|لو سمحت|أرجو|ارجو|"
    "пожалуйста|будь ласка|"
    "कृपया|" + FOREIGN_FROM_NOW_ON
)

#: Instruction and standing words of Chinese, Japanese and Korean ("please", "always"),
#: matched without word boundaries.
CJK_INSTRUCTION = "请|請|ください|下さい|总是|總是|一直|いつも|常に|항상|해주세요|해 주세요|주세요"

#: "When"/"if"/"today" in Arabic, Russian, Ukrainian and Hindi: a trigger.
FOREIGN_TRIGGERS = (
    "لما|عندما|إذا|اذا|لو(?! سمحت)|اليوم|بكرا|غدا|"
    "когда|если|сегодня|завтра|коли|якщо|сьогодні|завтра|"
    "जब|अगर|आज|कल|इस बार|अभी के लिए|फिलहाल|फ़िलहाल|"
    # "this time", "only now" in Russian, Ukrainian and Arabic
    "только сейчас|сейчас|в этот раз|на этот раз|цього разу|зараз|هذه المرة|الآن فقط"
)

#: The same in Chinese, Japanese and Korean, without word boundaries.
CJK_TRIGGERS = (
    "的时候|的時候|时候|時候|如果|今天|明天|ときは|時は|場合|今日|明日|때는|때|오늘|내일|"
    # "this time"
    "这次|這次|今回|今度|이번"
)

#: A character of Chinese, Japanese (kana) or Korean, scripts that run their words together.
CJK_CHAR = "[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"
# Kin and social roles in Chinese, Japanese and Korean (the subject of someone else's wish
# or take-back).
_ZH_KIN = "妈妈|媽媽|爸爸|老板|老闆|哥哥|姐姐|弟弟|妹妹|朋友|老师|老師|儿子|兒子|女儿|女兒|妻子|丈夫|同事|孩子"
_JA_KIN = "母|父|上司|兄|姉|弟|妹|友達|先生|息子|娘|妻|夫|同僚"
_KO_KIN = "엄마|아빠|어머니|아버지|상사|형|언니|오빠|누나|친구|선생님|아들|딸|아내|남편|동료"
#: Someone of the speaker's in Chinese, Japanese and Korean, as the subject (Japanese and
#: Korean with their topic or subject particle): "我妈妈", "母は", "엄마는".
CJK_SOMEONE = f"(?:{_ZH_KIN})|(?:{_JA_KIN})(?:は|が)|(?:{_KO_KIN})(?:는|은|가|이)"
#: Someone else's wish in Chinese, Japanese and Korean, which have no spaces to find a
#: reporting subject by: a relation, then what they want, hope or say ("我妈妈希望你...",
#: "母は...と言っています", "우리 엄마는 ... 원해요").
CJK_SOMEONE_ELSE = (
    f"(?:{_ZH_KIN})[^。！？!?]{{0,12}}?(?:希望|想要|想让|想讓|要求|说|說|喜欢|喜歡|觉得|覺得)|"
    f"(?:{_JA_KIN})(?:は|が)[^。！？!?]{{0,24}}?(?:と言って|と言い|ほしいと|欲しいと|が好き|を好む)|"
    f"(?:{_KO_KIN})(?:는|은|가|이)[^.!?]{{0,24}}?(?:원해|원합니다|좋아해|좋아합니다|말했|말해요|바라)"
)
#: Taking back in Chinese, Japanese and Korean, without word boundaries: "no need any more"
#: ("不用再", "もう...なくていい", "더 이상", "않아도 돼"), "forget" ("忘了", "忘れて", "잊어").
CJK_WITHDRAWAL = (
    "不用再|不必再|不需要再|不再|别再|別再|忘了|忘掉|算了|"
    "もう[^。！？!?]{0,12}?(?:なくていい|なくても(?:いい|大丈夫)|いらない)|忘れて|"
    "더 이상|않아도 (?:돼|됩니다|괜찮)|안 해도 (?:돼|됩니다)|잊어"
)
#: The English name of each language ``CJK_LANGUAGES`` names (a take-back's topic).
CJK_LANGUAGE_IN_ENGLISH: dict[str, str] = _in_english(
    {
        "chinese": "中文 汉语 漢語 普通话 중국어",
        "english": "英文 英语 英語 영어",
        "japanese": "日本語 日本语 日语 일본어",
        "korean": "한국어",
    }
)

#: Someone else's wish in Hindi (Devanagari), matched without word boundaries (Python's
#: ``\w`` does not cover the vowel signs inside Devanagari words): a subject other than "I"
#: or "we" who wants, says or thinks ("मेरी माँ चाहती है कि ...", "पापा कहते हैं कि ..."), or
#: someone's "said" ("मेरे भाई ने कहा कि ..."; not "मैंने कहा", "I said", one word).
HINDI_SOMEONE_ELSE = (
    "(?<!मैं )(?<!हम )(?:चाहत|कहत|सोचत)[ाीे] (?:है|हैं|था|थी|थे)|(?<!\\S)ने (?:कहा|बोला|लिखा)"
)

#: "Even when/if" in the same languages: a concession, so the rule holds in that case too
#: (the opposite of a trigger).
CONCESSIONS = (
    "even (?:when|if|(?:the )?next time)|même (?:quand|si|lorsque)|incluso (?:cuando|si)|aun(?:que| cuando)|"
    "mesmo (?:quando|que|se)|auch wenn|selbst wenn|ook als|zelfs als|anche (?:se|quando)|"
    "nawet (?:gdy|jeśli|jesli|kiedy)|حتى لو|حتى لما|даже если|даже когда|навіть якщо|"
    "भले ही"
)


#: Someone else's wish passed on, in the languages the rules read (Spanish, Portuguese,
#: French, German, Italian, Dutch, Polish, Danish, Swedish, Norwegian, Turkish): third-person
#: forms of "says", "wants",
#: "asks", "writes", "thinks" and their past (the subject decides whose wish it is).
FOREIGN_REPORTING = (
    "dice|dijo|quiere|quería|prefiere|pide|pidió|escribe|escribió|cree|"
    "diz|disse|quer|queria|prefere|pede|pediu|escreve|escreveu|acha|"
    "dit|veut|voulait|préfère|demande|écrit|pense|"
    "sagt|sagte|meint|meinte|möchte|findet|schreibt|schrieb|"
    "vuole|voleva|preferisce|chiede|scrive|pensa|"
    "zegt|zei|wil|wilde|vindt|vraagt|vroeg|schrijft|schreef|"
    "mówi|powiedział|powiedziała|chce|chciał|chciała|prosi|pisze|napisał|napisała|uważa|"
    # (not "ville" or "mener", French words)
    "siger|sier|sagde|säger|vil|vill|foretrækker|foretrekker|föredrar|skriver|synes|"
    "tycker|menar|beder|ber|istiyor|diyor|söylüyor|söyledi|yazıyor|yazdı|"
    # likes and dislikes ("Mein Chef mag immer kurze Antworten", "mon patron aime ..."; not
    # "will" or "adore", English words)
    "mag|mochte|liebt|hasst|bevorzugt|braucht|wollte|aime|aimait|déteste|odia|odeia|"
    "necesita|adora|gosta|preferiva|houdt|haat|woli|lubi|"
    "gillar|gillade|liker|likte|älskar|elsker|hatar|hader|behöver|trenger|kan lide|"
    "sever|seviyor"
)
#: A setting or channel a rule is kept to, in those languages ("en los exámenes", "sur
#: WhatsApp", "bei der Arbeit", "na escola", "op het werk", "w pracy", "på jobbet"): a trigger.
FOREIGN_SETTINGS = (
    r"(?:en|sur|par|au|aux|à l'|a la|al|auf|bei|beim|in|im|per|a|alla|allo|nel|nella|na|no|nos|"
    r"nas|em|op|w|we|på|i|ved)\s+(?:(?:el|la|los|las|le|les|der|die|den|dem|il|lo|gli|o|a|"
    r"os|as|het|de|mis|mes|meinen|meiner|meinem|miei|mie|meus|minhas|mijn|moich|mina|mine|"
    r"mitt|min)\s+)?"
    r"(?:whatsapp|telegram|slack|teams|signal|discord|sms|correos?|mails?|e-?mails?|"
    r"ex[áa]men(?:es)?|examens?|prüfungen?|esami|exames|egzamin\w*|eksamen\w*|tentor|"
    r"clases?|cours|unterricht|lezion[ei]|aulas?|lessen|lekcj\w*|"
    r"trabajo|travail|arbeit|lavoro|trabalho|werk|pracy|jobbet|jobben|arbejde|arbeidet|"
    r"escuela|colegio|[ée]cole|schule|scuola|escola|school|szkole|skolan|skolen|"
    r"reuni(?:ón|ones|ões|ao|ão)|r[ée]unions?|besprechung\w*|riunion[ei]|vergadering\w*|"
    r"spotkani\w*|m[øö]te[nrt]?|oficina|bureau|büro|ufficio|escrit[óo]rio|kantoor|biurze|"
    r"kontoret)(?!\w)"
)
#: A while the principal's circumstances hold for, in those languages ("durante este mes",
#: "pendant mon séjour", "bis Ende des Monats", "fino a venerdì", "até sexta"): a trigger.
FOREIGN_TIME_BOUND = (
    r"durante|pendant|während|tijdens|podczas|"
    r"hasta (?:el|la|que|mañana|el lunes|fin)|jusqu'(?:à|au|en)|bis (?:zum|zur|ende|morgen|"
    r"montag|dienstag|mittwoch|donnerstag|freitag|samstag|sonntag|nächste)|fino a|finché|até|"
    r"tot (?:het|de|morgen|volgende|eind)|indtil|tills|inntil|"
    r"este mes|esta semana|ce mois|cette semaine|diesen monat|diese woche|questo mese|"
    r"questa settimana|este mês|deze maand|deze week|w tym miesiącu|w tym tygodniu|"
    r"denne måned|den här månaden|denne måneden|denna vecka|denne uge|bu ay|bu hafta|"
    r"por ahora|pour l'instant|pour le moment|vorerst|im moment|per ora|por agora|voorlopig|"
    r"na razie|for nu|för tillfället|foreløpig|şimdilik|"
    # next week, month, year
    r"(?:l'année|la semaine|le mois) prochaine?|nächste[ns]? (?:jahr|woche|monat)|"
    r"(?:el año|la semana|el mes) que viene|(?:el|la) próxim[oa] (?:año|semana|mes)|"
    r"(?:l'anno|la settimana|il mese) prossim[oa]|(?:no|na) próxim[oa] (?:ano|semana|mês)|"
    r"volgend(?:e)? (?:jaar|week|maand)|w przyszłym (?:roku|tygodniu|miesiącu)|"
    r"nästa (?:år|vecka|månad)|n(?:e|æ)ste (?:år|uke|uge|måned)|gelecek (?:yıl|hafta|ay)|seneye"
)
#: A class of the principal's own things, in those languages ("para todos mis correos",
#: "pour tous mes mails", "für alle meine E-Mails"): a trigger.
FOREIGN_ALL_MY = (
    r"(?:para|pour|für|per|voor|dla|for|för)\s+(?:tod[oa]s(?: (?:os|as))?|tous|toutes|alle|"
    r"tutt[ei](?: (?:i|le))?|wszystki\w+|alla|allt?)\s+(?:mis|mes|meine|miei|mie|meus|minhas|mijn|"
    r"moich|moje|mina|mine)\s+[^\W\d_]+"
)
#: Taking back an earlier request in those languages: forget, drop it, no longer ("olvida lo
#: de ...", "vergiss das mit ...", "non rispondermi più in spagnolo", "já não preciso de ...").
#: Both the extractor and the activation rules read it.
FOREIGN_WITHDRAWAL = (
    r"ya no|olvida\w*|déjalo|dejalo|oublie\w*|laisse tomber|plus besoin|esquece\w*|"
    r"não precisa mais|nao precisa mais|vergiss\w*|nicht mehr|"
    r"non (?:[^\W\d_]+ )?più|già non|já não|ja nao|niet meer|nie (?:[^\W\d_]+ )?już|już nie|"
    r"ikke (?:længere|lenger)|inte längre|artık|"
    # Russian, Ukrainian and Arabic: "no longer", "forget", "no need"
    r"больше не|уже не нужно|забудь\w*|більше не|вже не треба|"
    r"لم أعد|لم اعد|لم يعد|لا داعي|انس(?:ى|َ)?"
)
#: The same in Hindi, matched without word boundaries (see ``HINDI_SOMEONE_ELSE``): "forget"
#: ("भूल जाओ"), "no need" ("ज़रूरत नहीं").
HINDI_WITHDRAWAL = r"(?<!\S)(?:भूल जा\S*|(?:ज़रूरत|जरूरत) नहीं)"
#: "According to" in those languages ("laut meiner Lehrerin", "según mi profesor"), not "in my
#: opinion" ("selon moi", "secondo me", "volgens mij").
FOREIGN_ACCORDING_TO = (
    r"(?:según|segun|d'après|d'apres|selon|laut|secondo|segundo|volgens|według|wedlug|ifølge|"
    r"enligt)(?!\s+(?:moi|nous|me|mij|mir|mí|mi parecer|mim|mnie|meg|mig|mig selv)\b)"
)
#: The first person singular subject in those languages ("ich will", "ik wil", "yo quiero").
FOREIGN_I = "yo|eu|je|j|ich|io|ik|ja|jeg|jag"
#: Someone else's device, in those languages: "il telefono di Lucia", "sto usando il suo
#: telefono", "el móvil de mi hermana", "auf dem Handy von Tom", "son téléphone".
_FOREIGN_DEVICES = (
    r"(?:tel[eé]fono|telefone|telem[oó]vel|celular|m[oó]vil|portable|t[eé]l[eé]phone|handy|"
    r"telefoon|telefon|tablet|laptop|ordenador|computador|ordinateur|pc|cuenta|conta|compte|"
    r"konto|account)"
)
FOREIGN_SOMEONES_DEVICE = (
    rf"\b{_FOREIGN_DEVICES}\s+(?:di|de|da|do|von|van|d')\s*\w|"
    r"\b(?:il suo|la sua|su|seu|sua|son|sa|sein(?:em)?|ihr(?:em)?|zijn|haar|jego|jej)\s+"
    rf"{_FOREIGN_DEVICES}\b|"
    # a relation at the keyboard: "mi hermano está escribiendo", "mein Sohn tippt gerade"
    rf"(?<!\w)(?:{_FOREIGN_RELATIONS})\s+(?:min\s+|mitt\s+)?(?:está escribiendo|esta escribiendo|"
    r"está escrevendo|está a escrever|está digitando|est en train d'écrire|est en train de taper|"
    r"tape|schreibt gerade|tippt|sta scrivendo|is aan het typen|typt|pisze teraz|skriver nu|"
    r"skriver)(?!\w)"
)
#: Replies addressed to someone else, in those languages: "respóndele", "antworte ihr",
#: "rispondile", "réponds-lui", "antwoord haar", "jej odpowiadaj".
FOREIGN_ANSWER_THEM = (
    r"\b(?:resp[oó]nde(?:le|les)|cont[eé]sta(?:le|les)|rispondi(?:le|gli)|r[eé]ponds-(?:lui|leur)|"
    r"responde-(?:lhe|lhes)|responda-(?:lhe|lhes))\b|"
    # a dative with no preposition: "antworte meiner Schwester auf Italienisch"
    r"\b(?:antworte|antwortet|schreib|schreibe|schreibt)\s+(?:meiner|meinem|unserer|unserem)\s+"
    rf"(?:{_FOREIGN_RELATIONS})(?!\w)|"
    r"\b(?:antworte|antwortet|antwoord|odpowiadaj|odpowiedz|odpisuj)\s+(?:ihr|ihm|ihnen|haar|hem|"
    r"hun|jej|jemu|im)\b|"
    r"\b(?:ihr|ihm|ihnen|haar|hem|hun|jej|jemu|im)\s+(?:antworte|antworten|antwoord|odpowiadaj|"
    r"odpowiedz|odpisuj)\b"
)
