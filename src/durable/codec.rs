//! The on-disk record: one versioned, little-endian encoding, and a decoder that
//! returns an error on any malformed input (it never panics and never reads past the
//! end).
//!
//! ```text
//! offset size field
//! 0      1    format version (RECORD_VERSION)
//! 1      1    state: 1 = in progress, 2 = done
//! 2      1    flags: bit 0 payload fingerprint present, bit 1 result present
//! 3      1    reserved, 0
//! 4      4    fencing token (u32)
//! 8      8    at_ms: claimed at (in progress) or completed at (done)
//! 16     8    expires_ms: lease expiry (in progress) or retention expiry (done)
//! 24     8    payload fingerprint (u64), if flag bit 0
//! ..     4    result length (u32), if flag bit 1, then that many bytes
//! ```

use std::fmt;

use crate::bytes::{Reader, Truncated};

/// The record format this build writes and reads.
pub(crate) const RECORD_VERSION: u8 = 1;
/// The largest result a record may carry.
pub(crate) const MAX_RESULT: usize = 1 << 20;

const HEADER: usize = 24;
const FLAG_PAYLOAD: u8 = 1;
const FLAG_RESULT: u8 = 2;

/// A key's durable state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordState {
    InProgress,
    Done,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) state: RecordState,
    pub(crate) token: u32,
    pub(crate) at_ms: u64,
    pub(crate) expires_ms: u64,
    pub(crate) payload: Option<u64>,
    pub(crate) result: Option<Vec<u8>>,
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Fewer bytes than the header or a declared field needs.
    Truncated,
    /// Bytes left over after the last declared field.
    TrailingBytes,
    /// A record written by another format version.
    Version(u8),
    /// A state byte that is neither in progress nor done.
    State(u8),
    /// Flag or reserved bits that this version does not define.
    Flags(u8),
    /// A result length beyond [`MAX_RESULT`].
    ResultTooLong(u32),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("record is truncated"),
            DecodeError::TrailingBytes => f.write_str("record has trailing bytes"),
            DecodeError::Version(v) => write!(f, "record format version {v} is not supported"),
            DecodeError::State(s) => write!(f, "record state byte {s} is invalid"),
            DecodeError::Flags(b) => write!(f, "record flag byte {b:#04x} is invalid"),
            DecodeError::ResultTooLong(n) => write!(f, "record result length {n} is too long"),
        }
    }
}

impl Record {
    /// Appends the encoding of `self` to `out`.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        let mut flags = 0;
        if self.payload.is_some() {
            flags |= FLAG_PAYLOAD;
        }
        if self.result.is_some() {
            flags |= FLAG_RESULT;
        }
        out.push(RECORD_VERSION);
        out.push(match self.state {
            RecordState::InProgress => 1,
            RecordState::Done => 2,
        });
        out.push(flags);
        out.push(0);
        out.extend_from_slice(&self.token.to_le_bytes());
        out.extend_from_slice(&self.at_ms.to_le_bytes());
        out.extend_from_slice(&self.expires_ms.to_le_bytes());
        if let Some(p) = self.payload {
            out.extend_from_slice(&p.to_le_bytes());
        }
        if let Some(r) = &self.result {
            out.extend_from_slice(&(r.len() as u32).to_le_bytes());
            out.extend_from_slice(r);
        }
    }

    /// The encoding of `self`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 12 + self.result.as_ref().map_or(0, Vec::len));
        self.encode_into(&mut out);
        out
    }

    /// Decodes one record, refusing anything malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        let (mut record, result) = Self::parse(bytes)?;
        record.result = result.map(<[u8]>::to_vec);
        Ok(record)
    }

    /// The state and expiry of a record that decodes whole (as [`Record::decode`]
    /// would), without copying its result: the prefilter's rebuild reads every
    /// record so.
    pub(crate) fn check(bytes: &[u8]) -> Result<(RecordState, u64), DecodeError> {
        Self::parse(bytes).map(|(r, _)| (r.state, r.expires_ms))
    }

    /// The record without its result, and the result's bytes.
    fn parse(bytes: &[u8]) -> Result<(Record, Option<&[u8]>), DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != RECORD_VERSION {
            return Err(DecodeError::Version(version));
        }
        let state = match r.u8()? {
            1 => RecordState::InProgress,
            2 => RecordState::Done,
            s => return Err(DecodeError::State(s)),
        };
        let flags = r.u8()?;
        if flags & !(FLAG_PAYLOAD | FLAG_RESULT) != 0 {
            return Err(DecodeError::Flags(flags));
        }
        let reserved = r.u8()?;
        if reserved != 0 {
            return Err(DecodeError::Flags(reserved));
        }
        let token = r.u32()?;
        let at_ms = r.u64()?;
        let expires_ms = r.u64()?;
        let payload = if flags & FLAG_PAYLOAD != 0 {
            Some(r.u64()?)
        } else {
            None
        };
        let result = if flags & FLAG_RESULT != 0 {
            let len = r.u32()?;
            if len as usize > MAX_RESULT {
                return Err(DecodeError::ResultTooLong(len));
            }
            Some(r.take(len as usize)?)
        } else {
            None
        };
        if r.remaining() != 0 {
            return Err(DecodeError::TrailingBytes);
        }
        Ok((
            Record {
                state,
                token,
                at_ms,
                expires_ms,
                payload,
                result: None,
            },
            result,
        ))
    }
}

