"""Test doubles and fixtures that ship with Retold, for hosts' tests and our own.

Nothing here talks to a real vendor: scripted policies, a deterministic clock and a
loopback HTTP server that speaks the providers' wire protocols on 127.0.0.1.
"""

from __future__ import annotations

from ._loopback import (
    LoopbackServer,
    RecordedRequest,
    Reply,
    Responder,
    Route,
    ScriptedToolCall,
    anthropic_json,
    anthropic_message,
    embeddings_reply,
    hashed_embedding,
    loopback_fixture,
    openai_chat,
    openai_json,
    tool_call,
)
from ._policies import (
    UNSET,
    Behaviour,
    FakeRetriever,
    FunctionAdmissionPolicy,
    FunctionGapPolicy,
    HashingEmbedder,
    ManualClock,
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    ScriptedGeneration,
    StoreRetriever,
    SyncScriptedAdmissionPolicy,
    SyncScriptedGapPolicy,
    SyncScriptedGeneration,
)

__all__: list[str] = [
    "UNSET",
    "Behaviour",
    "FakeRetriever",
    "FunctionAdmissionPolicy",
    "FunctionGapPolicy",
    "HashingEmbedder",
    "LoopbackServer",
    "ManualClock",
    "RecordedRequest",
    "Reply",
    "Responder",
    "Route",
    "ScriptedAdmissionPolicy",
    "ScriptedGapPolicy",
    "ScriptedGeneration",
    "ScriptedToolCall",
    "StoreRetriever",
    "SyncScriptedAdmissionPolicy",
    "SyncScriptedGapPolicy",
    "SyncScriptedGeneration",
    "anthropic_json",
    "anthropic_message",
    "embeddings_reply",
    "hashed_embedding",
    "loopback_fixture",
    "openai_chat",
    "openai_json",
    "tool_call",
]
