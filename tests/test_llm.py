"""eat's LLM client against a real OpenAI-compatible server on 127.0.0.1: retries, usage, cost."""

import inspect

import pytest

from eat.llm import RETRY, BudgetSpent, LLMClient, LLMError, LLMSettings, _litellm, redact

MODEL = "openai/eat-test-model"


def client(server, calls, **kw):
    settings = LLMSettings(model=MODEL, api_base=server.base_url, timeout_s=kw.pop("timeout", 5),
                           attempts=kw.pop("attempts", 3), backoff_s=0.0, **kw.pop("prices", {}))
    return LLMClient(settings, record=calls.append, sleep=lambda s: None, **kw)


def test_every_litellm_exception_class_has_a_retry_decision():
    litellm = _litellm()
    classes = {n for n, c in vars(litellm.exceptions).items()
               if inspect.isclass(c) and issubclass(c, Exception)}
    assert classes - RETRY.keys() == set(), "add these to eat.llm.RETRY"


def test_reply_usage_and_cached_tokens_are_recorded(llm_server):
    llm_server.reply("hello", prompt_tokens=120, completion_tokens=7, cached_tokens=100)
    calls = []
    assert client(llm_server, calls).chat([{"role": "user", "content": "hi"}],
                                          agent="t-1/coder", team="t-1") == "hello"
    (c,) = calls
    assert (c.ok, c.prompt_tokens, c.completion_tokens, c.cached_tokens) == (True, 120, 7, 100)
    assert c.cost_usd is None            # litellm has no price for this model: cost unknown
    assert llm_server.requests[0].messages == [{"role": "user", "content": "hi"}]


def test_user_prices_give_a_cost(llm_server):
    llm_server.reply("x", prompt_tokens=100, completion_tokens=10)
    calls = []
    client(llm_server, calls, prices={"input_cost_per_token": 1e-6,
                                      "output_cost_per_token": 2e-6}).chat(
        [{"role": "user", "content": "hi"}], agent="a")
    assert calls[0].cost_usd == pytest.approx(100e-6 + 20e-6)


def test_rate_limit_then_success_is_retried_once_per_request(llm_server):
    llm_server.error(429, retry_after=0).error(503).reply("ok")
    calls = []
    assert client(llm_server, calls).chat([{"role": "user", "content": "x"}], agent="a") == "ok"
    assert len(llm_server.requests) == 3            # no hidden SDK or litellm retries
    assert [c.ok for c in calls] == [False, False, True]
    assert "RateLimitError" in calls[0].error


def test_a_hanging_server_times_out_and_the_outage_is_reported_as_retryable(llm_server):
    for _ in range(2):
        llm_server.hang(10)
    calls = []
    with pytest.raises(LLMError) as e:
        client(llm_server, calls, timeout=0.5, attempts=2).chat(
            [{"role": "user", "content": "x"}], agent="a")
    assert e.value.retryable and "Timeout" in str(e.value)
    assert [c.ok for c in calls] == [False, False]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried(llm_server, status):
    llm_server.error(status)
    calls = []
    with pytest.raises(LLMError) as e:
        client(llm_server, calls).chat([{"role": "user", "content": "x"}], agent="a")
    assert not e.value.retryable and len(llm_server.requests) == 1


def test_no_call_starts_once_the_budget_refuses(llm_server):
    calls = []
    c = client(llm_server, calls, refuse=lambda: "LLM spend reached $0.5 of $0.5")
    with pytest.raises(BudgetSpent, match="spend reached"):
        c.chat([{"role": "user", "content": "x"}], agent="a")
    assert llm_server.requests == [] and calls == []


def test_a_budget_spent_between_retries_stops_them(llm_server):
    llm_server.error(503)
    llm_server.error(503)
    calls = []
    c = client(llm_server, calls, attempts=5, refuse=lambda: "no calls left" if calls else None)
    with pytest.raises(BudgetSpent, match="no calls left"):
        c.chat([{"role": "user", "content": "x"}], agent="a")
    assert len(llm_server.requests) == 1 and [x.ok for x in calls] == [False]


def test_secrets_in_error_messages_are_masked(monkeypatch):
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "sk-live-1234567890")
    assert redact("Incorrect API key provided: sk-live-1234567890.") == \
        "Incorrect API key provided: ***."
