"""Validates rendered histories with the providers' own SDK request types.

Input: a JSON file (argv[1]) holding a list of cases
`{"name": str, "target": str, "messages": [...]}`, `target` a toolstream history format.
Each history is checked with the request type of its provider's SDK:

- openai-chat: `openai.types.chat.ChatCompletionMessageParam` (each message)
- openai-responses: `openai.types.responses.ResponseInputParam` (the whole input)
- anthropic: `anthropic.types.MessageParam` (each message)

The openai and anthropic types are TypedDicts. pydantic validates their `Iterable[...]` fields
lazily (never, unless consumed) and let a union member with a missing required key through,
so they are checked by `check_typed` below: every required key present, no unknown key, every
value of its annotated type (unions: some member fits; literals: equal). pydantic checks
pydantic models (google-genai, mistralai, ollama).

One field is allowed beyond the openai types: `extra_content` on an openai-chat tool call, the
Gemini OpenAI-compatible endpoint's documented thought-signature carrier (rendered only for calls
that came from that endpoint). It must be `{"google": {"thought_signature": str}}`.

- gemini: `google.genai.types.Content` (each content; pydantic, unknown fields forbidden)
- mistral: `mistralai.client.models.ChatCompletionRequestMessage` (each message)
- bedrock: botocore's `ParamValidator` on the `bedrock-runtime` `Converse` input shape, with
  the case's `tool_config` as `toolConfig`; and Converse's service-side rule that `toolUse` /
  `toolResult` blocks need a `toolConfig` naming every tool used
- ollama: `ollama.Message` (each message)

Prints one line per failing case and exits 1 if any failed, 2 if an SDK cannot be imported.
"""

import collections.abc
import json
import sys
import typing

import typing_extensions as te


