"""Deterministic text rules of activation: sentences, negation, hypotheticals, the claim match.

The matching rule of step 2 (:func:`find_supporting_claim`) is lexical and deterministic:
the turn is split into sentences (a claim may span up to three consecutive ones, all of which
must qualify; the span stating most of the record's content words wins, then the shortest);
a sentence is skipped when it is a question (unless it is a standing request such as "can
you always ...?" or "could you ... from now on?"), hypothetical ("if", "suppose", "imagine",
...; idioms such as "if needed" do not count), about a third party (a third-person pronoun
other than "I find them ..." in or before the clause that addresses the assistant, a subject
other than "I" before a reporting/preference verb such as "wants" or "said", or hearsay such
as "according to"), or differs from the record in negation. The record's content words
(stop words and generic preference verbs removed, light suffix stemming) must then be found
in the sentence: at least ``min(2, n)`` of the ``n`` words and at least 60% of them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from ._lexicon import (
    ACCESSIBILITY,
    CJK_SOMEONE_ELSE,
    CJK_WITHDRAWAL,
    CONCESSIONS,
    FOREIGN_ACCORDING_TO,
    FOREIGN_ALWAYS,
    FOREIGN_ANSWER_THEM,
    FOREIGN_FOR_THEM,
    FOREIGN_FROM_NOW_ON,
    FOREIGN_I,
    FOREIGN_IMPERATIVES,
    FOREIGN_REPORTING,
    FOREIGN_SOMEONES_DEVICE,
    FOREIGN_WHEN_YOU_ANSWER,
    FOREIGN_WITHDRAWAL,
    HINDI_SOMEONE_ELSE,
    HINDI_WITHDRAWAL,
    RELATIONS,
    WORD_CHAR,
)
from ._records import (
    Principal,
    Record,
    Role,
    TranscriptTurn,
)
from ._redaction import normalise

__all__ = [
    "ClaimMatch",
    "find_supporting_claim",
    "own_words",
    "relay_flags",
]


class ClaimMatch(BaseModel):
    """Where a record's claim was found inside one turn's text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sentence_index: int
    sentence: str
    matched: int
    of: int


# -- deterministic text rules -----------------------------------------------------------

