//! Strings, after their opening quote: read as text ([`Reader::str_strict`], serde_json's
//! `parse_str`: escapes decoded, surrogate pairs and UTF-8 checked, borrowed from the chunk
//! when there is no escape) or skipped ([`Reader::skip_str`], its `ignore_str`: escapes only
//! have to be well-formed).

use super::{Code, Fault, Reader};
use std::borrow::Cow;

/// Whether `b` ends the run of plain bytes in a string: a quote, a backslash or a control
/// character (serde_json's `is_escape` with control characters forbidden).
#[inline]
fn is_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

impl<'a> Reader<'a> {
    /// serde_json's `skip_to_escape`: moves to the first quote, backslash or control
    /// character (or the end), eight bytes at a time.
    #[inline(always)]
    fn skip_to_escape(&mut self) {
        const ONES: u64 = u64::MAX / 255;
        let bytes = self.bytes;
        let mut i = self.index;
        while let Some(Ok(word)) = bytes.get(i..i + 8).map(<[u8; 8]>::try_from) {
            let chars = u64::from_le_bytes(word);
            let ctrl = chars.wrapping_sub(ONES * 0x20) & !chars;
            let quote = chars ^ (ONES * u64::from(b'"'));
            let quote = quote.wrapping_sub(ONES) & !quote;
            let backslash = chars ^ (ONES * u64::from(b'\\'));
            let backslash = backslash.wrapping_sub(ONES) & !backslash;
            let found = (ctrl | quote | backslash) & (ONES << 7);
            if found != 0 {
                self.index = i + found.trailing_zeros() as usize / 8;
                return;
            }
            i += 8;
        }
        while let Some(&b) = bytes.get(i) {
            if is_escape(b) {
                break;
            }
            i += 1;
        }
        self.index = i;
    }

