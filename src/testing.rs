//! Tests that need real data: the data folders of [`crate::data`] (datasets, tokenizer, few-shot files) or a
//! model checkpoint that `scripts/setup.sh` downloads.
//!
//! Where the data is missing, such a test prints `skipped: TEST: needs PATH — HOW TO GET IT` on the test
//! binary's standard error (not captured, so `cargo test` shows it) and returns early. With
//! `RAGTIME_REQUIRE_DATA=1` (set by `.ci/run`) a missing file fails the test instead.
//!
//! ```ignore
//! let tok = ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");   // returns if missing
//! let Some(p) = ragtime::testing::require("qa/nq/NQ-open.dev.jsonl") else { return };
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::data;

/// The environment variable that turns a skip into a failure.
pub const ENV_REQUIRE: &str = "RAGTIME_REQUIRE_DATA";

/// Whether missing data fails the test (`RAGTIME_REQUIRE_DATA` set to anything but empty or `0`).
pub fn data_required() -> bool {
    std::env::var(ENV_REQUIRE).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The data file or folder `rel` (relative to the data folders) if present; else reports the skip and returns
/// `None` (or panics under `RAGTIME_REQUIRE_DATA=1`).
pub fn require(rel: &str) -> Option<PathBuf> {
    if let Some((p, _)) = data::find(Path::new(rel)) {
        return Some(p);
    }
    let how = match rel.strip_prefix("qa/").and_then(|r| r.split('/').next()) {
        Some(name) => {
            format!("run `ragtime data fetch {name}` or place the shared data beside the repository (../shared/data)")
        }
        None => {
            "place the shared data beside the repository (../shared/data) or point RAGTIME_DATA at a copy".to_string()
        }
    };
    missing(&data::shared_dir().join(rel), &how)
}

/// The model checkpoint `checkpoints/NAME` if present; else reports the skip (see [`require`]).
pub fn require_checkpoint(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("checkpoints").join(name);
    if crate::io::present_or_refused(&p) {
        return Some(p);
    }
    missing(&p, "run scripts/setup.sh to download it (`scripts/setup.sh --help` lists the optional models)")
}

fn missing(path: &Path, how: &str) -> Option<PathBuf> {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    if data_required() {
        panic!("{test}: needs {} and {ENV_REQUIRE} is set: {how}", path.display());
    }
    // Written to the stream itself: libtest captures print!/eprint! of passing tests, which would hide the skip.
    let _ = writeln!(std::io::stderr().lock(), "skipped: {test}: needs {} — {how}", path.display());
    None
}

/// `ragtime::require_data!("rel/path")`: the path from [`require`], or `return` from the enclosing test.
#[macro_export]
macro_rules! require_data {
    ($rel:expr) => {
        match $crate::testing::require($rel) {
            Some(p) => p,
            None => return,
        }
    };
}

/// `ragtime::require_checkpoint!("name.gguf")`: the path from [`require_checkpoint`], or `return`.
#[macro_export]
macro_rules! require_checkpoint {
    ($name:expr) => {
        match $crate::testing::require_checkpoint($name) {
            Some(p) => p,
            None => return,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_data_skips_or_fails_as_configured() {
        let r = std::panic::catch_unwind(|| {
            (require("qa/no-such-dataset/none.json"), require_checkpoint("no-such-model.gguf"))
        });
        if data_required() {
            assert!(r.is_err());
        } else {
            assert_eq!(r.unwrap(), (None, None));
        }
    }
}
