//! Any bytes into the durable record decoder: an error or a record, never a panic, and
//! a decoded record re-encodes to exactly the bytes it came from (the encoding is
//! canonical, so the decoder accepts nothing it would not write).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(again) = idem::__fuzz::record_roundtrip(data) {
        assert_eq!(again, data, "decode/encode is not the identity");
    }
});