_WORD = re.compile(rf"{WORD_CHAR}+(?:'{WORD_CHAR}+)?")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;؟])\s+|(?<=[。！？।])\s*|\n+|[\u0085\u2028\u2029]+")
_NEGATIONS = frozenset({"not", "no", "never", "nor", "without", "cannot"})
_HYPOTHETICAL = frozenset(
    {
        "if",
        "suppose",
        "supposing",
        "imagine",
        "imagining",
        "hypothetically",
        "hypothetical",
        "pretend",
        "pretending",
        "unless",
    }
)
_THIRD_PERSON = frozenset(
    {"he", "she", "they", "his", "her", "hers", "him", "them", "their", "theirs"}
    # the same in the other languages the rules read, leaving out the forms that double as
    # a polite "you" (German "Sie", Italian "Lei", Spanish "su") or as an English word
    | {"él", "ella", "ellos", "ellas", "ele", "ela", "eles", "elas", "dele", "dela", "elle"}
    | {"elles", "ils", "er", "lui", "hij", "он", "она", "они", "він", "вона", "вони"}
    # (Danish and Norwegian "hun", "her"; not "han" or "hon", a Spanish verb and an
    # English word)
    | {"hun", "hendes", "hennes", "henne"}
)
_HYPOTHETICAL_PHRASE = re.compile(
    r"\bwhat if\b|\bin (?:a|an) (?:perfect|ideal) world\b|\bif only\b|\bin theory\b|"
    # a wish about oneself is counterfactual: "I wish I could read Japanese, then you could
    # always answer me in it" ("I wish you'd stop using emoji" stays a request)
    r"\bi wish (?:i|we)\b|"
    # and a wish about someone else: "I wish my colleagues would always answer briefly",
    # "ich wünschte, meine Kollegen würden ..." (not about the assistant: "I wish you'd ...")
    r"\bi wish,? (?:that )?(?:my|our|his|her|their|the|people|everyone|everybody|[^\W\d_]+'s)\b|"
    r"\bich wünschte,? (?:dass )?(?!du\b)|\bik wou(?:de)? dat (?!je\b|jij\b|u\b)|"
    r"\bojalá (?:que )?(?:mi|mis|el|la|los|las|su|sus)\b|\bsi seulement\b|"
    r"\bjag önskar,? att (?!du\b)|\bjeg (?:ville|skulle) ønske,? (?:at )?(?!du\b)|\bkeşke\b|"
    # what the principal would never ask: "I'd never ask you to always answer in French"
    r"\bi(?:'d| would) never\b"
)
# A joke marker: "kidding", "joking" (not "I'm not joking"), "jk", "/s".
_JOKE = re.compile(
    r"(?<!not )(?<!n't )\b(?:kidding|joking)\b|\bj/?k\b|(?<!\w)/s\b|"
    r"\bsaid no ?(?:one|body) ever\b|\byeah,? right\b"
)
# What takes back what was just said: "always answer in French - just kidding", "..., lol
# jk", "scratch that", "forget what I said".
_TAKE_BACK = (
    rf"{_JOKE.pattern}|\bscratch that\b|"
    r"\b(?:ignore|disregard|forget) (?:that|it|what i (?:just )?(?:said|wrote))\b"
)
# In the same turn, after the claim, "never mind" takes it back too, and so does a sentence
# naming it as material: "that's the opening line of my short story", "this is a sample".
_RETRACTION = re.compile(
    rf"{_TAKE_BACK}|\bnever ?mind\b|"
    r"\b(?:that|this|it)(?:'s| is| was)\s+(?:just\s+|only\s+)?(?:the|a|an|my|our|his|her|their)\s+"
    r"(?:[^\W\d_]+\s+){0,2}(?:lines?|quotes?|sentences?|examples?|opening|title|lyrics?|caption|"
    r"slogan|prompt|sample|excerpt|draft|dialogue|motto|chorus|verse|refrain|hook|punchline|"
    r"catchphrase)\b|"
    # or a test of what the assistant can do: "Just curious if you can."
    r"\bjust (?:curious|wondering|asking|checking)\b|"
    # or says who said it: "Never reply in English again!!! said my angry customer"
    r"^\W*(?:said|says|wrote|writes|asked|asks)\b|"
    # or says what it is for: "Use Spanish. It's for my Spanish homework."
    r"\b(?:it's|it is|this is|that's|that is) (?:just |only )?for (?:my|a|an|the|our) "
    r"(?:[^\W\d_]+ )?(?:homework|assignment|essay|exam|test|quiz|presentation|report|party|"
    r"trick|game|slides|project|demo|screenshot|video|joke|prank)\b|"
    r"\b(?:curious|wondering) (?:if|whether) you (?:can|could)\b|"
    # or asks for work on it: "1. Always speak French at meetings. 2. ... Format these nicely?"
    r"\b(?:format|proofread|rewrite|reword|polish|tidy up|edit|improve|rank|rate|number|sort)\s+"
    r"(?:these|those|them)\b|"
    # or says it was meant the other way, a sentence of its own: "... exactly what I need. Not."
    r"^\W*not\W*$|"
    # or numbers it as part of something: "that's line one of the prompt I'm testing"
    r"\b(?:that|this|it)(?:'s| is| was)\s+(?:just\s+|only\s+|also\s+)?(?:line|sentence|part|"
    r"step|rule|item) (?:one|two|three|four|five|\d+) of\b|"
    # or says whose way it is: "That's what my old assistant did", "that's how my kid likes it"
    r"\b(?:that|this|it)(?:'s| is| was) (?:what|how) (?:my|our|his|her|their|the) "
    r"(?:[^\W\d_]+ ){1,2}?(?:did|does|do|says?|said|wants?|wanted|likes?|liked|used to|prefers?|"
    r"preferred)\b|"
    # or limits it to one setting: "That's how I like it for my Spanish class only."
    r"\bfor (?:my|our|the|this|that) (?:[^\W\d_]+ ){0,2}?[^\W\d_]+ only\b|"
    r"\bonly (?:for|in|at|during) (?:my|our|the|this|that)\b|"
    # or names its author after a dash: "... -- the villain in my novel"
    r"^\s*(?:--|\u2014|\u2013)\s*\w"
)
# A wish with its subject dropped: "Would really appreciate metric units from here on".
SUBJECTLESS_WISH = (
    r"^\W*(?:would|'d)\s+(?:really\s+|much\s+|greatly\s+)?(?:appreciate|love|prefer)\b"
)
# What helps the principal: "it really helps when you keep sentences short" (a stated
# preference, and no condition: the "when" clause is what is asked for).
HELPS_WHEN_YOU = (
    r"\bit (?:really |always |genuinely )?(?:helps|works better)(?: me)? (?:when(?:ever)?|if) you\b"
)
# A polite request ("I'd appreciate it if you always ...", "it would help if you ..."): a
# request, not a hypothetical (the activation classifier reads it as an instruction).
POLITE_REQUEST = (
    r"\b(?:i'd|i would|it'd|it would)\s+(?:really\s+|much\s+|greatly\s+)?(?:appreciate it|help|"
    r"love it|like it|prefer it|prefer|"
    r"be (?:great|nice|good|helpful|better|easier|lovely))\s+if "
    r"(?:you|your (?:answers?|repl(?:y|ies)|responses?|messages?|explanations?))\b|"
    rf"{HELPS_WHEN_YOU}"
)
# "If needed", "if possible", ...: idiomatic qualifiers of an instruction, not hypotheticals.
IF_IDIOM = re.compile(
    r"\bif (?:needed|necessary|possible|relevant|appropriate|applicable|useful|helpful|any)\b|"
    r"\bwhen(?:ever)? (?:you can|possible|useful|helpful|appropriate|relevant|needed|"
    r"necessary)\b|"
    # the assistant's judgement of use: "whenever they'd help", "if it helps"
    r"\b(?:if|when(?:ever)?) (?:it|they|that|this|those)(?:'d|'ll| would| will)? "
    r"(?:helps?|be (?:useful|helpful)|makes? sense)\b|"
    # the end of a reply, not a condition: "just stop when you're done"
    r"\bwhen you(?:'re| are) (?:done|finished|through)(?=\s*(?:[.,;!?]|$))|"
    # leave given, not a condition: "you can use emojis again if you want"
    r"\bif you (?:want|like|wish|prefer)(?=\s*(?:[.,;!?]|$))|"
    # concessive, not conditional: "even if I write in Dutch, answer in English"
    rf"\b(?:{CONCESSIONS})\b|"
    # a condition on the reply's own form ("if the answer is long"), not a hypothetical
    r"\bif (?:the|your|an?|my) (?:answers?|repl(?:y|ies)|responses?|explanations?|lists?) "
    r"(?:is|are|gets?|runs?) (?:long|longer|lengthy|complex|detailed)\b|"
    # a condition on the principal's own message, which any turn may meet: "if my question
    # is vague, ask me first", "if something I ask is ambiguous, ..."
    r"\b(?:if|when(?:ever)?) (?:my|a|the) (?:question|request|message|prompt|ask)s? "
    r"(?:is|are|seems?|sounds?|looks?) (?:\w+ )?(?:vague|unclear|ambiguous|confusing|"
    r"open-ended|underspecified|too broad)\b|"
    r"\b(?:if|when(?:ever)?) (?:something|anything|what) i (?:ask|say|write|mean)\w* "
    r"(?:is|seems?|sounds?) (?:\w+ )?(?:vague|unclear|ambiguous|confusing)\b|"
    # a polite request: "I'd appreciate it if you ...", "it would really help if you ..."
    rf"{POLITE_REQUEST}|"
    # a default the principal may override later: it states the rule, it is no hypothetical
    r"\bunless (?:i|we) (?:say|ask|tell you|specify) (?:otherwise|so|differently)\b|"
    r"\bunless (?:i|we) (?:ask|say|tell you) (?:for|i want|we want) (?:more|less|details?|"
    r"something else|a longer (?:one|answer|reply))\b|"
    r"\bunless (?:otherwise|stated otherwise)\b|"
    # the same default the other way round: "details only if I ask", "more if I ask for it"
    r"\b(?:more|details?|the rest|the (?:long|longer|full) (?:version|answer)|explanations?|"
    r"background|examples?) (?:only )?(?:if|when) (?:i|we) (?:ask|request|say so)(?: for (?:it|them))?"
    r"\b|\b(?:if|when) (?:i|we) (?:ask|request) for (?:more|details?|the (?:rest|details))\b|"
    # "then the details if I need them": more when wanted, no hypothetical
    r"\b(?:if|when) (?:i|we) (?:need|want) (?:them|it|more|details?|the (?:rest|details))\b"
)
# A condition on the reply itself rather than on a topic, time or channel: "for long
# replies", "when you list steps", "if the answer is long". The instruction still applies
# to every conversation (it shapes the form of any reply of that kind), so it is no
# trigger. Only response-form words: a task or topic ("when you write code", "when I ask
# about money") is still a trigger.
RESPONSE_FORM = (
    r"(?:steps?|lists?|items?|options?|points?|answers?|repl(?:y|ies)|responses?|"
    r"summar(?:y|ies)|explanations?|instructions?|examples?|sources?|messages?|"
    r"process(?:es)?|procedures?|how-?tos?|charts?|graphs?|diagrams?|images?|pictures?|"
    r"times|dates|numbers|prices|temperatures|weights|distances|measurements|amounts|"
    r"recommendations?|suggestions?|advice|estimates?|opinions?|comparisons?|definitions?|"
    r"translations?|choices?|alternatives?|picks?|verdicts?)"
)
RESPONSE_CONDITION = re.compile(
    # ("when you give me options", "if you're comparing options for me")
    r"\b(?:when(?:ever)?|if)\s+you(?:'re|\s+are)?\s+(?:list(?:ing)?|giv(?:e|ing)|writ(?:e|ing)|"
    r"explain(?:ing)?|summari[sz](?:e|ing)|includ(?:e|ing)|show(?:ing)?|compar(?:e|ing)|"
    r"us(?:e|ing)|number(?:ing)?|send(?:ing)?|mention(?:ing)?|quot(?:e|ing)|stat(?:e|ing)|"
    r"describ(?:e|ing)|offer(?:ing)?|walk(?:ing)? me through)\s+"
    r"(?:(?:a|an|the|any|some|me|several|multiple|more|many)\s+)*"
    # (not those of one item: "when you mention times in the rota I'm pasting")
    rf"{RESPONSE_FORM}\b(?!\s+(?:in|from|of|on|to|for)\s+(?:the|this|that|these|those|my|our)\b)|"
    rf"\bfor\s+(?:(?:any|all|every|the|your)\s+)?(?:long(?:er)?|short(?:er)?|lengthy|big(?:ger)?|"
    rf"detailed|complex)\s+{RESPONSE_FORM}\b|"
    # a reply's parts as such: "use bullet points for steps", "numbers for lists"
    rf"\bfor\s+(?:(?:any|all|the|your)\s+)?{RESPONSE_FORM}\b"
    r"(?!\s+(?:in|of|from|for|on|to|about)\s+(?:the|this|that|these|those|my|our)\b)|"
    rf"\b(?:when(?:ever)?|if)\s+(?:the|your|an?|my)\s+{RESPONSE_FORM}\s+(?:is|are|gets?|runs?)\s+"
    rf"(?:long(?:er)?|lengthy|short|big|complex|detailed)\b|"
    # what a reply holds: "whenever there are numbers in an answer", "when your answer has
    # a list"
    rf"\bwhen(?:ever)?\s+there\s+(?:is|are)\s+(?:[^\W\d_]+\s+){{1,3}}in\s+(?:an?|the|your|any)\s+"
    rf"{RESPONSE_FORM}\b|"
    rf"\b(?:when(?:ever)?|if)\s+(?:an?|the|your)\s+{RESPONSE_FORM}\s+(?:has|have|contains?|"
    rf"includes?)\b|"
    # what any reply needs: "whenever something has more than two steps", "if an answer has
    # lots of steps"
    r"\b(?:when(?:ever)?|if)\s+(?:something|anything|it|an?\s+answer|the\s+answer|a\s+reply)\s+"
    r"(?:has|needs|involves|takes)\s+(?:more\s+than\s+[^\W\d_]+\s+|several\s+|many\s+|"
    rf"multiple\s+|a\s+lot\s+of\s+|lots\s+of\s+|a\s+few\s+)?{RESPONSE_FORM}\b"
    r"(?!\s+(?:at|in|on|for)\s+(?:work|home|school|the|my|our)\b)|"
    # what a reply holds, when it matters: "when numbers matter, write them out", "tables
    # when there's data to compare"
    r"\bwhen(?:ever)?\s+(?:the\s+)?(?:numbers|figures|data|statistics|stats|dates|amounts|"
    r"prices)\s+(?:matter|count|are involved)\b|"
    r"\bwhen(?:ever)?\s+there(?:'s|\s+is|\s+are)\s+(?:data|numbers|figures|options|"
    r"things|prices)\s+to\s+compare\b|"
    # what a reply states, as it comes up: "give me temperatures in Celsius whenever they
    # come up" (the pronoun's antecedent a reply's part, named before it)
    rf"\b{RESPONSE_FORM}\b[^.!?]{{0,60}}?\bwhen(?:ever)?\s+(?:they|those|these|it)\s+"
    r"(?:come|comes|crop|crops|show|shows) up\b|"
    # every reply: "when you answer me", "whenever you reply to me" (not "when you reply
    # about X", which names a topic)
    # every conversation: "when we talk", "whenever we chat" (not "when we talk about X")
    r"\bwhen(?:ever)?\s+we\s+(?:talk|chat|speak)\b(?!\s+(?:about|on|regarding)\b)|"
    r"\b(?:when(?:ever)?|if)\s+you\s+(?:answer|reply|respond|write back|talk|speak|get back)"
    r"(?:\s+to)?(?:\s+(?:me|us))?\b(?!\s+(?:about|on|regarding|for|my|his|her|their|our|him|"
    r"them|someone|somebody|anyone|anybody|people|others|other)\b)|"
    # any recommendation or explanation, whatever it is of: "when you recommend something",
    # "when you explain anything", "whenever I ask you to compare things"
    # and any choice made for the principal: "when I ask you to choose between things"
    r"\b(?:when(?:ever)?|if)\s+(?:you(?:'re|\s+are)?|i\s+ask\s+you\s+to)\s+"
    r"(?:recommend(?:ing)?|suggest(?:ing)?|explain(?:ing)?|describ(?:e|ing)|compar(?:e|ing)|"
    r"list(?:ing)?|show(?:ing)?|giv(?:e|ing)|summari[sz](?:e|ing)|choos(?:e|ing)|pick(?:ing)?|"
    r"decid(?:e|ing))\s+(?:between\s+)?"
    r"(?:something|anything|things|stuff|options|alternatives|choices|"
    r"(?:an?\s+|new\s+)?(?:concepts?|ideas?|terms?|topics?))\b|"
    # when the assistant is unsure: "when you're not sure about something, say so", "if you
    # don't know, ..." (not "when you're not sure about the train times", which names one)
    r"\b(?:when(?:ever)?|if)\s+you(?:'re|\s+are)\s+(?:not\s+(?:sure|certain)|unsure|uncertain)"
    r"(?:\s+(?:about|of)\s+(?:something|anything|it|that))?\b|"
    r"\b(?:when(?:ever)?|if)\s+you\s+(?:don't|do\s+not)\s+know"
    r"(?:\s+(?:something|anything|the\s+answer|for\s+sure))?\b|"
    # when the assistant needs input: "ask yes/no questions when you need something from me"
    r"\bwhen(?:ever)?\s+you\s+need\s+(?:something|anything|more|information|input|details|"
    r"an answer)\s+from\s+me\b|"
    # how to do anything: "when you explain how to do something"
    r"\b(?:when(?:ever)?|if)\s+you\s+(?:explain|describe|show me|tell me)\s+how\s+(?:to\s+)?"
    r"(?:do\s+)?(?:something|anything|things|stuff)\b"
    r"(?!\s+(?:to|for|with|about|in)\s+(?:my|our|his|her|their|the|this|that)\b)|"
    # any fact or figure an answer states: "whenever you state a fact, link the source"
    r"\b(?:when(?:ever)?|if)\s+you\s+(?:state|give|quote|cite|mention|claim|use)\s+(?:me\s+)?"
    r"(?:an?\s+|any\s+)?(?:facts?|figures?|numbers?|statistics?|stats|claims?|data)\b|"
    # the opposite of a trigger: "whatever we talk about", "whatever the topic", "even when
    # I'm casual" (a concession: the rule holds in that case too)
    r"\bwhatever (?:we|you|i) (?:talk|chat|ask|write|discuss)\w*(?: about)?\b|"
    rf"\b(?:{CONCESSIONS})\b|"
    r"\bwhatever the (?:topic|subject)\b|\bregardless of (?:the )?(?:topic|subject)\b|"
    # the behaviour itself, liked or not: "I hate it when you use emojis", "it annoys me
    # when you apologise" (what follows "when you" is the reply, not a trigger)
    r"\b(?:hate|dislike|love|like|prefer|(?:can't|cannot|ca not) stand|appreciate|mind)\s+"
    r"(?:it\s+)?(?:when(?:ever)?|if)\s+you\b|"
    r"\b(?:annoys|bugs|irritates|bothers|frustrates|confuses) me (?:when(?:ever)?|if) you\b|"
    rf"(?<!\w)(?:{FOREIGN_WHEN_YOU_ANSWER})(?!\w)"
)
# "I find them distracting": an object pronoun for the thing the principal judges, not a
# third party (who would be "I want them to ...", which stays disqualified).
_THING_PRONOUN = re.compile(
    r"\bi\s+(?:really\s+|just\s+|honestly\s+)?(?:find|found|hate|dislike|like|love|"
    r"(?:ca|can) not stand|cannot stand|ignore|skip|miss|skim|read|see|view|open|get|"
    r"receive|check|scroll through)\s+them\b(?!\s+to\b)|"
    # "them" as the object of an instruction about the reply's parts ("when you list steps,
    # number them"): a thing, not a third party
    r"\b(?:number|keep|make|put|list|break|split|format|label|order|sort|bold|shorten|write|"
    r"spell|round|convert|translate|explain|highlight)\s+them\b"
)
# "They"/"them" whose antecedent is a thing ("your answers are too long, can you cut them
# down", "describe things by their colour"): the reply's parts or things in general named
# before the pronoun, with no person named before it (a possessive, or people in the
# plural), make it a thing, not a third party.
_THINGS = frozenset(
    "answers replies responses explanations messages lists steps examples sources summaries "
    "paragraphs sentences emojis emoji bullets points headings headers tables links words "
    "numbers figures dates units texts notes suggestions recommendations options things "
    "items stuff intros introductions disclaimers caveats warnings apologies greetings "
    "pleasantries jokes quotes citations references abbreviations acronyms charts diagrams "
    "details specifics alternatives marks symbols emoticons asterisks hashtags icons "
    "images pictures visuals colours colors fonts capitals caps formulas equations "
    # the quantities a reply states: "give me temperatures in Celsius whenever they come up"
    "temperatures prices distances weights measurements amounts currencies".split()
)
_THING_ANAPHOR = frozenset({"they", "them", "their", "theirs"})
# A person named: a possessive, people in general, or a relation ("my", "users", "kids").
_PERSON_WORD = re.compile(
    rf"(?:my|our|his|her|their|people|users|guys|folks|everyone|everybody|{RELATIONS})"
)
_ADDRESSED_TO_OTHERS = re.compile(
    r"\b(?:answer(?:s|ed|ing)?|repl(?:y|ies|ied|ying)|respond(?:s|ed|ing)?|write|writes|wrote|"
    r"writing|talk(?:s|ed|ing)?|speak(?:s|ing)?|spoke|tell(?:s|ing)?|told|explain(?:s|ed|ing)?|"
    r"send(?:s|ing)?|sent|text(?:s|ed)?|e-?mail(?:s|ed)?|message(?:s|d)?|address(?:es|ed)?|"
    r"greet(?:s|ed)?|say|says|said|recommend(?:s|ed|ing)?|suggest(?:s|ed|ing)?|"
    r"describ(?:e|es|ed|ing))"
    r"(?:\s+(?:back|things|it|them|this|that|something|anything|stuff))?\s+(?:to\s+|for\s+|with\s+)?"
    rf"(?:my|our|his|her|their|the)\s+(?:[^\W\d_]+\s+)?{RELATIONS}\b|"
    # or a person named before: "my grandmother will ask you things too: always answer her"
    r"\b(?:answer|reply to|respond to|write to|talk to|speak to|tell|explain (?:it )?to)\s+"
    r"(?:him|her)\b|"
    rf"{FOREIGN_ANSWER_THEM}|{FOREIGN_FOR_THEM}"
)

