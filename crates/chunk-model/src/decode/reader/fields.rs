//! Reading a struct the way serde's derived `Deserialize` does ([`Fields`]): from an object,
//! field by name, members it does not know skipped; or from an array, field by position
//! (a derived struct accepts both). A decoder loops over [`Fields::next`], which refuses a
//! field seen twice (`duplicate field`, at its key, before its value), and reads each value
//! with [`Fields::value`], which locates an error in it at the field, as
//! `serde_path_to_error` does.

use super::{Fault, Reader, Segment, Shape};

/// The fields of one struct being read, by name (an object) or by position (an array), the
/// way a derived serde struct takes them.
pub(crate) struct Fields {
    shape: Shape,
    first: bool,
    /// The struct's field names, in order.
    names: &'static [&'static str],
    /// The field being read (its index in `names`), for the path of an error in its value.
    at: usize,
    /// The fields seen so far (bit `i`: `names[i]`).
    seen: u32,
    /// Position of the next field (array).
    position: usize,
}

impl Fields {
    pub(crate) fn new(shape: Shape, names: &'static [&'static str]) -> Self {
        Fields {
            shape,
            first: true,
            names,
            at: 0,
            seen: 0,
            position: 0,
        }
    }

    /// The next field the struct has, as its index in `names` (at most 32; its value is then
    /// read with [`Fields::value`]): members whose key `field` does not find in `names` are
    /// skipped, a field named twice is `duplicate field`; an array gives its elements to the
    /// fields in order and ends with the fields or with itself.
    #[inline(always)]
    pub(crate) fn next(
        &mut self,
        r: &mut Reader<'_>,
        field: impl Fn(&[u8]) -> Option<usize>,
    ) -> Result<Option<usize>, Fault> {
        match self.shape {
            Shape::Object => {
                while r.next_key(&mut self.first)? {
                    if let Some(i) = field(&r.key()?) {
                        if self.seen & (1 << i) != 0 {
                            let name = self.names.get(i).copied().unwrap_or("?");
                            return Err(Fault::duplicate_field(name));
                        }
                        self.seen |= 1 << i;
                        self.at = i;
                        return Ok(Some(i));
                    }
                    r.colon()?;
                    r.skip_value()?;
                }
                Ok(None)
            }
            Shape::Array => {
                if self.position == self.names.len() || !r.next_element(&mut self.first)? {
                    return Ok(None);
                }
                self.at = self.position;
                self.position += 1;
                Ok(Some(self.at))
            }
        }
    }

    /// Reads the current field's value with `read` (after its key's `:`), an error in it
    /// located at the field.
    #[inline(always)]
    pub(crate) fn value<'a, T>(
        &self,
        r: &mut Reader<'a>,
        read: impl FnOnce(&mut Reader<'a>) -> Result<T, Fault>,
    ) -> Result<T, Fault> {
        if self.shape == Shape::Object {
            r.colon()?;
        }
        read(r).map_err(|f| {
            f.within(match self.shape {
                Shape::Object => Segment::Key(self.names.get(self.at).copied().unwrap_or("?")),
                Shape::Array => Segment::Index(self.at),
            })
        })
    }
}
