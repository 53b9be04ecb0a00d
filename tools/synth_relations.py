"""Write a synthetic LoCoMo-shaped data set of questions that name people by relation, for
developing the relation path (never for judging it).

Usage: ``python tools/synth_relations.py OUT.json --seed N [--variant dev|test]
[--mentions K] [--chatter K] [--by-other]``

Three two-person conversations of 20 dated sessions, in the format of
``tests/data/locomo_mini.json``. Each speaker introduces three people by relation once, in
one of the first eight sessions ("I had lunch with my brother Luis on Sunday."), and later
says three facts about each by name only, in later sessions ("Luis got hired as a vet,
finally!"); small talk fills the rest. Every question asks about a person by relation
("What does Mei's brother do for work?"), so its evidence is two turns: the introduction
and the fact (category 1, multi-hop).

- ``--variant``: ``dev`` and ``test`` use different phrasings of the introductions, facts
  and questions, so a change chosen on one can be checked on the other.
- ``--mentions K``: K more turns per person that name them without a fact ("Called Luis on
  the way home.").
- ``--chatter K``: K more turns per person that use the relation word without a name ("My
  brother called again last night."), after the introduction: a long history in which the
  introduction is far older than most uses of the word.
- ``--by-other``: the other speaker introduces each person ("How is your brother Luis
  doing these days?").
- ``--ask-by-name``: the other way round: the facts call the person by relation only ("My
  brother got hired as a vet, finally!") and the questions by name ("What does Luis do for
  work?").

Deterministic: the same arguments write the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SPEAKERS = ["Priya", "Tomas", "Mei", "Jordan", "Amara", "Lukas", "Sofia", "Kenji", "Nadia", "Oscar"]
NAMES = [
    "Luis", "Greta", "Omar", "Wren", "Dario", "Beatriz", "Ilya", "Maren", "Tariq", "Zoe",
    "Caspar", "Hedda", "Ruben", "Signe", "Anton", "Lotte", "Emeka", "Freya", "Hugo", "Ayla",
]  # fmt: skip
RELATIONS = [
    "brother", "sister", "wife", "husband", "boss", "neighbour", "cousin", "daughter", "son",
    "best friend", "flatmate", "uncle", "aunt",
]  # fmt: skip
JOBS = [
    "paramedic",
    "tax lawyer",
    "bus driver",
    "baker",
    "software tester",
    "vet",
    "pilot",
    "plumber",
]
CITIES = ["Leeds", "Porto", "Gdansk", "Tucson", "Osaka", "Quito", "Bergen", "Adelaide"]
HOBBIES = ["kayaking", "chess", "birdwatching", "knitting", "bouldering", "the cello", "sourdough"]

PHRASINGS: dict[str, dict[str, Any]] = {
    "dev": {
        "intro": [
            "My {rel} {name} called me last night, we talked for ages.",
            "I had lunch with my {rel} {name} on Sunday.",
            "My {rel} {name} says hi, by the way!",
            "Spent the afternoon helping my {rel} {name} move some furniture.",
        ],
        "fact": {
            "job": [
                "{name} just started working as a {job}.",
                "{name} got hired as a {job}, finally!",
            ],
            "city": ["{name} is moving to {city} next month.", "{name} found a flat in {city}."],
            "hobby": [
                "{name} has really gotten into {hobby} lately.",
                "{name} won't stop talking about {hobby}.",
            ],
        },
        "question": {
            "job": "What does {spk}'s {rel} do for work?",
            "city": "Where is {spk}'s {rel} moving to?",
            "hobby": "What hobby has {spk}'s {rel} taken up?",
        },
        "question_by_name": {
            "job": "What does {name} do for work?",
            "city": "Where is {name} moving to?",
            "hobby": "What hobby has {name} taken up?",
        },
    },
    "test": {
        "intro": [
            "{name}, my {rel}, popped round yesterday.",
            "Went to the cinema with my {rel}, {name}.",
            "My {rel} — {name} — is visiting this weekend.",
            "Guess who rang? My {rel} {name}!",
        ],
        "fact": {
            "job": [
                "Big news: {name} is now a {job}.",
                "{name} took a position as a {job} at last.",
            ],
            "city": [
                "{name} has decided to relocate to {city}.",
                "{name} signed a lease in {city}.",
            ],
            "hobby": [
                "These days {name} spends every weekend on {hobby}.",
                "{name} picked up {hobby} recently.",
            ],
        },
        "question": {
            "job": "What is {spk}'s {rel}'s job now?",
            "city": "Which city is {spk}'s {rel} relocating to?",
            "hobby": "What pastime has {spk}'s {rel} picked up?",
        },
        "question_by_name": {
            "job": "What is {name}'s job now?",
            "city": "Which city is {name} relocating to?",
            "hobby": "What pastime has {name} picked up?",
        },
    },
}
OTHER_INTRO = [
    "How is your {rel} {name} doing these days?",
    "Say hi to your {rel} {name} from me!",
    "Did your {rel} {name} like the present?",
    "I bumped into your {rel}, {name}, at the market.",
]
CHATTER = [
    "My {rel} called again last night.",
    "Honestly, my {rel} never changes.",
    "I was talking to my {rel} about the weekend.",
    "My {rel} says hello, by the way.",
]
ACTS = [
    "finished a book", "made a big pot of soup", "fixed my bike", "repainted the hallway",
    "went for a long run", "cleaned out the garage", "tried a new recipe", "watched a documentary",
    "had friends over for dinner", "started a puzzle", "walked by the river", "baked bread",
    "sorted my tax forms", "planted tomatoes", "rearranged the living room", "went to a gig",
    "caught up on sleep", "visited a museum", "did a pottery taster", "went swimming",
]  # fmt: skip
WHEN = [
    "Yesterday", "Last night", "This morning", "On Saturday", "Over the weekend", "On Tuesday",
    "After work", "Earlier today", "On my day off", "Last weekend",
]  # fmt: skip
OPEN = [
    "How was your week?", "What have you been up to?", "Any plans for the weekend?",
    "How's everything going?", "Good to hear from you!", "That sounds lovely!", "Haha, classic.",
    "Oh nice, how was it?", "Same here, honestly.", "I can imagine.",
]  # fmt: skip
MENTION = [
    "Had coffee with {name} this morning.", "{name} came over for dinner.",
    "{name} sent me the funniest video.", "I'm meeting {name} later.",
    "{name} and I went for a walk.", "{name} says hello!", "{name} lent me a great book.",
    "{name} has been really busy lately.", "Called {name} on the way home.",
]  # fmt: skip
SMALL = [f"{w} I {a}." for w in WHEN for a in ACTS] + [
    "Work has been hectic, honestly.", "My commute was a nightmare this morning.",
    "The office moved to a new floor.", "I might move to a bigger flat next year.",
    "Work wants me to travel more.", "Our team got a new project at work.",
    "My job is keeping me busy these days.", "I'm thinking of moving closer to the city.",
]  # fmt: skip
SESSIONS = 20


def _sample(rng: random.Random, args: argparse.Namespace, index: int) -> dict[str, Any]:
    words = PHRASINGS[args.variant]
    a, b = rng.sample(SPEAKERS, 2)
    names = rng.sample(NAMES, 12)
    # speaker -> [(relation, name, {fact kind: value})]
    people: dict[str, list[tuple[str, str, dict[str, str]]]] = {}
    for spk in (a, b):
        people[spk] = []
        for rel in rng.sample(RELATIONS, 3):
            facts = {
                "job": rng.choice(JOBS),
                "city": rng.choice(CITIES),
                "hobby": rng.choice(HOBBIES),
            }
            people[spk].append((rel, names.pop(), facts))
    small = SMALL[:]
    rng.shuffle(small)
    # session -> [(speaker or None, text, evidence tag or None)]
    planned: dict[int, list[tuple[str | None, str, tuple[str, ...] | None]]] = {
        i: [] for i in range(1, SESSIONS + 1)
    }
    for spk in (a, b):
        for rel, name, facts in people[spk]:
            intro_at = rng.randint(1, 8)
            if args.by_other:
                line = rng.choice(OTHER_INTRO).format(rel=rel, name=name)
                planned[intro_at].append((b if spk == a else a, line, ("intro", spk, rel)))
            else:
                line = rng.choice(words["intro"]).format(rel=rel, name=name)
                planned[intro_at].append((spk, line, ("intro", spk, rel)))
            for kind, value in facts.items():
                at = rng.randint(intro_at + 1, SESSIONS)
                text = rng.choice(words["fact"][kind]).format(
                    name=name, job=value, city=value, hobby=value
                )
                if args.ask_by_name:
                    by_relation = f"My {rel}" if text.startswith(name) else f"my {rel}"
                    text = text.replace(name, by_relation, 1)
                planned[at].append((spk, text, ("fact", spk, rel, kind)))
            for _ in range(args.chatter):
                at = rng.randint(intro_at + 1, SESSIONS)
                planned[at].append((spk, rng.choice(CHATTER).format(rel=rel), None))
            for _ in range(args.mentions):
                at = rng.randint(intro_at, SESSIONS)
                planned[at].append((spk, rng.choice(MENTION).format(name=name), None))
    conversation: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    where: dict[tuple[str, ...], str] = {}
    start = datetime(2025, 1, 5, 18, 0)
    for i in range(1, SESSIONS + 1):
        items = planned[i][:]
        for _ in range(max(4, 14 - len(items))):
            at = rng.randint(0, len(items))
            filler = rng.choice(OPEN) if rng.random() < 0.3 else small.pop()
            items.insert(at, (None, filler, None))
        turns = []
        for j, (spk, text, tag) in enumerate(items):
            did = f"D{i}:{j + 1}"
            turns.append({"speaker": spk or (a if j % 2 == 0 else b), "dia_id": did, "text": text})
            if tag:
                where[tag] = did
        when = start + timedelta(days=9 * i)
        conversation[f"session_{i}_date_time"] = (
            f"{when.hour % 12 or 12}:{when:%M} {when:%p} on {when.day} {when:%B, %Y}".lower()
        )
        conversation[f"session_{i}"] = turns
    qa = [
        {
            "question": words["question_by_name" if args.ask_by_name else "question"][kind].format(
                spk=spk, rel=rel, name=name
            ),
            "answer": value,
            "evidence": [where[("intro", spk, rel)], where[("fact", spk, rel, kind)]],
            "category": 1,
        }
        for spk in (a, b)
        for rel, name, facts in people[spk]
        for kind, value in facts.items()
    ]
    return {
        "sample_id": f"rel-{args.variant}-{args.seed}-{index}",
        "conversation": conversation,
        "qa": qa,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("out")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--variant", choices=sorted(PHRASINGS), default="dev")
    p.add_argument("--mentions", type=int, default=0)
    p.add_argument("--chatter", type=int, default=0)
    p.add_argument("--by-other", action="store_true")
    p.add_argument("--ask-by-name", action="store_true")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    data = [_sample(rng, args, i) for i in range(3)]
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
