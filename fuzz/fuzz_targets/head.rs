//! A raw response head, as `explain_headers` reads it, through the head
//! parser and then the rate-limit parser: see `../check_head.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../check_head.rs");

fuzz_target!(|data: &[u8]| check(data));
