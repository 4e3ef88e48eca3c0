//! The command line's error: a request that cannot be met as given — a flag's value that fails a check clap
//! cannot make (a split the dataset does not have, an empty prompt), two flags that contradict each other, a
//! `--set` override that names no setting. The binary exits with 2 for it, as for clap's own usage errors, and
//! with 1 for every other error (a file, a model, an index or the disk that is not as it should be); see
//! [`exit_code`].
//!
//! The other layers' errors, each in its own module: [`crate::config::ConfigError`] (method configs and `--set`),
//! [`crate::io::FileError`] (files: not found, refused by the OS, malformed),
//! [`crate::model::ModelError`] (model files and their metadata), [`crate::retrieval::IndexError`] (search
//! indexes), [`crate::model::engine::ContextOverflow`] (decoding past the model's positions),
//! [`crate::data::fetch::DownloadError`] (downloads). Pipelines carry them in an [`anyhow::Error`] with the context
//! of what they were doing; the binary prints the whole chain on one line (`error: a: b: c`).

/// A command-line request that cannot be met as given. The message starts with the flag (`--split nope: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Returns early with a [`UsageError`]: `usage_bail!("--split {name}: no such split")`.
#[macro_export]
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err(::anyhow::Error::new($crate::usage::UsageError(format!($($arg)*))))
    };
}

/// The process exit code for `err`: 2 when the command line itself is wrong (a [`UsageError`], or a config error
/// that comes from `--set`), else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    let usage = err.chain().any(|e| {
        e.downcast_ref::<UsageError>().is_some()
            || e.downcast_ref::<crate::config::ConfigError>().is_some_and(crate::config::ConfigError::is_usage)
    });
    if usage {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn split(name: &str) -> anyhow::Result<()> {
        usage_bail!("--split {name}: no such split")
    }

    #[test]
    fn usage_errors_exit_2_through_any_context() {
        let e = split("nope").context("loading the dataset").unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert_eq!(format!("{e:#}"), "loading the dataset: --split nope: no such split");
        let io = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied)).context("x");
        assert_eq!(exit_code(&io), 1);
    }
}
