"""The scripted model: the real openai client against a scripted, validating server (no sockets)."""

import json

import httpx
import openai
import pytest

from sessionlab.scripted import (Crash, Disconnect, Fail, ScriptedModel, SimulatedCrash, call, raw_call,
                                 say, use, validate, InvalidRequest)

USER = {"role": "user", "content": "Buy a rope."}


def assistant_calling(*ids, arguments='{"item": "rope"}'):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "buy", "arguments": arguments}} for i in ids]}


def tool(call_id, content="ok"):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def ask(model, messages, **options):
    return model.client().chat.completions.create(model=model.model, messages=messages, **options)


def rejected(model, messages):
    with pytest.raises(openai.BadRequestError) as error:
        ask(model, messages)
    assert error.value.status_code == 400
    body = error.value.body
    assert body["type"] == "invalid_request_error", body
    return body["message"]


# --- replies ---------------------------------------------------------------------------


def test_a_text_reply_comes_back_through_the_real_client():
    model = ScriptedModel([say("Welcome.")])

    response = ask(model, [USER])

    assert isinstance(response, openai.types.chat.ChatCompletion)
    assert response.choices[0].message.content == "Welcome."
    assert response.choices[0].finish_reason == "stop"
    assert response.choices[0].message.tool_calls is None


def test_several_tool_calls_in_one_reply_get_distinct_ids():
    model = ScriptedModel([use(call("buy", item="torch"), call("talk_to", npc="elder"))])

    message = ask(model, [USER]).choices[0].message

    assert [c.function.name for c in message.tool_calls] == ["buy", "talk_to"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"item": "torch"}
    assert len({c.id for c in message.tool_calls}) == 2
    assert model.requests[0]["messages"] == [USER]


def test_tool_call_ids_stay_unique_across_a_conversation_and_processes():
    first = ScriptedModel([use(call("buy", item="torch"))])
    id_1 = ask(first, [USER]).choices[0].message.tool_calls[0].id
    second = ScriptedModel([use(call("buy", item="rope"))])   # a new process, a fresh model
    history = [USER, assistant_calling(id_1), tool(id_1), {"role": "assistant", "content": "ok"}, USER]
    id_2 = ask(second, history).choices[0].message.tool_calls[0].id
    assert id_1 != id_2


def test_finish_reason_can_be_scripted_to_lie_like_some_servers_do():
    model = ScriptedModel([use(call("buy", item="rope"), finish_reason="stop")])
    choice = ask(model, [USER]).choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls


def test_every_request_is_recorded_with_its_tools():
    model = ScriptedModel([say("a"), say("b")])
    tools = [{"type": "function", "function": {"name": "buy", "parameters": {"type": "object"}}}]
    ask(model, [USER], tools=tools)
    ask(model, [USER, {"role": "assistant", "content": "a"}, USER])
    assert len(model.requests) == 2
    assert model.requests[0]["tools"] == tools
    assert len(model.messages_sent[1]) == 3


def test_a_policy_function_answers_every_request():
    model = ScriptedModel(script=lambda request: say(f"you sent {len(request['messages'])}"))
    assert ask(model, [USER]).choices[0].message.content == "you sent 1"


def test_running_out_of_script_is_a_clear_server_error():
    model = ScriptedModel([say("only one")])
    ask(model, [USER])
    with pytest.raises(openai.InternalServerError, match="no reply left"):
        ask(model, [USER, {"role": "assistant", "content": "only one"}, USER])


def test_observers_see_each_request_before_the_reply(tmp_path):
    marker = tmp_path / "state"
    marker.write_text("before")
    model = ScriptedModel([say("a")])
    model.on_request(lambda request: marker.read_text())

    ask(model, [USER])

    assert model.observations == ["before"]


# --- failures on demand --------------------------------------------------------------


def test_fail_answers_with_the_http_status():
    model = ScriptedModel([Fail(500), Fail(429, "slow down")])
    with pytest.raises(openai.InternalServerError):
        ask(model, [USER])
    with pytest.raises(openai.RateLimitError, match="slow down"):
        ask(model, [USER])


def test_disconnect_drops_the_connection():
    model = ScriptedModel([Disconnect()])
    with pytest.raises(openai.APIConnectionError):
        ask(model, [USER])


def test_crash_gets_through_the_client_and_any_except_exception():
    model = ScriptedModel([Crash()])
    with pytest.raises(SimulatedCrash):
        try:
            ask(model, [USER])
        except Exception:  # noqa: BLE001 - this is what a careless agent would write
            pytest.fail("a simulated crash must not be catchable as an Exception")


def test_nothing_reaches_the_network():
    model = ScriptedModel([say("a")])
    router = model.router()
    with pytest.raises(Exception):
        router.handler(httpx.Request("GET", "https://api.openai.com/v1/chat/completions"))


