//! Reasons a producer can act on (issue 8 item 9): for every decoder and the tool-result
//! decoder, JSON nested 100,000 deep, invalid UTF-8, an empty body, a JSON array / number /
//! string / null instead of an object, and a truncated body each get a precise reason, in the
//! `<provider>: <what>` shape the store prefixes with `decode_error: ` (the worker logs only
//! the code before the first `:`; the rest may quote input). Deep input is decoded on a
//! thread with a small stack: no depth of input may exhaust it.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunk_model::decode::{self as decoders};
use chunk_model::{decode, decode_result, DecodeError, Provider};

const ALL: [Provider; 7] = [
    Provider::OpenaiChat,
    Provider::OpenaiResponses,
    Provider::Anthropic,
    Provider::Gemini,
    Provider::Bedrock,
    Provider::Ollama,
    Provider::AiSdk,
];

fn on_a_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

fn err(p: Provider, body: &[u8]) -> DecodeError {
    match decode(p, body) {
        Err(e) => e,
        Ok(evs) => panic!(
            "{p}: expected an error for {:?}, got {evs:?}",
            excerpt(body)
        ),
    }
}

fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned()
}

fn deep_bodies() -> Vec<Vec<u8>> {
    let n = 100_000;
    vec![
        // all brackets
        format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes(),
        // an object whose deep part is a field no decoder reads
        format!(
            "{{\"type\":\"ping\",\"x\":{}1{}}}",
            "{\"a\":".repeat(n),
            "}".repeat(n)
        )
        .into_bytes(),
        // deep where a decoder does read (choices / candidates / content_block)
        format!("{{\"choices\":{}{}}}", "[".repeat(n), "]".repeat(n)).into_bytes(),
        format!("{{\"candidates\":{}", "[".repeat(n)).into_bytes(),
        // unclosed: deep and truncated; depth is what is reported
        "{\"a\":".repeat(n).into_bytes(),
    ]
}

#[test]
fn json_nested_100000_deep_is_refused_with_a_recursion_limit_reason_by_every_decoder() {
    let reasons = on_a_small_stack(|| {
        let mut out = Vec::new();
        for p in ALL {
            for body in deep_bodies() {
                out.push((p, err(p, &body)));
            }
        }
        out
    });
    for (p, e) in reasons {
        assert!(
            matches!(e, DecodeError::TooDeep { provider, limit: 127, .. } if provider == p),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "{p}: JSON nested deeper than 127 levels (recursion limit): "
            )),
            "{text}"
        );
        assert!(text.len() < 400, "the reason quotes an excerpt only");
    }
}

#[test]
fn json_at_the_depth_limit_is_not_refused_for_its_depth() {
    // 126 levels under the top object: 127 in all, what serde_json parses.
    let body = format!("{{\"x\":{}{}}}", "[".repeat(126), "]".repeat(126));
    for p in ALL {
        assert!(
            !matches!(decode(p, body.as_bytes()), Err(DecodeError::TooDeep { .. })),
            "{p}: refused at the limit"
        );
    }
    let over = format!("{{\"x\":{}{}}}", "[".repeat(127), "]".repeat(127));
    for p in ALL {
        assert!(matches!(
            err(p, over.as_bytes()),
            DecodeError::TooDeep { .. }
        ));
    }
}

#[test]
fn invalid_utf8_is_reported_as_not_utf8_with_its_offset() {
    for p in ALL {
        let e = err(p, b"\xff\xfe{}");
        assert_eq!(
            e.to_string()
                .split(" (")
                .nth(1)
                .map(|s| s.split(')').next()),
            Some(Some("not UTF-8: invalid byte 0xFF at offset 0")),
            "{e}"
        );
        assert!(matches!(e, DecodeError::NotJson { .. }));
    }
    // inside a string a decoder reads
    let e = err(Provider::Anthropic, b"{\"type\":\"\xc3(\"}");
    assert!(
        e.to_string()
            .contains("(not UTF-8: invalid byte 0xC3 at offset 9)"),
        "{e}"
    );
}

