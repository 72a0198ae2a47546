//! A shard's fingerprint index: open addressing over 64-byte buckets, each holding 12
//! one-byte tags and the 12 slab indices they stand for, in one cache line.
//!
//! A look-up reads one bucket (its home, from the hash's low bits), compares the
//! tags, and checks the slab entry of each tag that matches. That is one cache miss
//! for the bucket and one for the entry. A SwissTable keeps its control bytes and its
//! slots in different lines, so the same look-up there costs three.
//!
//! A tag match alone would send one look-up in about thirty (a dozen slots at one in
//! 255 each) to a slab entry that is not the key's: another cache miss. So a slot
//! also keeps some of the hash's bits that neither the tag nor the bucket uses, in the
//! high bits of its `u32` that slab indices leave free (their number, the array's
//! `checks`, is written in every bucket, for lock-free readers), and a look-up only
//! follows a slot whose bits agree. Slab indices too large for the array's free bits
//! make the index rebuild its array with fewer check bits.
//!
//! A full bucket overflows into the next one (linear probing by bucket). Each bucket
//! counts the entries that live past it because it was full on their way (`over`), so
//! a look-up stops at the first bucket with no overflow, and removal leaves no
//! tombstone: it lowers the counts it raised. A count that reaches 255 stays there
//! (look-ups past that bucket then always go on), which only costs probes.

/// Slots per bucket.
const SLOTS: usize = 12;
/// The table grows past 7/8 of its slots.
const LOAD_NUM: usize = 7;
const LOAD_DEN: usize = 8;
/// An overflow count that has saturated.
const STICKY: u8 = u8::MAX;

#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    /// 0 marks a free slot; otherwise the tag of the slot's hash.
    tags: [u8; SLOTS],
    /// Entries placed past this bucket because it was full when they arrived.
    over: u8,
    /// How many high bits of every slot in this bucket's array hold check bits of
    /// the slot's hash (0 to [`MAX_CHECKS`]); the same in every bucket of an array.
    checks: u8,
    _pad: [u8; 2],
    slots: [u32; SLOTS],
}

/// The most check bits a slot keeps: 16, so that slab indices below 2^16 never make
/// an index rebuild.
const MAX_CHECKS: u32 = 16;

/// The slot bits that hold check bits, in an array with `checks` of them.
#[inline(always)]
fn check_mask(checks: u8) -> u32 {
    // Shifted in 64 bits, so that 0 checks is a shift by 32: no bits.
    (u64::MAX << (32 - u32::from(checks).min(MAX_CHECKS))) as u32
}

/// The check bits of hash `h` under `mask`: from bits 40 to 55 of the hash, which the
/// tag (56 to 63) and the home bucket (the low bits) do not use.
#[inline(always)]
fn check_bits(h: u64, mask: u32) -> u32 {
    (h >> 24) as u32 & mask
}

/// The check bits an array of `buckets` buckets keeps when slab indices up to
/// `largest` are stored in it: the slab index gets the bits of twice the array's
/// capacity (and of `largest`), at least 16; the rest, at most [`MAX_CHECKS`], check.
fn checks_for(buckets: usize, largest: u32) -> u8 {
    let room = capacity(buckets).max(largest as usize);
    let width = (usize::BITS - room.leading_zeros() + 1).clamp(32 - MAX_CHECKS, 32);
    (32 - width) as u8
}

const _: () = assert!(std::mem::size_of::<Bucket>() == BUCKET_ALIGN);
const _: () = assert!(std::mem::offset_of!(Bucket, tags) == 0 && SLOTS + 4 == 16);
const _: () = assert!(std::mem::align_of::<Bucket>() == BUCKET_ALIGN);

impl Bucket {
    const EMPTY: Bucket = Bucket {
        tags: [0; SLOTS],
        over: 0,
        checks: 0,
        _pad: [0; 2],
        slots: [0; SLOTS],
    };

    /// An empty bucket of an array whose slots keep `checks` check bits.
    const fn empty(checks: u8) -> Bucket {
        Bucket {
            checks,
            ..Bucket::EMPTY
        }
    }

    /// A bit per slot whose tag is `t`: the bucket's first 16 bytes (the 12 tags,
    /// `over` and the padding) compared at once in one SSE2 register, which every
    /// x86_64 processor has; the bits past the tags are dropped.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn matches(&self, t: u8) -> u32 {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_load_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        #[allow(unsafe_code)]
        // SAFETY: SSE2 is part of the x86_64 baseline. The load reads 16 bytes from
        // the start of the bucket, which is 64 bytes long and 64-byte aligned (both
        // asserted beside the type), and every one of those bytes is initialised:
        // `tags`, `over`, `checks` and `_pad` are plain bytes, laid out first by
        // `repr(C)`.
        let bits = unsafe {
            let v = _mm_load_si128(self as *const Bucket as *const __m128i);
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(t as i8)))
        };
        bits as u32 & ((1 << SLOTS) - 1)
    }

    /// A bit per slot whose tag is `t`: the 12 tags compared eight and four at a
    /// time inside ordinary registers (processors without SSE2, and the test that
    /// checks the two agree).
    #[cfg(any(not(target_arch = "x86_64"), test))]
    #[inline]
    fn matches_portable(&self, t: u8) -> u32 {
        let g = &self.tags;
        let lo = u64::from_le_bytes([g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]]);
        let hi = u32::from_le_bytes([g[8], g[9], g[10], g[11]]) as u64;
        let t = t as u64 * 0x0101_0101_0101_0101;
        zero_bytes(lo ^ t) | (zero_bytes(hi ^ t) & 0xF) << 8
    }

    /// A bit per slot whose tag is `t`.
    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    fn matches(&self, t: u8) -> u32 {
        self.matches_portable(t)
    }
}