def check_typed(value, tp, path="$"):
    """Raises ValueError unless `value` (parsed JSON) fits the type `tp` strictly."""
    origin = te.get_origin(tp)
    args = te.get_args(tp)
    if tp is typing.Any or tp is object:
        return
    if origin in (te.Annotated, getattr(typing, "Annotated", None)) and args:
        return check_typed(value, args[0], path)
    if origin in (te.Required, te.NotRequired):
        return check_typed(value, args[0], path)
    if origin is typing.Union or (hasattr(__import__("types"), "UnionType") and origin is __import__("types").UnionType):
        errors = []
        for member in args:
            try:
                check_typed(value, member, path)
                return
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(f"{path}: fits no member of {tp}: " + " | ".join(errors[:6]))
    if origin in (typing.Literal, te.Literal):
        if value in args and type(value) in {type(a) for a in args}:
            return
        raise ValueError(f"{path}: {value!r} is not one of {args}")
    if tp is type(None):
        if value is None:
            return
        raise ValueError(f"{path}: expected null")
    if te.is_typeddict(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected an object for {tp.__name__}")
        hints = te.get_type_hints(tp)
        # `__required_keys__` is wrong under postponed annotations: read Required/NotRequired
        extras = te.get_type_hints(tp, include_extras=True)
        required = set()
        for k, h in extras.items():
            marks = {te.get_origin(h)} | {te.get_origin(a) for a in te.get_args(h)[:1]}
            if te.Required in marks or (tp.__total__ and te.NotRequired not in marks):
                required.add(k)
        missing = [k for k in required if k not in value]
        if missing:
            raise ValueError(f"{path}: {tp.__name__} misses {missing}")
        unknown = [k for k in value if k not in hints]
        if unknown:
            raise ValueError(f"{path}: {tp.__name__} has no field {unknown}")
        for k, v in value.items():
            check_typed(v, hints[k], f"{path}.{k}")
        return
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence, typing.List):
        if not isinstance(value, list):
            raise ValueError(f"{path}: expected a list")
        for i, item in enumerate(value):
            check_typed(item, args[0] if args else typing.Any, f"{path}[{i}]")
        return
    if origin in (dict, collections.abc.Mapping, typing.Dict):
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected an object")
        return
    if tp is str:
        if isinstance(value, str):
            return
        raise ValueError(f"{path}: expected a string, got {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return
        raise ValueError(f"{path}: expected a bool")
    if tp in (int, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return
        raise ValueError(f"{path}: expected a number")
    if tp is dict:
        if isinstance(value, dict):
            return
        raise ValueError(f"{path}: expected an object")
    if isinstance(tp, te.TypeAliasType) if hasattr(te, "TypeAliasType") else False:
        return check_typed(value, tp.__value__, path)
    # bytes, file types, ...: never in a rendered history
    raise ValueError(f"{path}: unexpected value for type {tp}")


def without_gemini_extra_content(message):
    """The chat message without Gemini's `extra_content` on its tool calls (checked here)."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list):
        return message
    stripped = []
    for call in calls:
        if isinstance(call, dict) and "extra_content" in call:
            extra = call["extra_content"]
            signature = extra.get("google", {}).get("thought_signature") if isinstance(extra, dict) else None
            if set(extra) != {"google"} or set(extra["google"]) != {"thought_signature"} or not isinstance(signature, str):
                raise ValueError(f"extra_content is not a Gemini thought signature: {extra!r}")
            call = {k: v for k, v in call.items() if k != "extra_content"}
        stripped.append(call)
    return {**message, "tool_calls": stripped}


def load_validators():
    from pydantic import TypeAdapter

    from anthropic.types import MessageParam
    from botocore.session import get_session
    from botocore.validate import ParamValidator
    from google.genai import types as genai_types
    from mistralai.client.models import ChatCompletionRequestMessage
    from ollama import Message as OllamaMessage
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.responses import ResponseInputParam

    mistral = TypeAdapter(ChatCompletionRequestMessage)
    converse = (
        get_session().get_service_model("bedrock-runtime").operation_model("Converse").input_shape
    )
    param_validator = ParamValidator()

    def each(adapter_validate):
        def run(messages):
            for i, m in enumerate(messages):
                try:
                    adapter_validate(m)
                except Exception as e:  # the SDK's own error, reported with the message index
                    raise ValueError(f"message {i}: {e}") from None

        return run

    def bedrock(messages, tool_config=None):
        request = {"modelId": "anthropic.claude-sonnet", "messages": messages}
        if tool_config is not None:
            request["toolConfig"] = tool_config
        report = param_validator.validate(request, converse)
        if report.has_errors():
            raise ValueError(report.generate_report())
        # Converse's own rule, checked by the service rather than the shape: a request whose
        # messages hold toolUse / toolResult blocks needs a toolConfig naming the tools used.
        blocks = [b for m in messages for b in m.get("content", [])]
        used = {b["toolUse"]["name"] for b in blocks if "toolUse" in b}
        if used or any("toolResult" in b for b in blocks):
            if tool_config is None:
                raise ValueError("toolUse/toolResult blocks without a toolConfig")
            named = {t["toolSpec"]["name"] for t in tool_config.get("tools", [])}
            if not used <= named:
                raise ValueError(f"toolConfig does not name {sorted(used - named)}")

    return {
        "openai-chat": each(
            lambda m: check_typed(without_gemini_extra_content(m), ChatCompletionMessageParam)
        ),
        "openai-responses": lambda ms: check_typed(ms, ResponseInputParam),
        "anthropic": each(lambda m: check_typed(m, MessageParam)),
        "gemini": each(genai_types.Content.model_validate),
        "mistral": each(mistral.validate_python),
        "bedrock": bedrock,
        "ollama": each(OllamaMessage.model_validate),
    }


def main():
    if len(sys.argv) != 2:
        print("usage: validate.py CASES.json", file=sys.stderr)
        return 2
    try:
        validators = load_validators()
    except ImportError as e:
        print(f"cannot import a provider SDK: {e}", file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    failed = 0
    counts = {}
    for case in cases:
        target = case["target"]
        validate = validators.get(target)
        if validate is None:
            print(f"FAIL {case['name']}: no validator for target {target}")
            failed += 1
            continue
        try:
            if target == "bedrock":
                validate(case["messages"], case.get("tool_config"))
            else:
                validate(case["messages"])
            counts[target] = counts.get(target, 0) + 1
        except Exception as e:
            failed += 1
            print(f"FAIL {case['name']} ({target}): {e}")
    print(f"validated {sum(counts.values())} histories: {json.dumps(counts, sort_keys=True)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
