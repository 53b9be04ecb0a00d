"""Vocabulary shared by the offline (rule-based) extractor and activation classifier."""

from __future__ import annotations

__all__ = ["CONCESSIONS", "FOREIGN_IMPERATIVES", "FOREIGN_STANDING", "LANGUAGE_NAMES"]

#: Language names as a regex alternation, in English and as their speakers write them
#: (Spanish, Portuguese, French, German, Italian, Dutch, Polish; Hindi in Latin script).
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
    "hiszpańsku|francusku|niemiecku|włosku"
)

#: Imperatives addressed to the assistant in the other languages the rules read (Spanish,
#: Portuguese, French, German, Italian, Dutch, Polish; Hindi in Latin script): "answer me",
#: "write", "speak".
FOREIGN_IMPERATIVES = (
    "respóndeme|respondeme|contéstame|contestame|háblame|hablame|escríbeme|escribeme|"
    "responde|contesta|habla|escribe|fala|fale|responda|escreve|escreva|réponds|reponds|"
    "répondez|repondez|parle|parlez|écris|ecris|écrivez|antworte|antworten|sprich|schreib|"
    "schreibe|jawab do|baat karo|likho|bolo|rispondi|rispondimi|rispondetemi|scrivi|scrivimi|"
    "parla|parlami|antwoord|schrijf|spreek|praat|odpowiadaj|odpowiedz|odpisuj|pisz|mów|mow"
)

#: Standing markers and "please" in the same languages: "always", "from now on", "please".
FOREIGN_STANDING = (
    "siempre|sempre|toujours|immer|altijd|zawsze|hamesha|"
    "por favor|s'il te plaît|s'il vous plaît|bitte|per favore|alsjeblieft|alstublieft|proszę|"
    "prosze|a partir de ahora|de ahora en adelante|à partir de maintenant|"
    "a partir de maintenant|désormais|dorénavant|ab jetzt|von nun an|ab sofort|"
    "a partir de agora|de agora em diante|daqui (?:pra|para) frente|d'ora in poi|"
    "da ora in poi|da adesso in poi|voortaan|vanaf nu|od teraz|od tej pory|ab se"
)

#: "Even when/if" in the same languages: a concession, so the rule holds in that case too
#: (the opposite of a trigger).
CONCESSIONS = (
    "even (?:when|if)|même (?:quand|si|lorsque)|incluso (?:cuando|si)|aun(?:que| cuando)|"
    "mesmo (?:quando|que|se)|auch wenn|selbst wenn|ook als|zelfs als|anche (?:se|quando)|"
    "nawet (?:gdy|jeśli|jesli|kiedy)"
)