/// A bit per zero byte of `x` (bit i for byte i), exactly.
#[cfg(any(not(target_arch = "x86_64"), test))]
#[inline]
fn zero_bytes(x: u64) -> u32 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    // A byte's top bit ends up set iff the byte is zero; no carry crosses bytes.
    let zero = !(((x & LOW7) + LOW7) | x | LOW7);
    // Gather the eight top bits into one byte (the partial products never overlap).
    ((zero >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

/// The tag of a hash: its top byte, never 0.
#[inline]
fn tag(h: u64) -> u8 {
    match (h >> 56) as u8 {
        0 => 1,
        t => t,
    }
}

/// Asks the processor to start loading the bucket where hash `h` lives, in an index
/// whose [`Index::hint`] was `hint` (read without the shard's lock, so it may be stale:
/// then the load is merely wasted). Look-ups that follow find the line on its way, so
/// a batch of claims overlaps its cache misses instead of taking them one by one.
#[inline]
pub(crate) fn prefetch(hint: usize, h: u64) {
    if hint == 0 {
        return;
    }
    let base = hint & !(BUCKET_ALIGN - 1);
    let mask = (1usize << (hint & (BUCKET_ALIGN - 1))) - 1;
    prefetch_line(base.wrapping_add((h as usize & mask) * BUCKET_ALIGN));
}

/// Asks the processor to start loading the cache line holding address `addr`.
#[inline]
pub(crate) fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch is only a hint: it never faults and changes nothing the
    // program can observe, whatever the address (a stale or freed one included). The
    // pointer is never dereferenced.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Asks the processor to fetch the cache line holding `addr` ready to be written
/// (`prefetchw`: exclusive, so a later store needs no second request). Processors
/// without the instruction execute it as a no-op; so does Miri, which runs no
/// inline assembly.
#[inline]
pub(crate) fn prefetch_line_for_write(addr: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[allow(unsafe_code)]
    // SAFETY: as in `prefetch_line`: a prefetch never faults and has no effect the
    // program can observe; the address is never dereferenced, and the instruction
    // touches no register or flag besides reading `addr`.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = addr;
}

/// A key's home bucket as a lock-free reader sees it: its 16 bytes of tags read once,
/// its slots read on demand. Every read is a relaxed atomic load of the bucket's
/// memory, which a lock holder may be writing meanwhile (so a reader may see a torn
/// bucket: it validates what it concludes against the shard's write sequence before
/// using it).
#[cfg_attr(idem_loom, allow(dead_code))]
pub(crate) struct HomeBucket {
    at: *const Bucket,
    tags: [u64; 2],
}

/// A relaxed atomic load of the `u32` at `p`.
///
/// # Safety
/// `p` is aligned and points into a live allocation.
#[inline(always)]
#[allow(unsafe_code)]
#[cfg_attr(idem_loom, allow(dead_code))]
pub(crate) unsafe fn racy_u32(p: *const u32) -> u32 {
    // SAFETY: aligned and live (the caller's contract); only loaded through.
    unsafe { std::sync::atomic::AtomicU32::from_ptr(p as *mut u32) }
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg_attr(idem_loom, allow(dead_code))]
impl HomeBucket {
    /// Reads the tags of hash `h`'s home bucket in the bucket array that `hint` (an
    /// [`Index::hint`], 0 for none) describes.
    ///
    /// # Safety
    /// The bucket array `hint` points to must still be allocated, and stay so while
    /// the result is used: the caller is pinned to the epoch in which it read `hint`,
    /// and arrays are retired only after the hint that replaces them is published.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn read(hint: usize, h: u64) -> Option<Self> {
        if hint == 0 {
            return None;
        }
        // SAFETY: the caller's contract.
        Some(unsafe { Self::read_at(hint, h as usize) })
    }

    /// Reads bucket `b` (masked to the array's length) of the array `hint` describes.
    ///
    /// # Safety
    /// As for [`HomeBucket::read`]; `hint` is not 0.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn read_at(hint: usize, b: usize) -> Self {
        let base = (hint & !(BUCKET_ALIGN - 1)) as *const Bucket;
        let mask = (1usize << (hint & (BUCKET_ALIGN - 1))) - 1;
        // SAFETY: the array holds `mask + 1` buckets (the hint's length) and is
        // allocated (the caller's contract), so `b & mask` is in bounds; a bucket is
        // 64-byte aligned, so its first two words are 8-byte aligned.
        unsafe {
            let at = base.add(b & mask);
            // Read as little-endian, so that byte i of the bucket is byte i of the
            // word on every target.
            let word = |i: usize| {
                u64::from_le(
                    std::sync::atomic::AtomicU64::from_ptr((at as *mut u64).add(i))
                        .load(std::sync::atomic::Ordering::Relaxed),
                )
            };
            HomeBucket {
                at,
                tags: [word(0), word(1)],
            }
        }
    }

    /// The slab index stored under `h` that `eq` accepts, looked for as
    /// [`Index::find`] does (from the home bucket on, while buckets overflow), in the
    /// array `hint` describes (0: none). At most the array's length of buckets is
    /// read, whatever torn values a concurrent writer leaves.
    ///
    /// # Safety
    /// As for [`HomeBucket::read`].
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn find_from(
        hint: usize,
        h: u64,
        mut eq: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        if hint == 0 {
            return None;
        }
        let len = 1usize << (hint & (BUCKET_ALIGN - 1));
        let mut b = h as usize;
        for _ in 0..len {
            // SAFETY: the caller's contract.
            let bucket = unsafe { Self::read_at(hint, b) };
            if let Some(i) = bucket.find(h, &mut eq) {
                return Some(i);
            }
            // `over` is the bucket's 13th byte.
            if (bucket.tags[1] >> 32) as u8 == 0 {
                return None;
            }
            b = b.wrapping_add(1);
        }
        None
    }

    /// A bit per slot whose tag is `t` (the 12 tags are the low 12 bytes of the two
    /// words, little-endian).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn matches(&self, t: u8) -> u32 {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x};
        #[allow(unsafe_code)]
        // SAFETY: SSE2 is part of the x86_64 baseline; no memory is touched.
        let bits = unsafe {
            let v = _mm_set_epi64x(self.tags[1] as i64, self.tags[0] as i64);
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(t as i8)))
        };
        bits as u32 & ((1 << SLOTS) - 1)
    }

    /// A bit per slot whose tag is `t`.
    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn matches(&self, t: u8) -> u32 {
        let t = t as u64 * 0x0101_0101_0101_0101;
        zero_bytes(self.tags[0] ^ t) | (zero_bytes(self.tags[1] ^ t) & 0xF) << 8
    }

    /// The slot bits of this bucket's array that hold check bits (`checks` is the
    /// bucket's 14th byte).
    #[inline(always)]
    fn check_mask(&self) -> u32 {
        check_mask((self.tags[1] >> 40) as u8)
    }

    /// Slot `i` as stored: its slab index, and check bits above it.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn slot(&self, i: usize) -> u32 {
        // SAFETY: the bucket is live (see `read`); `slots` is an aligned `u32` array.
        unsafe { racy_u32(std::ptr::addr_of!((*self.at).slots[i])) }
    }

    /// The first slab index among this bucket's whose tag and check bits match `h`
    /// that `eq` accepts.
    #[inline(always)]
    fn find(&self, h: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut m = self.matches(tag(h));
        let mask = self.check_mask();
        let check = check_bits(h, mask);
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let slot = self.slot(i);
            if slot & mask == check && eq(slot & !mask) {
                return Some(slot & !mask);
            }
        }
        None
    }

    /// The first slab index whose tag and check bits match `h`, if any (to prefetch
    /// its entry).
    #[inline(always)]
    pub(crate) fn candidate(&self, h: u64) -> Option<u32> {
        self.find(h, |_| true)
    }
}

/// A bucket's size and alignment: the low bits of a bucket array's address are free to
/// carry the log2 of its length in [`Index::hint`].
const BUCKET_ALIGN: usize = 64;

/// How many entries an index of `buckets` buckets holds before it grows.
pub(crate) const fn capacity(buckets: usize) -> usize {
    buckets * SLOTS * LOAD_NUM / LOAD_DEN
}

/// A map from 64-bit hashes to `u32` slab indices; equality is decided by the caller
/// (several indices may share a hash's tag, or even the hash).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Index {
    /// Bucket arrays outgrown, kept until the new one's [`Index::hint`] is published
    /// (a lock-free reader may still be reading an old array): see
    /// [`Index::take_retired`]. First: it is rarely touched, and the fields every
    /// insert reads and writes then run on into the shard's slab (see [`Shard`]).
    retired: Vec<Vec<Bucket>>,
    buckets: Vec<Bucket>,
    len: usize,
    /// The bucket array was replaced since the hint was last published.
    pub(crate) dirty: bool,
    /// How many high bits of a slot hold check bits: the array's (see
    /// [`check_mask`]). A count, not the mask, so that the index stays one line.
    check_count: u8,
    /// The doubling is under way: the entries are being copied into the spare, a
    /// few with each insert (see [`Index::begin_move`]).
    moving: bool,
    /// The largest slab index ever stored: every array made has room for it.
    largest: u32,
}

/// Bucket arrays an index has outgrown, to be freed once no lock-free reader can
/// hold them.
#[derive(Debug)]
pub(crate) struct Retired(Vec<Vec<Bucket>>);

impl Retired {
    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.0
            .iter()
            .map(|b| b.capacity() * std::mem::size_of::<Bucket>())
            .sum()
    }
}

/// Bucket arrays reserved by [`Index::reserve_for_shards`], given back when dropped.
#[derive(Default)]
pub(crate) struct Reserved(Vec<Vec<Bucket>>);

/// The smallest bucket array whose doubling is prepared with a [`Spare`] (64 KiB):
/// below it a doubling is short.
pub(crate) const SPARE_FROM: usize = 1024;

/// Where an array of `buckets` buckets asks for its spare: at its last sixteenth of
/// room before it doubles.
const fn spare_mark(buckets: usize) -> usize {
    capacity(buckets) - capacity(buckets) / 16
}

/// Where an array of [`SPARE_FROM`] buckets or more whose spare the maintenance
/// thread has not made yet has it made by a claim instead: at its last 32nd of room,
/// halfway from [`spare_mark`] to the doubling. A fill faster than that thread (two
/// claiming threads on two cores: every shard reaches the same doubling within a
/// few milliseconds, each asking for its spare at once) would otherwise double
/// without one, placing every entry again while the lock is held.
const fn late_mark(buckets: usize) -> usize {
    capacity(buckets) - capacity(buckets) / 32
}

/// A bucket array made ahead of an index's doubling, on another thread than the
/// claim that doubles (see [`Index::spare_wanted`]): the allocation and the first
/// touch of its pages (a page fault each, 2-4 us on a virtual machine: 256 of them
/// for a megabyte) are then no part of the pause.
///
/// Once its index has it, the doubling is spread over the inserts that follow
/// ([`Index::begin_move`]): each copies a few entries into it, in slab order, and
/// the last one makes it the index's array. Meanwhile the index's own array stays
/// whole (lock-free readers read only that one), and every change to an entry
/// already copied is made in both.
#[derive(Debug)]
pub(crate) struct Spare {
    buckets: Vec<Bucket>,
    /// The check bits its slots keep (written in every bucket).
    check_count: u8,
    /// Holds nothing but empty buckets of `check_count`.
    clean: bool,
    /// While its index moves into it: every entry of a slab index below this is
    /// in it too, and no other.
    upto: u32,
    /// Entries in it.
    moved: usize,
}

impl Spare {
    /// An array of `buckets` buckets, every page of it written once, or `None` if the
    /// allocator refuses. Its slots keep the check bits an index of that length
    /// keeps while its slab indices stay within the array's room, which they do
    /// unless the slab has many more free slots than live ones.
    pub(crate) fn make(buckets: usize) -> Option<Spare> {
        let check_count = checks_for(buckets, 0);
        let mut v = Vec::new();
        v.try_reserve_exact(buckets).ok()?;
        v.resize(buckets, Bucket::empty(check_count));
        Some(Spare {
            buckets: v,
            check_count,
            clean: true,
            upto: 0,
            moved: 0,
        })
    }

