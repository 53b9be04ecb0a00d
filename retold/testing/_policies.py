"""Scripted policies, retrievers, generation callbacks and a manual clock.

Every double takes the same behaviour knobs (see :class:`Behaviour`): a real ``delay``, a
``hang`` that never returns (until :meth:`Behaviour.release` for the thread-based ones), an
``error`` to raise, a raw ``output`` that replaces the well-formed answer (to script
malformed output), a ``cost_ms`` charged to a :class:`ManualClock` (simulated latency with
no waiting) and an ``on_call`` hook (e.g. to set an event the test waits on).

``Scripted*`` doubles are ``async``; ``SyncScripted*`` ones are plain methods, which the
orchestrator runs in worker threads.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from .._orchestrator import Generation, GenerationRequest
from .._policies import (
    ADMITTING_REASONS,
    AdmissionDecision,
    CandidateVerdict,
    Gap,
    GapCategory,
    GapDecision,
    ReasonCode,
)
from .._records import Candidate, Principal, ProfileBlock, Record
from .._store import Store

__all__ = [
    "UNSET",
    "Behaviour",
    "FakeRetriever",
    "FunctionAdmissionPolicy",
    "FunctionGapPolicy",
    "HashingEmbedder",
    "ManualClock",
    "ScriptedAdmissionPolicy",
    "ScriptedGapPolicy",
    "ScriptedGeneration",
    "StoreRetriever",
    "SyncScriptedAdmissionPolicy",
    "SyncScriptedGapPolicy",
    "SyncScriptedGeneration",
]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: "No override": the double returns its well-formed answer.
UNSET: Any = _Unset()


class ManualClock:
    """A monotonic clock (seconds) that only moves when told to; pass it as ``clock=``."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        """Move the clock forward by ``ms`` milliseconds."""
        with self._lock:
            self.now += ms / 1000


@dataclass
class Behaviour:
    """How a double misbehaves; the defaults answer at once and well-formed.

    Attributes:
        delay: real seconds to take before answering (abandoned calls never answer).
        hang: never answer (async: sleep forever; sync: block until :meth:`release`).
        error: raise this exception instead of answering.
        output: return this raw object instead of the well-formed answer.
        cost_ms / clock: advance ``clock`` by ``cost_ms`` per call (simulated latency).
        on_call: called (and awaited if it returns an awaitable) at the start of each call.
    """

    delay: float = 0.0
    hang: bool = False
    error: BaseException | None = None
    output: Any = UNSET
    cost_ms: float = 0.0
    clock: ManualClock | None = None
    on_call: Callable[[], Any] | None = None
    calls: int = 0
    _released: threading.Event = field(default_factory=threading.Event, repr=False)

    def release(self) -> None:
        """Let blocked sync calls return (call in test teardown to free their threads)."""
        self._released.set()

    def _charge(self) -> None:
        self.calls += 1
        if self.clock is not None and self.cost_ms:
            self.clock.advance(self.cost_ms)

    async def run_async(self, answer: Callable[[], Any]) -> Any:
        self._charge()
        if self.on_call is not None:
            hooked = self.on_call()
            if inspect.isawaitable(hooked):
                await hooked
        if self.hang:
            await anyio.sleep_forever()
        if self.delay:
            await anyio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return answer() if self.output is UNSET else self.output

    def run_sync(self, answer: Callable[[], Any]) -> Any:
        self._charge()
        if self.on_call is not None:
            self.on_call()
        if self.hang:
            self._released.wait()
            raise RuntimeError("released hang")
        if self.delay:
            self._released.wait(self.delay)
        if self.error is not None:
            raise self.error
        return answer() if self.output is UNSET else self.output


GapSpec = Gap | tuple[str, str]


def _gap_decision(gaps: Sequence[GapSpec], policy_id: str) -> GapDecision:
    built = [g if isinstance(g, Gap) else Gap(category=GapCategory(g[0]), query=g[1]) for g in gaps]
    return GapDecision(gaps=tuple(built), policy=policy_id)


class _GapBase:
    def __init__(
        self,
        gaps: Sequence[GapSpec] | Callable[[str], Sequence[GapSpec]] = (),
        *,
        policy_id: str = "scripted-gap@1",
        behaviour: Behaviour | None = None,
        **knobs: Any,
    ) -> None:
        self.gaps = gaps
        self.policy_id = policy_id
        self.behaviour = behaviour or Behaviour(**knobs)
        self.turns: list[str] = []
        self.inventories: list[list[str]] = []

    def _answer(self, turn: str, inventory: Sequence[str]) -> Callable[[], GapDecision]:
        self.turns.append(turn)
        self.inventories.append(list(inventory))
        gaps = self.gaps(turn) if callable(self.gaps) else self.gaps
        return lambda: _gap_decision(gaps, self.policy_id)


class ScriptedGapPolicy(_GapBase):
    """An async gap policy returning fixed gaps (or ``gaps(turn)``), e.g.
    ``ScriptedGapPolicy([("preference", "favourite editor")])``."""

    async def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision:
        result: GapDecision = await self.behaviour.run_async(self._answer(turn, inventory))
        return result


class SyncScriptedGapPolicy(_GapBase):
    """The blocking twin of :class:`ScriptedGapPolicy` (runs in a worker thread)."""

    def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision:
        result: GapDecision = self.behaviour.run_sync(self._answer(turn, inventory))
        return result


AdmitSpec = Sequence[str] | Literal["all"] | Callable[[Sequence[Record]], Sequence[str]]


class _AdmissionBase:
    def __init__(
        self,
        admit: AdmitSpec = (),
        *,
        reject_reason: ReasonCode = ReasonCode.INSUFFICIENT,
        also_name: Sequence[str] = (),
        policy_id: str = "scripted-admission@1",
        behaviour: Behaviour | None = None,
        **knobs: Any,
    ) -> None:
        self.admit_spec = admit
        self.reject_reason = reject_reason
        self.also_name = tuple(also_name)
        self.policy_id = policy_id
        self.behaviour = behaviour or Behaviour(**knobs)
        self.seen: list[tuple[str, ...]] = []
        self.drafts: list[str] = []

    def _answer(self, draft: str, candidates: Sequence[Record]) -> Callable[[], Any]:
        ids = tuple(r.id for r in candidates)
        self.seen.append(ids)
        self.drafts.append(draft)
        spec = self.admit_spec
        if spec == "all":
            wanted: Sequence[str] = ids
        elif callable(spec):
            wanted = spec(candidates)
        else:
            wanted = spec
        admitted = tuple(i for i in ids if i in set(wanted)) + self.also_name
        reason = ReasonCode.HELPFUL

        def build() -> Any:
            verdicts = [
                CandidateVerdict(
                    record_id=i, reason=reason if i in admitted else self.reject_reason
                )
                for i in (*ids, *self.also_name)
            ]
            if self.reject_reason in ADMITTING_REASONS:
                raise ValueError("reject_reason must not be an admitting reason")
            return AdmissionDecision(
                admitted=admitted, verdicts=tuple(verdicts), policy=self.policy_id
            )

        return build


class ScriptedAdmissionPolicy(_AdmissionBase):
    """An async admission policy admitting the given ids that it was offered (``"all"``
    admits everything); the rest get ``reject_reason``. ``also_name`` names ids it was not
    offered (the unknown-ids fault)."""

    async def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> AdmissionDecision:
        result: AdmissionDecision = await self.behaviour.run_async(self._answer(draft, candidates))
        return result


class SyncScriptedAdmissionPolicy(_AdmissionBase):
    """The blocking twin of :class:`ScriptedAdmissionPolicy` (runs in a worker thread)."""

    def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> AdmissionDecision:
        result: AdmissionDecision = self.behaviour.run_sync(self._answer(draft, candidates))
        return result


class FunctionGapPolicy:
    """A gap policy backed by a function with ``plan``'s signature (sync or async)."""

    def __init__(self, fn: Callable[..., Any], *, policy_id: str = "function-gap@1") -> None:
        self.fn = fn
        self.policy_id = policy_id

    def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> Any:
        return self.fn(turn, public_context, ambient_profile, inventory)