#[test]
fn an_empty_chunk_decodes_to_nothing_and_each_decoder_called_directly_says_empty() {
    type Decoder = fn(&[u8]) -> Result<Vec<chunk_model::ChunkEvent>, DecodeError>;
    let direct: [(Provider, Decoder); 7] = [
        (Provider::OpenaiChat, decoders::openai_chat::decode),
        (
            Provider::OpenaiResponses,
            decoders::openai_responses::decode,
        ),
        (Provider::Anthropic, decoders::anthropic::decode),
        (Provider::Gemini, decoders::gemini::decode),
        (Provider::Bedrock, decoders::bedrock::decode),
        (Provider::Ollama, decoders::ollama::decode),
        (Provider::AiSdk, decoders::ai_sdk::decode),
    ];
    for (p, decoder) in direct {
        assert_eq!(decode(p, b"  \n").unwrap(), vec![], "{p}: documented");
        let e = decoder(b"").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{p}: chunk is not valid JSON (empty): \"\""),
            "{e}"
        );
    }
}

#[test]
fn a_json_value_that_is_not_an_object_is_named() {
    for p in ALL {
        for (body, found) in [
            (&b"[1,2]"[..], "an array"),
            (b"42", "a number"),
            (b"-1.5", "a number"),
            (b"\"hello\"", "a string"),
            (b"true", "a boolean"),
            (b"null", "null"),
        ] {
            let e = err(p, body);
            let text = e.to_string();
            // Gemini reads a top-level array as a stream of responses: the element is named.
            let field = if p == Provider::Gemini && body[0] == b'[' {
                "[0]"
            } else {
                "$"
            };
            let found = if field == "[0]" { "a number" } else { found };
            assert!(
                text.starts_with(&format!(
                    "{p}: field `{field}` expected a JSON object, found {found}: "
                )),
                "{text}"
            );
        }
    }
}

#[test]
fn a_truncated_chunk_says_truncated() {
    for p in ALL {
        for body in [
            &br#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a"#[..],
            br#"{"choices":[{"index":0,"delta":{"tool_calls":["#,
            br#"{"a":1"#,
        ] {
            let e = err(p, body);
            assert!(matches!(e, DecodeError::NotJson { .. }), "{e:?}");
            assert!(
                e.to_string()
                    .starts_with(&format!("{p}: chunk is not valid JSON (truncated: EOF while parsing")),
                "{e}"
            );
        }
    }
}

fn result_problem(body: &[u8]) -> String {
    match decode_result(body) {
        Err(DecodeError::BadResult { problem, .. }) => problem,
        other => panic!("expected BadResult, got {other:?}"),
    }
}

#[test]
fn the_result_decoder_names_each_problem() {
    let deep = on_a_small_stack(|| {
        deep_bodies()
            .iter()
            .map(|b| result_problem(b))
            .collect::<Vec<_>>()
    });
    for problem in deep {
        assert_eq!(
            problem,
            "JSON nested deeper than 127 levels (recursion limit)"
        );
    }
    assert_eq!(
        result_problem(b""),
        "empty body: expected a tool result JSON object"
    );
    assert_eq!(
        result_problem(b" \n"),
        "empty body: expected a tool result JSON object"
    );
    assert_eq!(
        result_problem(b"\xff{}"),
        "not valid JSON (not UTF-8: invalid byte 0xFF at offset 0)"
    );
    assert!(result_problem(br#"{"tool_call_id":"c","output":"#)
        .starts_with("not valid JSON (truncated: EOF while parsing a value"));
    for (body, found) in [
        (&b"42"[..], "a number"),
        (b"\"x\"", "a string"),
        (b"null", "null"),
        (b"[[1]]", "an array"),
        (b"[true]", "a boolean"),
    ] {
        assert_eq!(
            result_problem(body),
            format!("expected a JSON object (or an array of objects), found {found}")
        );
    }
    let text = decode_result(b"").unwrap_err().to_string();
    assert!(text.starts_with("tool result: empty body"), "{text}");
}
