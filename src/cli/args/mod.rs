//! The command line: every flag, its environment variable and default
//! (flags first, then environment variables, then defaults that work on a
//! development machine, MariaDB on 127.0.0.1:3306). clap stops here: the
//! runners in `cli/` turn these into the plain settings structs the layers
//! below take, and nothing below `cli` imports clap.
//!
//! One file per runner of `cli/`, holding the flags of the commands it
//! runs: `database` (migrate, partitions, shards), `mailing` (build,
//! suppressions, tracking-optouts, erase, segment, stats rollup, and where
//! tracked URLs point), `bounces`, `export`, `links`, `domains`, `secrets` (and the
//! checks of secret settings), `serve` (serve, demo, and the bot verdicts
//! and live layer it shares with the mailing commands), `webhooks` (and
//! events out), `keys` (the API's keys).

// These doc comments are clap's --help text, written for a terminal:
// `[::]` is an address, not a link, and a URL is shown as it is.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]

pub mod bounces;
pub mod database;
pub mod domains;
pub mod export;
pub mod keys;
pub mod links;
pub mod mailing;
pub mod relay;
pub mod secrets;
pub mod serve;
pub mod webhooks;

use clap::{Args, Parser, Subcommand};
use database::{MigrateArgs, PartitionsCommand, ShardsCommand};
use export::ExportCommand;
use mailing::{
    BuildArgs, EraseArgs, SegmentArgs, StatsCommand, SuppressionsCommand, TrackingOptoutsCommand,
};
use serve::{DemoArgs, ServeArgs};
use webhooks::WebhooksCommand;

pub const DEFAULT_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/linktrack";

#[derive(Debug, Parser)]
#[command(
    name = "linktrack",
    version,
    about = "Email-newsletter link tracking: build tracked letters, serve redirects, rotate daily partitions",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line as `--help` shows it: every `[env: NAME]` without
    /// the variable's current value. clap would print `[env: NAME=]` for a
    /// variable that is unset, which reads as "set to empty", and the value
    /// of one that is set, which may be a secret.
    pub fn command_for_help() -> clap::Command {
        use clap::CommandFactory;
        hide_env_values(Cli::command())
    }

    /// Parse the process's arguments (exits with clap's message on an error).
    pub fn parse_args() -> Cli {
        use clap::FromArgMatches;
        let matches = Cli::command_for_help().get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
    }
}

fn hide_env_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}

/// Flags every subcommand accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// MySQL or MariaDB URL (mysql:// or mariadb://; any other scheme is
    /// refused); the database in it is the one linktrack uses.
    // The URL may carry a password: never echo the environment's value in --help.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, global = true, hide_env_values = true, value_name = "URL")]
    pub database_url: String,

    /// A Spider cluster's data nodes: comma-separated MySQL URLs (each with
    /// its database). DATABASE_URL is then the head, the one server every
    /// command talks to; unset is a single server. See docs/scaling.md.
    #[arg(
        long,
        env = "LINKTRACK_SHARDS",
        global = true,
        hide_env_values = true,
        value_name = "URL,URL,…"
    )]
    pub shards: Option<String>,

    /// Log as JSON lines instead of human-readable text (filter with RUST_LOG).
    #[arg(long, env = "LINKTRACK_LOG_JSON", global = true)]
    pub log_json: bool,
}

