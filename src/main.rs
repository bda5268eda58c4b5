//! The `linktrack` binary: parse the command line and hand it to the library.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = linktrack::config::Cli::parse();
    match linktrack::cli::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!(
                "linktrack: error: {}",
                linktrack::error_report::report(&err)
            );
            ExitCode::FAILURE
        }
    }
}