# A reply to someone named: "always reply in Spanish to Maria" (the name ends the clause or
# is followed by "in", "with", "when": "to Spanish messages" names no one).
_TO_NAMED = re.compile(
    r"\b(?:[Rr]eply|[Aa]nswer|[Rr]espond|[Ww]rite|[Tt]alk|[Ss]peak)\b[^.!?]{0,40}?\bto\s+"
    r"(?!(?:I|You|Me)\b)[A-Z][a-z]+(?=\s*(?:[.,;!?]|$|\s+(?:in|with|when|whenever|if)\b))"
)


# Another voice assistant addressed by its wake word ("Alexa, always ...", "hey Google, ..."):
# the instruction is for that device.
_OTHER_ASSISTANT = re.compile(
    r"^\W*(?:(?:hey|ok|okay|hi)\s+)?(?:alexa|siri|google|cortana|bixby|echo)\b\s*[,:!]|"
    # a letter's greeting to someone else: "Dear diary, ...", "Dear Sam, ..."
    r"^\W*dear (?!(?:assistant|ai|bot|chatbot|claude|gpt|chatgpt|retold|you)\b)[^\W\d_]+"
)


def _names_people(words: Sequence[str]) -> bool:
    """Whether ``words`` name someone else (a third person's possessive, people in general,
    a relation: not "my" alone, as in "my eyes", and not a screen reader, a program)."""
    return any(
        _PERSON_WORD.fullmatch(w.removesuffix("'s"))
        and w not in ("my", "our")
        and not (i and words[i - 1] == "screen")
        for i, w in enumerate(words)
    )


def _without_thing_anaphors(words: Sequence[str], *, before: Sequence[str] = ()) -> list[str]:
    """``words`` without the plural pronouns whose antecedent is a part of the reply,
    named in ``words`` before the pronoun or in ``before`` (the sentence before it: "The
    emojis annoy me. Could you leave them out in future?"), with no person named first."""
    out: list[str] = []
    parts = any(w in _THINGS for w in before)
    people = _names_people(before)
    for w in words:
        if w in _THING_ANAPHOR and parts and not people:
            continue
        parts = parts or w in _THINGS
        people = people or bool(_PERSON_WORD.fullmatch(w))
        out.append(w)
    return out


