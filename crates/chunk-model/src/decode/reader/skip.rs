//! Skipping a value the decoder does not read (serde's `IgnoredAny`, serde_json's
//! `ignore_value`): it only has to be well-formed, strings and numbers are not checked
//! further. Iterative like serde_json's: the arrays and objects open inside the value are a
//! stack of bits (at most [`MAX_JSON_DEPTH`](crate::depth::MAX_JSON_DEPTH) deep, so 128 bits
//! hold it), not a recursion.

use super::{Code, Fault, Reader};

/// The containers open inside a skipped value, innermost in the lowest bit: 1 for an object.
struct Frames {
    bits: u128,
    len: u32,
}

impl Frames {
    fn push(&mut self, frame: u8) {
        self.bits = (self.bits << 1) | u128::from(frame == b'{');
        self.len += 1;
    }

    fn pop(&mut self) -> Option<u8> {
        if self.len == 0 {
            return None;
        }
        let frame = if self.bits & 1 == 1 { b'{' } else { b'[' };
        self.bits >>= 1;
        self.len -= 1;
        Some(frame)
    }
}

impl<'a> Reader<'a> {
    /// Skips the value at the reader (serde_json's `ignore_value`, step for step, so a
    /// malformed value fails with its error at its position).
    pub(crate) fn skip_value(&mut self) -> Result<(), Fault> {
        // A string or number on its own (most skipped values) needs none of the frames.
        match self.ws() {
            Some(b'"') => {
                self.eat();
                return self.skip_str();
            }
            Some(b'0'..=b'9') => return self.skip_integer(),
            _ => {}
        }
        let mut stack = Frames { bits: 0, len: 0 };
        let mut enclosing: Option<u8> = None;
        loop {
            let peek = match self.ws() {
                Some(b) => b,
                None => return Err(self.peek_err(Code::EofWhileParsingValue)),
            };
            let frame = match peek {
                b'"' => {
                    self.eat();
                    self.skip_str()?;
                    None
                }
                b'0'..=b'9' => {
                    self.skip_integer()?;
                    None
                }
                b'-' => {
                    self.eat();
                    self.skip_integer()?;
                    None
                }
                b'n' => {
                    self.eat();
                    self.ident(b"ull")?;
                    None
                }
                b't' => {
                    self.eat();
                    self.ident(b"rue")?;
                    None
                }
                b'f' => {
                    self.eat();
                    self.ident(b"alse")?;
                    None
                }
                b'[' | b'{' => {
                    if let Some(outer) = enclosing.take() {
                        stack.push(outer);
                    }
                    self.enter()?;
                    Some(peek)
                }
                _ => return Err(self.peek_err(Code::ExpectedSomeValue)),
            };

            let (mut accept_comma, mut frame) = match frame {
                Some(frame) => (false, frame),
                None => match enclosing.take() {
                    Some(frame) => (true, frame),
                    None => match stack.pop() {
                        Some(frame) => (true, frame),
                        None => return Ok(()),
                    },
                },
            };

            loop {
                match self.ws() {
                    Some(b',') if accept_comma => {
                        self.eat();
                        break;
                    }
                    Some(b']') if frame == b'[' => {}
                    Some(b'}') if frame == b'{' => {}
                    Some(_) => {
                        if accept_comma {
                            return Err(self.peek_err(if frame == b'[' {
                                Code::ExpectedListCommaOrEnd
                            } else {
                                Code::ExpectedObjectCommaOrEnd
                            }));
                        }
                        break;
                    }
                    None => {
                        return Err(self.peek_err(if frame == b'[' {
                            Code::EofWhileParsingList
                        } else {
                            Code::EofWhileParsingObject
                        }));
                    }
                }
                // the container's end
                self.eat();
                self.leave();
                frame = match stack.pop() {
                    Some(frame) => frame,
                    None => return Ok(()),
                };
                accept_comma = true;
            }

            if frame == b'{' {
                match self.ws() {
                    Some(b'"') => self.eat(),
                    Some(_) => return Err(self.peek_err(Code::KeyMustBeAString)),
                    None => return Err(self.peek_err(Code::EofWhileParsingObject)),
                }
                self.skip_str()?;
                self.colon()?;
            }

            enclosing = Some(frame);
        }
    }
}
