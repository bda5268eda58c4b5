//! The shipped deployment files: docker-compose.yml as `docker-compose
//! config` resolves it with an .env from `scripts/gen-env`, checked for the
//! unsafe settings issue 25 found in it (a published database port, empty
//! passwords, root), and the server's refusal of a placeholder secret.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn require(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        found,
        "{tool} is missing: install Debian's {package} package \
         (scripts/test does it in scripts/prepare.d)"
    );
}

/// An .env written by `scripts/gen-env` into `dir`.
fn generated_env(dir: &Path) -> PathBuf {
    let env_file = dir.join("env");
    let out = Command::new(repo().join("scripts/gen-env"))
        .arg("https://t.example.com")
        .env("LINKTRACK_ENV_FILE", &env_file)
        .output()
        .expect("running scripts/gen-env");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env_file
}

/// `docker-compose config` of the shipped file; `Err` holds its stderr.
fn compose_config(env_file: &Path) -> Result<String, String> {
    require("docker-compose", "docker-compose");
    let mut command = Command::new("docker-compose");
    command
        .current_dir(repo())
        .args(["--project-directory", "."]);
    command.arg("--env-file").arg(env_file);
    // The variables gen-env writes must come from the file, not the test's environment.
    for name in [
        "MARIADB_PASSWORD",
        "MARIADB_ROOT_PASSWORD",
        "LINKTRACK_SECRET",
        "LINKTRACK_PREVIOUS_SECRETS",
        "LINKTRACK_API_TOKEN",
        "LINKTRACK_BASE_URL",
    ] {
        command.env_remove(name);
    }
    let out = command
        .args(["-f", "docker-compose.yml", "config"])
        .output()
        .expect("running docker-compose");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// YAML to JSON through python3's yaml module (docker-compose's own
/// dependency, so present wherever docker-compose is).
fn yaml_to_json(yaml: &str) -> Value {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, json, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python3 could not read the YAML");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn is_database(service: &Value) -> bool {
    let image = service["image"].as_str().unwrap_or_default();
    image.starts_with("mariadb") || image.starts_with("mysql")
}

/// A service's environment as (name, value) pairs: compose resolves it to a map.
fn environment(service: &Value) -> Vec<(String, String)> {
    let Some(map) = service["environment"].as_object() else {
        return Vec::new();
    };
    map.iter()
        .map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (name.clone(), text)
        })
        .collect()
}

/// What makes a resolved compose file unsafe, one line per finding.
fn unsafe_settings(config: &Value, dockerfile: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Some(services) = config["services"].as_object() else {
        return vec!["no services".to_owned()];
    };
    for (name, service) in services {
        if is_database(service) && service.get("ports").is_some() {
            found.push(format!("{name}: the database publishes a port"));
        }
        for port in service["ports"].as_array().into_iter().flatten() {
            let text = port.to_string();
            if text.contains("3306") {
                found.push(format!("{name}: port 3306 published ({text})"));
            }
        }
        for (var, value) in environment(service) {
            let secret = ["PASSWORD", "SECRET", "TOKEN"]
                .iter()
                .any(|w| var.contains(w));
            // An empty ring of previous secrets is a fresh install's.
            let optional = var == "LINKTRACK_PREVIOUS_SECRETS";
            if secret && !optional && value.trim().is_empty() {
                found.push(format!("{name}: {var} is empty"));
            }
            if var.contains("ALLOW_EMPTY") {
                found.push(format!("{name}: {var} allows an empty password"));
            }
            if var == "DATABASE_URL" {
                let credentials = value
                    .split_once("://")
                    .and_then(|(_, rest)| rest.split_once('@'))
                    .map(|(credentials, _)| credentials.to_owned())
                    .unwrap_or_default();
                let (user, password) = credentials.split_once(':').unwrap_or((&credentials, ""));
                if user.is_empty() || user == "root" {
                    found.push(format!("{name}: DATABASE_URL connects as root"));
                }
                if password.is_empty() {
                    found.push(format!("{name}: DATABASE_URL has no password"));
                }
            }
        }
        if let Some(user) = service["user"].as_str() {
            if user == "root" || user == "0" || user.starts_with("0:") || user.starts_with("root:")
            {
                found.push(format!("{name}: runs as {user}"));
            }
        }
        if service["restart"].as_str() != Some("unless-stopped") {
            found.push(format!("{name}: restart is not unless-stopped"));
        }
        if service.get("healthcheck").is_none() {
            found.push(format!("{name}: no health check"));
        }
    }
    let last_user = dockerfile
        .lines()
        .rev()
        .take_while(|line| !line.trim_start().starts_with("FROM "))
        .find_map(|line| line.trim_start().strip_prefix("USER "));
    match last_user.map(str::trim) {
        None => found.push("Dockerfile: the image runs as root (no USER)".to_owned()),
        Some(user) if user == "root" || user.starts_with("0") || user.starts_with("root:") => {
            found.push(format!("Dockerfile: USER {user}"))
        }
        Some(_) => {}
    }
    found
}

