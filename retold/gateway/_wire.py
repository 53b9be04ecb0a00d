"""The OpenAI chat-completions wire format, as the gateway reads and writes it.

Requests are validated here into a :class:`ChatRequest`: the last message must be the
user's turn, earlier user and assistant messages are the conversation, and system (or
``developer``) messages are the host's public context. Errors use OpenAI's error JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from retold._errors import InvalidInputError

__all__ = ["ChatRequest", "error_body", "finish_reason", "parse_chat_request"]

_UNSUPPORTED = frozenset(
    {"tools", "tool_choice", "functions", "function_call", "response_format", "logprobs"}
)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One validated chat-completions request.

    Attributes:
        turn: the text of the last user message (the turn Retold answers).
        conversation: the earlier user/assistant messages as ``(role, text)``, oldest first.
        public_context: the client's system messages joined, or None.
        stream: whether the client asked for server-sent events.
        include_usage: with ``stream``, whether the client asked (``stream_options``) for a
            last chunk carrying the turn's ``usage``.
        model: the model name the client asked for (echoed; the upstream model answers).
        max_tokens: ``max_completion_tokens`` (or the older ``max_tokens``), or None.
        temperature: the client's sampling temperature, or None.
        first_message: the first user message's text (the default session's seed; an
            app's fixed greeting before it would give all its chats one seed).
    """

    turn: str
    conversation: tuple[tuple[str, str], ...]
    public_context: str | None
    stream: bool
    include_usage: bool
    model: str | None
    max_tokens: int | None
    temperature: float | None
    first_message: str


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise InvalidInputError(
                    f"{where}[{i}]", "only text content parts are supported by the gateway"
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidInputError(f"{where}[{i}].text", "must be a string")
            parts.append(text)
        return "".join(parts)
    raise InvalidInputError(where, "must be a string or a list of text parts")


def _include_usage(options: Any, stream: bool) -> bool:
    """``stream_options.include_usage``, checked as OpenAI checks it."""
    if options is None:
        return False
    if not stream:
        raise InvalidInputError("stream_options", "is only allowed when stream is true")
    if not isinstance(options, dict):
        raise InvalidInputError("stream_options", "must be an object")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise InvalidInputError("stream_options.include_usage", "must be a boolean")
    return include


def _max_tokens(body: dict[str, Any]) -> int | None:
    """``max_completion_tokens``, or the older ``max_tokens``; not both."""
    given = [name for name in ("max_completion_tokens", "max_tokens") if body.get(name) is not None]
    if len(given) > 1:
        raise InvalidInputError("max_tokens", "send max_completion_tokens or max_tokens, not both")
    if not given:
        return None
    value = body[given[0]]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(given[0], "must be an integer >= 1")
    return value


def _temperature(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise InvalidInputError("temperature", "must be a number between 0 and 2")
    return float(value)


def parse_chat_request(raw: bytes, *, max_messages: int) -> ChatRequest:
    """Validate a chat-completions body.

    Raises:
        InvalidInputError: naming the field that is wrong.
    """
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInputError("body", "is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidInputError("body", "must be a JSON object")
    for name in body:
        if name in _UNSUPPORTED:
            raise InvalidInputError(
                name, "is not supported by the Retold gateway (memory tools are its own)"
            )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidInputError("stream", "must be a boolean")
    include_usage = _include_usage(body.get("stream_options"), stream)
    n = body.get("n", 1)
    if n not in (1, None):
        raise InvalidInputError("n", "only n=1 is supported")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidInputError("model", "must be a string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInputError("messages", "must be a non-empty list")
    if len(messages) > max_messages:
        raise InvalidInputError(
            "messages",
            f"holds {len(messages)} messages; the gateway accepts at most {max_messages}",
        )
    system: list[str] = []
    dialogue: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidInputError(where, "must be an object")
        role = message.get("role")
        text = _text(message.get("content"), f"{where}.content")
        if role in ("system", "developer"):
            if text:
                system.append(text)
        elif role in ("user", "assistant"):
            dialogue.append((role, text))
        elif role == "tool":
            raise InvalidInputError(
                f"{where}.role", "tool messages are not supported by the gateway"
            )
        else:
            raise InvalidInputError(f"{where}.role", f"unknown role {role!r}")
    if not dialogue or dialogue[-1][0] != "user":
        raise InvalidInputError("messages", "the last non-system message must be the user's turn")
    turn = dialogue[-1][1]
    if not turn.strip():
        raise InvalidInputError(f"messages[{len(messages) - 1}].content", "must not be empty")
    return ChatRequest(
        turn=turn,
        conversation=tuple(dialogue[:-1]),
        public_context="\n\n".join(system) or None,
        stream=stream,
        include_usage=include_usage,
        model=model,
        max_tokens=_max_tokens(body),
        temperature=_temperature(body.get("temperature")),
        first_message=next(text for role, text in dialogue if role == "user"),
    )


def finish_reason(reason: str | None) -> str:
    """A provider's finish reason as OpenAI's: ``length`` when the answer hit its token cap
    (OpenAI's ``length``, Anthropic's ``max_tokens``), ``content_filter`` when a filter cut
    it, else ``stop`` (the gateway's own tool rounds end before the answer)."""
    if reason in ("length", "max_tokens"):
        return "length"
    if reason == "content_filter":
        return "content_filter"
    return "stop"


def sse_chunks(text: str, size: int = 48) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters, cut after whitespace where possible."""
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = text.rfind(" ", start, end)
            if cut > start:
                end = cut + 1
        yield text[start:end]
        start = end
