"""Every LLM call eat makes: litellm, our own retries, usage and cost, the spend cap.

litellm is imported on first use (it costs ~3 s and, unless told otherwise, reaches for the
network at import). Retries are ours alone (`num_retries=0`, the SDK's off), decided by the
status the provider answered (`retryable`), whichever exception class litellm raises for it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from eat.errors import EatError
from eat.runners.sandbox import looks_secret

# Statuses another try may well not get: the provider's pace (429), a timeout (408), a
# conflict (409); every 5xx too. Other 4xx are the request's fault and stay so.
RETRY_STATUSES = frozenset({408, 409, 429})


class LLMError(EatError):
    """A call failed for good (not retryable, or retries spent)."""

    code = "llm_error"

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


class BudgetSpent(EatError):
    """The run's LLM budget (--max-cost, --max-llm-calls) is spent: no new call starts."""

    code = "budget_spent"


class LLMSettings(BaseModel):
    """How to reach one model."""

    model: str = Field(description="Any litellm model string, e.g. 'openai/gpt-4.1'.")
    api_base: str | None = Field(
        None,
        description="OpenAI-compatible server (vLLM, SGLang, "
        "Ollama), e.g. http://127.0.0.1:8000/v1.",
    )
    timeout_s: float = Field(300.0, gt=0, description="Per attempt.")
    attempts: int = Field(5, ge=1, description="Tries per call for retryable failures.")
    backoff_s: float = Field(2.0, ge=0, description="First wait between tries; doubles.")
    max_backoff_s: float = Field(60.0, ge=0, description="Longest wait between tries.")
    input_cost_per_token: float | None = Field(
        None, ge=0, description="USD, when litellm does not know the model's price."
    )
    output_cost_per_token: float | None = Field(None, ge=0, description="USD, likewise.")
    temperature: float | None = Field(None, description="Sampling temperature, if set.")
    concurrency: int = Field(
        4,
        ge=1,
        description="Calls to this model (and server) in flight "
        "at once, across every team of the run.",
    )


class Call(BaseModel):
    """What one call used (or why it failed): becomes an llm_called event."""

    agent: str
    team: str | None = None
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    ok: bool = True
    error: str | None = None


def redact(text: str) -> str:
    """`text` with the value of every secret-looking environment variable masked."""
    for name, value in os.environ.items():
        if looks_secret(name) and len(value) >= 6:
            text = text.replace(value, "***")
    return text


def retryable(exc: BaseException) -> bool:
    """Whether a failed call may succeed when tried again, by what the provider answered: its
    status (litellm gives every exception one; 403 arrives as a generic APIError, so the status
    decides, not the class), else a timeout or a dropped connection."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in RETRY_STATUSES or status >= 500
    return isinstance(exc, (TimeoutError, ConnectionError))


def check_model(model: str, api_base: str | None = None) -> None:
    """Raise BadInput when litellm cannot tell which provider serves `model`."""
    from eat.errors import BadInput

    try:
        _litellm().get_llm_provider(model=model, api_base=api_base)
    except Exception as e:  # litellm says so with several exception classes
        raise BadInput(
            f"model {model!r}: litellm cannot tell its provider; write "
            f"provider/model, e.g. openai/gpt-4.1 ({type(e).__name__})"
        ) from None


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class Gate:
    """What one model on one server allows, shared by every client of it in this process: at
    most `limit` calls in flight, and after a rate-limit answer no call starts until the wait
    it asked for has passed, so one team's 429 slows every team on that model, not just itself.
    """

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic):
        self.slots = threading.BoundedSemaphore(limit)
        self.clock, self._lock, self._until = clock, threading.Lock(), 0.0

    def hold_off(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, self.clock() + seconds)

    def wait_s(self) -> float:
        """Seconds until calls may start again."""
        with self._lock:
            return max(0.0, self._until - self.clock())


_GATES: dict[tuple, Gate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(settings: LLMSettings) -> Gate:
    """The process's one Gate for this model and server."""
    with _GATES_LOCK:
        key = (settings.model, settings.api_base)
        if key not in _GATES:
            _GATES[key] = Gate(settings.concurrency)
        return _GATES[key]


def rate_limited(exc: BaseException) -> bool:
    return getattr(exc, "status_code", None) == 429 or "RateLimit" in type(exc).__name__


def _retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After, in seconds, when its answer carried one."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class LLMClient:
    """Chat completions for one model; `record` gets every Call, `refuse` says why no call may
    start now (the run's budget is spent) or None."""

    def __init__(
        self,
        settings: LLMSettings,
        record: Callable[[Call], object],
        refuse: Callable[[], str | None] = lambda: None,
        sleep: Callable[[float], None] = time.sleep,
        gate: Gate | None = None,
    ):
        self.settings, self.record, self.refuse, self.sleep = settings, record, refuse, sleep
        self.gate = gate or gate_for(settings)

    def chat(
        self, messages: list[dict], *, agent: str, team: str | None = None, **extra: Any
    ) -> str:
        """The reply's text; raises BudgetSpent before a try the budget refuses, LLMError after
        the last try."""
        return self.complete(messages, agent=agent, team=team, **extra).content or ""

    def complete(self, messages: list[dict], *, agent: str, team: str | None = None, **extra: Any):
        """The reply's message (text and tool calls: pass `tools=`), as `chat`."""
        s = self.settings
        litellm = _litellm()
        kwargs: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "timeout": s.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
            **extra,
        }
        if s.api_base:
            kwargs["api_base"] = s.api_base
            if s.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
                kwargs["api_key"] = "none"  # local servers want some key; this is no secret
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        if s.input_cost_per_token is not None:
            kwargs["input_cost_per_token"] = s.input_cost_per_token
        if s.output_cost_per_token is not None:
            kwargs["output_cost_per_token"] = s.output_cost_per_token
        wait = s.backoff_s
        for attempt in range(1, s.attempts + 1):
            while (held := self.gate.wait_s()) > 0:  # another team was told to slow down
                self.sleep(held)
            if why := self.refuse():  # each try is a call the budget counts
                raise BudgetSpent(why)
            try:
                with self.gate.slots:
                    response = litellm.completion(**kwargs)
            except Exception as e:  # every provider error arrives as some litellm class
                again = retryable(e) and attempt < s.attempts
                why = redact(f"{type(e).__name__}: {' '.join(str(e).split())}")[:300]
                self.record(Call(agent=agent, team=team, model=s.model, ok=False, error=why))
                if not again:
                    raise LLMError(f"{s.model}: {why}", retryable(e)) from None
                pause = min(s.max_backoff_s, wait) * random.uniform(0.8, 1.2)
                if rate_limited(e):
                    pause = max(pause, _retry_after(e) or 0.0)
                    self.gate.hold_off(pause)
                self.sleep(pause)
                wait *= 2
                continue
            self.record(self._usage(response, agent, team))
            return response.choices[0].message
        raise AssertionError("unreachable")

    def _usage(self, response, agent: str, team: str | None) -> Call:
        u = getattr(response, "usage", None)
        details = getattr(u, "prompt_tokens_details", None)
        cached = (
            getattr(details, "cached_tokens", None)
            or getattr(u, "cache_read_input_tokens", None)
            or 0
        )
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        return Call(
            agent=agent,
            team=team,
            model=self.settings.model,
            prompt_tokens=getattr(u, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(u, "completion_tokens", 0) or 0,
            cached_tokens=cached,
            cost_usd=cost,
        )