fn shipped() -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let env_file = generated_env(dir.path());
    let yaml =
        compose_config(&env_file).unwrap_or_else(|err| panic!("docker-compose config: {err}"));
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    (yaml_to_json(&yaml), dockerfile)
}

#[test]
fn the_compose_file_validates_and_is_safe_by_default() {
    let (config, dockerfile) = shipped();
    assert_eq!(unsafe_settings(&config, &dockerfile), Vec::<String>::new());
    let services = config["services"].as_object().unwrap();
    assert!(services.contains_key("rotate"), "no rotate service");
    // The published server port is on the host's loopback, for the proxy.
    let ports = services["linktrack"]["ports"].to_string();
    assert!(ports.contains("127.0.0.1"), "{ports}");
    let dockerignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    assert!(
        dockerignore.lines().any(|l| l.trim() == "target/"),
        "{dockerignore}"
    );
}

#[test]
fn compose_refuses_to_start_without_the_generated_env() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("env");
    std::fs::write(&empty, "").unwrap();
    let err = compose_config(&empty).expect_err("config resolved without .env");
    assert!(err.contains("run scripts/gen-env"), "{err}");
}

/// The checker is not vacuous: each unsafe setting of the old file is found.
#[test]
fn the_safety_check_finds_each_unsafe_setting() {
    let (config, dockerfile) = shipped();
    let mut bad = config.clone();
    bad["services"]["db"]["ports"] = serde_json::json!(["3306:3306"]);
    bad["services"]["db"]["environment"]["MARIADB_ALLOW_EMPTY_ROOT_PASSWORD"] = "yes".into();
    bad["services"]["db"]["environment"]["MARIADB_PASSWORD"] = "".into();
    bad["services"]["linktrack"]["environment"]["DATABASE_URL"] =
        "mysql://root@db:3306/linktrack".into();
    bad["services"]["linktrack"]["user"] = "root".into();
    bad["services"]["rotate"]
        .as_object_mut()
        .unwrap()
        .remove("healthcheck");
    let found = unsafe_settings(&bad, &dockerfile).join("\n");
    for expected in [
        "db: the database publishes a port",
        "db: port 3306 published",
        "db: MARIADB_ALLOW_EMPTY_ROOT_PASSWORD allows an empty password",
        "db: MARIADB_PASSWORD is empty",
        "linktrack: DATABASE_URL connects as root",
        "linktrack: DATABASE_URL has no password",
        "linktrack: runs as root",
        "rotate: no health check",
    ] {
        assert!(
            found.contains(expected),
            "{expected} not found in:\n{found}"
        );
    }
    let rootful = dockerfile.replace("USER linktrack:linktrack", "");
    assert!(unsafe_settings(&config, &rootful)
        .iter()
        .any(|f| f.contains("runs as root")));
}

#[test]
fn serve_refuses_a_placeholder_secret_before_starting() {
    let out = Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env("DATABASE_URL", "mysql://nobody@127.0.0.1:1/none")
        .env("LINKTRACK_SECRET", "change-me")
        .env_remove("LINKTRACK_API_TOKEN")
        .output()
        .expect("running linktrack");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("LINKTRACK_SECRET is a placeholder (\"change-me\")"),
        "{stderr}"
    );
}

