//! The wire contract in one place: every name and format toolstream shares with producers,
//! UIs and its own crates (the README's "Contracts" section is the prose of it).
//!
//! ## Layout
//! - [`headers`] — every `Toolstream-*` header name, `Nats-Msg-Id`, and the
//!   `Toolstream-Control` values.
//! - [`tokens`] — the one subject-token rule ([`tokens::check_token`]) and the prefix rule.
//! - [`subjects`] — [`Subjects`]: every subject built from the prefix, and the parsers of
//!   input and query subjects.
//! - [`msg_id`] — every `Nats-Msg-Id` format: inputs (`toolstream publish`, with a parser
//!   that maps an id back), store dead letters, worker dead letters, oversized replacements.
//!   Events use their `event_id` ([`crate::event_id`]).
//! - [`reason`] — [`Reason`] (an event's or call's `reason`), [`DeadLetterCode`] (the code
//!   of a `Toolstream-Reason`), and the finish reasons toolstream itself writes.
//! - [`aliases`] — the one provider alias table behind [`crate::Provider::parse`] and
//!   [`crate::encode::HistoryFormat`]'s parser.

pub mod aliases;
pub mod headers;
pub mod msg_id;
pub mod reason;
pub mod subjects;
pub mod tokens;

pub use reason::{DeadLetterCode, Reason, UnknownReason};
pub use subjects::{InputKind, InputSubject, Subjects, Unroutable};
pub use tokens::{check_prefix, check_token, is_token, TokenError};
