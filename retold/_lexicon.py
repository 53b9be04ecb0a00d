"""Vocabulary shared by the offline (rule-based) extractor and activation classifier."""

from __future__ import annotations

__all__ = ["LANGUAGE_NAMES"]

#: Language names as a regex alternation, in English and as their speakers write them
#: (Spanish, Portuguese, French, German, Italian; Hindi in Latin script).
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
    "chinesisch|hindustani"
)
