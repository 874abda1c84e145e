//! The policy, as a format-independent plan: which calls are sent as tool calls, which results
//! answer them (real, truncated, or placeholder), and what becomes plain text.
//!
//! Rules, per stored message (a "turn"), in order:
//! 1. A call is *sendable* when it is `completed` and has a name. Its results follow it in call
//!    order; the first stored result with its id answers it (truncated), and a call with none
//!    gets the placeholder result — so every sent call is answered and the provider accepts it.
//! 2. Any other call (`invalid`, `abandoned`, still `streaming`, or nameless) is never sent as
//!    a tool call: the provider would reject its unparseable arguments, and its result would
//!    then have no call (the 400). It becomes an assistant note `[Tool call not sent: …]` with
//!    its status, reason and (truncated) raw arguments, ahead of the sendable calls.
//! 3. Every result that answers no sendable call — a result of a cut call, a second result for
//!    the same call, an unknown id, or a stored `orphaned_results` entry — becomes a user
//!    message `[Tool Result - Previous Context]` + its (truncated) content. It is never dropped
//!    and never sent as a tool message.
//! 4. Strict text mode renders the sendable calls and their results as text too.
//! 6. A turn's reasoning blocks (Anthropic `thinking` / `redacted_thinking`, Bedrock
//!    `reasoningContent`) go back in place: each before the first sent call at or after the
//!    position it had ([`Block::Calls::reasoning`]); a turn with no sent call, or strict text,
//!    sends none (no `tool_use` needs them), counted in [`Plan::unsent_reasoning`].
//! 5. A turn's Gemini thought signature stays on its turn: Gemini signs the first call of a
//!    step only (of parallel calls, the others carry none), and Gemini 3 rejects a turn whose
//!    first function call lacks one. When the signed call is not sent (rule 2) and no sent
//!    call of the turn carries a signature of its own, the first sent call carries the cut
//!    call's ([`Block::Calls::signature_from`]); the history answer says so in its notes.

use super::options::HistoryOptions;
use super::truncate::{truncate, Truncation};
use crate::call::{CallStatus, ToolCall, ToolResult};
use crate::encode::{thought_signature, Role};
use crate::snapshot::{MessageSnapshot, ReasoningBlock};

/// The header of an orphaned result rendered as text.
pub const ORPHAN_HEADER: &str = "[Tool Result - Previous Context]";

/// One unit of the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Block<'a> {
    /// An assistant turn with sendable calls (and an optional note about cut calls).
    Calls {
        /// Position of the stored message.
        turn: usize,
        /// Note about the turn's cut calls.
        note: Option<String>,
        /// The sendable calls, in index order.
        calls: Vec<&'a ToolCall>,
        /// A call of the turn that is not sent whose thought signature the first sent call
        /// carries (rule 5).
        signature_from: Option<&'a ToolCall>,
        /// The turn's reasoning blocks, each with the position among `calls` it goes before
        /// (`calls.len()`: after the last), in order (rule 6).
        reasoning: Vec<(usize, ReasoningBlock)>,
    },
    /// The answers to the preceding `Calls`, one per call, in call order.
    Results {
        /// Position of the stored message.
        turn: usize,
        /// One answer per call.
        results: Vec<Answer<'a>>,
    },
    /// A plain text message.
    Text {
        /// Position of the stored message.
        turn: usize,
        /// Who speaks it.
        role: Role,
        /// The text.
        text: String,
    },
}

impl Block<'_> {
    /// The stored message this block comes from.
    pub fn turn(&self) -> usize {
        match self {
            Block::Calls { turn, .. } | Block::Results { turn, .. } | Block::Text { turn, .. } => {
                *turn
            }
        }
    }
}

/// The result sent for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<'a> {
    /// The call answered.
    pub call: &'a ToolCall,
    /// The (truncated) output, or the placeholder.
    pub output: String,
    /// Whether the tool reported failure.
    pub is_error: bool,
}

/// The plan and what it had to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan<'a> {
    /// The blocks, in history order.
    pub blocks: Vec<Block<'a>>,
    /// Results (answers and orphans) that were cut to the limit.
    pub truncated_results: usize,
    /// Calls answered with the placeholder.
    pub placeholders: usize,
    /// Results rendered as `[Tool Result - Previous Context]` text.
    pub orphans: usize,
    /// Reasoning blocks of turns that send no tool call (rule 6), by turn.
    pub unsent_reasoning: Vec<(usize, usize)>,
}