class FunctionAdmissionPolicy:
    """An admission policy backed by a function with ``admit``'s signature (sync or async)."""

    def __init__(self, fn: Callable[..., Any], *, policy_id: str = "function-admission@1") -> None:
        self.fn = fn
        self.policy_id = policy_id

    def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> Any:
        return self.fn(turn, public_context, ambient_profile, draft, candidates)


def _as_candidates(items: Sequence[Record | Candidate], query: str) -> list[Candidate]:
    out = []
    for rank, item in enumerate(items):
        if isinstance(item, Candidate):
            out.append(item)
        else:
            out.append(Candidate(record=item, score=1.0 - rank / 100, paths=("fake",), query=query))
    return out


class FakeRetriever:
    """A retriever returning scripted records: per query (a mapping) or for every query.

    It does no filtering of its own, so it can script an out-of-scope candidate. The
    orchestrator re-reads every candidate from its store in scope, so scripted records
    must be stored there (``store.add``); others fail the turn closed (``unknown_ids``).
    """

    def __init__(
        self,
        results: Mapping[str, Sequence[Record | Candidate]] | Sequence[Record | Candidate] = (),
        *,
        behaviour: Behaviour | None = None,
        **knobs: Any,
    ) -> None:
        self.results = results
        self.behaviour = behaviour or Behaviour(**knobs)
        self.calls: list[tuple[Principal, str, str | None, int]] = []

    async def retrieve(
        self,
        scope: Principal,
        query: str,
        *,
        context: str | None = None,
        limit: int = 8,
    ) -> Sequence[Candidate]:
        self.calls.append((scope, query, context, limit))
        items = self.results.get(query, ()) if isinstance(self.results, Mapping) else self.results
        result: Sequence[Candidate] = await self.behaviour.run_async(
            lambda: _as_candidates(items, query)[:limit]
        )
        return result


