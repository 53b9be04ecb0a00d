"""Anthropic Messages API (``POST {base_url}/v1/messages``) including tool use.

System messages are hoisted into the top-level ``system`` field; tool results travel as
``tool_result`` blocks in a user turn, and consecutive turns of one role are merged, as the
API requires. Structured output (``response_schema`` or ``json_mode``) is obtained by
forcing a single tool whose input schema is the requested schema; its input becomes
:attr:`Completion.text`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from retold._errors import UsageError

from ._base import (
    ChatAdapter,
    ChatMessage,
    Completion,
    RetryPolicy,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
    _count,
    _malformed,
)

__all__ = ["AnthropicChatAdapter"]

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
JSON_OUTPUT_TOOL = "json_output"
"""The name of the forced tool that carries structured output."""


class AnthropicChatAdapter(ChatAdapter):
    """Chat over the Anthropic Messages API.

    Args:
        model: the model id (``claude-sonnet-4-5``, ...).
        api_key: sent as ``x-api-key``; required by the hosted API.
        base_url: endpoint root without ``/v1``.
        http_client: an ``httpx.AsyncClient`` to borrow (never closed by the adapter).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for the response (per attempt).
        retry: retry policy for 429/5xx (529 "overloaded" included).
        max_tokens: default cap on generated tokens (the API requires one).
        anthropic_version: the ``anthropic-version`` header.
        extra_headers: further headers (e.g. ``anthropic-beta``) on every request.
    """

    provider = "anthropic"
    max_temperature = 1.0
    endpoint = "/v1/messages"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
        http_client: httpx.AsyncClient | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        max_tokens: int = 1024,
        anthropic_version: str = DEFAULT_ANTHROPIC_VERSION,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            http_client=http_client,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retry=retry,
        )
        if max_tokens < 1:
            raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self._headers = dict(extra_headers or {})
        self._headers["anthropic-version"] = anthropic_version

    def _request_headers(self) -> dict[str, str]:
        headers = dict(self._headers)
        if self._http.api_key is not None:
            headers["x-api-key"] = self._http.api_key.get_secret_value()
        return headers

    # ------------------------------------------------------------------ request

    @staticmethod
    def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
        if message.role == "tool":
            if not message.tool_call_id:
                raise UsageError("a tool message needs tool_call_id (use ChatMessage.tool_result)")
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                block["is_error"] = True
            return [block]
        # The API rejects empty text blocks, so an empty text is simply left out.
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for call in message.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": call.arguments if call.arguments is not None else {},
                }
            )
        return blocks

    def build_payload(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        response_schema: Mapping[str, Any] | None = None,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        """The request body :meth:`complete` sends (exposed for inspection and tests)."""
        system: list[str] = []
        turns: list[dict[str, Any]] = []
        for message in messages:
            if message.role == "system":
                if message.content:
                    system.append(message.content)
                continue
            role = "assistant" if message.role == "assistant" else "user"
            blocks = self._blocks(message)
            if not blocks:
                continue
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        if not turns:
            raise UsageError("messages must contain at least one non-empty user or assistant turn")
        cap = self.max_tokens if max_tokens is None else max_tokens
        if cap < 1:
            raise UsageError(f"max_tokens must be >= 1, got {cap}")
        payload: dict[str, Any] = {"model": self.model, "max_tokens": cap, "messages": turns}
        if system:
            payload["system"] = "\n\n".join(system)
        if temperature is not None:
            if not 0 <= temperature <= self.max_temperature:
                raise UsageError(
                    f"temperature must be between 0 and {self.max_temperature:g} for "
                    f"Anthropic, got {temperature}"
                )
            payload["temperature"] = temperature
        if response_schema is not None or json_mode:
            if tools:
                raise UsageError(
                    "the Anthropic adapter obtains structured output by forcing a tool, so "
                    "response_schema/json_mode cannot be combined with tools; make two calls"
                )
            schema = dict(response_schema) if response_schema is not None else {"type": "object"}
            payload["tools"] = [
                {
                    "name": JSON_OUTPUT_TOOL,
                    "description": "Return the answer as this tool's input.",
                    "input_schema": schema,
                }
            ]
            payload["tool_choice"] = {"type": "tool", "name": JSON_OUTPUT_TOOL}
            return payload
        if tools:
            names = {t.name for t in tools}
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
            if tool_choice == "auto":
                payload["tool_choice"] = {"type": "auto"}
            elif tool_choice == "required":
                payload["tool_choice"] = {"type": "any"}
            elif tool_choice == "none":
                payload["tool_choice"] = {"type": "none"}
            elif tool_choice is not None:
                if tool_choice not in names:
                    raise UsageError(f"tool_choice {tool_choice!r} names no tool in tools")
                payload["tool_choice"] = {"type": "tool", "name": tool_choice}
        elif tool_choice not in (None, "auto", "none"):
            raise UsageError(f"tool_choice {tool_choice!r} given without tools")
        return payload

    # ------------------------------------------------------------------ response

    def parse_response(self, status: int, body: Any, *, structured: bool = False) -> Completion:
        """Turn a Messages API JSON body into a :class:`Completion`."""
        scrub = self._http.scrub

        def bad(what: str) -> Exception:
            return _malformed(self.provider, status, body, what, scrub)

        if not isinstance(body, dict):
            raise bad("the body is not a JSON object")
        content = body.get("content")
        if not isinstance(content, list):
            raise bad("content is missing")
        texts: list[str] = []
        calls: list[ToolCall] = []
        structured_text: str | None = None
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                raise bad(f"content[{index}] is not an object")
            kind = block.get("type")
            if kind == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    raise bad(f"content[{index}].text is not text")
                texts.append(text)
            elif kind == "tool_use":
                name, call_id, arguments = block.get("name"), block.get("id"), block.get("input")
                if not isinstance(name, str) or not isinstance(call_id, str):
                    raise bad(f"content[{index}] tool_use has no name or id")
                if not isinstance(arguments, dict):
                    raise bad(f"content[{index}] tool_use input is not an object")
                raw = json.dumps(arguments, ensure_ascii=False)
                if structured and name == JSON_OUTPUT_TOOL and structured_text is None:
                    structured_text = raw
                    continue
                calls.append(
                    ToolCall(id=call_id, name=name, raw_arguments=raw, arguments=arguments)
                )
            # Other block kinds (thinking, server tools) carry nothing a caller can use here.
        if structured and structured_text is None:
            raise bad(f"the model did not return the forced {JSON_OUTPUT_TOOL} tool call")
        usage = body.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        stop = body.get("stop_reason")
        model = body.get("model")
        return Completion(
            text=structured_text if structured_text is not None else "".join(texts),
            tool_calls=tuple(calls),
            finish_reason=stop if isinstance(stop, str) else None,
            usage=Usage(
                input_tokens=_count(usage.get("input_tokens")),
                output_tokens=_count(usage.get("output_tokens")),
            ),
            model=model if isinstance(model, str) and model else self.model,
            provider=self.provider,
        )