# A polite request phrased as a question ("can you generally ...?", "could you answer me in
# Japanese from now on?") is a direct instruction when it says the request is standing.
# It opens the sentence or a clause after a complaint ("the emojis annoy me, could you leave
# them out in future?"), after any discourse markers ("honestly, could you ...").
_REQUEST_QUESTION = re.compile(
    # (bounded runs of punctuation: unbounded ones are quadratic on a long run of dashes)
    r"(?:^|[,;:\u2014\u2013]\s*|\s-\s)\W{0,8}(?:(?:hey|hi|ok|okay|so|also|and|but|actually|please|"
    r"btw|oh|well|anyway|anyhow|right|alright|listen|look|yeah|plus|now|besides|honestly|"
    r"frankly|seriously|sorry|by the way|one more thing|last thing|"
    r"quick (?:question|request|one))\W{1,8})*"
    r"(?:(?:can|could|would|will)\s+you|(?:can|could|shall)\s+we|"
    r"(?:would|will) it be possible to|is it possible to|(?:can|could|may) i ask you to|"
    # the same in the languages the rules read: "¿puedes ...?", "mi rispondi ...?"
    r"puedes|podrías|podrias|pode|podes|poderia|peux-tu|pourrais-tu|pouvez-vous|tu peux|"
    r"tu pourrais|vous pouvez|vous pourriez|você pode|voce pode|du kannst|wil je|wilt u|"
    r"würdest du|würden sie|"
    r"pourriez-vous|kannst du|könntest du|können sie|könnten sie|puoi|potresti|può|"
    r"mi rispondi|kun je|zou je|kunt u|możesz|mógłbyś|mogłabyś)(?!\w)"
)
#: A rule set for the assistant: "New rule for you: metric units only" (it stands, and it
#: instructs).
RULE_FOR_YOU = r"(?:(?:a|one|new|general|standing)\s+)?rules?\s+for\s+you"
#: A standing marker: the instruction holds from now on, for every reply.
STANDING = re.compile(
    r"\b(?:always|never|generally|in general|from now on|from here on|going forward|by default|"
    r"whenever|(?:every|each) (?:single )?time|all the time|in (?:the )?future|as a rule|"
    r"for everything|in (?:everything|anything) you (?:write|send|say|tell)|"
    r"whatever the (?:topic|subject|question)|no matter (?:what|the topic|the subject)|"
    r"for future reference|for (?:the )?next time|for the future|from today(?: on(?:wards?)?)?|"
    r"make (?:it )?a habit (?:of|to)|"
    # a rule set for the assistant holds until changed: "new rule for you: metric units only"
    rf"{RULE_FOR_YOU}|"
    # a reply of any kind: "could you stop opening every reply with ...?"
    r"(?:every|each) (?:single )?(?:answer|reply|response|message)|"
    # every reply, named in the plural: "avoid them in your answers", "your replies to me"
    r"in (?:all|every one) of (?:your|my) (?:answers|replies|responses|messages)|"
    r"in all (?:your |my )?(?:answers|replies|responses|messages)|"
    r"all (?:of )?your (?:answers|replies|responses|messages)|"
    # for ever: "could you stop using emoji for good?" (not "for good measure")
    r"for good(?! (?:measure|reason|luck|cause))|once and for all|permanently|"
    r"in your (?:answers|replies|responses)|your (?:answers|replies|responses) to me)\b|"
    rf"(?<!\w)(?:{FOREIGN_ALWAYS}|{FOREIGN_FROM_NOW_ON})(?!\w)|"
    # a way of replying kept up with the principal: "could you keep a formal tone with me?",
    # "would you mind sticking to plain words between us?"
    r"\b(?:(?:keep|stick|stay|talk|speak)(?:s|ing)?|use[sd]?|using|writes?|writing|be|being)\b"
    r"[^.!?]{0,160}\b(?:with me|between us)\b|"
    # "no emoji, ever", "Don't greet me. Ever.": a trailing "ever" after a pause
    r"[,.!]\s*ever\b"
)
_REPORTING_VERBS = (
    "wants|prefers|likes|needs|asks|asked|says|said|told|tells|thinks|loves|hates|requires|"
    "required|wrote|writes|wanted|preferred|liked|needed|recommends|recommended|suggests|"
    "suggested|insists|insisted|advises|advised|heard|mentioned|mentions|claims|claimed|noted|"
    "reckons|reckoned|believes|believed|feels|felt|explained|explains|warned|warns|swears|swore"
)
_REPORTED = re.compile(
    rf"\b([^\W_]+(?:'[^\W_]+)?)\s+(?:{_REPORTING_VERBS}|{FOREIGN_REPORTING})(?!\w)"
)
# The principal reporting their own words ("I've said it before: short answers, always").
_FIRST_PERSON_SINGULAR = frozenset({"i", "i've", "i'd", "i'll", *FOREIGN_I.split("|")})
# The principal after a verb of wanting, once a phrase comes first ("ab jetzt möchte ich
# ..."); only a wish: "mein Chef sagt ich soll ..." reports, comma or not.
_INVERTED_I = re.compile(rf"\s+(?:{FOREIGN_I})\b")
_WANTS = frozenset("möchte wil vil vill wilde foretrækker foretrekker föredrar".split())
# A thing's need, not someone's report: "answer as long as it needs to be" ("it says ..."
# is a report).
_THING = frozenset("it this that which what everything something anything nothing".split())
_A_NEED = re.compile(r"\s+(?:needs|needed|requires|required)\b")
# Someone else's rule passed on by the principal: "according to my editor, ...", "I heard
# that ...".
_HEARSAY = re.compile(
    rf"\baccording to\b|(?<!\w){FOREIGN_ACCORDING_TO}(?!\w)|\bi (?:have |'ve )?heard\b|"
    r"\b(?:rumou?rs? (?:has it|says|is)|word (?:has it|is)|supposedly|allegedly|they say)\b|"
    # someone else's words passed on: "copying my manager's note here - always ..."
    r"\b[^\W\d_]+(?:'s|s') (?:[^\W\d_]+ )?(?:note|notes|message|e-?mail|text|rule|rules|"
    r"instructions?|words|request|memo|advice|orders|status|bio|post|tweet|caption|diary|"
    r"journal|poster|sign)\b|"
    # an instruction the principal gave someone else, or something they set up: "I told my
    # students to always ...", "set up my out-of-office to always reply in German"
    r"\b(?:told|tell|asked|ask|taught|teach|reminded|remind|set up|setup|configure|program|"
    r"get)\s+(?:my|our|his|her|their|the)\s+[^\W\d_]+(?:[\s-]+[^\W\d_]+){0,2}?\s+to\b|"
    # a standing rule for someone or something else, or for the principal to keep: "tell
    # Siri to always ...", "I set it to always ...", "remind me to always answer emails ..."
    r"\b(?:told|tell|tells|asked|ask|reminded|remind|taught|teach|set|configured|configure|"
    r"programm?ed|program|trained|train|got|get|have|had)\s+(?!(?:you|yourself|sure|u)\b)"
    r"[^\W\d_]+\s+to\s+(?:always|never|only)\b|"
    # someone who made the principal do so: "my ex used to make me always answer in French",
    # "our teacher makes us always write full sentences"
    r"\b(?:made|make|makes|making|forced?|forcing|had|has|have|lets?)\s+(?:me|us)\s+"
    r"(?:always|never)\b|"
    # a motto or a policy stated, not an instruction: "my motto is always keep it short"
    r"\b(?:motto|slogan|mantra|policy|policies|philosophy|creed) (?:is|was|says)\b|"
    # a saying passed on: "as my grandma used to say, always keep it short", "as they say"
    r"\bas the saying goes\b|"
    # a quotative: "never reply in English again, said my angry customer"
    r"\b(?:said|says|asked|asks|wrote|writes) (?:my|our|his|her|their|the|a|an) [^\W\d_]+|"
    r"\bas (?:[^\W\d_]+\s+){1,3}(?:(?:used|likes?|liked|would) to say|says|said|puts? it)\b"
)
# What someone does with a reply's parts ("uses", "gives"), in the third person.
_OTHERS_VERB = (
    r"(?:(?:always|usually|often|also|normally)\s+)?(?:uses|writes|gives|sends|puts|adds|"
    r"speaks|picks|chooses|likes)\b"
)
# The same with a name: "I love the bullet points Anna uses" (on the sentence as written).
_OTHERS_NAMED_DO = re.compile(
    rf"\b(?i:the|those|these)\s+(?:[^\W\d_]+\s+){{1,3}}?(?:(?i:that|which)\s+)?"
    rf"[A-Z][^\W\d_]+\s+(?i:{_OTHERS_VERB})"
)
# Someone else's habit, not an instruction: "my kids always answer me in English", "our
# teacher writes in French".
_OTHERS_DO = re.compile(
    # a thing of the principal's that must behave so: "the bot in my app must never use
    # emojis" (not "my answers should always be short": the replies to the principal)
    r"^\W*(?:the|my|our|his|her|their)\s+(?!(?:answers?|repl(?:y|ies)|responses?|explanations?|"
    r"messages?|summar(?:y|ies)|lists?|texts?)\b)[^\W\d_]+(?:\s+(?:in|of|on|for)\s+"
    r"(?:my|our|the|his|her|their)\s+[^\W\d_]+)?"
    # or what the principal makes: "the app I'm building should never use emojis"
    r"(?:\s+(?:that\s+|which\s+)?(?:i'm|i am|we're|we are|i've|we've|i|we)\s+[^\W\d_]+)?"
    r"\s+(?:must|should|needs? to|has to|have to|shall)\b|"
    # people in general: "users should always get answers in English"
    r"^\W*(?:(?:all|most|some|other)\s+)?(?:users|people|everyone|everybody|customers|clients|"
    r"students|readers|visitors|members|employees|staff|nobody|no one|someone|somebody|anyone|"
    r"anybody)\s+(?:should|must|need|needs|have to|has to|always|never|want|wants|prefer|"
    r"prefers|like|likes|get|gets)\b|"
    r"^\W*(?:my|our|his|her|their)\s+[^\W\d_]+(?:\s+[^\W\d_]+)?\s+"
    r"(?:(?:always|never|usually|often|sometimes|also|only)\s+)?"
    r"(?:answers?|replies|repl(?:y|ied)|responds?|writes?|speaks?|talks?|uses?|texts?)\b|"
    # someone else's state, said first: "my colleague is dyslexic, so keep it simple" (what
    # follows is for them)
    rf"^\W*(?:my|our|his|her|their|the)\s+(?:[^\W\d_]+\s+)?{RELATIONS}\s+(?:is|are|was|were|"
    r"has|have|gets|needs|can't|cannot|can not)\b|"
    # what someone else does, liked: "I like the emojis my sister uses", "the short answers
    # my teacher gives"
    rf"\b(?:the|those|these)\s+(?:[^\W\d_]+\s+){{1,3}}?(?:that\s+|which\s+)?"
    rf"(?:my|our|his|her|their)\s+[^\W\d_]+\s+{_OTHERS_VERB}|"
    # the same in the other languages the rules read, whose third person often looks like
    # the imperative ("Mi madre siempre me contesta en español")
    r"^\W*(?:mi|mis|ma|mon|mes|mein|meine|mia|mio|minha|meu|mijn|moja|mój|моя|мой|мій)\s+"
    rf"[^\W\d_]+\s+(?:(?:{FOREIGN_ALWAYS})\s+)?(?:(?:me|mi|mir|me|мне|мені)\s+)?"
    rf"(?:{FOREIGN_IMPERATIVES})(?!\w)"
)
_STOPWORDS = frozenset(
    """
    a an the and or but of to in on at by for from with as is are was were be been being am
    it its this that these those there here i me my mine we us our you your yours user users
    user's principal principal's prefers prefer preferred preference preferences wants want
    wanted likes like liked would should please always also just really very do does did
    so than then to too all any some s
    """.split()
)


def _normalise_text(text: str) -> str:
    # The one normaliser redaction uses too: NFKC, format characters (U+200B, ...) removed,
    # U+2028-style breaks turned into newlines; then case-folded for matching.
    text = unicodedata.normalize("NFKC", normalise(text)).casefold()
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    # Chat spellings of "you", "your", "I'm", "I've": "can u stop w the emojis in ur replies".
    text = _CHAT_SPELLINGS.sub(lambda m: _CHAT_WORDS[m.group(0)], text)
    # "don't" -> "do not", "can't" -> "ca not": negation parity sees one "not" either way.
    return re.sub(r"n't\b", " not", text)


_CHAT_WORDS = {"u": "you", "ur": "your", "yr": "your", "im": "i'm", "ive": "i've"}
_CHAT_SPELLINGS = re.compile(r"(?<![\w'])(?:u|ur|yr|im|ive)(?![\w'])")


def _words(text: str) -> list[str]:
    return _WORD.findall(_normalise_text(text))


def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ly", "ing", "ed", "ies", "es", "s"):
        # "ly" keeps a 4-letter stem so "reply" is not cut to "rep".
        if word.endswith(suffix) and len(word) - len(suffix) >= (4 if suffix == "ly" else 3):
            word = word[: -len(suffix)] + ("i" if suffix == "ies" else "")
            break
    if word.endswith("y"):
        word = word[:-1] + "i"
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def _content_stems(text: str) -> set[str]:
    return {_stem(w) for w in _words(text) if w not in _STOPWORDS and w not in _NEGATIONS}


def _negated(words: Iterable[str]) -> bool:
    return any(w in _NEGATIONS for w in words)


# Where a sentence's clauses part, for reading a negation where it applies.
CLAUSE_BREAKS = r"[,;:\u2014\u2013]|[.!?](?=\s)|\s-\s|\band\b|\bbut\b"
_CLAUSE_PARTS = re.compile(rf"\s*(?:{CLAUSE_BREAKS})\s*", re.I)


def _claim_negated(sentence: str, wanted: set[str]) -> bool:
    """Whether the clauses of ``sentence`` that hold the claim's words (``wanted`` stems) are
    negated: "Always answer in English, no emojis" states "Always answer in English"
    unnegated; "I don't want short answers" negates "short answers"."""
    clauses = [c for c in _CLAUSE_PARTS.split(sentence) if c and c.strip()]
    holding = [c for c in clauses if wanted & {_stem(w) for w in _words(c)}]
    return _negated(w for c in holding or clauses for w in _words(c))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


# A tag after a statement ("From now on we speak Italian, ok?"): the sentence asks nothing.
_TAG_QUESTION = re.compile(
    r",\s*(?:ok|okay|alright|all right|right|yeah|yes|deal|got it|understood|thanks|"
    r"please|pls|capisce|agreed)\s*\?+\s*$",
    re.I,
)


def asks(sentence: str) -> bool:
    """Whether ``sentence`` is a question: it ends with "?" (or the Arabic "؟", the
    full-width "？"), and not only after a tag ("..., ok?")."""
    text = sentence.rstrip()
    return text.endswith(("?", "؟", "？")) and not _TAG_QUESTION.search(text)


def standing_request(sentence: str) -> bool:
    """A request-question that states a standing instruction ("can you always ...?")."""
    text = _normalise_text(sentence)
    return bool(_REQUEST_QUESTION.search(text)) and bool(STANDING.search(text))


# Where a sentence's clauses part: punctuation, or a conjunction that opens a reason or
# a result ("..., so I can check them", "... because they get read out").
_CLAUSE_BREAK = frozenset({",", ";", ":", "so", "because", "since", "as", "cause", "cos"})
_ADDRESSEE = frozenset({"you", "your", "yours", "yourself"})
_TOKEN = re.compile(rf"{WORD_CHAR}+(?:'{WORD_CHAR}+)?|[,;:]")
# What opens a clause of its own (a subject): "..., they look unprofessional when I forward
# them", "..., I still cook the old way".
_SUBJECT = frozenset(
    "i i'm i've i'd he she it it's they they're we we're that that's this these those my "
    "his her their our".split()
)