    /// A string read as text (serde_json's `parse_str`), after its opening quote: borrowed
    /// from the chunk when it has no escape.
    #[inline]
    pub(crate) fn str_strict(&mut self) -> Result<Cow<'a, str>, Fault> {
        let start = self.index;
        self.skip_to_escape();
        match self.peek() {
            Some(b'"') => {
                let end = self.index;
                self.eat();
                // (a quote is ASCII: in UTF-8 text, both ends are character boundaries)
                if let Some(s) = self.text.and_then(|t| t.get(start..end)) {
                    return Ok(Cow::Borrowed(s));
                }
                let raw = self.bytes.get(start..end).unwrap_or_default();
                match std::str::from_utf8(raw) {
                    Ok(s) => Ok(Cow::Borrowed(s)),
                    Err(_) => Err(self.err(Code::InvalidUnicodeCodePoint)),
                }
            }
            Some(b'\\') => self.str_escaped(start),
            Some(_) => {
                self.eat();
                Err(self.err(Code::ControlCharacterWhileParsingString))
            }
            None => Err(self.err(Code::EofWhileParsingString)),
        }
    }

    /// [`Reader::str_strict`] as bytes: the same checks, without making a `str` when there is
    /// no need (keys are matched as bytes).
    #[inline(always)]
    pub(crate) fn bytes_strict(&mut self) -> Result<Cow<'a, [u8]>, Fault> {
        let start = self.index;
        self.skip_to_escape();
        match self.peek() {
            Some(b'"') => {
                let raw = self.bytes.get(start..self.index).unwrap_or_default();
                self.eat();
                if self.text.is_some() || raw.is_ascii() || std::str::from_utf8(raw).is_ok() {
                    Ok(Cow::Borrowed(raw))
                } else {
                    Err(self.err(Code::InvalidUnicodeCodePoint))
                }
            }
            Some(b'\\') => Ok(match self.str_escaped(start)? {
                Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                Cow::Owned(s) => Cow::Owned(s.into_bytes()),
            }),
            Some(_) => {
                self.eat();
                Err(self.err(Code::ControlCharacterWhileParsingString))
            }
            None => Err(self.err(Code::EofWhileParsingString)),
        }
    }

    /// The rest of [`Reader::str_strict`] once an escape is seen (serde_json's
    /// `parse_str_bytes` with its scratch buffer).
    #[cold]
    fn str_escaped(&mut self, start: usize) -> Result<Cow<'a, str>, Fault> {
        let mut scratch: Vec<u8> = Vec::new();
        let mut start = start;
        loop {
            self.skip_to_escape();
            match self.peek() {
                Some(b'"') => {
                    scratch
                        .extend_from_slice(self.bytes.get(start..self.index).unwrap_or_default());
                    self.eat();
                    // (serde_json points at the first bad byte; an invalid string here means
                    // the chunk is not UTF-8, and that is what the error then says)
                    return String::from_utf8(scratch)
                        .map(Cow::Owned)
                        .map_err(|_| self.err(Code::InvalidUnicodeCodePoint));
                }
                Some(b'\\') => {
                    scratch
                        .extend_from_slice(self.bytes.get(start..self.index).unwrap_or_default());
                    self.eat();
                    self.escape(&mut scratch)?;
                    start = self.index;
                }
                Some(_) => {
                    self.eat();
                    return Err(self.err(Code::ControlCharacterWhileParsingString));
                }
                None => return Err(self.err(Code::EofWhileParsingString)),
            }
        }
    }

    /// serde_json's `parse_escape` (validating), after the backslash.
    fn escape(&mut self, scratch: &mut Vec<u8>) -> Result<(), Fault> {
        let ch = match self.next_char() {
            Some(b) => b,
            None => return Err(self.err(Code::EofWhileParsingString)),
        };
        match ch {
            b'"' => scratch.push(b'"'),
            b'\\' => scratch.push(b'\\'),
            b'/' => scratch.push(b'/'),
            b'b' => scratch.push(b'\x08'),
            b'f' => scratch.push(b'\x0c'),
            b'n' => scratch.push(b'\n'),
            b'r' => scratch.push(b'\r'),
            b't' => scratch.push(b'\t'),
            b'u' => return self.unicode_escape(scratch),
            _ => return Err(self.err(Code::InvalidEscape)),
        }
        Ok(())
    }

    /// serde_json's `parse_unicode_escape` (validating), after `\u`: a surrogate must be a
    /// leading one followed by `\u` and a trailing one.
    fn unicode_escape(&mut self, scratch: &mut Vec<u8>) -> Result<(), Fault> {
        let n = self.hex_escape()?;
        if (0xDC00..=0xDFFF).contains(&n) {
            return Err(self.err(Code::LoneLeadingSurrogateInHexEscape));
        }
        if !(0xD800..=0xDBFF).contains(&n) {
            push_char(scratch, u32::from(n));
            return Ok(());
        }
        match self.peek() {
            None => return Err(self.err(Code::EofWhileParsingString)),
            Some(b'\\') => self.eat(),
            Some(_) => {
                self.eat();
                return Err(self.err(Code::UnexpectedEndOfHexEscape));
            }
        }
        match self.peek() {
            None => return Err(self.err(Code::EofWhileParsingString)),
            Some(b'u') => self.eat(),
            Some(_) => {
                self.eat();
                return Err(self.err(Code::UnexpectedEndOfHexEscape));
            }
        }
        let n2 = self.hex_escape()?;
        if !(0xDC00..=0xDFFF).contains(&n2) {
            return Err(self.err(Code::LoneLeadingSurrogateInHexEscape));
        }
        let c = ((u32::from(n - 0xD800) << 10) | u32::from(n2 - 0xDC00)) + 0x1_0000;
        push_char(scratch, c);
        Ok(())
    }

    /// serde_json's `decode_hex_escape`: four hex digits.
    fn hex_escape(&mut self) -> Result<u16, Fault> {
        match self.bytes.get(self.index..self.index + 4) {
            Some(digits) => {
                self.index += 4;
                let mut n: u16 = 0;
                for &d in digits {
                    let v = match d {
                        b'0'..=b'9' => d - b'0',
                        b'a'..=b'f' => d - b'a' + 10,
                        b'A'..=b'F' => d - b'A' + 10,
                        _ => return Err(self.err(Code::InvalidEscape)),
                    };
                    n = (n << 4) | u16::from(v);
                }
                Ok(n)
            }
            None => {
                self.index = self.bytes.len();
                Err(self.err(Code::EofWhileParsingString))
            }
        }
    }

    /// A string skipped (serde_json's `ignore_str`), after its opening quote.
    pub(crate) fn skip_str(&mut self) -> Result<(), Fault> {
        loop {
            self.skip_to_escape();
            match self.peek() {
                Some(b'"') => {
                    self.eat();
                    return Ok(());
                }
                Some(b'\\') => {
                    self.eat();
                    self.skip_escape()?;
                }
                // (serde_json does not step past the control character here)
                Some(_) => return Err(self.err(Code::ControlCharacterWhileParsingString)),
                None => return Err(self.err(Code::EofWhileParsingString)),
            }
        }
    }

    /// serde_json's `ignore_escape`, after the backslash: `\u` needs four hex digits, nothing
    /// more.
    fn skip_escape(&mut self) -> Result<(), Fault> {
        match self.next_char() {
            None => Err(self.err(Code::EofWhileParsingString)),
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(()),
            Some(b'u') => self.hex_escape().map(|_| ()),
            Some(_) => Err(self.err(Code::InvalidEscape)),
        }
    }
}

/// Appends the code point `c` (never a surrogate here) as UTF-8.
fn push_char(scratch: &mut Vec<u8>, c: u32) {
    let c = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
    let mut buf = [0u8; 4];
    scratch.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}