impl<'a> Plan<'a> {
    /// Applies the policy to `snapshots` (in conversation order).
    pub fn build(snapshots: &'a [MessageSnapshot], options: &HistoryOptions) -> Plan<'a> {
        let mut plan = Plan::default();
        for (turn, snap) in snapshots.iter().enumerate() {
            plan.add_turn(turn, snap, options);
        }
        plan
    }

    fn cut(&mut self, text: &str, limit: usize) -> String {
        let (out, t) = truncate(text, limit);
        if t == Truncation::Cut {
            self.truncated_results += 1;
        }
        out.into_owned()
    }

    fn add_turn(&mut self, turn: usize, snap: &'a MessageSnapshot, options: &HistoryOptions) {
        let limit = options.result_limit();
        let (sendable, cut): (Vec<&ToolCall>, Vec<_>) = {
            let mut s = Vec::new();
            let mut c = Vec::new();
            for outcome in &snap.calls {
                let call = &outcome.tool_call;
                if outcome.status == CallStatus::Completed && !call.name.trim().is_empty() {
                    s.push(call);
                } else {
                    c.push(outcome);
                }
            }
            (s, c)
        };
        let note = (!cut.is_empty()).then(|| {
            cut.iter()
                .map(|o| {
                    let name = if o.tool_call.name.trim().is_empty() {
                        "<unnamed>"
                    } else {
                        o.tool_call.name.as_str()
                    };
                    let status = serde_json::to_value(o.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    let reason = o
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default();
                    let (raw, _) = truncate(&o.tool_call.raw_arguments, limit);
                    format!(
                        "[Tool call not sent: {name} (id {}) was {status}{reason}; raw arguments: {raw}]",
                        o.tool_call.id
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        });

        let mut used = vec![false; snap.tool_results.len()];
        let mut answers = Vec::with_capacity(sendable.len());
        for call in &sendable {
            let found =
                snap.tool_results.iter().enumerate().find(|(k, r)| {
                    !used.get(*k).copied().unwrap_or(true) && r.tool_call_id == call.id
                });
            match found {
                Some((k, r)) => {
                    if let Some(slot) = used.get_mut(k) {
                        *slot = true;
                    }
                    let output = self.cut(&r.output, limit);
                    answers.push(Answer {
                        call,
                        output,
                        is_error: r.is_error,
                    });
                }
                None => {
                    self.placeholders += 1;
                    answers.push(Answer {
                        call,
                        output: options.placeholder.clone(),
                        is_error: false,
                    });
                }
            }
        }

        let reasoning = snap.reasoning();
        if (sendable.is_empty() || options.strict_text) && !reasoning.is_empty() {
            self.unsent_reasoning.push((turn, reasoning.len()));
        }
        if sendable.is_empty() {
            if let Some(text) = note {
                self.blocks.push(Block::Text {
                    turn,
                    role: Role::Assistant,
                    text,
                });
            }
        } else if options.strict_text {
            self.push_strict(turn, note, &answers);
        } else {
            let unsigned = sendable
                .iter()
                .all(|c| thought_signature(&c.provider_metadata).is_none());
            let signature_from = cut
                .iter()
                .map(|o| &o.tool_call)
                .find(|c| unsigned && thought_signature(&c.provider_metadata).is_some());
            let reasoning = reasoning
                .into_iter()
                .map(|b| {
                    let at = sendable
                        .iter()
                        .position(|c| c.index >= b.before_call)
                        .unwrap_or(sendable.len());
                    (at, b)
                })
                .collect();
            self.blocks.push(Block::Calls {
                turn,
                note,
                calls: sendable,
                signature_from,
                reasoning,
            });
            self.blocks.push(Block::Results {
                turn,
                results: answers,
            });
        }

        let unmatched = snap
            .tool_results
            .iter()
            .zip(used)
            .filter(|(_, u)| !u)
            .map(|(r, _)| r);
        let orphans: Vec<&ToolResult> = unmatched.chain(&snap.orphaned_results).collect();
        for r in orphans {
            self.orphans += 1;
            let body = self.cut(&r.output, limit);
            let error = if r.is_error { " (error)" } else { "" };
            self.blocks.push(Block::Text {
                turn,
                role: Role::User,
                text: format!("{ORPHAN_HEADER}{error}\n{body}"),
            });
        }
    }

    /// Strict text mode: the calls as one assistant text, their answers as one user text.
    fn push_strict(&mut self, turn: usize, note: Option<String>, answers: &[Answer<'a>]) {
        let mut call_lines: Vec<String> = note.into_iter().collect();
        let mut result_lines = Vec::with_capacity(answers.len());
        for a in answers {
            call_lines.push(format!(
                "[Tool call] {}(id {}): {}",
                a.call.name, a.call.id, a.call.arguments
            ));
            let kind = if a.is_error {
                "[Tool error]"
            } else {
                "[Tool result]"
            };
            result_lines.push(format!(
                "{kind} {}(id {}):\n{}",
                a.call.name, a.call.id, a.output
            ));
        }
        self.blocks.push(Block::Text {
            turn,
            role: Role::Assistant,
            text: call_lines.join("\n"),
        });
        self.blocks.push(Block::Text {
            turn,
            role: Role::User,
            text: result_lines.join("\n"),
        });
    }
}
