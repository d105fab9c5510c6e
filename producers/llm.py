"""LLM calls through litellm (imported lazily: it costs ~5 s), and the scripted model."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from convdb.infra import tracing
from convdb.infra.settings import LLMSettings
from convdb.producers.errors import LLMError
from convdb.producers.scripted import SCRIPTED_MODEL, scripted_turn

logger = logging.getLogger(__name__)

FAKE_LITELLM_MODEL = "openai/convdb-scripted"
"""What litellm is told the scripted model is; registered with a price so cost is computed."""

SCRIPTED_PRICE = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
"""USD per token of the scripted model (made up, but non-zero so budgets are exercised)."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call proposed by the LLM (arguments as the raw JSON text it produced)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class LLMReply:
    """One assistant turn with its usage and cost."""

    response_id: str
    model: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    latency_ms: float
    cached_tokens: int = 0


class LLMClient(Protocol):
    """Anything that turns chat messages (+ tool specs) into an assistant turn."""

    def complete(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        """One completion. Raises `LLMError`."""
        ...


_register_lock = threading.Lock()
_registered = False


def _litellm() -> Any:
    global _registered
    import litellm

    with _register_lock:
        if not _registered:
            litellm.suppress_debug_info = True
            litellm.register_model(
                {
                    "convdb-scripted": {
                        "litellm_provider": "openai",
                        "mode": "chat",
                        "cache_read_input_token_cost": 0.0,
                        "cache_creation_input_token_cost": 0.0,
                        **SCRIPTED_PRICE,
                    }
                }
            )
            _registered = True
    return litellm


class LitellmClient:
    """Calls `litellm.completion`; the scripted model goes through it as a dict `mock_response`."""

    def __init__(self, timeout_s: float = 60.0, scripted_latency_s: float = 0.0) -> None:
        self.timeout_s = timeout_s
        self.scripted_latency_s = scripted_latency_s
        """How long a scripted turn waits, as a provider would (`LLMSettings.scripted_latency_ms`)."""

    def warm_up(self) -> None:
        """Import litellm now (~5 s) so the first step's timing measures the step, not the import."""
        _litellm()

    def complete(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        """One litellm completion; usage and cost from litellm's response."""
        litellm = _litellm()
        kwargs: dict[str, Any] = {"model": model, "messages": messages, "timeout": self.timeout_s}
        if tools:
            kwargs["tools"] = tools
        if model == SCRIPTED_MODEL:
            kwargs.update(model=FAKE_LITELLM_MODEL, mock_response=scripted_turn(messages))
        parent = tracing.litellm_parent()
        if parent:
            kwargs["metadata"] = parent
        started = time.perf_counter()
        if model == SCRIPTED_MODEL and self.scripted_latency_s:
            time.sleep(self.scripted_latency_s)
        try:
            response = litellm.completion(**kwargs)
        except Exception as exc:  # noqa: BLE001 - litellm raises many provider-specific types
            raise LLMError(f"{model}: completion failed: {type(exc).__name__}: {exc}") from exc
        latency = (time.perf_counter() - started) * 1000
        return _reply(model, response, latency, _cost(litellm, response))


def _cost(litellm: Any, response: Any) -> float | None:
    cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    if cost is None:
        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception:  # noqa: BLE001 - unpriced model: cost stays unknown
            logger.debug("no price for %s", getattr(response, "model", "?"))
            return None
    return float(cost)


def _reply(model: str, response: Any, latency_ms: float, cost: float | None) -> LLMReply:
    try:
        message = response.choices[0].message
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments or "{}") for c in (message.tool_calls or ())
        )
        usage = response.usage
        details = getattr(usage, "prompt_tokens_details", None)
        return LLMReply(
            response_id=str(response.id),
            model=model,
            content=message.content or "",
            tool_calls=calls,
            prompt_tokens=int(usage.prompt_tokens or 0),
            completion_tokens=int(usage.completion_tokens or 0),
            cost=cost,
            latency_ms=latency_ms,
            cached_tokens=int(getattr(details, "cached_tokens", 0) or 0),
        )
    except (AttributeError, IndexError, TypeError) as exc:
        raise LLMError(f"{model}: unusable reply: {exc}") from exc


class DirectScriptedClient:
    """The scripted model without litellm: same replies and prices, no 5 s import."""

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        """How long a turn waits, as a provider would (`LLMSettings.scripted_latency_ms`)."""

    def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],  # noqa: ARG002
    ) -> LLMReply:
        """The scripted turn, priced with `SCRIPTED_PRICE`."""
        if model != SCRIPTED_MODEL:
            raise LLMError(f"the direct scripted backend only runs {SCRIPTED_MODEL}, not {model}")
        started = time.perf_counter()
        if self.latency_s:
            time.sleep(self.latency_s)
        turn = scripted_turn(messages)
        message, usage = turn["choices"][0]["message"], turn["usage"]
        calls = tuple(
            ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls", ())
        )
        cost = (
            usage["prompt_tokens"] * SCRIPTED_PRICE["input_cost_per_token"]
            + usage["completion_tokens"] * SCRIPTED_PRICE["output_cost_per_token"]
        )
        return LLMReply(
            turn["id"],
            model,
            message.get("content") or "",
            calls,
            usage["prompt_tokens"],
            usage["completion_tokens"],
            cost,
            (time.perf_counter() - started) * 1000,
        )


def make_llm(settings: LLMSettings, model: str | None = None) -> LLMClient:
    """The client for a model: direct scripted when configured so, litellm otherwise."""
    if (model or settings.model) == SCRIPTED_MODEL and settings.scripted_backend == "direct":
        return DirectScriptedClient(settings.scripted_latency_ms / 1000)
    return LitellmClient(settings.timeout_s, settings.scripted_latency_ms / 1000)
