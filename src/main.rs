use clap::Parser;

mod cli;

fn main() {
    let args = cli::Cli::parse();
    if let Err(err) = cli::run(args) {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
