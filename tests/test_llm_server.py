"""litellm against a real local OpenAI-compatible server: the behaviour eat's LLM client relies on.

These tests are documentation as much as checks. They pin, for litellm 1.110.x with the OpenAI
SDK underneath (model "openai/<name>" + api_base):
- where content, usage and cached tokens land on the response;
- which litellm exception each HTTP failure raises, and how many requests reach the server
  when every retry is switched off (``num_retries=0, max_retries=0``);
- what the defaults do instead (the OpenAI SDK retries twice; ``num_retries`` adds litellm's own);
- response cost for a model litellm has no price for, and the ways to give it one;
- the exception classes litellm exports.
Every test talks HTTP to tests/llm_server.py; none needs a network or a key.
"""

from __future__ import annotations

import inspect
import json
import os
import time
import urllib.request

import pytest

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # before the import: no fetch of the price map
import litellm  # noqa: E402
import litellm.exceptions  # noqa: E402
import openai  # noqa: E402
from llm_server import Drop, Hang, HTTPError, Malformed, Reply, ScriptedLLM, serve  # noqa: E402

litellm.suppress_debug_info = True

MESSAGES = [{"role": "user", "content": "hello there"}]

# All retries off: litellm's wrapper (num_retries) and the OpenAI SDK's own (max_retries,
# default 2).
NO_RETRIES = {"num_retries": 0, "max_retries": 0}


def call(server: ScriptedLLM, **extra):
    return litellm.completion(messages=MESSAGES, **server.litellm_kwargs(**extra))


def raised(server: ScriptedLLM, **extra) -> BaseException:
    with pytest.raises(Exception) as info:
        call(server, **extra)
    return info.value


# --------------------------------------------------------------------------- the server itself


def test_server_records_requests_and_answers_in_order(llm_server):
    llm_server.push("first", Reply("second"))
    assert call(llm_server).choices[0].message.content == "first"
    assert call(llm_server, temperature=0.5).choices[0].message.content == "second"
    assert llm_server.pending == 0
    first, second = llm_server.requests
    assert first.path == "/v1/chat/completions" and first.method == "POST"
    assert first.model == "eat-test-model"  # litellm strips the "openai/" route prefix
    assert first.messages == MESSAGES
    assert second.get("temperature") == 0.5
    assert "authorization" not in first.headers  # recorded headers leave the key out
    assert first.headers["content-type"] == "application/json"


def test_script_exhausted_is_an_error_and_is_recorded(llm_server):
    assert isinstance(raised(llm_server), litellm.InternalServerError)
    assert "script exhausted" in str(raised(llm_server))
    assert len(llm_server.requests) == 2


def test_callable_step_answers_from_the_request(llm_server):
    def echo(req: dict) -> Reply:
        fmt = (req.get("response_format") or {}).get("type", "text")
        return Reply(f"{fmt}:{req['messages'][-1]['content']}")

    llm_server.push(echo, echo)
    assert call(llm_server).choices[0].message.content == "text:hello there"
    reply = call(llm_server, response_format={"type": "json_object"})
    assert reply.choices[0].message.content == "json_object:hello there"
    assert llm_server.requests[1].get("response_format") == {"type": "json_object"}


def test_models_endpoint_and_unknown_paths(llm_server):
    with urllib.request.urlopen(llm_server.base_url + "/models", timeout=5) as resp:
        body = json.load(resp)
    assert body["object"] == "list" and body["data"][0]["id"] == "eat-test-model"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(
            urllib.request.Request(llm_server.base_url + "/embeddings", data=b"{}"), timeout=5
        )
    assert info.value.code == 404
    assert llm_server.requests == [] and len(llm_server.other_requests) == 2


def test_hang_does_not_hold_up_shutdown():
    server = ScriptedLLM().start()
    server.hang(60)
    with pytest.raises(litellm.Timeout):
        call(server, timeout=0.3)
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 2


def test_serve_context_manager_gives_a_fresh_port_each_time():
    with serve() as a, serve() as b:
        assert a.base_url != b.base_url
        assert a.base_url.startswith("http://127.0.0.1:") and a.base_url.endswith("/v1")


# --------------------------------------------------------------------------- replies, usage


def test_reply_content_and_usage(llm_server):
    llm_server.reply("hi", prompt_tokens=100, completion_tokens=7)
    r = call(llm_server)
    assert r.choices[0].message.content == "hi"
    assert r.choices[0].finish_reason == "stop"
    assert r.model == "eat-test-model"  # the server's model field, no provider prefix
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (100, 7, 107)
    assert r.usage.prompt_tokens_details is None  # server sent no prompt_tokens_details