    /// Its length in buckets.
    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }

    /// For tests: where its buckets are.
    #[cfg(test)]
    pub(crate) fn addr(&self) -> usize {
        self.buckets.as_ptr() as usize
    }

    /// Copies `(h, idx)` in.
    fn place(&mut self, h: u64, idx: u32) {
        place_in(&mut self.buckets, check_mask(self.check_count), h, idx);
        self.moved += 1;
    }

    /// Copies every `(h, idx)` of `group` in.
    fn place_all(&mut self, group: &[(u64, u32)]) {
        for &(h, idx) in group {
            self.place(h, idx);
        }
    }

    /// The address of hash `h`'s home bucket in it.
    fn home(&self, h: u64) -> usize {
        let b = h as usize & (self.buckets.len() - 1);
        self.buckets.as_ptr() as usize + b * BUCKET_ALIGN
    }
}

/// The fewest entries an insert copies into the spare while its index moves into
/// it (more when the array's remaining room asks for more: the move must end by the
/// insert that fills the array). From the mark, the 15/16 of the array's room
/// already filled are copied within its last sixteenth, with what arrives meanwhile.
const MOVE_STEP: usize = 16;

/// Bucket and slot of the index that `eq` accepts, among those stored under `h` in
/// `buckets` (whose slots keep the check bits `checks`).
#[inline]
fn position_in(
    buckets: &[Bucket],
    checks: u32,
    h: u64,
    mut eq: impl FnMut(u32) -> bool,
) -> Option<(usize, usize)> {
    if buckets.is_empty() {
        return None;
    }
    let t = tag(h);
    let check = check_bits(h, checks);
    let mask = buckets.len() - 1;
    let mut b = h as usize & mask;
    for _ in 0..buckets.len() {
        let bucket = &buckets[b];
        let mut m = bucket.matches(t);
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let slot = bucket.slots[i];
            if slot & checks == check && eq(slot & !checks) {
                return Some((b, i));
            }
        }
        if bucket.over == 0 {
            return None;
        }
        b = (b + 1) & mask;
    }
    None
}

/// How a lock holder writes a bucket array that lock-free readers may be reading
/// ([`HomeBucket`]): each word they load is stored whole, with a relaxed atomic store
/// (a plain store on x86), so that the race of a write with a reader's load is one
/// the language defines (the reader checks the shard's write sequence before using
/// what it read); and no `&mut` is made over the array, which Miri counts as a write
/// of all of it. Reads stay plain: only the lock holder writes.
struct Writer {
    base: *mut Bucket,
    len: usize,
}

impl Writer {
    fn of(buckets: &mut Vec<Bucket>) -> Writer {
        Writer {
            // No reference to the elements is made.
            base: buckets.as_mut_ptr(),
            len: buckets.len(),
        }
    }

    /// Bucket `b` (below `len`), to read.
    #[inline(always)]
    fn bucket(&self, b: usize) -> &Bucket {
        debug_assert!(b < self.len);
        #[allow(unsafe_code)]
        // SAFETY: `b` is in the array, which the `Vec` this writer was made of keeps
        // allocated and initialised while the caller holds it mutably.
        unsafe {
            &*self.base.add(b)
        }
    }

