"""OpenAI-compatible chat completions: OpenAI, vLLM, Ollama's ``/v1``, LM Studio, llama.cpp.

All of them speak ``POST {base_url}/chat/completions``; ``base_url`` includes the version
segment (``https://api.openai.com/v1``, ``http://localhost:11434/v1``). Structured output
goes out as ``response_format`` of type ``json_schema`` by default; servers that only know
``json_object`` (or neither) are served with ``structured_output="json_object"`` or
``"prompt"``, which also put the schema into a system instruction.

Fallback: a server that refuses the structured-output request with a validation error
(llama.cpp's server answers ``json_schema`` with a 500 naming the field) is asked again in
the next mode, ``json_schema`` -> ``json_object`` (with the schema, which llama.cpp
enforces) -> ``prompt``, within the same call, so the turn is not dropped. The mode the
server accepted is kept for the adapter's later calls, recorded in
:attr:`OpenAIChatAdapter.accepted_structured_output` and logged once
(``structured_output_mode_accepted``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx
import structlog

from retold._errors import AdapterHTTPError, UsageError

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
    _parse_arguments,
)

__all__ = ["OpenAIChatAdapter"]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"

StructuredOutput = Literal["json_schema", "json_object", "prompt"]

_log = structlog.get_logger(__name__)

_NEXT_MODE: dict[str, StructuredOutput] = {"json_schema": "json_object", "json_object": "prompt"}
# Statuses a server uses to refuse a request body it cannot validate (llama.cpp: 500).
_REFUSAL_STATUSES = frozenset({400, 415, 422, 500, 501})
_REFUSAL_MARKERS = ("response_format", "json_schema", "json_object", "schema")


def refuses_structured_output(status: int, body: str) -> bool:
    """Whether an error answer is the server refusing the structured-output request itself.

    A validation-style status whose body names the structured-output field; a plain 500
    without such a mention is a transient failure and keeps its retries.
    """
    if status not in _REFUSAL_STATUSES:
        return False
    text = body.lower()
    return any(marker in text for marker in _REFUSAL_MARKERS)


def _schema_instruction(schema: Mapping[str, Any] | None) -> str:
    if schema is None:
        return "Reply with a single JSON object and nothing else."
    return (
        "Reply with a single JSON object and nothing else. It must validate against this "
        "JSON Schema:\n" + json.dumps(schema, sort_keys=True)
    )


class OpenAIChatAdapter(ChatAdapter):
    """Chat completions over the OpenAI wire protocol.

    Args:
        model: the model id the server knows (``gpt-4o-mini``, ``llama3.1:8b``, ...).
        base_url: endpoint root including ``/v1``.
        api_key: sent as ``Authorization: Bearer``; optional for local servers.
        http_client: an ``httpx.AsyncClient`` to borrow (never closed by the adapter).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for the response (per attempt).
        retry: retry policy for 429/5xx.
        structured_output: how ``response_schema`` is sent: ``json_schema`` (OpenAI, vLLM,
            Ollama, LM Studio, llama.cpp), ``json_object`` (schema in a system instruction)
            or ``prompt`` (instruction only, for servers with neither).
        organization: optional ``OpenAI-Organization`` header.
        extra_headers: further headers to send on every request.
    """

    provider = "openai"
    endpoint = "/chat/completions"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_OPENAI_BASE_URL,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        structured_output: StructuredOutput = "json_schema",
        organization: str | None = None,
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
        if structured_output not in ("json_schema", "json_object", "prompt"):
            raise UsageError(
                "structured_output must be 'json_schema', 'json_object' or 'prompt', "
                f"got {structured_output!r}"
            )
        self.structured_output: StructuredOutput = structured_output
        self.accepted_structured_output: StructuredOutput | None = None
        """The structured-output mode this server accepted (None until one succeeded)."""
        self._headers = dict(extra_headers or {})
        if organization:
            self._headers["openai-organization"] = organization

    def _request_headers(self) -> dict[str, str]:
        headers = dict(self._headers)
        if self._http.api_key is not None:
            headers["authorization"] = f"Bearer {self._http.api_key.get_secret_value()}"
        return headers

    # ------------------------------------------------------------------ request

    def _message(self, message: ChatMessage) -> dict[str, Any]:
        if message.role == "tool":
            if not message.tool_call_id:
                raise UsageError("a tool message needs tool_call_id (use ChatMessage.tool_result)")
            # No "name": the tool-message schema does not define it and strict servers
            # reject unknown fields; the call id is what links result to call.
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
        if message.role == "assistant" and message.tool_calls:
            return {
                "role": "assistant",
                "content": message.content or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.raw_arguments},
                    }
                    for call in message.tool_calls
                ],
            }
        return {"role": message.role, "content": message.content}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        response_schema: Mapping[str, Any] | None = None,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """Ask the model for one reply (see :meth:`ChatAdapter.complete`).

        A structured request the server refuses is retried once per weaker mode (see the
        module docstring) before the refusal is raised.
        """
        structured = response_schema is not None or json_mode
        while True:
            mode = self.structured_output
            payload = self.build_payload(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                response_schema=response_schema,
                json_mode=json_mode,
                max_tokens=max_tokens,
                temperature=temperature,
            )
            probing = structured and mode != "prompt" and self.accepted_structured_output is None
            try:
                status, body = await self._http.post_json(
                    self.endpoint,
                    payload,
                    headers=self._request_headers(),
                    deadline=deadline,
                    final=refuses_structured_output if probing else None,
                )
            except AdapterHTTPError as exc:
                if not probing or not refuses_structured_output(exc.status_code, exc.body):
                    raise
                fallback = _NEXT_MODE[mode]
                if mode == "json_schema" and response_schema is None:
                    fallback = "prompt"  # json_mode alone went out as json_object already
                _log.warning(
                    "structured_output_refused",
                    provider=self.provider,
                    base_url=self.base_url,
                    model=self.model,
                    mode=mode,
                    status_code=exc.status_code,
                    fallback=fallback,
                )
                self.structured_output = fallback
                continue
            if structured and self.accepted_structured_output is None:
                self.accepted_structured_output = mode
                _log.info(
                    "structured_output_mode_accepted",
                    provider=self.provider,
                    base_url=self.base_url,
                    model=self.model,
                    mode=mode,
                )
            return self.parse_response(status, body, structured=structured)

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
        if not messages:
            raise UsageError("messages must contain at least one message")
        wire = [self._message(m) for m in messages]
        payload: dict[str, Any] = {"model": self.model, "messages": wire, "stream": False}
        if tools:
            names = {t.name for t in tools}
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
            if tool_choice is not None:
                if tool_choice in ("auto", "none", "required"):
                    payload["tool_choice"] = tool_choice
                elif tool_choice in names:
                    payload["tool_choice"] = {"type": "function", "function": {"name": tool_choice}}
                else:
                    raise UsageError(f"tool_choice {tool_choice!r} names no tool in tools")
        elif tool_choice not in (None, "auto", "none"):
            raise UsageError(f"tool_choice {tool_choice!r} given without tools")
        if response_schema is not None or json_mode:
            mode = self.structured_output
            if response_schema is not None and mode == "json_schema":
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "response", "schema": dict(response_schema)},
                }
            else:
                if mode != "prompt":
                    payload["response_format"] = {"type": "json_object"}
                    if response_schema is not None:
                        # llama.cpp and others constrain decoding to this schema; servers
                        # that do not know the field ignore it, and the instruction remains.
                        payload["response_format"]["schema"] = dict(response_schema)
                wire.insert(0, {"role": "system", "content": _schema_instruction(response_schema)})
        if max_tokens is not None:
            if max_tokens < 1:
                raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
            payload["max_tokens"] = max_tokens
        if temperature is not None:
            payload["temperature"] = temperature
        return payload

    # ------------------------------------------------------------------ response

    def parse_response(self, status: int, body: Any, *, structured: bool = False) -> Completion:
        """Turn a chat-completions JSON body into a :class:`Completion`."""
        scrub = self._http.scrub

        def bad(what: str) -> Exception:
            return _malformed(self.provider, status, body, what, scrub)

        if not isinstance(body, dict):
            raise bad("the body is not a JSON object")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("no choices")
        choice = choices[0]
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            raise bad("choices[0].message is missing")
        message = choice["message"]
        content = message.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            # Some servers return content parts; keep the text ones.
            text = "".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        else:
            raise bad("choices[0].message.content is not text")
        calls: list[ToolCall] = []
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise bad("tool_calls is not a list")
        for index, raw in enumerate(raw_calls):
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise bad(f"tool_calls[{index}] has no function name")
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # a few servers send an object, not a string
                arguments = json.dumps(arguments, ensure_ascii=False)
            if arguments is None:
                arguments = ""
            if not isinstance(arguments, str):
                raise bad(f"tool_calls[{index}].function.arguments is not a string")
            call_id = raw.get("id")
            calls.append(
                ToolCall(
                    id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                    name=function["name"],
                    raw_arguments=arguments,
                    arguments=_parse_arguments(arguments),
                )
            )
        usage = body.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        finish = choice.get("finish_reason")
        model = body.get("model")
        return Completion(
            text=text,
            tool_calls=tuple(calls),
            finish_reason=finish if isinstance(finish, str) else None,
            usage=Usage(
                input_tokens=_count(usage.get("prompt_tokens")),
                output_tokens=_count(usage.get("completion_tokens")),
            ),
            model=model if isinstance(model, str) and model else self.model,
            provider=self.provider,
        )