/// Issue 43: a padded admin token, or one of only spaces, is refused at
/// start, naming the setting (accepted, nothing could ever authenticate).
#[test]
fn serve_refuses_padded_and_blank_tokens_before_starting() {
    for (name, value, says) in [
        (
            "LINKTRACK_ADMIN_TOKEN",
            "  padded-admin-token-0123  ",
            "LINKTRACK_ADMIN_TOKEN has white space at its start or end",
        ),
        (
            "LINKTRACK_API_TOKEN",
            "                ",
            "LINKTRACK_API_TOKEN is only white space",
        ),
    ] {
        let out = Command::new(crate::common::linktrack_binary())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--admin-listen", "127.0.0.1:0"])
            .env("DATABASE_URL", "mysql://nobody@127.0.0.1:1/none")
            .env_remove("LINKTRACK_SECRET")
            .env_remove("LINKTRACK_API_TOKEN")
            .env_remove("LINKTRACK_ADMIN_TOKEN")
            .env(name, value)
            .output()
            .expect("running linktrack");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}={value:?} accepted: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(
            !stderr.contains(value.trim()) || value.trim().is_empty(),
            "never printed: {stderr}"
        );
    }
}

/// The gauges the alert rules use come from a running server: database up,
/// days of partitions ahead, and the last successful `partitions rotate`
/// (written by the real binary).
#[tokio::test]
async fn serve_exports_the_gauges_the_alerts_read() {
    use crate::common::wait::{eventually, PATIENCE};
    use crate::common::{linktrack, metric_value, metrics_text, TestDb, TestServer};
    let db = TestDb::new().await;
    let out = linktrack(&db, &["partitions", "rotate", "--ahead-days", "5"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rotated_at = chrono::Utc::now().timestamp() as f64;
    let app = TestServer::start(db.pool.clone(), |settings| settings).await;
    // The worker reads the gauges as the server starts, one query after
    // another: wait until every gauge of the round is there (a scrape can
    // fall between two of them).
    let round = [
        "linktrack_database_up",
        "linktrack_partitions_days_ahead",
        "linktrack_partitions_rotate_last_success_timestamp_seconds",
        "linktrack_schema_installed_timestamp_seconds",
    ];
    let text = eventually(PATIENCE, "every gauge of the round", || async {
        let text = metrics_text(&app.admin).await;
        match round.iter().all(|name| metric_value(&text, name).is_some()) {
            true => Ok(text),
            false => Err(text),
        }
    })
    .await;
    assert_eq!(
        metric_value(&text, "linktrack_database_up"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric_value(&text, "linktrack_partitions_days_ahead"),
        Some(5.0),
        "{text}"
    );
    let last = metric_value(
        &text,
        "linktrack_partitions_rotate_last_success_timestamp_seconds",
    )
    .unwrap();
    assert!(
        (last - rotated_at).abs() < 120.0,
        "rotate recorded at {last}, ran at {rotated_at}"
    );
    // The test's database was migrated moments ago: the rotate alert's
    // clock on an install that never rotated.
    let installed = metric_value(&text, "linktrack_schema_installed_timestamp_seconds")
        .expect("the schema's install time");
    assert!(
        (installed - rotated_at).abs() < 120.0 && installed <= last + 1.0,
        "schema installed at {installed}, rotated at {last}"
    );
    app.stop().await;
}

fn promtool(args: &[&str]) -> String {
    require("promtool", "prometheus");
    let out = Command::new("promtool")
        .current_dir(repo().join("deploy/prometheus"))
        .args(args)
        .output()
        .expect("running promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn the_alert_rules_check_and_pass_their_unit_tests() {
    let checked = promtool(&["check", "rules", "alerts.yml"]);
    assert!(checked.contains("SUCCESS: 10 rules found"), "{checked}");
    promtool(&["test", "rules", "alerts_test.yml"]);
}

/// Every metric an alert reads is one the server exports (or Prometheus's own `up`).
#[test]
fn the_alerts_use_only_exported_metrics() {
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let mut sources = String::new();
    for dir in ["src"] {
        for entry in walk(&repo().join(dir)) {
            sources.push_str(&std::fs::read_to_string(entry).unwrap());
        }
    }
    let mut used: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("linktrack_"))
        .collect();
    used.sort_unstable();
    used.dedup();
    assert!(used.len() >= 7, "{used:?}");
    for metric in used {
        assert!(
            sources.contains(&format!("\"{metric}\"")),
            "{metric} is not exported by src/"
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// docs/deploy.md's backup and restore, as written there: `mariadb-dump
/// --single-transaction` of a database holding links and events, restored
/// into another database with the `mariadb` client; a server on the
/// restored copy still redirects a click on the old link over a socket,
/// and the events came along.
#[tokio::test]
async fn a_dump_restored_into_another_database_still_redirects_old_links() {
    use crate::common::{add_link, client, db, wait_for_events};
    use crate::common::{server_url, TestDb, TestServer};
    use linktrack::store::links::LinkKind;
    require("mariadb-dump", "mariadb-client");
    let source = db().await;
    let token = add_link(
        &source.pool,
        LinkKind::Click,
        "https://example.com/old-letter",
        1,
    )
    .await;
    let app = TestServer::start(source.pool.clone(), |settings| settings).await;
    let clicked = client()
        .get(format!("{}/c/{token}", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(clicked.status(), 302);
    app.stop().await;
    let events_before = wait_for_events(&source.pool, 1).await;
    assert_eq!(events_before.len(), 1);

    // Dump and restore through the command-line clients, as the guide does.
    let (host, port) = ("127.0.0.1", "3306");
    assert!(
        server_url().ends_with("127.0.0.1:3306"),
        "this test dumps the default server"
    );
    let dump = tempfile::NamedTempFile::new().unwrap();
    let dumped = Command::new("mariadb-dump")
        .args([
            "--single-transaction",
            "--routines",
            "--triggers",
            "--events",
        ])
        .args(["-h", host, "-P", port, "-u", "root", &source.name])
        .stdout(dump.reopen().unwrap())
        .output()
        .unwrap();
    assert!(
        dumped.status.success(),
        "{}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    let restored = TestDb::new().await; // migrated, then replaced by the dump
    let loaded = Command::new("mariadb")
        .args(["-h", host, "-P", port, "-u", "root", &restored.name])
        .stdin(dump.reopen().unwrap())
        .output()
        .unwrap();
    assert!(
        loaded.status.success(),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );

    assert_eq!(wait_for_events(&restored.pool, 1).await, events_before);
    let app = TestServer::start(restored.pool.clone(), |settings| settings).await;
    let response = client()
        .get(format!("{}/c/{token}", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 302);
    assert_eq!(
        response.headers()["location"].to_str().unwrap(),
        "https://example.com/old-letter"
    );
    app.stop().await;
    drop(source);
}

/// The install step of README and docs/deploy.md: `cargo install --path .
/// --locked` puts a binary that runs. Installed into a temporary root in
/// the debug profile and the tests' own target directory, so cargo reuses
/// the dependencies this test run built and compiles only linktrack
/// itself (a release install would build every dependency again, minutes
/// on 2 cores); what is tested is the install command, the lock file and
/// the binary target, which the profile does not change. It turns on
/// `test-hooks` as the test build does: cargo's install also puts its
/// build at the path every other test runs (`CARGO_BIN_EXE_linktrack`),
/// while they run, and without the hooks the tests that kill a server
/// through them would fail.
#[test]
fn the_install_step_installs_a_binary_that_runs() {
    let root = tempfile::tempdir().unwrap();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_linktrack"));
    // target/debug/linktrack (or target/<triple>/debug/linktrack).
    let target = binary
        .parent()
        .and_then(Path::parent)
        .expect("the binary's target directory");
    let out = Command::new(env!("CARGO"))
        .current_dir(repo())
        .args([
            "install",
            "--path",
            ".",
            "--locked",
            "--debug",
            "--offline",
            "--features",
            "test-hooks",
            "--root",
        ])
        .arg(root.path())
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("running cargo install");
    assert!(
        out.status.success(),
        "cargo install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = root.path().join("bin").join("linktrack");
    let version = Command::new(&installed)
        .arg("--version")
        .output()
        .expect("running the installed binary");
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("linktrack {}", env!("CARGO_PKG_VERSION"))
    );
}

/// `.env` (every secret, from scripts/gen-env) and the demo's files are
/// never committed by a `git add -A`.
#[test]
fn git_ignores_the_env_file_and_the_demo_output() {
    for path in [".env", "demo-out/cookie-key", "journal/segment"] {
        let out = Command::new("git")
            .current_dir(repo())
            .args(["check-ignore", "--no-index", "-q", path])
            .output()
            .expect("running git");
        assert!(out.status.success(), "{path} is not ignored by .gitignore");
    }
    let out = Command::new("git")
        .current_dir(repo())
        .args(["check-ignore", "--no-index", "-q", "src/lib.rs"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the check is not vacuous");
}
