"""Write a synthetic LoCoMo-shaped data set for developing retrieval (never for judging it).

Usage: ``python tools/synth_locomo.py OUT.json [--samples 6] [--seed 1]``

Each sample is a two-person conversation over many dated sessions, in the format of
``tests/data/locomo_mini.json`` (``conversation`` with ``session_N`` turn lists and
``session_N_date_time``; ``qa`` with ``question``, ``answer``, ``evidence`` and ``category``).
Facts are planted the way LoCoMo's dialogues carry them, which is what makes candidate
recall at a small cap hard:

- the fact is often the *answer* to the other speaker's question, so the evidence turn
  shares few words with the question asked later ("We called him Biscuit." after "What's
  his name?");
- times are relative to the session date ("last Saturday");
- the question paraphrases (job / position / role), and the same topic words recur in
  small talk across sessions (distractors);
- multi-hop questions (category 1) need two or three turns from different sessions,
  temporal ones (2) the dated turn, open-domain ones (3) an inference from one turn, and
  single-hop ones (4) one turn.

Deterministic: the same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

PEOPLE = [
    "Priya", "Tomas", "Mei", "Jordan", "Amara", "Lukas", "Sofia", "Kenji", "Nadia", "Oscar",
    "Leila", "Mateo", "Hana", "Ravi", "Elena", "Dev", "Ines", "Yusuf", "Clara", "Felix",
]  # fmt: skip
PET_NAMES = ["Biscuit", "Mango", "Pepper", "Juniper", "Waffles", "Nori", "Ziggy", "Clover"]
PETS = ["dog", "cat", "rabbit", "parrot"]
PET_WORDS = {"dog": "puppy", "cat": "kitten", "rabbit": "bunny", "parrot": "bird"}
JOBS = ["charge nurse", "department head", "senior designer", "shift supervisor", "head chef"]
HOBBIES = [
    ("pottery", "ceramics class", "a glazed bowl"),
    ("violin", "string lessons", "a short sonata"),
    ("rock climbing", "bouldering gym", "a hard route"),
    ("watercolour", "painting course", "a lake landscape"),
    ("salsa", "dance class", "a spin sequence"),
]
TEACHERS = ["Mr. Lindqvist", "Ms. Okafor", "Dr. Haddad", "Mrs. Petrov", "Coach Rivera"]
PLACES = ["Mount Hood", "Lisbon", "Yosemite", "Kyoto", "the Lake District", "Banff"]
PARTNERS = ["Sam", "Alex", "Robin", "Jamie", "Noor", "Kai"]
SPORTS = ["cycling", "swimming", "rowing", "tennis"]
RESTAURANTS = ["Habesha", "Casa Lupe", "Golden Lotus", "Trattoria Nonna", "Saffron House"]
CUISINES = {
    "Habesha": "Ethiopian",
    "Casa Lupe": "Mexican",
    "Golden Lotus": "Chinese",
    "Trattoria Nonna": "Italian",
    "Saffron House": "Indian",
}
STREETS = ["Elm Street", "Fifth Avenue", "Harbour Road", "Maple Lane", "Queen Street"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

SMALL_TALK = [
    "How was your week?",
    "Honestly it has been a long week at work.",
    "I finally slept in on Sunday, it felt amazing.",
    "The weather has been so grey lately.",
    "Did you watch anything good recently?",
    "I started a new series, it is a bit slow but I like it.",
    "Work has been busy but fine, the usual.",
    "I need a holiday soon, seriously.",
    "My neighbour's dog keeps barking at night.",
    "We had a team lunch, the food was okay.",
    "I have been trying to cook more at home.",
    "Traffic this morning was terrible.",
    "I went for a short walk in the park yesterday.",
    "Any plans for the weekend?",
    "Not really, maybe just relax and read.",
    "That sounds nice, you deserve a break.",
    "I cleaned the whole apartment, it took forever.",
    "My sister called, she says hi.",
    "Coffee is the only thing keeping me going.",
    "I keep meaning to start running again.",
    "The new job posting at my office looks interesting.",
    "I saw a cute cat video and thought of you.",
    "We should catch up properly soon.",
    "Thanks for checking in, it means a lot.",
    "Ha, same here. Talk soon!",
    "I read an article about sleep, it was fascinating.",
    "I tried a new recipe with lentils last night.",
    "My phone screen cracked again, so annoying.",
    "The class I signed up for got cancelled.",
    "I booked a dentist appointment, finally.",
]


def _date(d: datetime) -> str:
    hour = d.hour % 12 or 12
    half = "am" if d.hour < 12 else "pm"
    return f"{hour}:{d.minute:02d} {half} on {d.day} {d.strftime('%B')}, {d.year}"


class _Conv:
    def __init__(self, rng: random.Random, a: str, b: str, sessions: int, start: datetime) -> None:
        self.rng, self.a, self.b = rng, a, b
        self.sessions: list[list[tuple[str, str]]] = [[] for _ in range(sessions)]
        self.dates = []
        d = start
        for _ in range(sessions):
            d += timedelta(days=rng.randint(5, 20), hours=rng.randint(0, 6))
            self.dates.append(d)
        self.qa: list[dict[str, Any]] = []

    def say(self, k: int, who: str, text: str) -> str:
        self.sessions[k].append((who, text))
        return f"D{k + 1}:{len(self.sessions[k])}"

    def chat(self, k: int, n: int) -> None:
        for _ in range(n):
            who = self.a if len(self.sessions[k]) % 2 == 0 else self.b
            self.say(k, who, self.rng.choice(SMALL_TALK))

    def ask(self, question: str, answer: str, evidence: list[str], category: int) -> None:
        self.qa.append(
            {"question": question, "answer": answer, "evidence": evidence, "category": category}
        )


def _pet(c: _Conv, k: int, owner: str, other: str, found: dict[str, Any]) -> None:
    rng = c.rng
    pet, name = rng.choice(PETS), rng.choice(PET_NAMES)
    day = rng.choice(WEEKDAYS)
    e1 = c.say(k, owner, f"Guess what, I adopted a {PET_WORDS[pet]} from the shelter on {day}!")
    c.say(k, other, f"No way! What's the {PET_WORDS[pet]} called?")
    e2 = c.say(k, owner, f"We went with {name}. It suits the little troublemaker.")
    c.say(k, other, "I love that. Send me pictures!")
    when = c.dates[k] - timedelta(days=(c.dates[k].weekday() - WEEKDAYS.index(day)) % 7 or 7)
    c.ask(f"What is the name of {owner}'s {pet}?", name, [e2], 4)
    c.ask(f"When did {owner} adopt the {pet}?", f"{when:%d %B %Y}", [e1], 2)
    found["pet"] = (pet, name, e1, e2)


def _job(c: _Conv, k: int, k2: int, owner: str, other: str, found: dict[str, Any]) -> None:
    rng = c.rng
    job = rng.choice(JOBS)
    e1 = c.say(k, owner, f"Big news: I applied for the {job} position.")
    c.say(k, other, "That's exciting, fingers crossed for you!")
    c.chat(k, rng.randint(1, 3))
    c.say(k2, owner, "I got it! They offered me the promotion.")
    c.say(k2, other, "Congratulations!! When do you start?")
    month = (c.dates[k2] + timedelta(days=rng.randint(20, 60))).strftime("%B")
    e2 = c.say(k2, owner, f"At the beginning of {month}. No more night shifts, finally.")
    c.ask(f"When does {owner} start the new {job} role?", f"{month} {c.dates[k2].year}", [e2], 2)
    c.ask(f"What job did {owner} apply for?", job, [e1], 4)
    found["job"] = (job, e1, e2)


def _hobby(c: _Conv, k: int, k2: int, owner: str, other: str, found: dict[str, Any]) -> None:
    rng = c.rng
    hobby, course, piece = rng.choice(HOBBIES)
    teacher, street = rng.choice(TEACHERS), rng.choice(STREETS)
    c.say(k, other, "Are you still doing that class you mentioned?")
    e1 = c.say(k, owner, f"Yes, the {course} on {street}. I go every Thursday evening.")
    c.say(k, other, "Who runs it?")
    e2 = c.say(k, owner, f"{teacher}. Strict, but I learn a lot.")
    c.chat(k2, rng.randint(0, 2))
    e3 = c.say(k2, owner, f"I finished {piece} this week, my first one I'm proud of.")
    c.say(k2, other, "You have to show me next time!")
    c.ask(f"Who teaches {owner} {hobby}?", teacher, [e2], 4)
    c.ask(f"Where does {owner} go for {hobby}?", street, [e1], 4)
    c.ask(
        f"What has {owner} made or achieved in {hobby}, and who teaches them?",
        f"{piece}; {teacher}",
        [e3, e2],
        1,
    )
    found["hobby"] = (hobby, e1, e2, e3)


def _partner(c: _Conv, k: int, k2: int, owner: str, other: str, found: dict[str, Any]) -> None:
    rng = c.rng
    partner, sport = rng.choice(PARTNERS), rng.choice(SPORTS)
    c.say(k, other, "Was it just you this time?")
    e1 = c.say(k, owner, f"No, my partner {partner} came along for the first part.")
    c.say(k, other, f"Is {partner} sporty as well?")
    e2 = c.say(k, owner, f"Very. {partner} is obsessed with {sport}, trains four times a week.")
    c.chat(k2, rng.randint(0, 2))
    c.say(k2, other, f"How is {partner} doing?")
    e3 = c.say(k2, owner, f"Busy, there's a {sport} competition in {rng.choice(PLACES)} soon.")
    c.ask(f"What sport does {owner}'s partner do?", sport, [e2], 4)
    c.ask(f"Who is {owner}'s partner and what are they training for?", partner, [e1, e3], 1)
    if "pet" in found:
        _, name, _, e_pet = found["pet"]
        c.ask(
            f"Who looks after {name} with {owner}, and what sport do they do?",
            f"{partner}, {sport}",
            [e_pet, e2],
            1,
        )
    found["partner"] = (partner, sport, e1, e2)


def _trip(c: _Conv, k: int, owner: str, other: str, found: dict[str, Any]) -> None:
    rng = c.rng
    place = rng.choice(PLACES)
    c.say(k, other, "You look tanned, where have you been?")
    e1 = c.say(k, owner, f"We spent four days in {place} last week. I fell about twenty times.")
    c.say(k, other, "Ha! Skiing or hiking?")
    e2 = c.say(k, owner, "Hiking mostly, and one very bad attempt at skiing.")
    c.ask(f"Where did {owner} travel recently?", place, [e1], 4)
    c.ask(f"When did {owner} go to {place}?", f"the week before {c.dates[k]:%d %B %Y}", [e1], 2)
    c.ask(f"Would {owner} enjoy a winter sports holiday?", "Maybe; they tried skiing", [e2], 3)
    found["trip"] = (place, e1, e2)


def _dinner(c: _Conv, k: int, owner: str, other: str, found: dict[str, Any]) -> None:
    rng = c.rng
    place = rng.choice(RESTAURANTS)
    e0 = c.say(k, other, f"We should celebrate! Dinner at that {CUISINES[place]} place you like?")
    e1 = c.say(k, owner, f"Yes! {place} on {rng.choice(STREETS)}. Saturday works for me.")
    c.ask(f"Which restaurant did {owner} pick to celebrate?", place, [e1], 4)
    c.ask(
        f"What kind of food does {owner} enjoy?",
        CUISINES[place],
        [e0],
        3,
    )
    found["dinner"] = (place, e1)


def _sample(rng: random.Random, index: int) -> dict[str, Any]:
    a, b = rng.sample(PEOPLE, 2)
    sessions = rng.randint(14, 22)
    c = _Conv(rng, a, b, sessions, datetime(2023, 1, 1, 9, 0) + timedelta(days=rng.randint(0, 200)))
    for k in range(sessions):
        c.say(k, a, rng.choice(["Hey!", f"Hi {b}!", f"{b}, long time!", "Morning!"]))
        c.say(k, b, rng.choice(["Hi! How are you?", f"Hey {a}! Good to hear from you."]))
        c.chat(k, rng.randint(4, 10))
    for owner, other in ((a, b), (b, a)):
        found: dict[str, Any] = {}
        ks = rng.sample(range(sessions), 8)
        _pet(c, ks[0], owner, other, found)
        _job(c, ks[1], max(ks[1], ks[2]), owner, other, found)
        _hobby(c, min(ks[3], ks[4]), max(ks[3], ks[4]), owner, other, found)
        _partner(c, min(ks[5], ks[6]), max(ks[5], ks[6]), owner, other, found)
        _trip(c, ks[7], owner, other, found)
        _dinner(c, ks[2], owner, other, found)
    for k in range(sessions):
        c.chat(k, rng.randint(6, 14))
    conversation: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    for k, turns in enumerate(c.sessions):
        conversation[f"session_{k + 1}_date_time"] = _date(c.dates[k])
        conversation[f"session_{k + 1}"] = [
            {"speaker": who, "dia_id": f"D{k + 1}:{i + 1}", "text": text}
            for i, (who, text) in enumerate(turns)
        ]
    return {"sample_id": f"synth-{index}", "conversation": conversation, "qa": c.qa}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--samples", type=int, default=6)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    data = [_sample(rng, i + 1) for i in range(args.samples)]
    Path(args.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")


if __name__ == "__main__":
    main()
