//! Build options around a fixture mailing and the tracked tokens of a
//! built letter.

use linktrack::builder::{self, BuildOptions, Output};
use linktrack::store::links::LinkKind;
use linktrack::token::Token;
use std::path::{Path, PathBuf};

pub const BASE: &str = "https://t.example.test";

pub fn options(dir: &Path, mailing: PathBuf, recipients: PathBuf) -> BuildOptions {
    BuildOptions {
        mailing,
        recipients,
        out: Output::File(dir.join("letters.jsonl")),
        rejects: dir.join("rejects.jsonl"),
        base_url: BASE.into(),
        batch_size: 3,
        workers: 2,
        id_block: 4,
        progress: false,
        smtp: None,
        pools: None,
        return_path: None,
        delivery_log: None,
        bounce_domain: None,
        summary: None,
        max_letter_bytes: builder::DEFAULT_MAX_LETTER_BYTES,
        secret: None,
        new_secret: false,
        columns: Vec::new(),
        letter_by_letter: false,
    }
}

/// Every tracked token in a letter's HTML and headers, with its kind.
pub fn tracked_tokens(text: &str) -> Vec<(LinkKind, Token)> {
    let mut found = Vec::new();
    for (marker, kind) in [
        ("/c/", LinkKind::Click),
        ("/i/", LinkKind::Image),
        ("/o/", LinkKind::Pixel),
        ("/u/", LinkKind::Unsubscribe),
    ] {
        let needle = format!("{BASE}{marker}");
        for (at, _) in text.match_indices(&needle) {
            let start = at + needle.len();
            if let Some(hex) = text.get(start..start + 32) {
                found.push((kind, Token::parse(hex).expect("a valid token")));
            }
        }
    }
    found
}

/// `linktrack build --no-progress` on `database_url`, to be given its
/// mailing, recipients and output: the one place a test spells the build's
/// command (the binary under test, its database, quiet logs).
pub fn build_command(database_url: &str) -> std::process::Command {
    let mut command = std::process::Command::new(super::linktrack_binary());
    command
        .args(["build", "--no-progress"])
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn");
    command
}
