//! The `linktrack` binary: parse the command line and hand it to the library.

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: a request allocates and frees dozens
/// of small buffers, and glibc's malloc and free showed high in the
/// server's profile per request (`bench_serve`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = linktrack::cli::args::Cli::parse_args();
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