def _addressed(
    sentence: str, *, reasons_only: bool = False, ends: Callable[[str], bool] | None = None
) -> list[str]:
    """The words of ``sentence`` up to the end of the last clause that addresses the
    assistant ("you", "your", or a clause ``ends`` accepts): what follows is the speaker's
    reason ("..., they get read out one by one", "so I can check them"), whose pronouns are
    about things, not whose instruction it is. Every word when no clause addresses the
    assistant.

    With ``reasons_only``, a following clause is cut only where it opens with a subject of
    its own ("..., they look unprofessional when I forward them"): "..., when we talk about
    work" still conditions the instruction.
    """
    tokens = _TOKEN.findall(_normalise_text(sentence))
    last = max((i for i, w in enumerate(tokens) if w in _ADDRESSEE), default=None)
    if ends is not None:
        start = 0
        for i, w in enumerate([*tokens, ","]):
            if w in _CLAUSE_BREAK and not w.isalpha():
                if i > start and ends(" ".join(tokens[start:i])) and (last is None or i > last):
                    last = i - 1
                start = i + 1
    if last is not None:
        for i in range(last + 1, len(tokens)):
            if tokens[i] not in _CLAUSE_BREAK:
                continue
            opener = next((w for w in tokens[i + 1 :] if w not in _CLAUSE_BREAK), "")
            if not reasons_only or tokens[i].isalpha() or opener in _SUBJECT:
                tokens = tokens[:i]
                break
    return [w for w in tokens if w not in _CLAUSE_BREAK or w.isalpha()]


# A participle completing what the principal wants, not a report: "I don't need the basics
# explained", "I want everything explained simply" (the word before it is the object).
_COMPLEMENT_BEFORE = re.compile(
    r"\b(?:need|needs|want|wants|like|likes|prefer|prefers|have|has|get|gets)\s+"
    r"(?:(?:the|my|our|a|an|some|any|all|these|those)\s+)?$"
)


def refers_back(previous: str, sentence: str) -> bool:
    """Whether ``sentence`` names a part of the reply only by a pronoun whose antecedent is
    in ``previous`` ("The emojis annoy me." / "Could you leave them out in future?")."""
    words = _addressed(sentence)
    return len(_without_thing_anaphors(words, before=_words(previous))) < len(
        _without_thing_anaphors(words)
    )


#: Words a statement may open with before its subject: "btw", "heads up", "for context",
#: "I should mention (that)".
STATEMENT_LEAD_IN = (
    r"(?:btw|fyi|also|so|and|but|actually|oh|well|just so you know|heads up|for context|"
    r"i should (?:mention|say|tell you)(?: that)?|i forgot to (?:mention|say|tell you)(?: that)?)"
)
# A sentence about someone else: a relation with a possessive or a determiner ("my friend",
# "I should mention my son is dyslexic"), in the possessive ("my dad's"), or opening the
# sentence ("Grandpa can't ..."); or people in general, their state or wish ("Users struggle
# with jargon.").
_SOMEONE_ELSE = re.compile(
    rf"\b(?:my|our|his|her|their|the)\s+(?:[^\W\d_]+\s+)?{RELATIONS}\b|"
    rf"\b{RELATIONS}'s\b|^\W*{RELATIONS}\b|"
    rf"^\W*(?:{STATEMENT_LEAD_IN},?\s+)*(?:users|people|readers)\s+"
    r"(?:(?:really|also|all|both|always|usually|just)\s+)?(?:is|are|was|were|has|have|gets?|"
    r"needs?|can't|cannot|can not|hates?|loves?|likes?|prefers?|wants?|finds?|struggles?|"
    r"dislikes?|reads?|uses?|gets? (?:lost|confused|overwhelmed))\b"
)
_FIRST_PERSON_WORDS = frozenset({"i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself"})


def disqualified_sentences(sentences: Sequence[str]) -> list[str | None]:
    """Why each of a turn's consecutive ``sentences`` cannot be the principal's own direct
    claim (None when it can), each read after the sentence before it. An instruction right
    after a sentence about someone else, with no word of the principal's own ("My son is
    dyslexic. Please always keep sentences short.", "My eyes are fine, but my dad's aren't.
    Please always use large text."), is for that person."""
    out: list[str | None] = []
    for i, sentence in enumerate(sentences):
        before = sentences[i - 1] if i else ""
        words = _words(sentence)
        why = _disqualified(sentence, words, before=before)
        if (
            why is None
            and before
            and not _FIRST_PERSON_WORDS.intersection(words)
            and _SOMEONE_ELSE.search(_normalise_text(before))
        ):
            why = "third_party"
        out.append(why)
    return out


# The principal described by a relative clause, not someone else: "I'm someone who likes all
# the details", "I'm the kind of person who hates small talk".
_SELF_DESCRIBED = re.compile(
    r"\bi(?:'m| am)\s+(?:(?:just|really|very much|definitely|honestly|more of|the|a|an|one|of|"
    r"those|that|kind|type|sort)\s+)*(?:someone|somebody|person|people|one|type|kind|sort|guy|"
    r"gal|girl|woman|man|reader|learner)\s+(?:who|that)$"
)
# How a thing comes across, not someone's report: "it feels unprofessional", "the chummy
# style feels off".
_IMPRESSION = re.compile(
    r"(?:it|this|that|style|tone|voice|vibe|wording|phrasing|format|approach|register)\s+"
    r"(?:feels|felt)\b"
)


# (both matched without word boundaries: see the two patterns)
_SOMEONE_ELSE_UNBOUNDED = re.compile(f"{CJK_SOMEONE_ELSE}|{HINDI_SOMEONE_ELSE}")
_TURKISH_EVERY = re.compile(r"\bher (?=zaman|seferinde|defasında|gün)")


# What the principal will or would do: the consequence of a condition, not a rule.
# (the words as ``_words`` gives them: "won't" is "wo not")
_CONSEQUENCE = re.compile(r"\bi(?:'ll|'d| will| would| wo not)\b")


def _disqualified(sentence: str, words: Sequence[str], *, before: str = "") -> str | None:
    """Why a sentence cannot be the principal's own direct claim (None when it can).
    ``before``: the sentence before it, where a pronoun of it may find its antecedent."""
    if asks(sentence) and not standing_request(sentence):
        return "question"
    # a condition on a kind of reply ("if you give me options, ...") is no hypothetical,
    # unless what follows is what the principal would do ("if you answer in French I won't
    # understand")
    joined = " ".join(words)
    unidiomatic_words = IF_IDIOM.sub(" ", joined)
    if not _CONSEQUENCE.search(unidiomatic_words):
        unidiomatic_words = RESPONSE_CONDITION.sub(" ", unidiomatic_words)
    unidiomatic = unidiomatic_words.split()
    if any(w in _HYPOTHETICAL for w in unidiomatic) or _HYPOTHETICAL_PHRASE.search(joined):
        return "hypothetical"
    context = _words(before) if before else []
    addressed = " ".join(_addressed(sentence))
    if not _names_people(context):
        # "number them", "I find them ...": a thing, unless the sentence before named a
        # person ("My boss hates long emails. Please keep them short from now on.")
        addressed = _THING_PRONOUN.sub(" ", addressed)
    # Turkish "her" is "every" ("her zaman", always), not the English pronoun
    addressed = _TURKISH_EVERY.sub(" ", addressed)
    pronouns = _without_thing_anaphors(addressed.split(), before=context)
    if any(w in _THIRD_PERSON for w in pronouns):
        return "third_party"
    text = _normalise_text(sentence)
    if (
        _HEARSAY.search(text)
        or _OTHERS_DO.search(text)
        or _ADDRESSED_TO_OTHERS.search(text)
        or _TO_NAMED.search(sentence)
        or _OTHERS_NAMED_DO.search(sentence)
        or _OTHER_ASSISTANT.search(text)
        or _SOMEONE_ELSE_UNBOUNDED.search(sentence)
    ):
        return "third_party"
    unidiomatic_text = IF_IDIOM.sub(" ", text)
    for m in _REPORTED.finditer(unidiomatic_text):
        if (
            m.group(1) in _FIRST_PERSON_SINGULAR
            or m.group(1) == "being"
            # the subject after its verb, as in Danish, German or Dutch after a fronted
            # phrase: "fra nu af vil jeg ...", "ab jetzt möchte ich ..."
            or (m.group(0).split()[-1] in _WANTS and _INVERTED_I.match(unidiomatic_text, m.end()))
            or (m.group(1) in _THING and _A_NEED.match(m.group(0), len(m.group(1))))
            or _COMPLEMENT_BEFORE.search(unidiomatic_text[: m.start()])
            or _IMPRESSION.match(m.group(0))
            or _SELF_DESCRIBED.search(unidiomatic_text, 0, m.end(1))
        ):
            continue
        return "third_party"
    return None


# -- relayed content: what the user pastes or quotes is not what they state -------------