// Parsed once per run: `serve`'s many flags make its variant the largest,
// which costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the schema (creates the database if it is missing).
    Migrate(MigrateArgs),
    /// Manage the daily partitions of `links` and `events`.
    #[command(subcommand)]
    Partitions(PartitionsCommand),
    /// Build tracked letters for one mailing. Every row is accounted for:
    /// read = built + suppressed + rejected (see --summary). Exit status:
    /// 0 all built (suppressed rows included), 2 some recipients rejected or
    /// refused by the MTA (see the rejects file), 1 failure or a refused
    /// file (an unterminated or row-swallowing quote, a binary file, a
    /// creative over --max-letter-bytes).
    Build(BuildArgs),
    /// Manage the suppression list (addresses never sent to).
    #[command(subcommand)]
    Suppressions(SuppressionsCommand),
    /// Mail that comes back: bounces and complaints feed the suppression
    /// list (docs/bounces.md).
    #[command(subcommand)]
    Bounces(bounces::BouncesCommand),
    /// Manage the tracking opt-out list (addresses sent to, never tracked).
    #[command(subcommand, name = "tracking-optouts")]
    TrackingOptouts(TrackingOptoutsCommand),
    /// Run the tracking HTTP server: redirects, open pixel, image proxy, unsubscribe.
    Serve(ServeArgs),
    /// An SMTP relay in front of the sending pool's MTA: every message
    /// other platforms send through it is tracked as `build` tracks a
    /// letter, one letter per recipient, spooled on disk before the 250,
    /// and forwarded to --smtp (docs/relay.md).
    Relay(relay::RelayArgs),
    /// The whole loop on the fixtures: migrate, create partitions, build the
    /// fixture mailing, print tracked URLs to open, then serve them.
    Demo(DemoArgs),
    /// Erase an address from every copy: links, events, the outbox and its
    /// dead letters, MTA replies, personalised URLs, last open days, Redis
    /// (with REDIS_URL) and every running server's cache and journal (it
    /// waits for them). Its suppression and tracking opt-out entries are
    /// kept as a keyed hash. Prints what it changed per table; safe to repeat.
    /// See docs/privacy.md.
    Erase(EraseArgs),
    /// Print the addresses that clicked links with the given tags (needs REDIS_URL).
    Segment(SegmentArgs),
    /// Statistics maintenance.
    #[command(subcommand)]
    Stats(StatsCommand),
    /// Engagement data out: `export recipients --mailing ID [--format
    /// csv|jsonl]`, one row per letter (docs/operate.md, "Exports").
    #[command(subcommand)]
    Export(ExportCommand),
    /// Events out: the webhook and AMQP endpoints, their backlog and dead
    /// letters (the same settings as `serve`).
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// The seal keys of tracking tokens: list them, rotate to a new
    /// LINKTRACK_SECRET, retire one whose secret is lost (docs/token.md,
    /// "Rotating the secret").
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// A Spider cluster's data nodes and tables: each node's status, moving
    /// tables to another node (how a cluster grows; docs/scaling.md
    /// "Adding a data node").
    #[command(subcommand)]
    Shards(ShardsCommand),
    /// Tracking domains per sender: add, remove, list, verify their DNS
    /// (docs/domains.md, "Tracking domains").
    #[command(subcommand)]
    Domains(domains::DomainsCommand),
    /// A sent mailing's links: list where they lead, repoint them
    /// (docs/serve.md, "Repointing a sent link").
    #[command(subcommand)]
    Links(links::LinksCommand),
    /// Keys of the HTTP API, each limited to its scopes: create, list,
    /// revoke (docs/api.md, "Keys and scopes").
    #[command(subcommand)]
    Keys(keys::KeysCommand),
}

#[cfg(test)]
mod tests {
    use super::secrets::{check_secret, WeakSecret};
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn placeholder_and_short_secrets_are_refused_by_name() {
        for placeholder in [
            "change-me",
            "CHANGE-ME",
            "changeme",
            "<secret>",
            "please-change-me-now",
        ] {
            let err = check_secret("LINKTRACK_SECRET", Some(placeholder)).unwrap_err();
            assert!(
                matches!(err, WeakSecret::Placeholder { .. }),
                "{placeholder}: {err}"
            );
            assert!(
                err.to_string()
                    .starts_with("LINKTRACK_SECRET is a placeholder"),
                "{err}"
            );
        }
        let err = check_secret("LINKTRACK_API_TOKEN", Some("abc123")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "LINKTRACK_API_TOKEN has 6 characters, fewer than 16: generate one with \
             `openssl rand -hex 32` (docs/deploy.md, \"Secrets\")"
        );
        assert!(check_secret("LINKTRACK_SECRET", None).is_ok());
        // Padding and blanks are refused, naming the setting.
        let err =
            check_secret("LINKTRACK_ADMIN_TOKEN", Some("  padded-admin-token-0123  ")).unwrap_err();
        assert!(matches!(err, WeakSecret::Padded { .. }), "{err}");
        assert!(err
            .to_string()
            .starts_with("LINKTRACK_ADMIN_TOKEN has white space"));
        let err = check_secret("LINKTRACK_API_TOKEN", Some(&" ".repeat(16))).unwrap_err();
        assert!(matches!(err, WeakSecret::Blank { .. }), "{err}");
        assert!(check_secret("LINKTRACK_SECRET", Some("tab\tinside-0123456789")).is_ok());
        assert!(check_secret("LINKTRACK_SECRET", Some(&"ab12".repeat(16))).is_ok());
    }