    /// Sets byte `k` (below 16: a tag, `over`, `checks`) of bucket `b`: its 8-byte
    /// word read, changed and stored whole, as readers load it.
    #[inline(always)]
    fn set_byte(&self, b: usize, k: usize, v: u8) {
        debug_assert!(b < self.len && k < 16);
        #[allow(unsafe_code)]
        // SAFETY: word `k / 8` of bucket `b` is in the array (a bucket's first 16
        // bytes), 8-byte aligned (a bucket is 64-byte aligned); only this writer
        // stores to it.
        unsafe {
            let word =
                std::sync::atomic::AtomicU64::from_ptr(self.base.add(b).cast::<u64>().add(k / 8));
            // Byte `k % 8` of the word in memory order, by shifts (a byte array on
            // the stack, one byte stored into it and the word loaded back over it,
            // waited for the store each time).
            let at = if cfg!(target_endian = "little") {
                k % 8
            } else {
                7 - k % 8
            };
            let shift = 8 * at as u32;
            let old = word.load(std::sync::atomic::Ordering::Relaxed);
            word.store(
                (old & !(0xFF << shift)) | (u64::from(v) << shift),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// Sets slot `i` of bucket `b`.
    #[inline(always)]
    fn set_slot(&self, b: usize, i: usize, v: u32) {
        debug_assert!(b < self.len && i < SLOTS);
        #[allow(unsafe_code)]
        // SAFETY: slot `i` of bucket `b` is in the array, 4-byte aligned; only this
        // writer stores to it.
        unsafe {
            std::sync::atomic::AtomicU32::from_ptr(std::ptr::addr_of_mut!(
                (*self.base.add(b)).slots[i]
            ))
            .store(v, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Where `over` is among a bucket's first 16 bytes.
const OVER_BYTE: usize = SLOTS;

const _: () = assert!(std::mem::offset_of!(Bucket, over) == OVER_BYTE);

/// Puts `idx` in the first free slot on `h`'s probe path in `buckets`, raising the
/// overflow count of every full bucket passed. There is always a free slot: the load
/// stays under 7/8.
fn place_in(buckets: &mut Vec<Bucket>, checks: u32, h: u64, idx: u32) {
    debug_assert_eq!(idx & checks, 0, "the slab index fits under the checks");
    let t = tag(h);
    let slot = idx | check_bits(h, checks);
    let w = Writer::of(buckets);
    let mask = w.len - 1;
    let mut b = h as usize & mask;
    loop {
        let (free, over) = {
            let bucket = w.bucket(b);
            (bucket.matches(0), bucket.over)
        };
        if free != 0 {
            let i = free.trailing_zeros() as usize;
            w.set_byte(b, i, t);
            w.set_slot(b, i, slot);
            return;
        }
        if over != STICKY {
            w.set_byte(b, OVER_BYTE, over + 1);
        }
        b = (b + 1) & mask;
    }
}

/// Removes `idx` stored under `h` from `buckets`. False if it is not there.
fn remove_in(buckets: &mut Vec<Bucket>, checks: u32, h: u64, idx: u32) -> bool {
    let Some((b, i)) = position_in(buckets, checks, h, |s| s == idx) else {
        return false;
    };
    let w = Writer::of(buckets);
    w.set_byte(b, i, 0);
    w.set_slot(b, i, 0);
    // Lower the counts this entry raised on its way here.
    let mask = w.len - 1;
    let mut p = h as usize & mask;
    while p != b {
        let over = w.bucket(p).over;
        if over != STICKY {
            w.set_byte(p, OVER_BYTE, over - 1);
        }
        p = (p + 1) & mask;
    }
    true
}

impl Index {
    /// An empty index with room for `entries` before it first grows, or `None` if
    /// that many buckets cannot be allocated (the size overflows, or the allocator
    /// refuses it).
    pub(crate) fn try_with_room(entries: usize) -> Option<Self> {
        if entries == 0 {
            return Some(Index::default());
        }
        let (mut buckets, n) = Self::reserve_room(entries)?;
        let checks = checks_for(n, 0);
        buckets.resize(n, Bucket::empty(checks));
        Some(Index {
            buckets,
            len: 0,
            check_count: checks,
            moving: false,
            largest: 0,
            retired: Vec::new(),
            dirty: false,
        })
    }

    /// Reserves the buckets of `shards` indexes of [`Index::try_with_room`]`
    /// (entries)`, added to `held`; false if the allocator refuses. The caller gives
    /// them back, untouched (so, under overcommit, nothing is committed): a check
    /// before anything else is opened, of every namespace at once.
    pub(crate) fn reserve_for_shards(entries: usize, shards: usize, held: &mut Reserved) -> bool {
        if entries == 0 {
            return true;
        }
        for _ in 0..shards {
            match Self::reserve_room(entries) {
                Some((buckets, _)) => held.0.push(buckets),
                None => return false,
            }
        }
        true
    }

    /// The bytes of the buckets an index made with room for `entries` holds
    /// (`None` past what a count of bytes can hold).
    pub(crate) fn bytes_for(entries: usize) -> Option<usize> {
        Self::buckets_for(entries)?.checked_mul(std::mem::size_of::<Bucket>())
    }

    /// The bucket count an index made with room for `entries` has.
    fn buckets_for(entries: usize) -> Option<usize> {
        let mut n: usize = 1;
        while n.checked_mul(SLOTS * LOAD_NUM)? / LOAD_DEN < entries {
            n = n.checked_mul(2)?;
        }
        Some(n)
    }

    /// The buckets for `entries`, reserved (empty), and how many there are to be.
    fn reserve_room(entries: usize) -> Option<(Vec<Bucket>, usize)> {
        let n = Self::buckets_for(entries)?;
        let mut buckets = Vec::new();
        buckets.try_reserve_exact(n).ok()?;
        Some((buckets, n))
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }

    /// The length of the spare this index could take, if it could: an array of
    /// [`SPARE_FROM`] buckets or more, filled past its last sixteenth of room, whose
    /// shard may grow past it (`share`: the entries the shard is meant to hold, its
    /// part of the namespace's `max_keys`), could take one of twice its length at its
    /// next doubling instead of allocating. Whether one is made also depends on how
    /// fast the shard fills (see `Shard::spare_pass`).
    pub(crate) fn spare_wanted(&self, share: usize) -> Option<usize> {
        let n = self.buckets.len();
        (n >= SPARE_FROM && self.outgrown_by(share) && self.len >= spare_mark(n)).then_some(2 * n)
    }

    /// Whether the last insert brought the array, of any length, to a mark where
    /// its spare is made or asked for (see [`Index::spare_wanted`],
    /// [`Index::small_spare_wanted`]), or made by a claim if it is late
    /// ([`Index::at_late_mark`]). Reads only what every insert reads.
    #[inline]
    pub(crate) fn at_mark(&self) -> bool {
        let n = self.buckets.len();
        self.len == spare_mark(n) || self.len == late_mark(n)
    }

    /// Whether the last insert brought an array of [`SPARE_FROM`] buckets or more
    /// to the mark where the maintenance thread is asked for a spare.
    #[inline]
    pub(crate) fn at_spare_mark(&self) -> bool {
        let n = self.buckets.len();
        self.len == spare_mark(n) && n >= SPARE_FROM
    }

    /// Whether the last insert brought an array of [`SPARE_FROM`] buckets or more
    /// to the mark where a claim makes the spare that the maintenance thread has not
    /// made yet ([`late_mark`]).
    #[inline]
    pub(crate) fn at_late_mark(&self) -> bool {
        let n = self.buckets.len();
        self.len == late_mark(n) && n >= SPARE_FROM
    }

    /// The length of the spare a small array (under [`SPARE_FROM`] buckets) could
    /// take, past its mark, if its shard may grow past it (`share`, as in
    /// [`Index::spare_wanted`]): made by the claim that reaches the mark, after it
    /// lets the lock go, so that the doubling moves a few entries an insert instead
    /// of placing them all while the lock is held.
    pub(crate) fn small_spare_wanted(&self, share: usize) -> Option<usize> {
        let n = self.buckets.len();
        (n > 0 && n < SPARE_FROM && self.outgrown_by(share) && self.len >= spare_mark(n))
            .then_some(2 * n)
    }

    /// Whether a shard meant to hold `share` entries may outgrow this array.
    pub(crate) fn outgrown_by(&self, share: usize) -> bool {
        capacity(self.buckets.len()) < share
    }

    /// Entries it takes before the next insert doubles the array.
    pub(crate) fn room(&self) -> usize {
        capacity(self.buckets.len()).saturating_sub(self.len)
    }

    /// Whether `spare` is still of use: of the next doubling's length, with the
    /// index no emptier than three quarters of its room (expiry can take it below,
    /// and far from the doubling).
    pub(crate) fn spare_needed(&self, spare: &Spare) -> bool {
        let n = self.buckets.len();
        spare.buckets() == 2 * n && self.len >= capacity(n) * 3 / 4
    }

    /// The slot bits that hold check bits.
    #[inline]
    fn checks(&self) -> u32 {
        check_mask(self.check_count)
    }

    /// The index whose slab entry `eq` accepts, among those stored under `h`.
    #[inline]
    pub(crate) fn find(&self, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.position(h, eq)
            .map(|(b, i)| self.buckets[b].slots[i] & !self.checks())
    }

    /// Bucket and slot of the index that `eq` accepts, among those stored under `h`.
    #[inline]
    fn position(&self, h: u64, eq: impl FnMut(u32) -> bool) -> Option<(usize, usize)> {
        position_in(&self.buckets, self.checks(), h, eq)
    }

    /// Stores `idx` under `h` (the caller knows it is not there yet). When the index
    /// must grow first, or rebuild because `idx` needs bits its slots keep for
    /// checking, `entries` lists every index already stored with its hash (the
    /// caller reads them from wherever they are cheapest to read in order: a shard
    /// scans its slab front to back rather than chase each bucket's slots into it).
    /// True if the index made a new bucket array (and its [`Index::hint`] changed).
    /// (The shards call [`Index::insert_using`]; the benches and tests this.)
    pub(crate) fn insert<I>(&mut self, h: u64, idx: u32, entries: impl FnOnce() -> I) -> bool
    where
        I: IntoIterator<Item = (u64, u32)>,
    {
        let mut entries = Some(entries);
        self.insert_using(
            h,
            idx,
            |_| (entries.take().expect("listed once without a spare"))(),
            &mut None,
        )
    }

    /// [`Index::insert`], taking `spare` for the new array if it grows into one of
    /// that length, and moving into `spare` a few entries at a time if a move is
    /// under way ([`Index::begin_move`]). `entries(from)` lists the stored indices
    /// from slab index `from` on, in slab order, with their hashes (`idx` not among
    /// them).
    pub(crate) fn insert_using<I>(
        &mut self,
        h: u64,
        idx: u32,
        mut entries: impl FnMut(u32) -> I,
        spare: &mut Option<Spare>,
    ) -> bool
    where
        I: IntoIterator<Item = (u64, u32)>,
    {
        let grow = self.full();
        let rebuild = grow || !self.fits(idx);
        self.largest = self.largest.max(idx);
        if rebuild {
            // A move under way ends by the insert that fills the array, so one still
            // under way here began at a full array (or `idx` needs fewer check bits):
            // the rebuild places every entry, in the spare if it is of the new length.
            self.moving = false;
            let n = if grow {
                (self.buckets.len() * 2).max(1)
            } else {
                self.buckets.len()
            };
            let spare = spare.take_if(|s| grow && s.buckets() == n);
            self.rebuild(n, entries(0), spare);
        }
        self.place(h, idx);
        self.len += 1;
        if self.moving {
            return self.move_some(h, idx, &mut entries, spare) || rebuild;
        }
        rebuild
    }

    /// Whether slab index `idx` fits in a slot beside the check bits, so that storing
    /// it needs no rebuild (every index below 2^16 does).
    pub(crate) fn fits(&self, idx: u32) -> bool {
        idx & self.checks() == 0
    }

    /// Whether the next insert would grow the index first.
    pub(crate) fn full(&self) -> bool {
        self.len + 1 > capacity(self.buckets.len())
    }

    /// The bucket arrays outgrown since the last call, if any. The caller publishes
    /// the new [`Index::hint`] first.
    pub(crate) fn take_retired(&mut self) -> Option<Retired> {
        (!self.retired.is_empty()).then(|| Retired(std::mem::take(&mut self.retired)))
    }

    /// Where the buckets are, for [`prefetch`]: the array's address with the log2 of
    /// its length in the low bits (free: buckets are 64-byte aligned). 0 when empty.
    pub(crate) fn hint(&self) -> usize {
        if self.buckets.is_empty() {
            return 0;
        }
        self.buckets.as_ptr() as usize | self.buckets.len().trailing_zeros() as usize
    }

    /// Puts `idx` in the first free slot on `h`'s probe path (see [`place_in`]).
    fn place(&mut self, h: u64, idx: u32) {
        let checks = self.checks();
        place_in(&mut self.buckets, checks, h, idx);
    }

    /// Removes `idx` stored under `h`. False if it is not there. Only for an index
    /// that is not moving into a spare (see [`Index::remove_using`]).
    #[cfg(test)]
    pub(crate) fn remove(&mut self, h: u64, idx: u32) -> bool {
        self.remove_using(h, idx, &mut None)
    }

    /// Removes `idx` stored under `h`, from `spare` too if the index is moving into
    /// it and has copied `idx` there. False if it is not there.
    pub(crate) fn remove_using(&mut self, h: u64, idx: u32, spare: &mut Option<Spare>) -> bool {
        let checks = self.checks();
        if !remove_in(&mut self.buckets, checks, h, idx) {
            return false;
        }
        self.len -= 1;
        if self.moving {
            let s = spare.as_mut().expect("a moving index has its spare");
            if idx < s.upto {
                let gone = remove_in(&mut s.buckets, check_mask(s.check_count), h, idx);
                debug_assert!(gone, "an entry copied is in the spare");
                s.moved -= 1;
            }
        }
        true
    }

    /// Begins the doubling into `spare` (held by the caller from now on, and passed
    /// to every insert and removal until the move ends): an array of twice this
    /// one's length, clean, whose check bits leave room for every slab index stored
    /// so far. False, and nothing begun, otherwise (the doubling then takes it whole,
    /// as it would any spare of its length, as it does one given at a full array). Lock-free readers keep reading this
    /// array until the move ends.
    pub(crate) fn begin_move(&mut self, spare: &mut Option<Spare>) -> bool {
        let Some(s) = spare.as_mut() else {
            return false;
        };
        let n = 2 * self.buckets.len();
        if self.moving
            || self.buckets.is_empty()
            || !s.clean
            || s.buckets() != n
            || s.check_count != checks_for(n, self.largest)
        {
            return false;
        }
        s.clean = false;
        s.upto = 0;
        s.moved = 0;
        self.moving = true;
        true
    }

    /// Whether the index is moving into its spare.
    pub(crate) fn moving(&self) -> bool {
        self.moving
    }

    /// Gives up a move under way (the spare is to be freed, or an insert needs a
    /// rebuild): the spare keeps what was copied, and is written over before any
    /// later use.
    pub(crate) fn stop_moving(&mut self) {
        self.moving = false;
    }

    /// The move's part of an insert of `idx` under `h`, just placed in this array:
    /// copied into the spare as well if the move has passed it; then the next few
    /// entries in slab order (`entries(from)`: every stored index from `from` on but
    /// `idx`, with its hash, in slab order), and the spare made the array once they
    /// are all in. True if the move ended (the index's array changed).
    fn move_some<I>(
        &mut self,
        h: u64,
        idx: u32,
        entries: &mut impl FnMut(u32) -> I,
        spare: &mut Option<Spare>,
    ) -> bool
    where
        I: IntoIterator<Item = (u64, u32)>,
    {
        let s = spare.as_mut().expect("a moving index has its spare");
        // The spare's slots keep no more check bits than this array's (twice the
        // length, the same largest index), and `idx` fits this array's.
        debug_assert_eq!(idx & check_mask(s.check_count), 0);
        let from = s.upto;
        if idx < from {
            s.place(h, idx);
        }
        // Enough that the move ends before this array fills.
        let left = self.len.saturating_sub(s.moved);
        let room = self.room() + 1;
        let quota = left.div_ceil(room).max(MOVE_STEP);
        let mut copied = 0;
        let mut upto = u32::MAX;
        // In groups whose home buckets are asked for first: each is a cache miss (the
        // spare is larger than this core's cache, and was written on another core),
        // and placing them one after another would take the misses one by one.
        let mut group = [(0u64, 0u32); MOVE_STEP];
        let mut it = entries(from).into_iter();
        'copy: while copied < quota {
            let mut n = 0;
            while n < MOVE_STEP.min(quota - copied) {
                let Some(next) = it.next() else {
                    s.place_all(&group[..n]);
                    break 'copy;
                };
                prefetch_line_for_write(s.home(next.0));
                group[n] = next;
                n += 1;
            }
            s.place_all(&group[..n]);
            copied += n;
        }
        if upto == u32::MAX && copied == quota {
            // Stopped at the quota: the cursor is the next entry, if there is one.
            if let Some((_, e)) = it.next() {
                upto = e;
            }
        }
        if idx >= from && idx < upto {
            s.place(h, idx);
        }
        s.upto = upto;
        if upto == u32::MAX {
            self.end_move(spare);
            return true;
        }
        false
    }

    /// Makes the spare, which now holds every entry, the index's array.
    fn end_move(&mut self, spare: &mut Option<Spare>) {
        let s = spare.take().expect("a moving index has its spare");
        debug_assert_eq!(s.moved, self.len, "every entry was copied");
        self.install(s.buckets, s.check_count);
        self.moving = false;
    }

    /// Makes `buckets` (slots keeping `checks` check bits) the index's array,
    /// retiring the one it replaces for its lock-free readers.
    fn install(&mut self, buckets: Vec<Bucket>, checks: u8) {
        let old = std::mem::replace(&mut self.buckets, buckets);
        self.check_count = checks;
        if old.capacity() > 0 {
            self.retired.push(old);
        }
        self.dirty = true;
    }

    /// Makes a new array of `n` buckets, with room in its slots for every slab index
    /// stored so far, and places `entries` (every stored index,
    /// with its hash) in it again.
    fn rebuild(
        &mut self,
        n: usize,
        entries: impl IntoIterator<Item = (u64, u32)>,
        spare: Option<Spare>,
    ) {
        let checks = checks_for(n, self.largest);
        let fresh = match spare {
            // Written here again: its pages are touched already, so this is a plain
            // write, which also brings the array into this core's caches (it was
            // made on another core): placing the entries into it straight from
            // there took nearly as long as allocating a new one.
            Some(Spare { buckets: mut b, .. }) => {
                debug_assert_eq!(b.len(), n);
                b.fill(Bucket::empty(checks));
                b
            }
            None => vec![Bucket::empty(checks); n],
        };
        self.install(fresh, checks);
        let mut placed = 0;
        for (h, idx) in entries {
            self.place(h, idx);
            placed += 1;
        }
        debug_assert_eq!(placed, self.len, "a rebuild was given every stored entry");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn an_index_is_full_exactly_when_its_next_insert_would_grow_it() {
        let mut ix = Index::try_with_room(100).expect("allocates");
        let room = capacity(ix.buckets.len());
        assert!(room >= 100);
        for i in 0..room as u32 {
            assert!(!ix.full(), "full after {i} of {room}");
            assert!(!ix.insert(
                u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                i,
                Vec::new
            ));
        }
        assert!(ix.full());
        let before = ix.buckets.len();
        let all: Vec<(u64, u32)> = (0..room as u32)
            .map(|i| (u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15), i))
            .collect();
        assert!(ix.insert(7, room as u32, || all));
        assert_eq!(ix.buckets.len(), 2 * before);
        assert!(!ix.full());
    }

    #[test]
    fn room_that_cannot_be_allocated_is_refused() {
        assert!(Index::try_with_room(usize::MAX).is_none());
        assert!(Index::try_with_room(1 << 60).is_none());
        let idx = Index::try_with_room(1_000).unwrap();
        assert!(capacity(idx.buckets.len()) >= 1_000);
        assert!(
            capacity(idx.buckets.len() / 2) < 1_000,
            "the smallest that fits"
        );
        assert_eq!(Index::try_with_room(0).unwrap().bytes(), 0);
    }

    /// A deterministic hash stream (splitmix64).
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Stores `idx` under `h` in the index and in the model.
    fn put(ix: &mut Index, model: &mut HashMap<u32, u64>, idx: u32, h: u64) {
        let m = &*model;
        ix.insert(h, idx, || m.iter().map(|(&i, &h)| (h, i)));
        model.insert(idx, h);
    }

    /// The entries of `model` below index `below`, as growth is given them (the tests
    /// that use it insert indices in increasing order).
    fn stored(model: &HashMap<u32, u64>, below: u32) -> Vec<(u64, u32)> {
        model
            .iter()
            .filter(|&(&i, _)| i < below)
            .map(|(&i, &h)| (h, i))
            .collect()
    }

    /// Checks every stored index is found and the overflow counts are exactly what
    /// the placements imply (no count has saturated in these tests).
    fn check(ix: &Index, model: &HashMap<u32, u64>) {
        assert_eq!(ix.len(), model.len());
        for (&idx, &h) in model {
            assert_eq!(ix.find(h, |i| i == idx), Some(idx), "index {idx} lost");
        }
        if ix.buckets.is_empty() {
            return;
        }
        let mask = ix.buckets.len() - 1;
        let mut want = vec![0u32; ix.buckets.len()];
        for (b, bucket) in ix.buckets.iter().enumerate() {
            for i in 0..SLOTS {
                if bucket.tags[i] != 0 {
                    let slot = bucket.slots[i];
                    let h = model[&(slot & !ix.checks())];
                    assert_eq!(bucket.tags[i], tag(h));
                    assert_eq!(slot & ix.checks(), check_bits(h, ix.checks()));
                    assert_eq!(check_mask(bucket.checks), ix.checks());
                    let mut p = h as usize & mask;
                    while p != b {
                        want[p] += 1;
                        p = (p + 1) & mask;
                    }
                }
            }
        }
        for (b, bucket) in ix.buckets.iter().enumerate() {
            assert_eq!(bucket.over as u32, want[b], "overflow count of bucket {b}");
        }
    }

    #[test]
    fn tag_matching_agrees_with_a_byte_loop() {
        let mut b = Bucket::EMPTY;
        for round in 0..5_000u64 {
            let r = mix(round);
            for (i, t) in b.tags.iter_mut().enumerate() {
                // Few distinct values, so matches are common; 0 and 0x80 included.
                *t = [0u8, 1, 0x7F, 0x80, 0xFF][(r >> (i * 3)) as usize % 5];
            }
            for t in [0u8, 1, 0x7F, 0x80, 0xFF, 0x42] {
                // The bytes after the tags sometimes equal the tag: never a match.
                b.over = if r & 1 == 0 { t } else { !t };
                b.checks = t;
                b._pad = [t; 2];
                let want = (0..SLOTS).fold(0u32, |m, i| m | ((b.tags[i] == t) as u32) << i);
                assert_eq!(b.matches(t), want, "tags {:?}, t {t}", b.tags);
                assert_eq!(b.matches_portable(t), want, "tags {:?}, t {t}", b.tags);
            }
        }
    }

    #[test]
    fn random_inserts_and_removes_agree_with_a_map() {
        let mut ix = Index::default();
        let mut model: HashMap<u32, u64> = HashMap::new();
        let mut next = 0u32;
        for step in 0..20_000u64 {
            let r = mix(step);
            if !r.is_multiple_of(3) || model.is_empty() {
                let h = mix(r);
                put(&mut ix, &mut model, next, h);
                next += 1;
            } else {
                let victim = *model.keys().nth((r >> 8) as usize % model.len()).unwrap();
                let h = model.remove(&victim).unwrap();
                assert!(ix.remove(h, victim));
                assert!(!ix.remove(h, victim), "removed twice");
                assert_eq!(ix.find(h, |i| i == victim), None);
            }
            if step % 997 == 0 {
                check(&ix, &model);
            }
        }
        check(&ix, &model);
        assert!(ix.len() > 5_000);
    }

    /// An index of `buckets` buckets holding `n` entries (indices 0..n) of the hash
    /// stream, and its model.
    fn filled(buckets: usize, n: u32) -> (Index, HashMap<u32, u64>) {
        let mut ix = Index::try_with_room(capacity(buckets)).unwrap();
        assert_eq!(ix.buckets.len(), buckets);
        let mut model = HashMap::new();
        for i in 0..n {
            put(&mut ix, &mut model, i, mix(u64::from(i)));
        }
        (ix, model)
    }

    #[test]
    fn a_spare_is_wanted_from_the_last_sixteenth_of_a_large_arrays_room() {
        let n = SPARE_FROM;
        let mark = capacity(n) - capacity(n) / 16;
        let (mut ix, mut model) = filled(n, mark as u32 - 1);
        assert!(!ix.at_spare_mark());
        assert_eq!(ix.spare_wanted(usize::MAX), None, "not before the mark");
        put(&mut ix, &mut model, mark as u32 - 1, mix(mark as u64 - 1));
        assert!(ix.at_spare_mark(), "the insert that reaches it");
        assert_eq!(ix.spare_wanted(usize::MAX), Some(2 * n));
        assert_eq!(ix.room(), capacity(n) / 16);
        // Not for a shard meant to hold no more than the array has room for.
        assert!(!ix.outgrown_by(capacity(n)));
        assert_eq!(ix.spare_wanted(capacity(n)), None);
        assert!(ix.outgrown_by(capacity(n) + 1));
        assert_eq!(ix.spare_wanted(capacity(n) + 1), Some(2 * n));
        put(&mut ix, &mut model, mark as u32, mix(mark as u64));
        assert!(!ix.at_spare_mark(), "reached once an array");
        assert_eq!(ix.spare_wanted(usize::MAX), Some(2 * n), "still wanted");
        // A smaller array at its mark asks for none: its doubling is short.
        let half = n / 2;
        let (small, _) = filled(half, (capacity(half) - capacity(half) / 16) as u32);
        assert!(!small.at_spare_mark());
        assert_eq!(small.spare_wanted(usize::MAX), None);
    }

    #[test]
    fn a_doubling_places_every_entry_in_the_spare_it_is_given() {
        let n = SPARE_FROM;
        let full = capacity(n) as u32;
        let (mut ix, mut model) = filled(n, full);
        let mut made = Spare::make(2 * n).unwrap();
        // Left as a stale array would be: every other bucket written over (so
        // that placing still finds free slots). The doubling must write it again.
        for b in made.buckets.iter_mut().step_by(2) {
            *b = Bucket {
                tags: [7; SLOTS],
                over: 3,
                checks: 1,
                _pad: [0; 2],
                slots: [u32::MAX; SLOTS],
            };
        }
        let at = made.addr();
        let mut spare = Some(made);
        let h = mix(u64::from(full));
        let m = &model;
        assert!(ix.insert_using(h, full, |_| stored(m, full), &mut spare));
        model.insert(full, h);
        assert!(spare.is_none(), "taken");
        assert_eq!(ix.buckets.len(), 2 * n);
        assert_eq!(
            ix.hint() & !(BUCKET_ALIGN - 1),
            at,
            "the spare is the new array"
        );
        check(&ix, &model);
        for b in &ix.buckets {
            assert_eq!(b.checks, ix.check_count);
        }
        for i in 0..1_000u64 {
            let absent = mix(u64::MAX - i);
            assert_eq!(
                ix.find(absent, |_| true),
                None,
                "nothing left of the old fill"
            );
        }
    }

    #[test]
    fn a_spare_of_another_length_is_left_to_its_owner() {
        let n = SPARE_FROM;
        let full = capacity(n) as u32;
        let (mut ix, mut model) = filled(n, full - 1);
        // No growth: the spare stays, whatever its length.
        let mut spare = Some(Spare::make(2 * n).unwrap());
        let m = &model;
        ix.insert_using(
            mix(u64::from(full - 1)),
            full - 1,
            |_| stored(m, full - 1),
            &mut spare,
        );
        model.insert(full - 1, mix(u64::from(full - 1)));
        assert!(spare.is_some());
        // Growth into an array of another length than the spare's.
        let mut spare = Some(Spare::make(4 * n).unwrap());
        let at = spare.as_ref().unwrap().addr();
        let m = &model;
        assert!(ix.insert_using(mix(u64::from(full)), full, |_| stored(m, full), &mut spare));
        model.insert(full, mix(u64::from(full)));
        assert!(spare.is_some(), "not taken");
        assert_ne!(ix.hint() & !(BUCKET_ALIGN - 1), at);
        check(&ix, &model);
    }

    #[test]
    fn a_spare_is_needed_while_it_is_the_next_arrays_length_and_the_index_stays_full() {
        let n = SPARE_FROM;
        let three_quarters = (capacity(n) * 3 / 4) as u32;
        let (mut ix, mut model) = filled(n, three_quarters);
        let next = Spare::make(2 * n).unwrap();
        assert!(ix.spare_needed(&next));
        assert!(!ix.spare_needed(&Spare::make(n).unwrap()), "another length");
        let last = three_quarters - 1;
        assert!(ix.remove(model[&last], last));
        model.remove(&last);
        assert!(!ix.spare_needed(&next), "emptied below three quarters");
        assert_eq!(next.bytes(), 2 * n * BUCKET_ALIGN);
    }

    /// The entries of `model` from slab index `from` on but `except`, in slab order,
    /// as a shard lists them for a move.
    fn in_slab_order(model: &HashMap<u32, u64>, from: u32, except: u32) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = model
            .iter()
            .filter(|&(&i, _)| i >= from && i != except)
            .map(|(&i, &h)| (h, i))
            .collect();
        v.sort_unstable_by_key(|&(_, i)| i);
        v
    }

    /// Inserts `idx` under `h` as a shard does, passing `spare`.
    fn put_using(
        ix: &mut Index,
        model: &mut HashMap<u32, u64>,
        spare: &mut Option<Spare>,
        idx: u32,
        h: u64,
    ) -> bool {
        let m = &*model;
        let changed = ix.insert_using(h, idx, |from| in_slab_order(m, from, idx), spare);
        model.insert(idx, h);
        changed
    }

    /// Checks a move under way: the spare holds exactly the entries below its
    /// cursor, each found there.
    fn check_spare(ix: &Index, spare: &Option<Spare>, model: &HashMap<u32, u64>) {
        if !ix.moving {
            return;
        }
        let s = spare.as_ref().expect("a moving index has its spare");
        let checks = check_mask(s.check_count);
        let below: Vec<(&u32, &u64)> = model.iter().filter(|&(&i, _)| i < s.upto).collect();
        assert_eq!(
            s.moved,
            below.len(),
            "the spare holds what is below its cursor"
        );
        for (&i, &h) in below {
            assert!(
                position_in(&s.buckets, checks, h, |x| x == i).is_some(),
                "{i} copied"
            );
        }
        let held: usize = s
            .buckets
            .iter()
            .map(|b| b.tags.iter().filter(|&&t| t != 0).count())
            .sum();
        assert_eq!(held, s.moved, "and nothing else");
    }

    /// An index of [`SPARE_FROM`] buckets holding `n` entries, and its model, moving
    /// into a spare of twice its length (whose address comes last).
    fn moving_at(n: u32) -> (Index, HashMap<u32, u64>, Option<Spare>, usize) {
        let (mut ix, model) = filled(SPARE_FROM, n);
        let mut spare = Spare::make(2 * SPARE_FROM);
        let at = spare.as_ref().unwrap().addr();
        assert!(ix.begin_move(&mut spare));
        (ix, model, spare, at)
    }

    #[test]
    fn a_move_copies_a_few_entries_an_insert_and_ends_by_the_time_the_array_fills() {
        let n = SPARE_FROM;
        let mark = spare_mark(n) as u32;
        let (mut ix, mut model, mut spare, at) = moving_at(mark);
        assert!(ix.moving());
        assert!(!ix.begin_move(&mut spare), "once");
        let mut i = mark;
        while ix.moving() {
            let moved = spare.as_ref().unwrap().moved;
            let changed = put_using(&mut ix, &mut model, &mut spare, i, mix(u64::from(i)));
            i += 1;
            match &spare {
                Some(s) => {
                    assert!(!changed);
                    assert!(s.moved - moved <= MOVE_STEP + 1, "a few an insert");
                }
                None => assert!(changed, "the insert that ends it reports the new array"),
            }
            if ix.moving() {
                assert_eq!(ix.buckets.len(), n, "readers' array unchanged while moving");
            }
            if i.is_multiple_of(64) {
                check(&ix, &model);
                check_spare(&ix, &spare, &model);
            }
        }
        assert!(spare.is_none(), "taken");
        assert!(
            ix.len() <= capacity(n),
            "ended by the insert that fills the old array"
        );
        assert_eq!(ix.buckets.len(), 2 * n);
        assert_eq!(
            ix.hint() & !(BUCKET_ALIGN - 1),
            at,
            "the spare is the array"
        );
        assert_eq!(ix.take_retired().map(|r| r.0.len()), Some(1));
        check(&ix, &model);
    }

    #[test]
    fn a_move_begun_at_a_full_array_ends_in_the_insert_that_would_double_it() {
        let full = capacity(SPARE_FROM) as u32;
        let (mut ix, mut model, mut spare, at) = moving_at(full);
        assert!(put_using(
            &mut ix,
            &mut model,
            &mut spare,
            full,
            mix(u64::from(full))
        ));
        assert!(spare.is_none());
        assert_eq!(ix.hint() & !(BUCKET_ALIGN - 1), at);
        check(&ix, &model);
    }

    #[test]
    fn a_move_is_begun_only_into_a_clean_spare_of_twice_the_length() {
        let n = SPARE_FROM;
        let (mut ix, _) = filled(n, spare_mark(n) as u32);
        assert!(!ix.begin_move(&mut None));
        assert!(!ix.begin_move(&mut Spare::make(4 * n)), "another length");
        let mut spare = Spare::make(2 * n);
        assert!(ix.begin_move(&mut spare));
        ix.stop_moving();
        assert!(!ix.moving());
        assert!(!ix.begin_move(&mut spare), "written, not clean");
        // A slab index the spare's slots cannot hold (its check bits reach down to
        // bit 16).
        let mut spare = Spare::make(2 * n);
        ix.largest = 1 << 20;
        assert!(!ix.begin_move(&mut spare));
    }

    #[test]
    fn random_changes_during_moves_agree_with_a_map() {
        let n = SPARE_FROM;
        for round in 0..6u64 {
            let (mut ix, mut model) = filled(n, spare_mark(n) as u32 - 200);
            // Freed slab indices are reused, as a slab's free list does: some new
            // entries land below the move's cursor.
            let mut free: Vec<u32> = Vec::new();
            let mut next = model.len() as u32;
            let mut spare = None;
            let mut begun = false;
            let mut gave_up = false;
            for step in 0..6_000u64 {
                let r = mix(round << 32 | step);
                if !begun && ix.len() >= spare_mark(n) {
                    spare = Spare::make(2 * n);
                    assert!(ix.begin_move(&mut spare));
                    begun = true;
                }
                if round == 5 && ix.moving() && spare.as_ref().is_some_and(|s| s.moved > 3_000) {
                    // Given up part way: the doubling later writes the spare over.
                    ix.stop_moving();
                    gave_up = true;
                }
                if r % 5 < 3 || model.is_empty() {
                    let idx = if r.is_multiple_of(7) && !free.is_empty() {
                        free.swap_remove((r >> 16) as usize % free.len())
                    } else {
                        next += 1;
                        next - 1
                    };
                    put_using(&mut ix, &mut model, &mut spare, idx, mix(r ^ 0x55));
                } else {
                    let victim = *model.keys().nth((r >> 8) as usize % model.len()).unwrap();
                    let h = model.remove(&victim).unwrap();
                    assert!(ix.remove_using(h, victim, &mut spare));
                    assert!(!ix.remove_using(h, victim, &mut spare), "removed twice");
                    free.push(victim);
                }
                if step % 101 == 0 {
                    check(&ix, &model);
                    check_spare(&ix, &spare, &model);
                }
            }
            check(&ix, &model);
            check_spare(&ix, &spare, &model);
            assert!(!ix.moving(), "round {round}: every move ended");
            assert!(ix.buckets.len() >= 2 * n, "round {round}: doubled");
            assert_eq!(gave_up, round == 5);
        }
    }

    /// A slab index at the move's cursor, or just past it, freed and stored again
    /// under another hash while the index moves: the next insert's copies take it
    /// into the spare once (not skipped, not twice); and one below the cursor.
    #[test]
    fn an_entry_stored_where_the_moves_next_copies_are_is_copied_once() {
        for past in [1, 0] {
            let mark = spare_mark(SPARE_FROM) as u32;
            let (mut ix, mut model, mut spare, _) = moving_at(mark);
            // One insert copies the first entries (and leaves its own, at the end of
            // the slab, for later).
            put_using(&mut ix, &mut model, &mut spare, mark, mix(u64::from(mark)));
            let upto = spare.as_ref().unwrap().upto;
            assert!(upto > 0 && upto < mark);
            let reused = upto + past;
            let h = model.remove(&reused).unwrap();
            assert!(ix.remove_using(h, reused, &mut spare));
            put_using(&mut ix, &mut model, &mut spare, reused, mix(u64::MAX - 7));
            assert!(
                spare.as_ref().unwrap().upto > reused,
                "the window passed it"
            );
            check(&ix, &model);
            check_spare(&ix, &spare, &model);
            // And one freed and stored again below the cursor.
            let below = 3;
            let h = model.remove(&below).unwrap();
            assert!(ix.remove_using(h, below, &mut spare));
            check_spare(&ix, &spare, &model);
            put_using(&mut ix, &mut model, &mut spare, below, mix(u64::MAX - 9));
            check_spare(&ix, &spare, &model);
            let mut i = mark + 1;
            while ix.moving() {
                put_using(&mut ix, &mut model, &mut spare, i, mix(u64::from(i)));
                i += 1;
            }
            check(&ix, &model);
        }
    }

    #[test]
    fn overflow_chains_wrap_and_shrink_back() {
        // Every hash has the same home bucket (the last one: low bits all set) and
        // the same tag: the worst case.
        let mut ix = Index::default();
        let mut model = HashMap::new();
        for idx in 0..40u32 {
            let h = 0xAB00_0000_0000_00FF | (idx as u64) << 20;
            put(&mut ix, &mut model, idx, h);
        }
        check(&ix, &model);
        // 40 entries on the last of 4 buckets: the chain wraps round to the first.
        assert_eq!(ix.buckets.len(), 4);
        assert_eq!(ix.buckets[3].over, 28);
        assert_eq!(ix.buckets[0].over, 16);
        // Remove in an order that empties the home bucket first.
        for idx in 0..40u32 {
            let h = model.remove(&idx).unwrap();
            assert!(ix.remove(h, idx));
            check(&ix, &model);
        }
        assert!(ix
            .buckets
            .iter()
            .all(|b| b.over == 0 && b.matches(0) == (1 << SLOTS) - 1));
    }

    /// The candidate a lock-free reader finds from the index's published hint.
    #[allow(unsafe_code)]
    fn candidate(ix: &Index, h: u64) -> Option<u32> {
        // SAFETY: the hint is the live index's own.
        unsafe { HomeBucket::read(ix.hint(), h) }.and_then(|b| b.candidate(h))
    }

    #[test]
    fn the_candidate_is_the_home_buckets_first_slot_with_the_tag() {
        let mut ix = Index::default();
        let h = 0xAB00_0000_0000_0005u64;
        assert_eq!(candidate(&ix, h), None, "an empty index has no candidate");
        let mut model = HashMap::new();
        // Same home bucket, other tags.
        put(&mut ix, &mut model, 7, 0x1100_0000_0000_0005);
        put(&mut ix, &mut model, 8, 0x2200_0000_0000_0005);
        assert_eq!(candidate(&ix, h), None, "no slot there has the tag");
        put(&mut ix, &mut model, 9, h);
        assert_eq!(candidate(&ix, h), Some(9));
        // Another tag in the same bucket: none. A hash sharing the tag, the check
        // bits and the home bucket names the first such slot, which its look-up
        // checks first.
        assert_eq!(candidate(&ix, h ^ 0xFF00_0000_0000_0000), None);
        let twin = h ^ 0x0000_00F0_0000_0000;
        assert_eq!(candidate(&ix, twin), Some(9));
        assert_eq!(ix.find(twin, |i| i == 9), Some(9));
        // The same tag and home bucket but other check bits: no candidate.
        assert_eq!(candidate(&ix, h ^ 0x0000_FF00_0000_0000), None);
        check(&ix, &model);
    }

    #[test]
    fn a_slot_whose_check_bits_differ_is_never_offered_to_eq() {
        let mut ix = Index::default();
        let mut model = HashMap::new();
        // Forty hashes with one tag and one home bucket, differing only in bits 40
        // to 55: the check bits.
        let hash = |i: u64| 0x7700_0000_0000_0003 | i << 40;
        for i in 0..40u32 {
            put(&mut ix, &mut model, i, hash(i as u64));
        }
        check(&ix, &model);
        assert!(ix.checks() != 0, "a small index keeps check bits");
        for i in 0..40u32 {
            let mut asked = Vec::new();
            let found = ix.find(hash(i as u64), |s| {
                asked.push(s);
                s == i
            });
            assert_eq!(found, Some(i));
            assert_eq!(asked, [i], "only the slot whose bits agree is followed");
            // So does the lock-free reader.
            asked.clear();
            let found = lock_free_find(&ix, hash(i as u64), |s| {
                asked.push(s);
                s == i
            });
            assert_eq!(found, Some(i));
            assert_eq!(asked, [i], "lock-free");
        }
        // Absent: same tag and home, check bits no slot holds.
        let mut asked = 0;
        let mut count = |_| {
            asked += 1;
            true
        };
        assert_eq!(ix.find(hash(41), &mut count), None);
        assert_eq!(lock_free_find(&ix, hash(41), &mut count), None);
        assert_eq!(asked, 0);
    }

    /// A look-up as a lock-free reader makes it from the index's published hint.
    fn lock_free_find(ix: &Index, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        lock_free_find_at(ix.hint(), h, eq)
    }

    /// A look-up as a lock-free reader makes it from `hint`, whose array the caller
    /// keeps allocated.
    #[allow(unsafe_code)]
    fn lock_free_find_at(hint: usize, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        // SAFETY: the caller keeps the array allocated (the index's own, or retired
        // and held).
        unsafe { HomeBucket::find_from(hint, h, eq) }
    }

    #[test]
    fn a_slab_index_too_wide_for_the_slots_rebuilds_the_array_with_fewer_checks() {
        let mut ix = Index::default();
        let mut model: HashMap<u32, u64> = HashMap::new();
        for i in 0..100u32 {
            put(&mut ix, &mut model, i, mix(i as u64));
        }
        assert_eq!(ix.checks(), check_mask(MAX_CHECKS as u8));
        let buckets = ix.buckets.len();
        // The arrays outgrown so far.
        drop(ix.take_retired());
        // Indices that need 17, 25, 30 and 32 bits (one more for room, up to 32):
        // each rebuilds the array at the same size, with fewer check bits, and keeps
        // every entry.
        for (idx, checks) in [
            (1u32 << 16, 14u8),
            (1 << 24, 6),
            (1 << 29, 1),
            (u32::MAX - 1, 0),
        ] {
            ix.dirty = false;
            assert!(ix.take_retired().is_none());
            let before = ix.hint();
            let old_model = model.clone();
            let h = mix(idx as u64);
            let stored: Vec<(u64, u32)> = model.iter().map(|(&i, &h)| (h, i)).collect();
            assert!(!ix.fits(idx));
            assert!(ix.insert(h, idx, || stored));
            model.insert(idx, h);
            assert_ne!(ix.hint(), before, "a new array, to publish");
            assert!(ix.dirty, "marked for publication");
            assert_eq!(ix.buckets.len(), buckets);
            assert_eq!(ix.checks(), check_mask(checks), "index {idx}");
            check(&ix, &model);
            for (&i, &h) in &model {
                assert_eq!(
                    lock_free_find(&ix, h, |s| s == i),
                    Some(i),
                    "lock-free, {i}"
                );
            }
            // The old array is kept (retired, not freed), and a reader still holding
            // its hint decodes it with its own check bits.
            let retired = ix.take_retired().expect("the old array is retired");
            for (&i, &h) in &old_model {
                let found = lock_free_find_at(before, h, |s| s == i);
                assert_eq!(found, Some(i), "the old array, {i}");
            }
            drop(retired);
        }
        // Removal under fewer check bits.
        for i in (0..100u32).step_by(3) {
            let h = model.remove(&i).unwrap();
            assert!(ix.remove(h, i));
            assert_eq!(ix.find(h, |s| s == i), None);
        }
        check(&ix, &model);
        // Smaller indices after that rebuild nothing.
        let before = ix.hint();
        put(&mut ix, &mut model, 100, mix(100));
        assert_eq!(ix.hint(), before);
        // Growth keeps room for the largest index stored.
        let mut i = 101u32;
        while ix.buckets.len() == buckets {
            put(&mut ix, &mut model, i, mix(i as u64));
            i += 1;
        }
        assert_eq!(ix.checks(), 0);
        check(&ix, &model);
    }

    #[test]
    fn an_arrays_check_bits_leave_room_for_twice_its_capacity() {
        for buckets in [1usize, 2, 64, 1 << 10, 1 << 14, 1 << 20, 1 << 26] {
            let mask = check_mask(checks_for(buckets, 0));
            assert!(
                (2 * capacity(buckets) as u64) < u64::from(!mask) + 1,
                "{buckets} buckets"
            );
            assert!(mask.count_ones() <= MAX_CHECKS);
        }
        // 16 checks until the slab index needs more than 16 bits.
        assert_eq!(checks_for(1 << 10, 0), 16);
        assert_eq!(checks_for(1 << 14, 0), 13);
        assert_eq!(checks_for(1 << 14, 1 << 20), 10);
        assert_eq!(checks_for(1, u32::MAX), 0);
    }

    #[test]
    fn look_ups_of_absent_hashes_stop() {
        let mut ix = Index::default();
        assert_eq!(ix.find(7, |_| true), None);
        assert!(!ix.remove(7, 0));
        let mut model = HashMap::new();
        for idx in 0..1000u32 {
            let h = mix(idx as u64);
            put(&mut ix, &mut model, idx, h);
        }
        // A hash whose tag matches stored entries is still refused by `eq`.
        for idx in 0..1000u32 {
            let h = model[&idx];
            assert_eq!(ix.find(h, |_| false), None);
        }
    }

    #[test]
    fn a_saturated_overflow_count_stays_and_look_ups_still_end() {
        let mut ix = Index::default();
        let mut model = HashMap::new();
        // 300 entries on one home: more than 255 pass its bucket.
        for idx in 0..300u32 {
            let h = 0x5500_0000_0000_0000 | (idx as u64) << 24;
            put(&mut ix, &mut model, idx, h);
        }
        assert_eq!(ix.buckets[0].over, STICKY);
        for idx in 0..300u32 {
            let h = model.remove(&idx).unwrap();
            assert!(ix.remove(h, idx));
        }
        assert_eq!(
            ix.buckets[0].over, STICKY,
            "a saturated count is never lowered"
        );
        assert_eq!(ix.find(0x5500_0000_0000_0000, |_| true), None);
        assert_eq!(ix.len(), 0);
    }

    #[test]
    fn the_hint_names_the_bucket_array_and_its_size() {
        let mut ix = Index::default();
        assert_eq!(ix.hint(), 0);
        prefetch(0, 42); // nothing to prefetch: no effect
        let model: HashMap<u32, u64> = (0..500u32).map(|i| (i, mix(i as u64))).collect();
        let mut grew = 0;
        for i in 0..500u32 {
            let before = ix.hint();
            if ix.insert(model[&i], i, || stored(&model, i)) {
                grew += 1;
                assert_ne!(ix.hint(), before);
            } else {
                assert_eq!(ix.hint(), before);
            }
            let hint = ix.hint();
            assert_eq!(hint & !(BUCKET_ALIGN - 1), ix.buckets.as_ptr() as usize);
            assert_eq!(1 << (hint & (BUCKET_ALIGN - 1)), ix.buckets.len());
            prefetch(hint, model[&i]);
        }
        // 1, 2, 4, 8, 16, 32, 64 buckets.
        assert_eq!(grew, 7);
    }

    #[test]
    fn memory_is_a_cache_line_per_twelve_slots() {
        let mut ix = Index::default();
        let model: HashMap<u32, u64> = (0..10_000u32).map(|i| (i, mix(i as u64))).collect();
        for i in 0..10_000u32 {
            ix.insert(model[&i], i, || stored(&model, i));
        }
        let buckets = ix.bytes() / 64;
        assert!(buckets.is_power_of_two());
        // At most 7/8 full, at least half of that.
        assert!(10_000 * 8 <= buckets * SLOTS * 7);
        assert!(10_000 * 16 > buckets * SLOTS * 7);
    }
}
