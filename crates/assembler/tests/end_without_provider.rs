//! Issue 8 (bad-input corpus, case `c-end-without-any-provider`): an explicit end on a stream
//! that never named a provider used to be applied silently. It completed an empty message that
//! no event could show (no provider, so no `message.completed`), and every call statement of
//! the real stream that followed was dead-lettered `after_message_end`. The README's table says
//! such an input is a `no_provider` dead letter, and a stream with no provider is all dead
//! letters.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Control, Seq, Store};
use common::*;

#[test]
fn an_end_on_a_stream_without_any_provider_is_a_no_provider_dead_letter() {
    let s = Store::open_temporary(assembler::Config::default()).unwrap();
    let mut end = chunk("c", "m", 0, b"");
    end.provider = None;
    end.control = Some(Control::End);
    let v = s.apply(&end, 0).unwrap();
    assert!(
        matches!(&v, Applied::DeadLettered { reason } if reason.starts_with("no_provider")),
        "{v:?}"
    );
    // its redelivery is a duplicate, not a second dead letter
    assert_eq!(s.apply(&end, 0).unwrap(), Applied::Duplicate);
    // the stream is closed like any stream that lost a chunk: what follows is stream_closed
    let b = two_call_stream();
    let v = s.apply(&chunk("c", "m", 1, &b[0]), 0).unwrap();
    assert!(
        matches!(&v, Applied::DeadLettered { reason } if reason.starts_with("stream_closed")),
        "{v:?}"
    );
    s.flush().unwrap();
    assert!(events(&s).is_empty(), "no provider, no events");
    let reasons = dead_reasons(&s);
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].starts_with("no_provider"), "{reasons:?}");
}

#[test]
fn an_end_without_a_header_still_inherits_its_streams_provider() {
    let s = Store::open_temporary(assembler::Config::default()).unwrap();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    // numbered and unnumbered ends without Toolstream-Provider end the stream as before
    let mut end = chunk("c", "m", 1, b"");
    end.provider = None;
    end.control = Some(Control::End);
    assert!(matches!(
        s.apply(&end, 0).unwrap(),
        Applied::Accepted { .. }
    ));
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].reason.as_deref(), Some("stream_ended"));
    let s = Store::open_temporary(assembler::Config::default()).unwrap();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let mut end = chunk("c", "m", 0, b"");
    end.provider = None;
    end.seq = Seq::Transport(9);
    end.control = Some(Control::Error("reset".into()));
    assert!(matches!(
        s.apply(&end, 0).unwrap(),
        Applied::Accepted { .. }
    ));
    s.flush().unwrap();
    assert!(dead_reasons(&s).is_empty());
}