# A line that introduces someone else's text ("summarise this email:", "here is the page:",
# "translate the following:"): whatever follows the colon is the pasted material.
_LEAD_IN = re.compile(
    r"(?im)^[^\n]{0,160}?\b(?:summari[sz]e|summary|tl;?dr|translate|translation|proofread|"
    r"rewrite|paraphrase|reply to|respond to|answer (?:this|the following)|analy[sz]e|"
    r"review|check|read|paste[ds]?|(?<!going )(?<!moving )forward(?:ed|ing)?|quot(?:e|ed|ing)|"
    # a bare "Test:" before what follows
    r"^\W*test|"
    r"e-?mail|mail|message|article|web ?page|page|website|site|document|doc|pdf|"
    r"text|post|thread|transcript|comment|letter|snippet|excerpt|output|log|memo|guide|"
    r"handbook|manual|policy|policies|title|caption|heading|tagline|slogan|subject line|label|"
    r"blog|vlog|newsletter|podcast|template|resolution|checklist|tweet|draft|"
    r"copied|copying|forum|"
    r"status|bio|diary|journal|poster|lyrics?|song|"
    r"the following|below|wrote|writes|says|typed|texted|sent|posted|messaged|"
    # someone's words, not the principal's own said again ("I've said it before: ...")
    r"(?<!\bi )(?<!i've )(?<!i have )(?<!i'd )said|"
    r"tweeted|commented|scribbled|yelled|shouted|repeat|say|recite|fwd?|note to self|"
    # a note the principal keeps for themselves: "Reminder for me, not you: ..."
    r"reminders? (?:for|to) (?:me|myself)|notes? (?:for|to) (?:me|myself)|memo to self|"
    # a test or a sample, not a request: "just testing whether you remember: ...",
    # "unit test input: ...", "example: ..."
    r"just (?:a )?test(?:ing)?|(?:this is|it's) (?:just )?a test|testing (?:whether|if|you|your|how)|"
    r"unit test|test (?:input|prompt|message|case)|(?:sample|example) (?:input|prompt|text)|"
    r"example|prompt|"
    # a quiz item: "True or false: a good assistant should always answer in bullet points."
    r"true or false|agree or disagree|quiz|trivia|multiple choice|fill in the blanks?)\b"
    r"[^\n:]{0,80}:"
)
# A first paragraph asking for work on some material ("can you summarise this document for
# me?"), followed by more paragraphs: those paragraphs are the material.
_REQUEST_ON_MATERIAL = re.compile(
    r"(?i)\b(?:summari[sz]e|translate|proofread|rewrite|paraphrase|reply to|respond to|"
    r"analy[sz]e|review|check|read|edit|explain|look at|what do you (?:make|think) of)\b"
)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# A first line asking for that work and pointing at the material ("translate this for me",
# "proofread the following") or naming only where it goes ("translate into Spanish"): the
# lines after it are the material even with no blank line or colon between.
_POINTS_AT_MATERIAL = re.compile(
    r"(?i)\b(?:this|these|the following|below|here)\b|\b(?:in|into|to)\s+[^\W\d_]+\W*$"
)
# A first line that presents material ("here's the brief from my client", "this is the email
# I got"): the lines after it are that material.
_PRESENTS_MATERIAL = re.compile(
    r"(?i)^\W*(?:here(?:'s| is| are)|this is|below is|attached is|i got|i received|i found)\b"
    r"[^\n]*\b(?:brief|e-?mail|mail|text|message|doc|document|draft|post|article|notes?|list|"
    r"page|letter|script|thread|transcript|instructions|rules|policy|guide|template|prompt|memo|"
    r"output|log|quote|excerpt|paragraph|section|essay|story|poem|lyrics|review|feedback|"
    r"comments?|tweet|reply|response)s?\b"
)
# Headers that open a pasted or forwarded mail; the rest of the turn is the mail.
_MAIL_START = re.compile(
    r"(?im)^[ \t>]*(?:(?:from|to|cc|bcc|subject|date|sent|reply-to)\s*:\s*\S|"
    r"-{2,}\s*(?:original|forwarded) message\s*-{2,}|begin forwarded message\s*:)"
)
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# A line of only ---, ===, ***, ___ or ~~~ sets pasted material apart ("who's on nights
# from this rota?\n---\n<the rota>\n---"): what lies between two such lines, or after a
# lone one, is the material, not the user's words.
_SEPARATED = re.compile(
    r"(?m)^[ \t]*([-=*_~])(?:[ \t]*\1){2,}[ \t]*$(?:.*?^[ \t]*\1(?:[ \t]*\1){2,}[ \t]*$|.*\Z)",
    re.DOTALL,
)
_QUOTE_LINE = re.compile(r"(?m)^[ \t]*>.*$")
# Pasted code with no fence: a line that reads as code (a call, an assignment, a keyword
# statement, a brace) makes the turn's comment lines ("# always respond in French") part
# of that code, not the user's words.
_CODE_LINE = re.compile(
    r"(?m)^[ \t]*(?:[A-Za-z_][\w.]*\(.*\)[ \t]*;?|[A-Za-z_][\w.]*[ \t]*=[ \t]*\S.*|"
    r"(?:import|from|def|class|function|const|let|var|return|public|private|#include)\b.*|"
    r".*[{}])[ \t]*$"
)
_COMMENT_LINE = re.compile(r"(?m)^[ \t]*(?:#|//|--|/\*).*$")
# Text in quotation marks with at least three words is a quotation, not the user's claim.
_QUOTED = re.compile(
    r"\"[^\"\n]*?\s[^\"\n]*?\s[^\"\n]*?\"|\u201c[^\u201d\n]*\u201d|"
    # in single quotes, which open before a word and close after one (never the apostrophe
    # inside "don't" or "it's")
    r"(?<!\w)'(?=\w)[^'\n]*?\s[^'\n]*?\s[^'\n]*?(?<=[\w.!?,])'(?!\w)"
)
# Labels that imitate a conversation role (or a chat template's control tokens).
_ROLE_LABEL = re.compile(
    r"(?im)(?:^|[.!?:;]\s+|\n)[ \t>*#_\-]*(?:system|assistant|developer|operator|admin|"
    r"administrator|tool|function)(?:\s+(?:message|prompt|note|instruction|override|update))?"
    r"[ \t]*[:>\]]"
    r"|\[\s*/?\s*(?:system|assistant|developer|tool|inst|sys)\s*\]"
    r"|<\|?\s*/?\s*(?:system|assistant|developer|user|im_start|im_end|endoftext|eot_id|"
    r"start_header_id|end_header_id)[^>\n]{0,24}?\|?>"
    r"|<<\s*/?\s*sys\s*>>"
    r"|^#{1,6}\s*(?:system|instruction|response|assistant)\b"
    # a transcript's speaker labels at the start of a line ("Human: ...", "AI: ...")
    r"|^[ \t>*#_\-]*(?:ai|bot|chatbot|chatgpt|gpt(?:-?\d[\w.]*)?|claude|gemini|copilot|llm|"
    r"human)[ \t]*:"
)
# Format characters a person does not type: zero-width spaces and joiners inside words,
# bidi overrides, word joiners. U+200D (emoji sequences) and U+FE0F are left alone.
_HIDDEN = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067"
    "\u2068\u2069\ufeff"
)


# A pasted chat transcript: lines opening with a speaker label ("Tom: ...", "Me: ..."), by
# at least two different speakers, or a chat export's time-stamped lines ("[10:32] Ana: ...",
# "12/03/2024, 10:32 - Ana: ..."). Only the lines the user labels as their own are theirs.
_SPEAKER_LINE = re.compile(
    r"(?m)^[ \t>]*(?P<stamp>(?:\[?\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4},?[ \t]*)?\[?\d{1,2}[:.]\d{2}"
    r"(?:[:.]\d{2})?(?:[ \t]?[ap]\.?m\.?)?\]?[ \t]*[-\u2013]?[ \t]*)?"
    r"([^\W\d_][\w .'-]{0,30}?)[ \t]*:[ \t]+\S.*$"
)
_OWN_LABELS = frozenset({"me", "i", "myself"})
# Labels that head notes, not people ("Update: ...", "Context: ..."): two of them are a list.
_HEADINGS = frozenset(
    "update also note notes todo ps edit summary question answer q a tip tips warning "
    "reminder example context background goal goals problem solution result results status "
    "subject re fyi btw important pros cons step steps details date time where when who what "
    "why how price cost address location ingredients method agenda deadline owner input "
    "output error expected actual preference preferences request requests plan idea ideas "
    "option options pro con tl;dr tldr".split()
)


def _drop_transcript(text: str) -> str:
    lines = list(_SPEAKER_LINE.finditer(text))
    labels = [m.group(2).strip().casefold() for m in lines]
    # A conversation, not a list of headed notes ("Update: ...", "Also: ..."): the user
    # labels a line as their own, a speaker comes back, the lines carry chat times, or two
    # people are named (capitalised single-word labels that head no note).
    named = {
        m.group(2).strip()
        for m in lines
        if m.group(2).strip()[:1].isupper()
        and " " not in m.group(2).strip()
        and m.group(2).strip().casefold() not in _HEADINGS
    }
    stamped = any(m.group("stamp") for m in lines)
    conversation = (
        bool(_OWN_LABELS & set(labels))
        or len(set(labels)) < len(labels)
        or stamped
        or len(named) >= 2
    )
    if not lines or (len(set(labels)) < 2 and not stamped) or not conversation:
        return text
    for m in reversed(lines):
        if m.group(2).strip().casefold() not in _OWN_LABELS:
            text = text[: m.start()] + text[m.end() :]
    return text


def own_words(turn_text: str) -> str:
    """The part of a user turn that is the user's own words (normalised).

    Removed: fenced blocks, blocks set apart by separator lines (``---``), the other
    speakers' lines of a pasted chat transcript
    ("Tom: ..." beside "Me: ..."), ``>`` quoted lines, quotations of three words or more, a
    pasted or forwarded mail (from its first header on), whatever follows a lead-in
    that introduces someone else's text ("summarise this page:", "the email says:"), and
    what follows a first paragraph or line that asks for work on material after it.
    """
    text = normalise(turn_text)
    text = _FENCE.sub("\n", text)
    text = _SEPARATED.sub("\n", text)
    if _CODE_LINE.search(text):
        text = _COMMENT_LINE.sub("", text)
    text = _drop_transcript(text)
    mail = _MAIL_START.search(text)
    if mail is not None:
        text = text[: mail.start()]
    lead = _LEAD_IN.search(text)
    if lead is not None:
        text = text[: lead.end()]
    first = _PARAGRAPH_BREAK.search(text)
    if first is not None and _REQUEST_ON_MATERIAL.search(text[: first.start()]):
        text = text[: first.start()]
    head, newline, _ = text.partition("\n")
    if newline and (
        (_REQUEST_ON_MATERIAL.search(head) and _POINTS_AT_MATERIAL.search(head))
        or _PRESENTS_MATERIAL.search(head)
    ):
        text = head
    text = _QUOTE_LINE.sub("", text)
    return _QUOTED.sub(" ", text)


def relay_flags(turn_text: str) -> tuple[str, ...]:
    """Why a turn's wording should go to a person before it can shape every answer.

    ``role_label``: the turn carries a label imitating a role or a chat template
    (``SYSTEM:``, ``[system]``, ``<|im_start|>system``); ``hidden_characters``: it carries
    invisible format characters that hide how it reads.
    """
    flags: list[str] = []
    if _ROLE_LABEL.search(normalise(turn_text)):
        flags.append("role_label")
    if any(ch in _HIDDEN for ch in turn_text):
        flags.append("hidden_characters")
    return tuple(flags)


#: Asking for the same again, with what "that" is said only before it: "do that", "keep
#: doing that", "keep it up" (a regex alternation).
SAME_AGAIN = (
    r"(?:do|keep doing|more of|stick (?:to|with)) (?:that|this|it|the same)|"
    r"keep (?:it|that|this) (?:up|that way|like that|coming)"
)

#: A sentence that only says the one before it stands: "Short answers. Always."
ONLY_STANDS = re.compile(
    r"^\W*(?:always|(?:every|each) (?:single )?time|from now on|going forward|by default|"
    r"as a rule|ever|for good|at all times|no exceptions)\W*$",
    re.I,
)

#: The most consecutive sentences one claim may span.
_MAX_CLAIM_SENTENCES = 3


