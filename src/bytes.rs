//! A bounds-checked reader of little-endian fields, shared by the on-disk decoders
//! (durable records, dead letters, saved prefilters). It never panics and never reads
//! past the end: a field that is not all there is [`Truncated`].

/// The input ended before a field did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncated;

/// Reads fields from the front of a byte slice.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let end = self.pos.checked_add(n).ok_or(Truncated)?;
        let s = self.bytes.get(self.pos..end).ok_or(Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let mut b = [0; N];
        b.copy_from_slice(self.take(N)?);
        Ok(b)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Truncated> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Truncated> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Truncated> {
        self.array().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_fields_and_refuses_to_read_past_the_end() {
        let mut r = Reader::new(&[1, 2, 0, 3, 0, 0, 0, 9]);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16(), Ok(2));
        assert_eq!(r.u32(), Ok(3));
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.u64(), Err(Truncated));
        assert_eq!(r.take(usize::MAX), Err(Truncated));
        assert_eq!(r.take(1), Ok(&[9u8][..]));
        assert_eq!(r.remaining(), 0);
    }
}
