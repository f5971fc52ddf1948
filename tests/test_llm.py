"""eat's LLM client against a real OpenAI-compatible server on 127.0.0.1: retries, usage, cost."""

import pytest

from eat.llm import BudgetSpent, LLMClient, LLMError, LLMSettings, redact

MODEL = "openai/eat-test-model"


def client(server, calls, **kw):
    settings = LLMSettings(
        model=MODEL,
        api_base=server.base_url,
        timeout_s=kw.pop("timeout", 5),
        attempts=kw.pop("attempts", 3),
        backoff_s=0.0,
        **kw.pop("prices", {}),
    )
    return LLMClient(settings, record=calls.append, sleep=lambda s: None, **kw)


@pytest.mark.parametrize(
    "status, retried",
    [
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (408, True),
        (400, False),
        (401, False),
        (402, False),
        (403, False),
        (404, False),
        (422, False),
    ],
)
def test_what_the_server_answered_decides_a_retry(llm_server, status, retried):
    """Whatever class litellm raises for a status (it changes between releases), a busy or
    failing provider is tried again and a request it refuses is not."""
    llm_server.error(status, "no").reply("ok")
    calls = []
    chat = lambda: client(llm_server, calls, attempts=2).chat(  # noqa: E731
        [{"role": "user", "content": "x"}], agent="a"
    )
    if retried:
        assert chat() == "ok"
    else:
        with pytest.raises(LLMError) as e:
            chat()
        assert not e.value.retryable
    assert len(llm_server.requests) == (2 if retried else 1)


def test_a_dropped_connection_and_a_malformed_reply_are_retried(llm_server):
    llm_server.drop().malformed().reply("ok")
    calls = []
    assert (
        client(llm_server, calls, attempts=3).chat([{"role": "user", "content": "x"}], agent="a")
        == "ok"
    )
    assert [c.ok for c in calls] == [False, False, True]


def test_reply_usage_and_cached_tokens_are_recorded(llm_server):
    llm_server.reply("hello", prompt_tokens=120, completion_tokens=7, cached_tokens=100)
    calls = []
    assert (
        client(llm_server, calls).chat(
            [{"role": "user", "content": "hi"}], agent="t-1/coder", team="t-1"
        )
        == "hello"
    )
    (c,) = calls
    assert (c.ok, c.prompt_tokens, c.completion_tokens, c.cached_tokens) == (True, 120, 7, 100)
    assert c.cost_usd is None  # litellm has no price for this model: cost unknown
    assert llm_server.requests[0].messages == [{"role": "user", "content": "hi"}]


def test_user_prices_give_a_cost(llm_server):
    llm_server.reply("x", prompt_tokens=100, completion_tokens=10)
    calls = []
    client(
        llm_server, calls, prices={"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
    ).chat([{"role": "user", "content": "hi"}], agent="a")
    assert calls[0].cost_usd == pytest.approx(100e-6 + 20e-6)


def test_rate_limit_then_success_is_retried_once_per_request(llm_server):
    llm_server.error(429, retry_after=0).error(503).reply("ok")
    calls = []
    assert client(llm_server, calls).chat([{"role": "user", "content": "x"}], agent="a") == "ok"
    assert len(llm_server.requests) == 3  # no hidden SDK or litellm retries
    assert [c.ok for c in calls] == [False, False, True]
    assert "RateLimitError" in calls[0].error


def test_a_hanging_server_times_out_and_the_outage_is_reported_as_retryable(llm_server):
    for _ in range(2):
        llm_server.hang(10)
    calls = []
    with pytest.raises(LLMError) as e:
        client(llm_server, calls, timeout=0.5, attempts=2).chat(
            [{"role": "user", "content": "x"}], agent="a"
        )
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
    assert (
        redact("Incorrect API key provided: sk-live-1234567890.")
        == "Incorrect API key provided: ***."
    )


def test_calls_to_one_model_are_capped_across_clients(llm_server):
    """Four teams' clients of one model, at most two calls in flight: the server never sees
    more, and every call is answered."""
    import threading
    import time

    from llm_server import Reply

    from eat.llm import Gate

    lock, live, peak = threading.Lock(), [0], [0]

    def slow(req):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.2)
        with lock:
            live[0] -= 1
        return Reply("ok")

    llm_server.default = slow
    gate, calls, answers = Gate(2), [], []
    clients = [client(llm_server, calls, gate=gate) for _ in range(4)]
    threads = [
        threading.Thread(
            target=lambda c=c: answers.append(c.chat([{"role": "user", "content": "x"}], agent="a"))
        )
        for c in clients
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == ["ok"] * 4 and len(llm_server.requests) == 4
    assert peak[0] <= 2


def test_a_rate_limit_holds_every_client_of_the_model(llm_server):
    """Team A's 429 (Retry-After 5 s) makes team B, calling during A's wait, wait too before
    its call starts; on a clock of the test's own, so nothing here depends on real time."""
    from eat.llm import Gate

    now = [0.0]
    gate = Gate(4, clock=lambda: now[0])
    llm_server.error(429, retry_after=5).reply("b").reply("a")
    calls, b_waits = [], []

    def b_sleep(s):
        b_waits.append(s)
        now[0] += s

    b = client(llm_server, calls, gate=gate)
    b.sleep = b_sleep

    def a_sleep(s):  # while A backs off, B calls the same model
        assert b.chat([{"role": "user", "content": "b"}], agent="b") == "b"
        now[0] = max(now[0], 5.0)

    a = client(llm_server, calls, gate=gate)
    a.sleep = a_sleep
    assert a.chat([{"role": "user", "content": "a"}], agent="a") == "a"
    assert b_waits == [pytest.approx(5.0)]
    assert [r.messages[-1]["content"] for r in llm_server.requests] == ["a", "b", "a"]
