//! Numbers: read as values ([`Reader::number`], serde_json's `parse_integer` and what follows
//! it) or skipped ([`Reader::skip_integer`], its `ignore_integer`). The two refuse malformed
//! numbers with slightly different errors, as serde_json's do.
//!
//! A number read as a value is an unsigned or negative integer when it is one that fits, else
//! a float. The float's value (and a float out of range) comes from serde_json itself,
//! parsing just the number's bytes: the same digits through the same code give the same
//! `f64`, with or without `float_roundtrip`.

use super::{Code, Fault, Num, Reader};

impl<'a> Reader<'a> {
    /// A number read as a value: the reader is after its `-` (`positive` false) or at its
    /// first digit; `start` is where the number began (its `-`).
    pub(crate) fn number(&mut self, positive: bool, start: usize) -> Result<Num, Fault> {
        let first = match self.next_char() {
            Some(b) => b,
            None => return Err(self.err(Code::EofWhileParsingValue)),
        };
        // The significand while it fits a u64 (serde_json then switches to a long float).
        let mut significand: Option<u64> = match first {
            b'0' => {
                if self.peek_or_null().is_ascii_digit() {
                    return Err(self.peek_err(Code::InvalidNumber));
                }
                Some(0)
            }
            b'1'..=b'9' => {
                let mut n = u64::from(first - b'0');
                let mut fits = true;
                while let Some(d @ b'0'..=b'9') = self.peek() {
                    self.eat();
                    if fits {
                        match n
                            .checked_mul(10)
                            .and_then(|n| n.checked_add(u64::from(d - b'0')))
                        {
                            Some(m) => n = m,
                            None => fits = false,
                        }
                    }
                }
                fits.then_some(n)
            }
            _ => return Err(self.err(Code::InvalidNumber)),
        };
        let mut float = significand.is_none();
        if self.peek() == Some(b'.') {
            // serde_json's `parse_decimal`: at least one digit after the point.
            self.eat();
            let digits = self.index;
            while let Some(b'0'..=b'9') = self.peek() {
                self.eat();
            }
            if self.index == digits {
                return Err(match self.peek() {
                    Some(_) => self.peek_err(Code::InvalidNumber),
                    None => self.peek_err(Code::EofWhileParsingValue),
                });
            }
            float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            // serde_json's `parse_exponent`: an optional sign, then at least one digit.
            self.eat();
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.eat();
            }
            match self.next_char() {
                Some(b'0'..=b'9') => {}
                Some(_) => return Err(self.err(Code::InvalidNumber)),
                None => return Err(self.err(Code::EofWhileParsingValue)),
            }
            while let Some(b'0'..=b'9') = self.peek() {
                self.eat();
            }
            float = true;
        }
        if float {
            significand = None;
        }
        match (significand, positive) {
            (Some(n), true) => Ok(Num::U64(n)),
            (Some(n), false) => {
                // serde_json's `parse_number`: `-0` and what does not fit an i64 are floats.
                let neg = (n as i64).wrapping_neg();
                if neg >= 0 {
                    Ok(Num::F64(-(n as f64)))
                } else {
                    Ok(Num::I64(neg))
                }
            }
            (None, _) => self.float(start),
        }
    }

    /// The float the bytes from `start` to the reader are, parsed by serde_json (range
    /// included: out of range is its error, at its position).
    #[cold]
    fn float(&self, start: usize) -> Result<Num, Fault> {
        let text = self.bytes.get(start..self.index).unwrap_or_default();
        match serde_json::from_slice::<f64>(text) {
            Ok(f) => Ok(Num::F64(f)),
            // A number is one line: serde_json's column is the index in `text`.
            Err(e) => Err(Fault::Syntax {
                code: Code::NumberOutOfRange,
                at: start + e.column(),
            }),
        }
    }

    /// A number skipped (serde_json's `ignore_integer` and what follows it): the reader is
    /// after its `-` or at its first digit.
    pub(crate) fn skip_integer(&mut self) -> Result<(), Fault> {
        match self.next_char().unwrap_or(0) {
            b'0' => {
                if self.peek_or_null().is_ascii_digit() {
                    return Err(self.peek_err(Code::InvalidNumber));
                }
            }
            b'1'..=b'9' => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.eat();
                }
            }
            _ => return Err(self.err(Code::InvalidNumber)),
        }
        match self.peek_or_null() {
            b'.' => {
                // `ignore_decimal`
                self.eat();
                let digits = self.index;
                while let Some(b'0'..=b'9') = self.peek() {
                    self.eat();
                }
                if self.index == digits {
                    return Err(self.peek_err(Code::InvalidNumber));
                }
                if matches!(self.peek(), Some(b'e' | b'E')) {
                    self.skip_exponent()?;
                }
                Ok(())
            }
            b'e' | b'E' => self.skip_exponent(),
            _ => Ok(()),
        }
    }

    /// serde_json's `ignore_exponent`, at the `e`.
    fn skip_exponent(&mut self) -> Result<(), Fault> {
        self.eat();
        if matches!(self.peek(), Some(b'+' | b'-')) {
            self.eat();
        }
        match self.next_char().unwrap_or(0) {
            b'0'..=b'9' => {}
            _ => return Err(self.err(Code::InvalidNumber)),
        }
        while let Some(b'0'..=b'9') = self.peek() {
            self.eat();
        }
        Ok(())
    }
}
