//! Splits a recorded provider stream into chunk bodies: SSE, NDJSON or a raw JSON array,
//! detected from the first bytes. Pure: bytes in, [`Frame`]s out.
//!
//! - **SSE** (WHATWG "server-sent events" parsing): lines end in CRLF, LF or CR; a line
//!   starting with `:` is a comment (`: OPENROUTER PROCESSING`); `field: value` with at most
//!   one space removed after the colon; `data:` lines of one event join with `\n`; `event:`
//!   names the event; `id:`, `retry:` and unknown fields are ignored; a blank line ends the
//!   event, which becomes a frame only if it had a `data:` line. Unlike a live client, an
//!   event still open at the end of the recording is kept (recordings of broken streams end
//!   mid-event). `[DONE]` is passed through as a frame like any data.
//! - **NDJSON**: one JSON value per non-blank line (Ollama, Bedrock recordings); CRLF ends are
//!   tolerated.
//! - **JSON array**: Gemini's non-SSE `streamGenerateContent` answers one array of responses;
//!   each top-level element becomes a frame, byte for byte.
//!
//! Every frame's `data` has surrounding ASCII whitespace removed (trailing spaces after the
//! JSON are common in recordings) and `line` is the 1-based line where it starts.

/// A stream framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events (`data:` lines).
    Sse,
    /// Newline-delimited JSON, one chunk per line.
    Ndjson,
    /// One JSON array whose elements are the chunks.
    JsonArray,
}

/// One chunk body of a recorded stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The SSE `event:` name, when the event had one (always `None` for NDJSON/arrays).
    pub event: Option<String>,
    /// The chunk body: SSE data lines joined with `\n`, one NDJSON line, or one array element.
    pub data: Vec<u8>,
    /// 1-based line number where the frame starts (its first `data:` line for SSE).
    pub line: usize,
}

/// Why a recording could not be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The first bytes look like none of the framings.
    #[error("line {line}: not SSE, NDJSON or a JSON array: {excerpt:?}")]
    Undetected {
        /// Line of the first non-blank content.
        line: usize,
        /// The start of that line.
        excerpt: String,
    },
    /// A JSON array recording that is cut off or has something other than `,` between
    /// elements.
    #[error("line {line}: malformed JSON array stream: {problem}")]
    BadArray {
        /// Line where the problem was found.
        line: usize,
        /// What is wrong.
        problem: String,
    },
}

/// Guesses the framing from the first non-blank content: `[` → JSON array, `{` → NDJSON,
/// an SSE field or comment (`data:`, `event:`, `id:`, `retry:`, `:`) → SSE, an AI SDK v4 data
/// stream part (`9:{…}`, `f:{…}`) → one chunk per line like NDJSON. `None` for blank input or
/// anything else.
#[must_use]
pub fn detect(input: &[u8]) -> Option<Framing> {
    let body = strip_bom(input).trim_ascii_start();
    match body.first()? {
        b'[' => Some(Framing::JsonArray),
        b'{' => Some(Framing::Ndjson),
        b':' => Some(Framing::Sse),
        _ => {
            let fields: [&[u8]; 4] = [b"data", b"event", b"id", b"retry"];
            let sse = fields.iter().any(|f| {
                body.starts_with(f)
                    && matches!(body.get(f.len()), Some(b':' | b'\r' | b'\n') | None)
            });
            if sse {
                Some(Framing::Sse)
            } else if crate::decode::ai_sdk::data_stream_code(body).is_some() {
                // the AI SDK v4 data stream protocol: one `<code>:<json>` part per line
                Some(Framing::Ndjson)
            } else {
                None
            }
        }
    }
}

/// Splits `input` with the detected framing. Blank input gives no frames.
pub fn split(input: &[u8]) -> Result<Vec<Frame>, FramingError> {
    match detect(input) {
        Some(framing) => split_as(framing, input),
        None if input.trim_ascii().is_empty() || strip_bom(input).trim_ascii().is_empty() => {
            Ok(Vec::new())
        }
        None => {
            let body = strip_bom(input);
            let start = body.len() - body.trim_ascii_start().len();
            let line = line_at(body, start);
            let rest = body.get(start..).unwrap_or_default();
            let end = rest
                .iter()
                .position(|b| *b == b'\n' || *b == b'\r')
                .unwrap_or(rest.len());
            Err(FramingError::Undetected {
                line,
                excerpt: crate::error::excerpt(rest.get(..end).unwrap_or_default()),
            })
        }
    }
}

/// Splits `input` with the given framing.
pub fn split_as(framing: Framing, input: &[u8]) -> Result<Vec<Frame>, FramingError> {
    let body = strip_bom(input);
    match framing {
        Framing::Sse => Ok(split_sse(body)),
        Framing::Ndjson => Ok(split_ndjson(body)),
        Framing::JsonArray => split_array(body),
    }
}

fn strip_bom(input: &[u8]) -> &[u8] {
    input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input)
}