def test_the_installed_openai_client_reaches_the_model_without_a_socket(monkeypatch):
    """openai 3 sends through its own HTTP stack unless it is given an httpx.Client: the
    scripted client must use the one it is given, on 2.x and 3.x alike, and open no socket
    (not even to look up the host's name)."""
    import socket

    def no_socket(*args, **kwargs):
        raise AssertionError(f"openai {openai.__version__} opened a socket: the scripted "
                             "model's httpx.Client was not used")
    monkeypatch.setattr(socket, "socket", no_socket)
    monkeypatch.setattr(socket, "getaddrinfo", no_socket)
    monkeypatch.setattr(socket, "create_connection", no_socket)
    model = ScriptedModel([say("Offline.")])
    assert ask(model, [USER]).choices[0].message.content == "Offline."
    assert model.requests[0]["messages"] == [USER]


# --- validation: one test per rule -------------------------------------------------------


def test_unanswered_tool_calls_are_rejected_like_a_provider_does():
    model = ScriptedModel([say("never")])
    message = rejected(model, [USER, assistant_calling("call_a", "call_b"), tool("call_a")])
    assert "tool_call_ids did not have response messages: call_b" in message


def test_a_user_message_between_a_call_and_its_result_is_rejected():
    model = ScriptedModel([say("never")])
    message = rejected(model, [USER, assistant_calling("call_a"), USER, tool("call_a")])
    assert "call_a" in message


def test_a_tool_result_that_answers_no_call_is_rejected():
    model = ScriptedModel([say("never")])
    message = rejected(model, [USER, tool("call_zzz")])
    assert "role 'tool' must be a response" in message and "call_zzz" in message


def test_a_tool_result_answering_the_same_call_twice_is_rejected():
    model = ScriptedModel([say("never")])
    rejected(model, [USER, assistant_calling("call_a"), tool("call_a"), tool("call_a")])


def test_an_unknown_role_is_rejected():
    model = ScriptedModel([say("never")])
    message = rejected(model, [{"role": "robot", "content": "beep"}])
    assert "'robot'" in message


def test_tool_arguments_that_are_not_json_are_rejected():
    model = ScriptedModel([say("never")])
    message = rejected(model, [USER, assistant_calling("call_a", arguments="{item: rope"), tool("call_a")])
    assert "arguments" in message


def test_an_empty_message_list_is_rejected():
    with pytest.raises(InvalidRequest):
        validate({"model": "m", "messages": []})


def test_a_valid_conversation_with_tools_passes_validation():
    validate({"model": "m", "messages": [
        {"role": "system", "content": "be brave"}, USER, assistant_calling("call_a", "call_b"),
        tool("call_a"), tool("call_b"), {"role": "assistant", "content": "done"}]})


def test_a_rejected_request_is_still_recorded_but_uses_no_script_step():
    model = ScriptedModel([say("kept for later")])
    rejected(model, [{"role": "robot", "content": "beep"}])
    assert len(model.requests) == 1
    assert ask(model, [USER]).choices[0].message.content == "kept for later"


def test_a_model_may_send_malformed_arguments_for_the_agent_to_handle():
    model = ScriptedModel([use(raw_call("buy", "{item: rope"))])
    message = ask(model, [USER]).choices[0].message
    assert message.tool_calls[0].function.arguments == "{item: rope"


# --- the model's window ----------------------------------------------------------------


def test_a_request_larger_than_the_window_is_refused_in_openais_words():
    from sessionlab.scripted import request_tokens
    small = [{"role": "user", "content": "Hi."}]
    large = [{"role": "user", "content": "The ledge is steep. " * 100}]
    model = ScriptedModel([say("Hello.")], context_window=request_tokens({"messages": small}) + 10)
    with pytest.raises(openai.BadRequestError) as error:
        ask(model, large)
    body = error.value.body
    assert body["code"] == "context_length_exceeded", body
    assert body["message"].startswith(f"This model's maximum context length is {model.context_window} "
                                      f"tokens. However, your messages resulted in "
                                      f"{request_tokens({'messages': large})} tokens."), body
    assert len(model.requests) == 1, "the refused request is recorded"
    assert ask(model, small).choices[0].message.content == "Hello.", (
        "a request within the window is answered, with the step the refused one did not use")


def test_without_a_window_no_size_is_refused():
    model = ScriptedModel([say("Read it.")])
    assert ask(model, [{"role": "user", "content": "x" * 400_000}]).choices[0].message.content == "Read it."


@pytest.mark.parametrize("arguments", ['{"item": NaN}', '{"item": Infinity}',
                                       '{"gold": -Infinity}', "[" * 100_000])
def test_arguments_a_strict_provider_refuses_are_refused(arguments):
    """NaN and Infinity are no JSON (Python's json reads them; OpenAI's API refuses them),
    and nesting past any parser's depth is no usable object: the scripted model answers
    400 naming the field, as a strict provider does, instead of accepting them."""
    body = {"model": "town", "messages": [
        USER, assistant_calling("call_1", arguments=arguments), tool("call_1")]}
    with pytest.raises(InvalidRequest) as refused:
        validate(body)
    assert "function.arguments" in str(refused.value), (
        f"the refusal should name the field; it says {refused.value}")
