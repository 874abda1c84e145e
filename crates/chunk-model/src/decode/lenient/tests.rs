//! Tests of the lenient readers.

use super::*;
use crate::chunk::Finish;

fn loose(json: &str) -> Loose<'_> {
    serde_json::from_str(json).unwrap()
}

#[test]
fn loose_reads_every_json_value_and_borrows_plain_strings() {
    assert!(matches!(
        loose(r#""abc""#),
        Loose::Str(Cow::Borrowed("abc"))
    ));
    assert!(matches!(loose(r#""a\"b""#), Loose::Str(Cow::Owned(_))));
    assert_eq!(loose("7"), Loose::Unsigned(7));
    assert_eq!(loose("-7"), Loose::Signed(-7));
    assert_eq!(loose("1.5"), Loose::Float(1.5));
    assert_eq!(loose("true"), Loose::Bool(true));
    assert_eq!(loose("null"), Loose::Null);
    assert_eq!(loose(r#"[1,[2,{"a":[]}]]"#), Loose::Array);
    assert_eq!(loose(r#"{"a":{"b":[1,{"c":null}]}}"#), Loose::Object);
}

#[test]
fn index_accepts_numbers_and_numeric_strings_only() {
    assert_eq!(loose("3").index(), Ok(Some(3)));
    assert_eq!(loose("3.0").index(), Ok(Some(3)));
    assert_eq!(loose(r#"" 12 ""#).index(), Ok(Some(12)));
    assert_eq!(loose(r#""""#).index(), Ok(None));
    assert_eq!(loose("null").index(), Ok(None));
    for bad in [
        "-1",
        "1.5",
        "4294967296",
        r#""x""#,
        r#""-1""#,
        "true",
        "[]",
        "{}",
    ] {
        assert!(loose(bad).index().is_err(), "{bad}");
    }
    assert_eq!(
        loose(r#""one""#).index(),
        Err(r#"invalid value: string "one", expected a non-negative integer (or one written as a string)"#.to_string())
    );
}

#[test]
fn flag_accepts_booleans_their_strings_and_zero_or_one() {
    assert_eq!(loose("true").flag(), Ok(Some(true)));
    assert_eq!(loose(r#""False""#).flag(), Ok(Some(false)));
    assert_eq!(loose("1").flag(), Ok(Some(true)));
    assert_eq!(loose("0").flag(), Ok(Some(false)));
    assert_eq!(loose(r#"" ""#).flag(), Ok(None));
    for bad in [r#""yes""#, "2", "-1", "0.5", "[]", "{}"] {
        assert!(loose(bad).flag().is_err(), "{bad}");
    }
}

#[test]
fn number_accepts_finite_numbers_and_numeric_strings() {
    assert_eq!(
        loose("2.5").number(),
        Ok(Some(serde_json::Number::from_f64(2.5).unwrap()))
    );
    assert_eq!(loose(r#""-3""#).number(), Ok(Some((-3).into())));
    assert_eq!(
        loose(r#""1e3""#).number().unwrap().unwrap().as_f64(),
        Some(1000.0)
    );
    for bad in [r#""NaN""#, r#""Infinity""#, r#""x""#, "true", "{}"] {
        assert!(loose(bad).number().is_err(), "{bad}");
    }
}

fn finish(json: &str) -> Option<(Finish, String)> {
    serde_json::from_str::<FinishReason<'_>>(json)
        .unwrap()
        .read(|_| Finish::Complete)
}

#[test]
fn finish_reason_reads_strings_with_the_decoders_vocabulary() {
    assert_eq!(
        finish(r#""length""#),
        Some((Finish::Complete, "length".into()))
    );
    assert_eq!(finish(r#""  ""#), None);
}

#[test]
fn finish_reason_reads_the_v6_object_unified_first_then_raw() {
    assert_eq!(
        finish(r#"{"unified":"tool-calls","raw":"tool_calls"}"#),
        Some((Finish::Complete, "tool-calls".into()))
    );
    assert_eq!(
        finish(r#"{"raw":"max_tokens","unified":"length","extra":{"x":[1]}}"#),
        Some((Finish::Truncated, "length".into()))
    );
    assert_eq!(
        finish(r#"{"unified":"","raw":"SAFETY"}"#),
        Some((Finish::Filtered, "SAFETY".into()))
    );
    assert_eq!(finish(r#"{"unified":5,"raw":null}"#), None);
}

#[test]
fn finish_reason_of_any_other_shape_is_no_reason() {
    for other in ["1", "-1", "1.5", "true", "null", r#"["stop"]"#, "{}"] {
        assert_eq!(finish(other), None, "{other}");
    }
}

#[derive(Deserialize, Default, Debug, PartialEq)]
struct Inner {
    #[serde(default)]
    a: Option<u32>,
}

#[derive(Deserialize, Debug)]
struct Outer {
    #[serde(default, deserialize_with = "opt_object")]
    inner: Option<Inner>,
}

#[test]
fn opt_object_reads_objects_and_defaults_anything_else() {
    let read = |json: &str| serde_json::from_str::<Outer>(json).unwrap().inner;
    assert_eq!(
        read(r#"{"inner":{"a":1,"b":[2]}}"#),
        Some(Inner { a: Some(1) })
    );
    assert_eq!(read(r#"{"inner":null}"#), None);
    assert_eq!(read(r#"{}"#), None);
    for other in [r#""x""#, "1", "-1", "2.5", "true", r#"[1,{"a":2}]"#] {
        let json = format!(r#"{{"inner":{other}}}"#);
        assert_eq!(read(&json), Some(Inner::default()), "{json}");
    }
}