/// Lines of `input` with their 1-based numbers; a line ends at CRLF, LF or CR.
fn lines(input: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut rest = input;
    let mut number = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        number += 1;
        let end = rest
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
            .unwrap_or(rest.len());
        let line = rest.get(..end).unwrap_or_default();
        let skip = match (rest.get(end), rest.get(end + 1)) {
            (Some(b'\r'), Some(b'\n')) => 2,
            (Some(_), _) => 1,
            (None, _) => 0,
        };
        rest = rest.get(end + skip..).unwrap_or_default();
        Some((number, line))
    })
}

/// An SSE event being read.
#[derive(Default)]
struct Pending {
    event: Option<String>,
    data: Vec<u8>,
    has_data: bool,
    line: usize,
}

impl Pending {
    /// The frame of a finished event (only if it had data), resetting for the next.
    fn dispatch(&mut self) -> Option<Frame> {
        let done = std::mem::take(self);
        done.has_data.then(|| Frame {
            event: done.event,
            data: done.data.trim_ascii().to_vec(),
            line: done.line,
        })
    }
}

fn split_sse(input: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut pending = Pending::default();
    for (number, line) in lines(input) {
        if line.is_empty() {
            frames.extend(pending.dispatch());
            continue;
        }
        if line.first() == Some(&b':') {
            continue;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = line.get(colon + 1..).unwrap_or_default();
                (
                    line.get(..colon).unwrap_or_default(),
                    value.strip_prefix(b" ").unwrap_or(value),
                )
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if pending.has_data {
                    pending.data.push(b'\n');
                } else {
                    pending.has_data = true;
                    pending.line = number;
                }
                pending.data.extend_from_slice(value);
            }
            b"event" => {
                let name = String::from_utf8_lossy(value).trim().to_string();
                pending.event = (!name.is_empty()).then_some(name);
            }
            _ => {}
        }
    }
    frames.extend(pending.dispatch());
    frames
}

fn split_ndjson(input: &[u8]) -> Vec<Frame> {
    // Only LF separates records: a CR belongs to a CRLF end and is trimmed with the line.
    let mut frames = Vec::new();
    for (i, line) in input.split(|b| *b == b'\n').enumerate() {
        let data = line.trim_ascii();
        if !data.is_empty() {
            frames.push(Frame {
                event: None,
                data: data.to_vec(),
                line: i + 1,
            });
        }
    }
    frames
}

/// Splits a top-level JSON array into its elements by scanning brackets and strings, so each
/// frame is the element's exact bytes.
fn split_array(input: &[u8]) -> Result<Vec<Frame>, FramingError> {
    let mut frames = Vec::new();
    let start = input.len() - input.trim_ascii_start().len();
    let mut pos = start + 1; // past '['
    let mut expecting_element = true;
    loop {
        pos = skip_whitespace(input, pos);
        match input.get(pos) {
            None => {
                return Err(FramingError::BadArray {
                    line: line_at(input, pos),
                    problem: "the array is not closed".to_string(),
                })
            }
            Some(b']') => {
                let after = skip_whitespace(input, pos + 1);
                if after < input.len() {
                    return Err(FramingError::BadArray {
                        line: line_at(input, after),
                        problem: "content after the closing `]`".to_string(),
                    });
                }
                return Ok(frames);
            }
            Some(b',') if !expecting_element => {
                expecting_element = true;
                pos += 1;
            }
            Some(_) if expecting_element => {
                let end = element_end(input, pos)?;
                frames.push(Frame {
                    event: None,
                    data: input
                        .get(pos..end)
                        .unwrap_or_default()
                        .trim_ascii()
                        .to_vec(),
                    line: line_at(input, pos),
                });
                expecting_element = false;
                pos = end;
            }
            Some(other) => {
                return Err(FramingError::BadArray {
                    line: line_at(input, pos),
                    problem: format!("expected `,` or `]`, found {:?}", char::from(*other)),
                })
            }
        }
    }
}

fn skip_whitespace(input: &[u8], mut pos: usize) -> usize {
    while input.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

/// End (exclusive) of the element starting at `pos`: a container ends at its matching
/// bracket and a string at its closing quote (both outside strings), any other value at the
/// next whitespace, `,` or `]`.
fn element_end(input: &[u8], pos: usize) -> Result<usize, FramingError> {
    let cut = || FramingError::BadArray {
        line: line_at(input, pos),
        problem: "an element is cut off".to_string(),
    };
    let first = input.get(pos).copied().ok_or_else(cut)?;
    if !matches!(first, b'{' | b'[' | b'"') {
        let len = input
            .get(pos..)
            .unwrap_or_default()
            .iter()
            .position(|b| b.is_ascii_whitespace() || *b == b',' || *b == b']')
            .ok_or_else(cut)?;
        return Ok(pos + len);
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut i = pos;
    while let Some(&b) = input.get(i) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        i += 1;
        if depth == 0 && !in_string {
            return Ok(i);
        }
    }
    Err(cut())
}

/// 1-based line number of byte `pos` (CRLF, LF and CR each end a line).
fn line_at(input: &[u8], pos: usize) -> usize {
    let before = input.get(..pos).unwrap_or(input);
    let mut line = 1;
    let mut previous = 0u8;
    for &b in before {
        if b == b'\n' && previous != b'\r' || b == b'\r' {
            line += 1;
        }
        previous = b;
    }
    line
}