class HashingEmbedder:
    """A deterministic :class:`~retold.Embedder` with no model: hashed bag of words.

    Texts sharing words get nearby vectors, so the dense stage finds something; use it to
    exercise vector storage and dense search (the bench, tests) without a model.
    """

    def __init__(self, dimensions: int = 384, *, model_id: str | None = None) -> None:
        self._dims = dimensions
        self._id = model_id or f"hashing-bow:{dimensions}"
        self.calls = 0

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from ._loopback import hashed_embedding

        self.calls += 1
        return [hashed_embedding(t, self._dims) for t in texts]


class StoreRetriever:
    """A retriever over the real store's scope- and lifecycle-filtered BM25 search."""

    def __init__(self, store: Store, *, behaviour: Behaviour | None = None, **knobs: Any) -> None:
        self.store = store
        self.behaviour = behaviour or Behaviour(**knobs)
        self.calls: list[tuple[Principal, str, str | None, int]] = []

    async def retrieve(
        self,
        scope: Principal,
        query: str,
        *,
        context: str | None = None,
        limit: int = 8,
    ) -> Sequence[Candidate]:
        self.calls.append((scope, query, context, limit))
        hits = await anyio.to_thread.run_sync(lambda: self.store.search(scope, query, limit=limit))
        found = [
            Candidate(record=r, score=score, paths=("lexical",), query=query) for r, score in hits
        ]
        result: Sequence[Candidate] = await self.behaviour.run_async(lambda: found)
        return result


TextSpec = str | Generation | Callable[[GenerationRequest], str | Generation]


class _GenerationBase:
    def __init__(
        self, text: TextSpec = "draft", *, behaviour: Behaviour | None = None, **knobs: Any
    ) -> None:
        self.text = text
        self.behaviour = behaviour or Behaviour(**knobs)
        self.requests: list[GenerationRequest] = []
        self.started: list[float] = []
        self.finished: list[float] = []

    def _answer(self, request: GenerationRequest) -> Callable[[], Any]:
        self.requests.append(request)
        text = self.text
        return lambda: text(request) if callable(text) else text


class ScriptedGeneration(_GenerationBase):
    """An async generation callback; records every request and its real start/end times."""

    async def __call__(self, request: GenerationRequest) -> str | Generation:
        self.started.append(time.perf_counter())
        try:
            result: str | Generation = await self.behaviour.run_async(self._answer(request))
        finally:
            self.finished.append(time.perf_counter())
        return result


class SyncScriptedGeneration(_GenerationBase):
    """The blocking twin of :class:`ScriptedGeneration` (runs in a worker thread)."""

    def __call__(self, request: GenerationRequest) -> str | Generation:
        self.started.append(time.perf_counter())
        try:
            result: str | Generation = self.behaviour.run_sync(self._answer(request))
        finally:
            self.finished.append(time.perf_counter())
        return result
