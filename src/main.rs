use clap::Parser;

mod cli;

/// Exit codes: 0 success; 2 a usage error: clap's own, or a request the command line makes that cannot be met
/// (`ragtime::usage::UsageError`, a bad `--set`); 1 any other error (a file, model, index or disk that is not as
/// it should be). Errors print as `error: ...` with their causes on one line. A closed pipe (`ragtime search ... | head`) ends the process quietly, as it does other Unix tools;
/// any other failure to write (a full disk) is an error naming the OS error. A panic (a bug, or a dependency
/// that panics on bad input) is reported as an error too, with the panic's backtrace only when `RUST_BACKTRACE`
/// asks for it.
fn main() {
    restore_sigpipe();
    let backtrace = std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0");
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if backtrace {
            default_hook(info)
        }
    }));
    let args = cli::Cli::parse();
    let code = match std::panic::catch_unwind(|| cli::run(args)) {
        Ok(Ok(())) => 0,
        Ok(Err(err)) => {
            eprintln!("error: {err:#}");
            ragtime::usage::exit_code(&err)
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            eprintln!("error: {msg}");
            1
        }
    };
    std::process::exit(code);
}

/// Rust ignores SIGPIPE, which turns a write to a closed pipe into an error (a panic inside `println!`); the
/// default action ends the process silently instead.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid handler for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