impl From<Truncated> for DecodeError {
    fn from(_: Truncated) -> Self {
        DecodeError::Truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            state: RecordState::Done,
            token: 0xdead_beef,
            at_ms: 1_700_000_000_123,
            expires_ms: 1_700_604_800_123,
            payload: Some(0x0102_0304_0506_0708),
            result: Some(b"receipt".to_vec()),
        }
    }

    #[test]
    fn check_reads_what_decode_reads_and_refuses_what_it_refuses() {
        let rec = sample();
        let bytes = rec.encode();
        assert_eq!(
            Record::check(&bytes),
            Ok((RecordState::Done, rec.expires_ms))
        );
        let mut bad = Vec::new();
        bad.push(bytes[..23].to_vec());
        let mut v = bytes.clone();
        v[0] = 9;
        bad.push(v);
        let mut v = bytes.clone();
        v[1] = 3;
        bad.push(v);
        // Past the header: an unknown flag, a cut result, a trailing byte.
        let mut v = bytes.clone();
        v[2] |= 0x80;
        bad.push(v);
        bad.push(bytes[..bytes.len() - 1].to_vec());
        let mut v = bytes;
        v.push(0);
        bad.push(v);
        for v in bad {
            let refused = Record::decode(&v).err();
            assert!(refused.is_some(), "{v:?}");
            assert_eq!(Record::check(&v).err(), refused, "{v:?}");
        }
    }

    #[test]
    fn round_trips_every_shape() {
        for payload in [None, Some(7u64)] {
            // Up to the longest result a record takes, which decodes as stored.
            for result in [
                None,
                Some(vec![]),
                Some(b"r".to_vec()),
                Some(vec![9; 4096]),
                Some(vec![9; MAX_RESULT]),
            ] {
                for state in [RecordState::InProgress, RecordState::Done] {
                    let rec = Record {
                        state,
                        payload,
                        result: result.clone(),
                        ..sample()
                    };
                    assert_eq!(Record::decode(&rec.encode()), Ok(rec));
                }
            }
        }
    }

    #[test]
    fn layout_is_little_endian_with_a_version_byte() {
        let rec = Record {
            payload: None,
            result: None,
            ..sample()
        };
        let b = rec.encode();
        assert_eq!(b.len(), HEADER);
        assert_eq!(&b[..4], &[RECORD_VERSION, 2, 0, 0]);
        assert_eq!(&b[4..8], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&b[8..16], &1_700_000_000_123u64.to_le_bytes());
    }

    #[test]
    fn every_truncation_is_refused() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert_eq!(Record::decode(&b[..n]), Err(DecodeError::Truncated), "{n}");
        }
    }

    #[test]
    fn malformed_headers_are_refused() {
        let b = sample().encode();
        let mut v = b.clone();
        v[0] = 2;
        assert_eq!(Record::decode(&v), Err(DecodeError::Version(2)));
        let mut v = b.clone();
        v[1] = 3;
        assert_eq!(Record::decode(&v), Err(DecodeError::State(3)));
        let mut v = b.clone();
        v[2] = 4;
        assert_eq!(Record::decode(&v), Err(DecodeError::Flags(4)));
        let mut v = b.clone();
        v[3] = 1;
        assert_eq!(Record::decode(&v), Err(DecodeError::Flags(1)));
        let mut v = b.clone();
        v.push(0);
        assert_eq!(Record::decode(&v), Err(DecodeError::TrailingBytes));
        // A result length pointing past the end, and one beyond the limit.
        let mut v = Record {
            payload: None,
            ..sample()
        }
        .encode();
        v[HEADER..HEADER + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Record::decode(&v),
            Err(DecodeError::ResultTooLong(u32::MAX))
        );
        v[HEADER..HEADER + 4].copy_from_slice(&100u32.to_le_bytes());
        assert_eq!(Record::decode(&v), Err(DecodeError::Truncated));
    }
}
