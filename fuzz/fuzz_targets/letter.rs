//! Any bytes into the dead-letter decoder: an error or a letter, never a panic, and a
//! decoded letter re-encodes to exactly the bytes it came from (the encoding is
//! canonical: the decoder refuses unknown versions, states and flags, a non-zero
//! reserved byte, text that is not UTF-8, and trailing bytes). The decoder a store's
//! open uses, which leaves the payload out, refuses and accepts exactly the same
//! bytes (checked inside `letter_roundtrip`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(again) = idem::__fuzz::letter_roundtrip(data) {
        assert_eq!(again, data, "decode/encode is not the identity");
    }
});
