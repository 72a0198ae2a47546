//! Any bytes into the claim-marker journal's reader: markers or an error, never a
//! panic, and every marker it reads encodes to the very slot it was read from.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idem::__fuzz::journal_parse(data);
});