def find_supporting_claim(
    record_text: str, turn_text: str, *, confirmed: str = ""
) -> ClaimMatch | None:
    """The first sentence of ``turn_text`` that states ``record_text`` directly, or None.

    Deterministic and lexical; see the module docstring for the exact rule. Only the
    user's own words count (:func:`own_words`): pasted and quoted material never supports
    a claim. ``confirmed``: the principal's next turn, when it only says that what they
    asked stands (:func:`confirms_standing`); the turn's last sentence is read together with
    it ("Can you keep your answers shorter?" + "From now on, please.").
    """
    wanted = _content_stems(record_text)
    if not wanted:
        return None
    own = own_words(turn_text)
    # A turn someone else typed supports nothing (see ``_SOMEONE_ELSE_TYPING``), nor does
    # one read to someone else, but for a withdrawal (``_SOMEONE_ELSE_READING``).
    own_text = _normalise_text(own)
    if _SOMEONE_ELSE_TYPING.search(own_text) or _JOKE_FORM.search(own_text):
        return None
    signed = _SIGNED_IN.search(own_text)
    if signed is not None and not _NEED.search(signed.group(1)):
        return None
    record_norm = _normalise_text(record_text)
    if _SOMEONE_ELSE_READING.search(own_text) and not (
        WITHDRAWAL.search(record_norm) or WITHDRAWAL_OR_NEW.search(record_norm)
    ):
        return None
    record_negated = _claim_negated(record_text, wanted)
    need = min(2, len(wanted))
    sentences = _sentences(own)
    if confirmed and sentences:
        # one claim said over two turns, read as one sentence: "Can you keep your answers
        # shorter — from now on, please."
        sentences[-1] = f"{sentences[-1].rstrip('?.!;: ')} — {confirmed.strip()}"
    usable = [why is None for why in disqualified_sentences(sentences)]
    # A record may span consecutive sentences of the turn ("use metric units, always; I never
    # know what a foot is"): the run of usable sentences that states most of it is the claim
    # (the shortest such run, then the first). So a record the extractor kept whole ("I'm
    # dyslexic. Please keep sentences short.") is classified on the whole of what it says,
    # not on its instruction alone.
    best: ClaimMatch | None = None
    end = 0  # the index of the sentence after the best run
    for span in range(1, _MAX_CLAIM_SENTENCES + 1):
        for index in range(len(sentences) - span + 1):
            if not all(usable[index : index + span]):
                continue
            sentence = " ".join(sentences[index : index + span])
            words = _words(sentence)
            if _claim_negated(sentence, wanted) != record_negated:
                continue
            matched = len(wanted & {_stem(w) for w in words})
            if matched < need or matched / len(wanted) < 0.6:
                continue
            if best is None or matched > best.matched:
                best = ClaimMatch(
                    sentence_index=index, sentence=sentence, matched=matched, of=len(wanted)
                )
                end = index + span
    if best is None or _retracted(sentences, best.sentence_index):
        return None
    # A sentence after it that only says it stands ("Short answers. Always.") is part of it.
    if end < len(sentences) and ONLY_STANDS.match(sentences[end]):
        best = best.model_copy(update={"sentence": f"{best.sentence} {sentences[end]}"})
    return best


# The principal's next turn taking the claim back as not theirs or not meant: "lol that was
# my brother on my phone, ignore that", "haha no, forget that, my kid typed it". A bare
# "never mind" is left out: as a next turn it usually drops a topic, not a preference.
_DISOWNED = re.compile(
    rf"{_TAKE_BACK}|\b(?:ignore|disregard) (?:this|him|her|them)\b|\bwas(?:n't| not) me\b|"
    r"\b(?:that|it) was (?:my|our) [^\W\d_]+|"
    r"\b(?:my|our) [^\W\d_]+ (?:typed|wrote|sent|grabbed|took|was on|was using|was messing)\b|"
    r"\bwas messing (?:with|around)\b"
)


# Whose device or account a turn is typed on.
_DEVICES = r"(?:account|profile|login|tablet|phone|laptop|computer|device|ipad)"
# The turn says someone else is typing or speaking: "This is Sam's wife on his account",
# "Sam's mum here", "I'm his assistant", "my cat walked on the keyboard".
_SOMEONE_ELSE_TYPING = re.compile(
    rf"\b(?:this is|it's|it is|i'm|i am)\s+(?:[^\W\d_]+,?\s+)?(?:[^\W\d_]+'s|his|her|their)\s+"
    rf"(?:[^\W\d_]+\s+)?"
    rf"(?:{RELATIONS}|assistant|secretary|carer|caregiver|nurse|pa)\b|"
    rf"\b[^\W\d_]+'s\s+{RELATIONS}\s+here\b|"
    # someone else's account or device: "this is the kids' account", "it's Sam's tablet"
    r"\b(?:this is|it's|it is|on|using)\s+(?:(?:the|his|her|their)\s+)?[^\W\d_]+(?:'s|s')\s+"
    rf"{_DEVICES}\b|"
    rf"\b(?:on|using) (?:his|her|their) {_DEVICES}\b|"
    rf"{FOREIGN_SOMEONES_DEVICE}|"
    # the typist borrowed it: "Borrowing my friend's phone for a sec."
    rf"\bborrow(?:ing|ed)? (?:my |the |his |her |their )?[^\W\d_]+(?:'s|s') {_DEVICES}\b|"
    # someone else holding the device: "my toddler grabbed the phone"
    r"\bmy [^\W\d_]+ (?:grabbed|took|has|had|stole|snatched|got hold of|is using|was using) "
    r"(?:my|the) (?:phone|keyboard|laptop|tablet|computer|ipad|account)\b|"
    r"\b(?:my|our|the) [^\W\d_]+ (?:walked|sat|stepped|typed|is typing|was typing) "
    r"(?:on|across|over)? ?(?:my |the |this )?(?:keyboard|phone|laptop|tablet|screen|keys)\b|"
    # a relation signing in: "Mom here.", "Grandpa speaking, ..."
    rf"(?:^|[.!?\n]\s*)(?:(?:it's|this is)\s+)?(?:your\s+)?{RELATIONS}\s+"
    r"(?:here|speaking|typing|writing)\b|"
    # someone's anyone signing in: "Sam's assistant here"
    r"\b[^\W\d_]+'s\s+(?:[^\W\d_]+\s+)?[^\W\d_]+\s+(?:here|speaking|typing|writing)\b"
)
# The turn opens by signing in, in a few words: "New intern here.", "Customer support here",
# "Testing here." Unless what it signs in as is an access need ("colour blind here"), the
# turn speaks in a role (or is someone else's), and states no standing preference of the
# principal's own.
_SIGNED_IN = re.compile(
    r"(?:^|[.!?\n]\s*)((?:[^\W\d_]+[\s-]+){0,2}[^\W\d_]+)\s+(?:here|speaking)\s*(?:[.!,:;\n]|$)"
)
# An access need, on normalised text (also the classifier's ``accessibility`` category).
_NEED = re.compile(ACCESSIBILITY)
# A joke's form: whatever a knock-knock joke says, it says as a joke.
_JOKE_FORM = re.compile(r"\bknock,? knock\b|\bwho's there\b")


#: Telling the assistant to stop something: with a standing marker a new preference ("stop
#: using emojis from now on"), without one a take-back ("stop cutting your answers short").
#: The extractor and the rules both read it.
STOP_DOING = (
    r"stop (?:using|doing|replying|answering|responding|writing|talking|speaking|with|"
    r"cutting|converting|adding|putting|including|giving|making|sending)"
)
# Cues of taking back that the extractor reads too: "ignore my earlier request", "undo it",
# and the Dutch, Italian and Polish forms.
TAKE_BACK = (
    r"ignore (?:what i said|my (?:earlier|previous|last)|the (?:earlier|previous))|undo it|"
    # "the no-emoji rule is over"
    r"(?:rule|thing|request|ban|limit) is over|"
    r"(?:rule|thing|request|ban|limit)\W+(?:that's|that is|it's|it is) over|"
    # (the words between are bounded: an unbounded gap is quadratic on a long sentence)
    r"you can stop|no need (?:to|for) [^.!?]{0,80}?\bany ?more|"
    r"you (?:do not|don't|dont) (?:have|need) to\b[^.!?]{0,80}?\bany ?more|"
    r"niet meer|vergeet\w*|non serve più|lascia perdere|dimentic\w*|już nie|zapomnij\w*"
)
# The take-back cues the extractor reads too: the other languages' (Hindi's and those of
# Chinese, Japanese and Korean without word boundaries) and ``TAKE_BACK``.
SHARED_WITHDRAWAL = rf"\b(?:{FOREIGN_WITHDRAWAL}|{TAKE_BACK})\b|{HINDI_WITHDRAWAL}|{CJK_WITHDRAWAL}"
# Retracting an earlier preference rather than stating one: "never mind the bullet points",
# "forget the Hindi thing", "no longer", "stop replying in ...", "actually, don't ...".
WITHDRAWAL = re.compile(
    r"\b(?:never ?mind|forget (?:about |that|it|what i said|the|my|those|this)|"
    r"(?:scratch|scrap) (?:that|what)|drop that|cancel that|undo (?:that|the|my)|"
    r"disregard (?:that|what i said|the|my)|no longer|not any ?more|any ?more\b|"
    r"changed my mind|change of plan|go back to how)\b|"
    rf"{SHARED_WITHDRAWAL}"
)
# Cues that take something back, or tell the assistant to stop something new ("drop the
# markdown", "stop using emojis"): with a standing marker ("always", "in general") they
# state a new standing preference rather than withdraw one.
WITHDRAWAL_OR_NEW = re.compile(
    r"\b(?:scratch|scrap|drop|cancel) (?:the|my|those|this)\b|"
    # "back to normal" ends a game or a one-off, or takes a preference back: "Back to
    # normal: be concise in general" opens a new standing one
    r"\b(?:go |going |get |getting )?back to normal\b|"
    rf"\b{STOP_DOING}\b"
)
# Leave to do again, or do now, what a preference ruled out: "you can use emojis again",
# "long answers are fine again", "colours are fine now", "ya puedes contestarme en inglés
# otra vez". A weak cue: with a standing marker it states a new standing preference.
_AGAIN = re.compile(
    r"\b(?:again|otra vez|de nuevo|de nouveau|à nouveau|wieder|di nuovo|opnieuw|weer|znowu|"
    r"novamente|de novo)\b"
)
_ALLOWED = re.compile(
    r"\b(?:you can|you may|feel free|fine|ok|okay|go ahead|puedes|tu peux|vous pouvez|"
    r"du kannst|puoi|je mag|je kunt|możesz|podes|pode)\b"
)
_FINE_NOW = re.compile(r"\b(?:is|are|'s|'re) (?:fine|ok|okay|alright) now\b")
# What a leave given again needs to state a new standing preference instead: a marker of
# time, not "in your answers" ("colours in your answers are fine now" takes a need back).
_HENCEFORTH = re.compile(
    r"\b(?:always|from now on|from here on|going forward|by default|in (?:the )?future|"
    r"from today)\b|"
    rf"(?<!\w)(?:{FOREIGN_ALWAYS}|{FOREIGN_FROM_NOW_ON})(?!\w)"
)


