//! Any bytes into the claim-marker journal's reader: markers or an error, never a
//! panic, and every marker it reads encodes to the very slot it was read from. (The
//! header is made to match, and slots whose first byte is odd get their right check
//! word, so that the checks past those are reached too.)

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idem::__fuzz::journal_parse(data);
});
