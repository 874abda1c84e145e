//! Stored record forms: JSON for small state records, a binary form for parked raw inputs.
//! (Stream and message states, which every input rewrites, have a compact form of their own:
//! [`super::compact`].)

use crate::error::StoreError;
use crate::input::{Control, Origin};
use chunk_model::Provider;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Encodes a state record as JSON.
pub fn to_bytes<T: Serialize>(space: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    // (the room serde_json::to_vec starts with)
    let mut out = Vec::with_capacity(128);
    write_to(space, &mut out, value)?;
    Ok(out)
}

/// Encodes a record as JSON at the end of `out`.
pub fn write_to<T: Serialize>(
    space: &'static str,
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), StoreError> {
    serde_json::to_writer(out, value).map_err(|e| StoreError::Encode {
        space,
        detail: e.to_string(),
    })
}

/// Decodes a JSON state record.
pub fn from_bytes<T: DeserializeOwned>(space: &'static str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        space,
        detail: e.to_string(),
    })
}

/// A registered call (defined with the matching rules in [`crate::core::matching`]).
pub use crate::core::CallIndex;

/// The header of a parked input (the raw body follows it in the stored form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedHeader {
    /// The provider header.
    #[serde(default)]
    pub provider: Option<Provider>,
    /// The control header.
    #[serde(default)]
    pub control: Option<Control>,
    /// Where it came from.
    #[serde(default)]
    pub origin: Option<Origin>,
}

/// A parked input: header and raw body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedInput {
    /// Headers that matter.
    pub header: ParkedHeader,
    /// The raw body.
    pub body: Vec<u8>,
}

impl ParkedInput {
    /// Stored form: u32 header length, header JSON, body.
    pub fn encode(&self) -> Result<Vec<u8>, StoreError> {
        let header = to_bytes("parked", &self.header)?;
        let mut out = Vec::with_capacity(4 + header.len() + self.body.len());
        out.extend_from_slice(&(header.len() as u32).to_be_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.body);
        Ok(out)
    }

    /// Reads the stored form back.
    pub fn decode(bytes: &[u8]) -> Result<ParkedInput, StoreError> {
        let corrupt = || StoreError::Corrupt {
            space: "parked",
            detail: "truncated record".into(),
        };
        let len: [u8; 4] = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(corrupt)?;
        let len = u32::from_be_bytes(len) as usize;
        let header = from_bytes("parked", bytes.get(4..4 + len).ok_or_else(corrupt)?)?;
        let body = bytes.get(4 + len..).ok_or_else(corrupt)?.to_vec();
        Ok(ParkedInput { header, body })
    }
}
