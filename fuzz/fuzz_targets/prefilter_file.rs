//! A saved prefilter file: the bytes as they are (refused or loaded, never a panic),
//! then as arbitrary generations in a file that passes the checks a fuzzer cannot
//! forge: loading never panics or hangs, and a file that loads saves back to the
//! same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idem::__fuzz::prefilter_load(data);
});