def test_default_usage_is_estimated_from_text(llm_server):
    llm_server.reply("x" * 40)
    r = call(llm_server)
    assert r.usage.completion_tokens == 10
    assert r.usage.prompt_tokens == len("hello there") // 4


def test_cached_tokens_land_in_prompt_tokens_details(llm_server):
    """OpenAI's usage.prompt_tokens_details.cached_tokens comes through as is.

    There is no public usage.cache_read_input_tokens on this route (that is the Anthropic-style
    field); the private _cache_read_input_tokens stays 0. Cached tokens are part of prompt_tokens.
    """
    llm_server.reply("hi", prompt_tokens=100, completion_tokens=7, cached_tokens=40)
    u = call(llm_server).usage
    assert u.prompt_tokens_details.cached_tokens == 40
    assert u.prompt_tokens == 100
    assert not hasattr(u, "cache_read_input_tokens")
    assert getattr(u, "_cache_read_input_tokens", 0) == 0
    assert u.model_dump()["prompt_tokens_details"]["cached_tokens"] == 40


def test_missing_usage_reads_as_zeros(llm_server):
    llm_server.reply("hi", usage=False)
    u = call(llm_server).usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (0, 0, 0)


# ------------------------------------------------------------------------ errors, one attempt each

# scenario -> (step, litellm exception class raised, status_code on the exception)
ERRORS = {
    "429": (HTTPError(429, retry_after=3), litellm.exceptions.RateLimitError, 429),
    "500": (HTTPError(500), litellm.exceptions.InternalServerError, 500),
    "502": (HTTPError(502), litellm.exceptions.BadGatewayError, 502),
    "503": (HTTPError(503), litellm.exceptions.ServiceUnavailableError, 503),
    "504": (HTTPError(504), litellm.exceptions.Timeout, 504),
    "400": (HTTPError(400), litellm.exceptions.BadRequestError, 400),
    "401": (HTTPError(401), litellm.exceptions.AuthenticationError, 401),
    "403": (HTTPError(403), litellm.exceptions.APIError, 403),  # not PermissionDeniedError
    "404": (HTTPError(404), litellm.exceptions.NotFoundError, 404),
    "408": (HTTPError(408), litellm.exceptions.Timeout, 408),
    "422": (HTTPError(422), litellm.exceptions.BadRequestError, 422),
    "malformed-json": (Malformed(), litellm.exceptions.InternalServerError, 500),
    "json-without-choices": (Malformed(b'{"foo": 1}'), litellm.exceptions.InternalServerError, 500),
    "html-200": (
        Malformed(b"<html>bad gateway</html>", content_type="text/html"),
        litellm.exceptions.InternalServerError,
        500,
    ),
    "connection-dropped": (
        Drop(),
        litellm.exceptions.InternalServerError,
        500,
    ),  # not APIConnectionError
}


@pytest.mark.parametrize("scenario", list(ERRORS))
def test_error_maps_to_exception_after_one_request(llm_server, scenario):
    step, exc_class, status = ERRORS[scenario]
    llm_server.push(step)
    exc = raised(llm_server)
    assert type(exc) is exc_class, f"{scenario}: {type(exc).__module__}.{type(exc).__qualname__}"
    assert exc.status_code == status
    assert len(llm_server.requests) == 1  # with num_retries=0, max_retries=0: exactly one attempt


def test_rate_limit_exposes_retry_after(llm_server):
    llm_server.error(429, "slow down", retry_after=3)
    exc = raised(llm_server)
    assert isinstance(exc, litellm.RateLimitError)
    assert "slow down" in str(exc)
    assert exc.response.headers["retry-after"] == "3"
    assert exc.litellm_response_headers["retry-after"] == "3"


def test_hang_beyond_timeout_raises_timeout(llm_server):
    llm_server.hang(10)
    t0 = time.monotonic()
    exc = raised(llm_server, timeout=1)
    elapsed = time.monotonic() - t0
    assert type(exc) is litellm.exceptions.Timeout
    assert exc.status_code == 408
    assert 0.9 < elapsed < 9  # ended by the 1 s timeout, not by the 10 s hang
    assert len(llm_server.requests) == 1


def test_hang_shorter_than_timeout_answers(llm_server):
    llm_server.hang(0.2, then=Reply("slow but fine"))
    assert call(llm_server, timeout=5).choices[0].message.content == "slow but fine"