    #[test]
    fn serve_derives_its_base_url_from_listen_when_none_is_given() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Serve(serve) => serve.base_url(),
            other => panic!("parsed as {other:?}"),
        };
        assert_eq!(
            parse(&["linktrack", "serve", "--listen", "127.0.0.1:9000"]),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            parse(&["linktrack", "serve", "--listen", "0.0.0.0:8080"]),
            "http://localhost:8080"
        );
        assert_eq!(
            parse(&[
                "linktrack",
                "serve",
                "--listen",
                "[::]:80",
                "--base-url",
                "https://t.example.com"
            ]),
            "https://t.example.com"
        );
    }

    /// Every argument of every subcommand has a help line, and no
    /// `[env: NAME=]` reads as "set to empty".
    #[test]
    fn every_argument_has_help_and_env_names_show_no_value() {
        fn check(command: &mut clap::Command, path: &str) {
            let help = command.render_long_help().to_string();
            assert!(
                !help.contains("=]"),
                "{path}: an env value shown in\n{help}"
            );
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                assert!(
                    arg.get_help().is_some() || arg.get_long_help().is_some(),
                    "{path}: argument {id} has no help line"
                );
            }
            for sub in command.get_subcommands_mut() {
                let sub_path = format!("{path} {}", sub.get_name());
                check(sub, &sub_path);
            }
        }
        let mut command = Cli::command_for_help();
        command.build();
        check(&mut command, "linktrack");
    }

    #[test]
    fn acme_needs_the_tls_listener_and_gives_its_settings() {
        let refused = Cli::try_parse_from([
            "linktrack",
            "serve",
            "--acme-directory",
            "https://acme.example/dir",
        ]);
        let Err(err) = refused else {
            panic!("ACME without --tls-listen is refused");
        };
        assert!(err.to_string().contains("--tls-listen"), "{err}");
        let cli = Cli::try_parse_from([
            "linktrack",
            "serve",
            "--tls-listen",
            "127.0.0.1:8443",
            "--acme-directory",
            "https://acme.example/dir",
            "--acme-renew-before-days",
            "10",
        ])
        .unwrap();
        let Command::Serve(serve) = cli.command else {
            panic!("not serve");
        };
        let tls = serve.tls.settings().expect("TLS settings");
        assert_eq!(tls.listen.port(), 8443);
        let acme = tls.certificates.acme.expect("ACME settings");
        assert_eq!(acme.directory_url, "https://acme.example/dir");
        assert_eq!(
            acme.renew_before,
            Some(std::time::Duration::from_secs(10 * 86_400))
        );
        assert_eq!(tls.certificates.check_every.as_secs(), 3600);
        let plain = Cli::try_parse_from(["linktrack", "serve"]).unwrap();
        let Command::Serve(serve) = plain.command else {
            panic!("not serve");
        };
        assert!(serve.tls.settings().is_none(), "plain HTTP by default");
    }

    #[test]
    fn rotate_flags_parse() {
        let cli = Cli::try_parse_from([
            "linktrack",
            "partitions",
            "rotate",
            "--keep-days",
            "30",
            "--ahead-days",
            "3",
            "--dry-run",
        ])
        .unwrap();
        match cli.command {
            Command::Partitions(PartitionsCommand::Rotate(args)) => {
                assert_eq!(
                    (args.keep_days, args.ahead_days, args.dry_run),
                    (30, 3, true)
                );
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn segment_flags_parse_and_need_a_tag() {
        let cli = Cli::try_parse_from([
            "linktrack",
            "segment",
            "--mailing",
            "m1",
            "--tag",
            "ruby",
            "--and",
            "web",
            "--not",
            "erlang",
            "--not",
            "go",
        ])
        .unwrap();
        match cli.command {
            Command::Segment(args) => {
                assert_eq!(args.mailing, "m1");
                // `--and` is `--tag` again (kept for scripts that use it).
                assert_eq!(args.tag, ["ruby", "web"]);
                assert_eq!(args.not, ["erlang", "go"]);
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["linktrack", "segment", "--mailing", "m1"]).is_err());
    }

    /// Every help text of every command, long form.
    fn every_help() -> Vec<(String, String)> {
        fn walk(command: &mut clap::Command, path: String, out: &mut Vec<(String, String)>) {
            out.push((path.clone(), command.render_long_help().to_string()));
            for sub in command.get_subcommands_mut() {
                let sub_path = format!("{path} {}", sub.get_name());
                walk(sub, sub_path, out);
            }
        }
        let mut command = Cli::command_for_help();
        command.build();
        let mut out = Vec::new();
        walk(&mut command, "linktrack".into(), &mut out);
        out
    }

    /// `README "Section"`, `docs/serve.md, "Section"`: where a text sends
    /// its reader.
    fn references(text: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for (at, _) in text
            .match_indices("README")
            .chain(text.match_indices("docs/"))
        {
            let rest = &text[at..];
            // The file's name ends at a space or a comma (never a quote:
            // that is a file named in code), then the quoted section follows.
            let Some(file_end) = rest.find([' ', ',', '"']) else {
                continue;
            };
            if rest[file_end..].starts_with('"') {
                continue;
            }
            let file = &rest[..file_end];
            let after = rest[file_end..].trim_start_matches([',', ' ', '(']);
            let Some(quoted) = after.strip_prefix('"') else {
                continue;
            };
            let Some(end) = quoted.find('"') else {
                continue;
            };
            let file = if file == "README" { "README.md" } else { file };
            found.push((file.to_owned(), quoted[..end].to_owned()));
        }
        found
    }

    /// The headings (and bold run-in titles) of a Markdown file of the
    /// repository, lowercased.
    fn headings(file: &str) -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{file} is named but cannot be read: {err}"));
        let mut in_code = false;
        let mut found = Vec::new();
        for line in text.lines() {
            if line.starts_with("```") {
                in_code = !in_code;
            } else if !in_code && line.starts_with('#') {
                found.push(
                    line.trim_start_matches('#')
                        .trim()
                        .replace('`', "")
                        .to_lowercase(),
                );
            } else if let Some(run_in) = line
                .trim_start_matches(['-', ' '])
                .strip_prefix("**")
                .and_then(|rest| rest.split_once("**"))
                .filter(|_| !in_code)
            {
                // A paragraph's bold run-in title (`**From the KEY layout.**`).
                found.push(
                    run_in
                        .0
                        .trim_end_matches('.')
                        .replace('`', "")
                        .to_lowercase(),
                );
            }
        }
        found
    }

    fn assert_sections_exist(origin: &str, text: &str) -> usize {
        let mut followed = 0;
        for (file, section) in references(text) {
            let wanted = section.replace('`', "").to_lowercase();
            let found = headings(&file);
            assert!(
                found.iter().any(|h| h.starts_with(&wanted)),
                "{origin} sends the reader to {file} \"{section}\", which has no such section; \
                 its sections: {found:?}"
            );
            followed += 1;
        }
        followed
    }

    /// Every README or docs/ section `--help` names exists.
    #[test]
    fn every_section_the_help_names_exists() {
        let followed: usize = every_help()
            .iter()
            .map(|(path, help)| assert_sections_exist(&format!("`{path} --help`"), help))
            .sum();
        assert!(followed >= 5, "only {followed} references followed");
    }

    /// The same for the messages and comments of the source.
    #[test]
    fn every_section_the_source_names_exists() {
        fn walk(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, files);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut files = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut followed = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // The lines that write references, not this test's own.
            let text: String = text
                .lines()
                .filter(|line| {
                    !line.contains("README \"Section\"") && !line.contains("match_indices")
                })
                .map(|line| {
                    line.trim_start_matches([' ', '/', '!'])
                        .replace("\\\"", "\"")
                        + "\n"
                })
                .collect();
            followed += assert_sections_exist(&file.display().to_string(), &text);
        }
        assert!(followed >= 10, "only {followed} references followed");
    }

    /// One placeholder per kind of value: a flag's value is
    /// shown by what it is, never by the flag's own name.
    #[test]
    fn placeholders_name_kinds_of_values() {
        const KINDS: &[&str] = &[
            "URL",
            "URL,URL,…",
            "ADDR",
            "SECS",
            "MS",
            "DAYS",
            "N",
            "BYTES",
            "FILE",
            "FILE|-",
            "DIR",
            "TOKEN",
            "SECRET",
            "SECRET,SECRET,…",
            "NAME",
            "ID",
            "TAG",
            "PREFIX",
            "REASON",
            "SOURCE",
            "ADDRESS",
            "TIME",
            "DATA_TABLE",
            "SERVER|URL",
            "FIELD=HEADER",
            "FINGERPRINT",
            "CIDR",
            "FORMAT",
            "HOST",
            "DOMAIN",
            "HOST|ADDR",
            "ARN",
            "ACTION",
            "SCOPE[,SCOPE…]",
            "NAME|PREFIX",
            "DOMAIN=SELECTOR:FILE",
        ];
        for (path, help) in every_help() {
            for line in help.lines() {
                let line = line.trim_start();
                if !line.starts_with("--") && !line.starts_with('<') {
                    continue;
                }
                for (at, _) in line.match_indices('<') {
                    let Some(end) = line[at..].find('>') else {
                        continue;
                    };
                    let placeholder = &line[at + 1..at + end];
                    assert!(
                        KINDS.contains(&placeholder),
                        "{path}: <{placeholder}> in {line:?} is not one of {KINDS:?}"
                    );
                }
            }
        }
    }
}
