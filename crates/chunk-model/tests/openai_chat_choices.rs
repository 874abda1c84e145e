//! OpenAI chat with `n > 1`: each choice's events are routed to its own message
//! (`<msg>~choice<k>` for choice k > 0), the stream-wide ones to every choice, and history
//! follows choice 0, saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::decode::openai_chat::{choice_message, is_other_choice};
use chunk_model::decode::{decode_routed, Route};
use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{ChunkEvent, Finish, Provider};
use history_fixtures::{call, result, snapshot};
use serde_json::json;

#[test]
fn each_choice_is_routed_to_its_own_message() {
    let chunk = r#"{"id":"chatcmpl-n3","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null},{"index":2,"delta":{},"finish_reason":"stop"},{"index":"x","delta":{},"finish_reason":null}]}"#;
    let routed = decode_routed(Provider::OpenaiChat, chunk.as_bytes()).unwrap();
    let routes: Vec<Route> = routed.iter().map(|(r, _)| *r).collect();
    assert_eq!(routes, [Route::Choice(0), Route::Choice(2)]);
    assert_eq!(
        routed[1].1,
        ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "stop".into()
        }
    );
    // the stream's end and a top-level error concern every choice
    let done = decode_routed(Provider::OpenaiChat, b"[DONE]").unwrap();
    assert_eq!(done, vec![(Route::All, ChunkEvent::StreamEnd)]);
    let error = br#"{"error":{"message":"upstream failed","code":502},"choices":[]}"#;
    let routed = decode_routed(Provider::OpenaiChat, error).unwrap();
    assert!(matches!(
        routed[..],
        [(Route::All, ChunkEvent::ProviderError { .. })]
    ));
    // other providers have one choice
    let anthropic = br#"{"type":"content_block_stop","index":0}"#;
    let routed = decode_routed(Provider::Anthropic, anthropic).unwrap();
    assert!(routed.iter().all(|(r, _)| *r == Route::Choice(0)));
    // `decode` is choice 0's view, as before
    let only = chunk_model::decode(Provider::OpenaiChat, chunk.as_bytes()).unwrap();
    assert_eq!(only.len(), 1);
}

#[test]
fn the_id_scheme() {
    assert_eq!(choice_message("m1", 0), "m1");
    assert_eq!(choice_message("m1", 3), "m1~choice3");
    assert!(chunk_model::wire::tokens::is_token(&choice_message(
        "msg_9:x", 127
    )));
    assert!(is_other_choice("m1~choice3"));
    for not_one in [
        "m1",
        "m1~choice0",
        "m1~choice",
        "~choice2",
        "m1~choice03",
        "m1~choicex",
    ] {
        assert!(!is_other_choice(not_one), "{not_one}");
    }
}

#[test]
fn history_follows_choice_0_and_says_so() {
    let first = snapshot(
        "m1",
        vec![call("call_a", "get_weather", 0, json!({"city": "Paris"}))],
        vec![result("call_a", "18C")],
    );
    let alternative = snapshot(
        "m1~choice1",
        vec![call("call_b", "get_time", 0, json!({}))],
        vec![result("call_b", "12:00")],
    );
    let h = render(
        &[first.clone(), alternative],
        HistoryFormat::OpenaiChat,
        &HistoryOptions::default(),
    )
    .unwrap();
    let alone = render(
        &[first],
        HistoryFormat::OpenaiChat,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert_eq!(h.messages, alone.messages);
    assert_eq!(h.notes.len(), 1, "{:?}", h.notes);
    assert!(
        h.notes[0].contains("1 alternative choice message"),
        "{:?}",
        h.notes
    );
}