# --------------------------------------------------------------------------- retries


def _count_requests(step, n: int = 6, **kwargs) -> tuple[type, int]:
    with serve() as server:
        server.push(*[step] * n)
        base = {"model": "openai/eat-test-model", "api_base": server.base_url, "api_key": "sk-test"}
        with pytest.raises(Exception) as info:
            litellm.completion(messages=MESSAGES, **base, **kwargs)
        return type(info.value), len(server.requests)


FAST_503 = HTTPError(503, retry_after=0.01)  # the SDK honours Retry-After: keeps retries fast


@pytest.mark.parametrize(
    "kwargs, requests",
    [
        ({}, 3),  # defaults: the OpenAI SDK retries twice
        ({"num_retries": 0}, 1),  # litellm passes num_retries on to the SDK as max_retries
        ({"max_retries": 0}, 1),
        (NO_RETRIES, 1),
        ({"num_retries": 1}, 3),  # SDK retry + litellm's own retry
        ({"num_retries": 1, "max_retries": 0}, 3),  # num_retries wins over max_retries
    ],
    ids=[
        "defaults",
        "num_retries=0",
        "max_retries=0",
        "both=0",
        "num_retries=1",
        "num_retries=1,max_retries=0",
    ],
)
def test_how_many_requests_each_retry_setting_makes(kwargs, requests):
    assert _count_requests(FAST_503, **kwargs) == (litellm.ServiceUnavailableError, requests)


def test_defaults_do_not_retry_400_or_401_but_num_retries_retries_400():
    assert _count_requests(HTTPError(400)) == (litellm.BadRequestError, 1)
    assert _count_requests(HTTPError(401)) == (litellm.AuthenticationError, 1)
    assert _count_requests(HTTPError(400), num_retries=1) == (litellm.BadRequestError, 2)


def test_defaults_retry_timeouts():
    t0 = time.monotonic()
    assert _count_requests(Hang(10), timeout=0.2, max_retries=2) == (litellm.Timeout, 3)
    assert time.monotonic() - t0 < 5


# --------------------------------------------------------------------------- cost


def test_unknown_model_has_no_cost_and_completion_cost_raises(llm_server):
    llm_server.reply("hi", prompt_tokens=100, completion_tokens=7)
    r = call(llm_server)
    assert r._hidden_params.get("response_cost") is None  # no exception at call time
    with pytest.raises(litellm.exceptions.ModelNotMappedError):
        litellm.completion_cost(completion_response=r)
    with pytest.raises(litellm.exceptions.ModelNotMappedError):
        litellm.completion_cost(completion_response=r, model="openai/eat-test-model")
    assert litellm.exceptions.ModelNotMappedError.__bases__ == (Exception,)