def _leave_again(text: str) -> bool:
    return bool((_AGAIN.search(text) and _ALLOWED.search(text)) or _FINE_NOW.search(text))


def allowed_again(sentence: str) -> bool:
    """Whether ``sentence`` gives leave again for what a preference ruled out (see
    ``_AGAIN``); the principal's earlier preference it takes back is found by topic."""
    return _leave_again(_normalise_text(sentence))


def takes_back_again(sentence: str) -> bool:
    """:func:`allowed_again` with no marker of time that makes it a new standing preference
    ("you can give me more detail again from now on")."""
    text = _normalise_text(sentence)
    return _leave_again(text) and not _HENCEFORTH.search(text)


# Someone else reading the replies now: "my friend is reading over my shoulder", "reading
# this to my class now". What the turn asks for is for them; a withdrawal still counts
# (taking a preference back for that reason is the principal's own decision).
_SOMEONE_ELSE_READING = re.compile(
    r"\bover my shoulder\b|"
    r"\b(?:read(?:ing)?|show(?:ing)?|project(?:ing)?|present(?:ing)?) (?:this|it|you|your "
    r"(?:answers?|repl(?:y|ies))|these|them) "
    r"(?:out )?(?:aloud |out loud )?to (?:my|our|the)\b|"
    r"\b(?:my|our|the) [^\W\d_]+ (?:is|are) (?:reading|watching|listening)\b"
)


# The principal's next turn opening by keeping what they just asked to the moment: "No,
# only for this message", "Just this one", "Not always, only here", "For now, yes".
_NARROWED = re.compile(
    r"^\W*(?:(?:no|nope|nah|oh|ah|well|sorry|yes|yeah|yep|ok|okay)\W+)*"
    r"(?:(?:just|only)\s+(?:(?:for\s+)?(?:this|that)(?:\s+(?:one|once|time|message|answer|reply|"
    r"question|chat|conversation|email|text|request|draft))?|here|once|the once|today|"
    r"for (?:now|today|the moment))|"
    r"not (?:always|every time|from now on|in general|for good|forever|permanently)|"
    r"this (?:once|one time)|one[- ]off|for now)"
    # and nothing else in that clause ("Just this morning I ..." tells a story)
    r"\s*(?:[,.!;]|$|(?:though|thanks|thank you|please)\b)"
)


# A whole turn that only answers "just now, or from now on?" with the latter: "From now on,
# please.", "No, always.", "Yes, exactly like that, every time."
_CONFIRMS_STANDING = re.compile(
    r"^\W*(?:(?:yes|yeah|yep|yup|sure|no|nope|ok|okay|exactly|perfect|great|please|"
    r"(?:exactly |just )?like (?:that|this))\W+)*"
    r"(?:always|(?:every|each) (?:single )?time|from now on|from here on|going forward|"
    r"by default|as a rule|for good|at all times|in general)"
    r"(?:\W+(?:please|pls|plz|thanks|thank you|ty))*\W*$"
)


def confirms_standing(turn_text: str) -> bool:
    """Whether the principal's whole turn only says that what they asked just before stands
    (the answer to "just this once, or from now on?")."""
    return bool(_CONFIRMS_STANDING.match(_normalise_text(own_words(turn_text))))


def disowns(turn_text: str) -> bool:
    """Whether the principal's next turn takes back what they just said (see ``_DISOWNED``),
    or keeps it to the moment (``_NARROWED``): either way it states no standing wish."""
    text = _normalise_text(own_words(turn_text))
    return bool(_DISOWNED.search(text) or _NARROWED.search(text))


# An earlier turn of the session that sets what follows apart from the principal's standing
# wishes. Someone else at the device: whatever follows is theirs.
_SOMEONE_ELSE_FRAME = re.compile(
    r"\b(?:is|are) using (?:the|this|my|your) (?:app|phone|account|tablet|laptop|computer|chat)\b|"
    r"\bwants? to (?:try|test|talk to) you\b|"
    r"\b(?:i'm|i am) (?:on|using) (?:my |the )?[^\W\d_]+(?:'s|s') (?:phone|account|tablet|laptop|"
    r"computer|ipad)\b|"
    # the device handed over, or someone else about to use it
    r"\b(?:handing|passing|giving) (?:the|my|this) [^\W\d_]+ (?:over )?to\b|"
    r"\b(?:my|our) [^\W\d_]+ (?:is going to|is gonna|will|wants to|is about to) (?:ask|talk|chat|"
    r"type|use|try)\b"
)
# A game, a role, a test or a practice session: what follows belongs to it, unless the
# principal changes the subject ("Anyway, ...").
_ROLE_FRAME = re.compile(
    r"\blet's (?:play|pretend|roleplay|role-play|do a [^\W\d_]+(?:-only)? (?:hour|day|round|"
    r"session))\b|\bpretend (?:you're|you are|to be|that)\b|\brole-?play\b|"
    r"\b(?:stay|staying) in character\b|"
    r"\b(?:we're|we are|i'm|i am) (?:testing|trying out)\b|"
    r"\b(?:practice|interview|quiz|game) time\b|\bpractice (?:session|interview|round)\b|"
    # "Let's do a quiz.", "Let's practise for my interview.", "a mock exam"
    r"\blet's (?:do|have|try|run|start) (?:a|an|some|another) (?:[^\W\d_]+ )?(?:quiz|game|"
    r"role-?play|drill|exercise|simulation)\b|\blet's (?:practi[sc]e|rehearse)\b|"
    r"\bmock (?:interview|exam|test|trial)\b|"
    r"\b[^\W\d_]+-only (?:hour|day|session|round)\b|"
    # acting as someone, or a demo: "act as my Latin teacher", "be Shakespeare for this chat"
    r"\bact (?:as|like)\b|\bsimulat(?:e|ing|ion)\b|\bplay(?:ing)? the (?:role|part)\b|"
    r"\bbe (?:[^\W\d_]+ ){1,3}?for (?:this|the) (?:chat|conversation|game|session)\b|"
    r"\b(?:doing|giving|running) a demo\b|"
    r"\bfor the next (?:few|couple of|\d+|two|three|five) (?:messages|answers|minutes|turns)\b"
)
# Material about to come or being written: what follows may be that material, unless the
# principal changes the subject or speaks of their own replies ("answer me", "your answers").
_MATERIAL_FRAME = re.compile(
    r"\b(?:i'm|i am|i'll|i will) (?:going to |gonna |about to )?(?:paste|send|share|forward|"
    r"upload)\b|"
    r"\bhelp me (?:write|draft|make|come up with|compose|design|word)\b|"
    r"\b(?:describe|explain|list|write down) the rules\b|"
    # being written or shown: "I'm drafting the welcome message", "let me show you what my
    # teacher wrote", "here's the system prompt I'm using:", "For my campaign notes:"
    r"\b(?:i'm|i am) (?:drafting|writing|translating|editing|preparing|composing)\b|"
    r"\blet me show you\b|\bsystem prompt\b|:\s*$"
)
_CHANGES_SUBJECT = re.compile(
    # at the start, after at most a one-word sentence ("Grazie! Different topic: ...")
    r"^\W*(?:[^\W\d_]+[.!]\s+)?(?:(?:ok|okay|right|alright|so|and)\W+)*"
    r"(?:by the way|btw|anyway|anyways|separately|on (?:a|another) (?:side )?note|"
    r"unrelated(?:ly)?|side note|one more thing|different topic|changing the subject)\b|"
    # or ends the game or role: "Ok, game over, that was fun. Back to normal: ..."
    r"\b(?:game over|end of (?:the )?(?:game|role ?play)|out of character|back to normal|"
    r"(?:stop|end|enough of) (?:the )?(?:game|role ?play)|(?:i'm|we're) done (?:playing|with the "
    r"(?:game|role ?play)))\b"
)
_OWN_REPLIES = re.compile(r"\b(?:me|my|answers|replies|responses)\b")
#: How many of the principal's turns before a claim may set it apart.
_FRAME_REACH = 3


def framed_before(
    scope: Principal,
    turn: TranscriptTurn,
    session: Sequence[TranscriptTurn],
    match: ClaimMatch | None = None,
) -> bool:
    """Whether what comes before the claim sets it apart from the principal's standing
    wishes: in one of the principal's last few turns before ``turn`` in its session (all of
    ``session``'s turns), someone else at the device (also when they say who they are:
    "Hi, this is Tom, Greta's husband, on her laptop."); a game, a role, a test or a
    practice session ("Let's play twenty questions." ... "Rule for this game: always answer
    in French."), unless ``turn`` changes the subject or ends the game; material to come
    ("I'm going to paste our chatbot rules."), unless ``turn`` also changes the subject or
    speaks of the principal's own replies. The sentences of ``turn`` before the claim
    (``match``, from :func:`find_supporting_claim`) count as the latest earlier turn for
    someone else and for a game or test, and so does the claim itself for a game or test
    ("I'm testing how you handle instructions. Always answer in Portuguese."); not for
    material (a sentence saying what the principal is writing is often only their reason).
    """
    earlier = [
        _normalise_text(own_words(t.text))
        for t in session
        if t.turn_index < turn.turn_index and _is_principal_turn(t, scope)
    ][-_FRAME_REACH:]
    own = own_words(turn.text)
    lead = _normalise_text(" ".join(_sentences(own)[: match.sentence_index])) if match else ""
    framing = [*earlier, lead] if lead else earlier
    if any(_SOMEONE_ELSE_FRAME.search(t) or _SOMEONE_ELSE_TYPING.search(t) for t in framing):
        return True
    claim = _normalise_text(own)
    if _CHANGES_SUBJECT.search(claim):
        return False
    claimed = _normalise_text(match.sentence) if match else ""
    if any(_ROLE_FRAME.search(text) for text in [*framing, claimed]):
        return True
    return not _OWN_REPLIES.search(claim) and any(_MATERIAL_FRAME.search(text) for text in earlier)


def _retracted(sentences: Sequence[str], index: int) -> bool:
    """Whether the turn takes the claim at ``index`` back: a joke marker in its sentence or
    after it, or any retraction ("scratch that", "never mind") in a later sentence."""
    if _JOKE.search(_normalise_text(sentences[index])):
        return True
    return any(_RETRACTION.search(_normalise_text(s)) for s in sentences[index + 1 :])


def _is_principal_turn(turn: TranscriptTurn, scope: Principal) -> bool:
    if turn.role is not Role.USER:
        return False
    return turn.speaker is None or turn.speaker.casefold() == scope.principal.casefold()


def _about_principal(record: Record, scope: Principal) -> bool:
    return record.speaker is None or record.speaker.casefold() == scope.principal.casefold()