def test_per_call_prices_give_a_cost_without_cache_discount(llm_server):
    llm_server.reply("hi", prompt_tokens=100, completion_tokens=7, cached_tokens=40)
    r = call(llm_server, input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    # all 100 prompt tokens at the input price (cached ones too) + 7 at the output price
    assert r._hidden_params["response_cost"] == pytest.approx(100 * 1e-6 + 7 * 2e-6)
    # the per-call prices are not remembered: completion_cost on the response still raises
    with pytest.raises(litellm.exceptions.ModelNotMappedError):
        litellm.completion_cost(completion_response=r)
    # ...unless given again
    cost = litellm.completion_cost(
        completion_response=r,
        custom_cost_per_token={"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
    )
    assert cost == pytest.approx(100 * 1e-6 + 7 * 2e-6)


def test_registered_model_prices_cached_tokens_at_the_cache_rate(llm_server):
    name = "eat-test-priced-model"
    litellm.register_model(
        {
            f"openai/{name}": {
                "input_cost_per_token": 1e-6,
                "output_cost_per_token": 2e-6,
                "cache_read_input_token_cost": 1e-7,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )
    try:
        llm_server.reply("hi", prompt_tokens=100, completion_tokens=7, cached_tokens=40)
        r = call(llm_server, model=name)
        expected = 60 * 1e-6 + 40 * 1e-7 + 7 * 2e-6
        assert r._hidden_params["response_cost"] == pytest.approx(expected)
        assert litellm.completion_cost(completion_response=r) == pytest.approx(expected)
    finally:
        litellm.model_cost.pop(f"openai/{name}", None)


# --------------------------------------------------------------------------- exception classes

# Every exception class defined in litellm.exceptions (litellm 1.110.2), with what it subclasses.
EXCEPTIONS = {
    "APIConnectionError": "openai.APIConnectionError",
    "APIError": "openai.APIError",
    "APIResponseValidationError": "openai.APIResponseValidationError",
    "AuthenticationError": "openai.AuthenticationError",
    "BadGatewayError": "openai.APIStatusError",
    "BadRequestError": "openai.BadRequestError",
    "BlockedPiiEntityError": "builtins.Exception",
    "BudgetExceededError": "builtins.Exception",
    "CallerCredentialAuthenticationError": "litellm.exceptions.AuthenticationError",
    "CallerCredentialRateLimitError": "litellm.exceptions.RateLimitError",
    "ContentPolicyViolationError": "litellm.exceptions.BadRequestError",
    "ContextWindowExceededError": "litellm.exceptions.BadRequestError",
    "EndpointNotSupportedByModelError": "litellm.exceptions.BadRequestError",
    "GuardrailRaisedException": "builtins.Exception",
    "ImageFetchError": "litellm.exceptions.BadRequestError",
    "InternalServerError": "openai.InternalServerError",
    "InvalidRequestError": "openai.BadRequestError",
    "JSONSchemaValidationError": "litellm.exceptions.APIResponseValidationError",
    "LiteLLMUnknownProvider": "litellm.exceptions.BadRequestError",
    "MalformedRequestFieldError": "litellm.exceptions.BadRequestError",
    "MidStreamFallbackError": "litellm.exceptions.ServiceUnavailableError",
    "MockException": "openai.APIError",
    "ModelNotMappedError": "builtins.Exception",
    "ModifyResponseException": "builtins.Exception",
    "NotFoundError": "openai.NotFoundError",
    "OpenAIError": "openai.OpenAIError",
    "PaymentRequiredError": "litellm.exceptions.BadRequestError",
    "PermissionDeniedError": "openai.PermissionDeniedError",
    "RateLimitError": "openai.RateLimitError",
    "RejectedRequestError": "litellm.exceptions.BadRequestError",
    "SensitiveDataRouteException": "builtins.Exception",
    "ServiceUnavailableError": "openai.APIStatusError",
    "Timeout": "openai.APITimeoutError",
    "UnprocessableEntityError": "openai.UnprocessableEntityError",
    "UnsupportedEndpointError": "litellm.exceptions.BadRequestError",
    "UnsupportedParamsError": "litellm.exceptions.BadRequestError",
    "VectorStoreSearchError": "litellm.exceptions.BadRequestError",
}


def litellm_exception_classes() -> dict[str, type]:
    return {
        name: obj
        for name, obj in vars(litellm.exceptions).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == "litellm.exceptions"
    }


def test_exception_classes_and_their_bases():
    found = litellm_exception_classes()
    assert set(found) >= set(EXCEPTIONS), set(EXCEPTIONS) - set(found)
    for name, base in EXCEPTIONS.items():
        bases = [f"{b.__module__}.{b.__qualname__}" for b in found[name].__bases__]
        assert bases == [base], name


def test_exception_hierarchy_facts_a_retry_table_needs():
    # litellm.Timeout is an openai.APIConnectionError but NOT a litellm.APIConnectionError
    assert issubclass(litellm.Timeout, openai.APIConnectionError)
    assert not issubclass(litellm.Timeout, litellm.APIConnectionError)
    # 502/503 classes are not InternalServerErrors
    assert not issubclass(litellm.ServiceUnavailableError, litellm.InternalServerError)
    assert not issubclass(litellm.BadGatewayError, litellm.InternalServerError)
    # context window / content policy are BadRequestErrors (so "don't retry 400" covers them)
    assert issubclass(litellm.ContextWindowExceededError, litellm.BadRequestError)
    assert issubclass(litellm.ContentPolicyViolationError, litellm.BadRequestError)
    # every HTTP-ish litellm error is an openai.APIError; the price/budget ones are not
    for cls in (
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.Timeout,
        litellm.BadRequestError,
        litellm.AuthenticationError,
        litellm.APIError,
    ):
        assert issubclass(cls, openai.APIError)
    for cls in (litellm.exceptions.ModelNotMappedError, litellm.BudgetExceededError):
        assert not issubclass(cls, openai.APIError)
    # some classes live in litellm.exceptions but are not re-exported at top level
    top_level_missing = {
        n for n, c in litellm_exception_classes().items() if getattr(litellm, n, None) is not c
    }
    assert top_level_missing >= {
        "BlockedPiiEntityError",
        "GuardrailRaisedException",
        "MidStreamFallbackError",
    }
