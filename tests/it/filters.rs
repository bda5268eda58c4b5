//! Issue 41: tracking never makes a letter look worse to a spam filter.
//! Every letter of fixtures/email-corpus is built untracked and in every
//! tracking mode and scored by SpamAssassin (local tests, no Bayes) and by
//! a private rspamd on loopback (network checks off), both from Debian's
//! packages (scripts/prepare.d/70-spam-filters.sh). And the honeypot is
//! not listed by the text browsers readers use (lynx, w3m).

use crate::common::build::options;
use crate::common::wait::{self, PATIENCE};
use crate::common::TestDb;
use linktrack::builder;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tracking host under a real top-level domain: rspamd recognises a URL
/// in the text part only under a known TLD, so `.test` would hide the
/// text part's links from it. Nothing is resolved (DNS is off).
const BASE: &str = "https://click.example.com";

const TRACKED_MODES: [&str; 5] = ["all", "clicks", "opens", "anonymous", "last_open_day"];

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/email-corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .collect();
    files.sort();
    files
}

fn need(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{tool} is missing: run scripts/prepare.d/70-spam-filters.sh (Debian's spamassassin, rspamd, lynx, w3m)"
    );
}

/// Builds `html` as one letter in `mode` and returns its JSON line.
async fn build_one(
    db: &TestDb,
    dir: &Path,
    id: &str,
    html: &str,
    mode: &str,
    extra: &serde_json::Value,
) -> serde_json::Value {
    let mut mailing = serde_json::json!({
        "mailing_id": id, "subject": "Our news this week",
        "from": "News <news@brand.example>", "html": html,
        "personalize": false, "track": mode,
    });
    if let (Some(mailing), Some(extra)) = (mailing.as_object_mut(), extra.as_object()) {
        mailing.extend(extra.clone());
    }
    let path = dir.join("m.json");
    std::fs::write(&path, mailing.to_string()).unwrap();
    std::fs::write(dir.join("r.jsonl"), "{\"email\":\"reader@example.com\"}\n").unwrap();
    let mut options = options(dir, path, dir.join("r.jsonl"));
    options.base_url = BASE.into();
    let summary = builder::run(&db.pool, &options)
        .await
        .unwrap_or_else(|e| panic!("{id} ({mode}): {e}"));
    assert_eq!(summary.letters_built, 1, "{id} ({mode}): {summary}");
    let text = std::fs::read_to_string(dir.join("letters.jsonl")).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// A private rspamd on loopback: its own configuration directory, its DNS
/// pointed at a closed loopback port, the modules that ask the network off.
struct Rspamd {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Rspamd {
    fn start() -> Rspamd {
        need("rspamd");
        need("rspamc");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["local.d", "override.d", "db", "run"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let (normal, controller) = (free_port(), free_port());
        let write = |file: &str, text: String| std::fs::write(root.join(file), text).unwrap();
        write(
            "local.d/options.inc",
            "dns { nameserver = [\"127.0.0.1:9\"]; timeout = 0.2s; retransmits = 1; }\n\
             disable_monitoring = true;\n"
                .into(),
        );
        write(
            "local.d/worker-normal.inc",
            format!("bind_socket = \"127.0.0.1:{normal}\";\ncount = 1;\n"),
        );
        write(
            "override.d/worker-controller.inc",
            format!("bind_socket = \"127.0.0.1:{controller}\";\ncount = 1;\n"),
        );
        write(
            "local.d/logging.inc",
            format!(
                "type = \"file\";\nfilename = \"{}\";\nlevel = \"error\";\n",
                root.join("rspamd.log").display()
            ),
        );
        for off in [
            "worker-proxy.inc",
            "worker-fuzzy.inc",
            "fuzzy_check.conf",
            "rbl.conf",
            "asn.conf",
            "dkim.conf",
            "spf.conf",
            "dmarc.conf",
            "mx_check.conf",
            "neural.conf",
            "url_redirector.conf",
            "rspamd_update.conf",
        ] {
            write(&format!("override.d/{off}"), "enabled = false;\n".into());
        }
        let var = |name: &str, path: &Path| format!("{name}={}", path.display());
        let child = Command::new("rspamd")
            .args([
                "-f",
                "-i",
                "-u",
                "root",
                "-g",
                "root",
                "-c",
                "/etc/rspamd/rspamd.conf",
            ])
            .arg("--var")
            .arg(var("LOCAL_CONFDIR", root))
            .arg("--var")
            .arg(var("DBDIR", &root.join("db")))
            .arg("--var")
            .arg(var("RUNDIR", &root.join("run")))
            .arg("--var")
            .arg(var("LOGDIR", root))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting rspamd");
        let rspamd = Rspamd {
            child,
            address: format!("127.0.0.1:{normal}"),
            _dir: dir,
        };
        rspamd.wait_ready();
        rspamd
    }

    fn wait_ready(&self) {
        let url = format!("http://{}/ping", self.address);
        // Longer than `PATIENCE`: a first start compiles rspamd's rule
        // maps (hyperscan) before a worker answers, minutes on a slow
        // machine even when nothing is wrong.
        let start_up = Duration::from_secs(240);
        let what = format!("rspamd answers on {}", self.address);
        wait::eventually_blocking(start_up, &what, || {
            let out = Command::new("curl")
                .args(["-s", "--max-time", "2", &url])
                .output()
                .map_err(|e| e.to_string())?;
            if out.stdout.starts_with(b"pong") {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stdout).into_owned())
            }
        });
    }

    /// The symbols rspamd finds in each file.
    fn symbols(&self, files: &[PathBuf]) -> BTreeMap<PathBuf, BTreeSet<String>> {
        let mut found = BTreeMap::new();
        for chunk in files.chunks(40) {
            let out = Command::new("rspamc")
                .args(["-h", &self.address, "-t", "60"])
                .args(chunk)
                .output()
                .expect("running rspamc");
            let text = String::from_utf8_lossy(&out.stdout);
            let mut current: Option<PathBuf> = None;
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("Results for file: ") {
                    let name = rest.rsplit_once(" (").map_or(rest, |(name, _)| name);
                    current = Some(PathBuf::from(name));
                    found.insert(PathBuf::from(name), BTreeSet::new());
                } else if let (Some(file), Some(rest)) = (&current, line.strip_prefix("Symbol: ")) {
                    let name = rest.split([' ', '(']).next().unwrap_or(rest).to_owned();
                    found.get_mut(file).unwrap().insert(name);
                }
            }
        }
        for file in files {
            assert!(
                found.contains_key(file),
                "rspamc gave no result for {}",
                file.display()
            );
        }
        found
    }
}

impl Drop for Rspamd {
    fn drop(&mut self) {
        // SIGTERM lets the main process stop its workers. This loop stays
        // a loop, not `eventually`: a drop must not panic, and nothing is
        // asserted here; a main process still up after the grace period is
        // killed instead.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SpamAssassin's score and rules for each file, local tests only, in one
/// process (loading the rules takes seconds).
fn spamassassin(files: &[PathBuf], state: &Path) -> BTreeMap<PathBuf, (f64, BTreeSet<String>)> {
    need("spamassassin");
    const SCRIPT: &str = r#"
use strict; use warnings; use Mail::SpamAssassin;
my $sa = Mail::SpamAssassin->new({ local_tests_only => 1, dont_copy_prefs => 1,
  userprefs_filename => '/dev/null', userstate_dir => shift @ARGV,
  post_config_text => "use_bayes 0\nbayes_auto_learn 0\n" });
$sa->init(1);
for my $file (@ARGV) {
  open(my $fh, '<', $file) or die "$file: $!"; my @lines = <$fh>; close $fh;
  my $mail = $sa->parse(\@lines); my $status = $sa->check($mail);
  printf "%s\t%.3f\t%s\n", $file, $status->get_score, $status->get_names_of_tests_hit;
  $status->finish; $mail->finish;
}
"#;
    let out = Command::new("perl")
        .arg("-e")
        .arg(SCRIPT)
        .arg(state)
        .args(files)
        .output()
        .expect("running perl with Mail::SpamAssassin");
    assert!(
        out.status.success(),
        "SpamAssassin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut fields = line.split('\t');
        let (Some(file), Some(score), rules) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let rules = rules
            .unwrap_or("")
            .split(',')
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .collect();
        found.insert(PathBuf::from(file), (score.parse().unwrap(), rules));
    }
    for file in files {
        assert!(
            found.contains_key(file),
            "SpamAssassin gave no result for {}",
            file.display()
        );
    }
    found
}

/// The corpus built untracked and in every mode: (file index, mode) -> .eml.
async fn build_corpus(
    db: &TestDb,
    dir: &Path,
    extra: serde_json::Value,
) -> BTreeMap<(usize, String), PathBuf> {
    let mut messages = BTreeMap::new();
    let work = dir.join("build");
    std::fs::create_dir_all(&work).unwrap();
    for (n, file) in corpus().iter().enumerate() {
        let html = std::fs::read_to_string(file).unwrap();
        for mode in std::iter::once("none").chain(TRACKED_MODES) {
            let id = format!("f-{n}-{mode}");
            let letter = build_one(db, &work, &id, &html, mode, &extra).await;
            let path = dir.join(format!("{n:02}-{mode}.eml"));
            std::fs::write(&path, letter["message"].as_str().unwrap()).unwrap();
            messages.insert((n, mode.to_owned()), path);
        }
    }
    messages
}

#[tokio::test]
async fn no_corpus_letter_scores_worse_tracked_in_any_mode() {
    let rspamd = Rspamd::start();
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let messages = build_corpus(&db, dir.path(), serde_json::json!({})).await;
    let files: Vec<PathBuf> = messages.values().cloned().collect();
    let assassin = spamassassin(&files, dir.path());
    let symbols = rspamd.symbols(&files);
    let names = corpus();
    let mut worse = Vec::new();
    for ((n, mode), path) in &messages {
        if mode == "none" {
            continue;
        }
        let untracked = &messages[&(*n, "none".to_owned())];
        let (score, rules) = &assassin[path];
        let (base_score, base_rules) = &assassin[untracked];
        let new_symbols: Vec<_> = symbols[path].difference(&symbols[untracked]).collect();
        if *score > base_score + 0.1 + 1e-9 || !new_symbols.is_empty() {
            worse.push(format!(
                "{} ({mode}): SpamAssassin {base_score:.3} -> {score:.3} (new rules {:?}), new rspamd symbols {new_symbols:?}",
                names[*n].file_name().unwrap().to_string_lossy(),
                rules.difference(base_rules).collect::<Vec<_>>(),
            ));
        }
    }
    assert!(
        worse.is_empty(),
        "{} of {} tracked letters look worse than untracked:\n{}",
        worse.len(),
        messages.len() - names.len(),
        worse.join("\n")
    );
    assert_eq!(messages.len(), names.len() * 6);
}

/// What a text browser lists of a letter's HTML.
fn dumped(tool: &str, html: &Path) -> String {
    need(tool);
    let out = match tool {
        "lynx" => Command::new("lynx")
            .args(["-dump", "-force_html"])
            .arg(html)
            .output(),
        _ => Command::new("w3m")
            .args(["-dump", "-o", "display_link_number=1", "-T", "text/html"])
            .arg(html)
            .output(),
    }
    .unwrap_or_else(|e| panic!("running {tool}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn text_browsers_do_not_list_the_honeypot_but_scanners_find_it() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/newsletter.html"),
    )
    .unwrap();
    let letter = build_one(
        &db,
        dir.path(),
        "hp",
        &html,
        "all",
        &serde_json::json!({"personalize": false}),
    )
    .await;
    let html = letter["html"].as_str().unwrap();
    let page = dir.path().join("letter.html");
    std::fs::write(&page, html).unwrap();
    let honeypot = honeypot_url(html);
    // What a link scanner does: every href of the letter.
    let hrefs: Vec<&str> = html
        .match_indices("href=\"")
        .map(|(at, m)| &html[at + m.len()..])
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    assert!(
        hrefs.contains(&honeypot.as_str()),
        "a scanner walking hrefs finds {honeypot}"
    );
    let clicks: Vec<&&str> = hrefs
        .iter()
        .filter(|h| h.starts_with(&format!("{BASE}/c/")) && **h != honeypot)
        .collect();
    assert!(!clicks.is_empty());
    for tool in ["lynx", "w3m"] {
        let listed = dumped(tool, &page);
        assert!(
            clicks.iter().any(|click| listed.contains(**click)),
            "{tool} lists the letter's tracked links (else this test proves nothing):\n{listed}"
        );
        assert!(
            !listed.contains(&honeypot),
            "{tool} lists the honeypot {honeypot}:\n{listed}"
        );
    }
    // Outside any <map>, hidden from the accessibility tree and the keyboard.
    let tag_start = html.find(&format!("href=\"{honeypot}\"")).unwrap();
    let tag_open = html[..tag_start].rfind('<').unwrap();
    let tag = &html[tag_open..tag_open + html[tag_open..].find('>').unwrap() + 1];
    assert!(tag.starts_with("<area "), "{tag}");
    assert!(
        tag.contains("aria-hidden=\"true\"") && tag.contains("tabindex=\"-1\""),
        "{tag}"
    );
    let maps_open = html[..tag_open].matches("<map").count();
    let maps_closed = html[..tag_open].matches("</map>").count();
    assert_eq!(maps_open, maps_closed, "the honeypot is in no <map>");
}

/// The honeypot's URL: the `/c/` link whose row is the honeypot, found
/// here as the `/c/` href of an `<area>` with `aria-hidden`.
fn honeypot_url(html: &str) -> String {
    let marker = "\" aria-hidden=\"true\"";
    let needle = format!("<area href=\"{BASE}/c/");
    let at = html.find(&needle).expect("a honeypot link");
    let url_start = at + "<area href=\"".len();
    let url_end = url_start + html[url_start..].find('"').unwrap();
    assert!(html[url_end..].starts_with(marker));
    html[url_start..url_end].to_owned()
}

/// Headless Chromium with the DevTools protocol on a free loopback port,
/// showing `page`; killed when dropped.
struct Chromium {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Chromium {
    fn open(page: &Path) -> Chromium {
        need("chromium");
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("file://{}", page.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium (scripts/prepare.d/30-chromium.sh)");
        // With port 0 Chromium writes the port it took into the profile.
        let active = profile.path().join("DevToolsActivePort");
        let port = wait::eventually_blocking(PATIENCE, "chromium opens its DevTools port", || {
            let written = std::fs::read_to_string(&active).unwrap_or_default();
            written
                .lines()
                .next()
                .and_then(|l| l.parse::<u16>().ok())
                .ok_or(written)
        });
        Chromium {
            child,
            port,
            _profile: profile,
        }
    }

    /// The DevTools WebSocket of the page showing `page`.
    async fn page_socket(&self, page: &Path) -> String {
        let url = format!("file://{}", page.display());
        let list = format!("http://127.0.0.1:{}/json/list", self.port);
        let what = format!("chromium lists a page for {url}");
        wait::eventually(PATIENCE, &what, || async {
            let listed = reqwest::get(&list).await.unwrap().text().await.unwrap();
            let targets: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
            targets
                .iter()
                .find(|t| t["type"] == "page" && t["url"] == url.as_str())
                .map(|target| target["webSocketDebuggerUrl"].as_str().unwrap().to_owned())
                .ok_or(targets)
        })
        .await
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One DevTools session: commands sent, their results read back.
struct DevTools {
    socket: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>,
    next_id: u64,
}

impl DevTools {
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next_id += 1;
        let id = self.next_id;
        let command = serde_json::json!({"id": id, "method": method, "params": params});
        self.socket
            .send(tungstenite::Message::text(command.to_string()))
            .unwrap();
        loop {
            let message = self.socket.read().unwrap();
            let Ok(text) = message.to_text() else {
                continue;
            };
            let reply: serde_json::Value = serde_json::from_str(text).unwrap();
            if reply["id"] == id {
                assert!(reply["error"].is_null(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// The backend node id of the first element `selector` matches.
    fn backend_node(&mut self, selector: &str) -> u64 {
        let expression = format!("document.querySelector({})", serde_json::json!(selector));
        let found = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": expression}),
        );
        let object = found["result"]["objectId"].clone();
        assert!(object.is_string(), "nothing matches {selector}: {found}");
        self.call("DOM.describeNode", serde_json::json!({"objectId": object}))["node"]
            ["backendNodeId"]
            .as_u64()
            .unwrap()
    }
}

/// A screen reader reads the browser's accessibility tree: the honeypot
/// `<area>` must not be in it, while the letter's real links are.
#[tokio::test]
async fn the_honeypot_is_not_in_chromiums_accessibility_tree_and_the_links_are() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/newsletter.html"),
    )
    .unwrap();
    let letter = build_one(&db, dir.path(), "ax", &html, "all", &serde_json::json!({})).await;
    let html = letter["html"].as_str().unwrap();
    let honeypot = honeypot_url(html);
    let page = dir.path().join("letter.html");
    std::fs::write(&page, html).unwrap();

    let browser = Chromium::open(&page);
    let socket = browser.page_socket(&page).await;
    let tree = tokio::task::spawn_blocking(move || {
        let (socket, _) = tungstenite::connect(socket.as_str()).unwrap();
        let mut devtools = DevTools { socket, next_id: 0 };
        wait::eventually_blocking(PATIENCE, "the letter loaded in chromium", || {
            let loaded = devtools.call(
                "Runtime.evaluate",
                serde_json::json!({
                    "expression": "location.protocol === 'file:' && document.readyState === 'complete'"
                }),
            );
            if loaded["result"]["value"] == true {
                Ok(())
            } else {
                Err(loaded)
            }
        });
        let honeypot_node = devtools.backend_node(&format!("area[href=\"{honeypot}\"]"));
        let link_node = devtools.backend_node(&format!("a[href^=\"{BASE}/c/\"]"));
        devtools.call("Accessibility.enable", serde_json::json!({}));
        let nodes = devtools.call("Accessibility.getFullAXTree", serde_json::json!({}))["nodes"]
            .as_array()
            .unwrap()
            .clone();
        (honeypot_node, link_node, nodes)
    })
    .await
    .unwrap();
    let (honeypot_node, link_node, nodes) = tree;
    let exposed = |backend: u64| {
        nodes
            .iter()
            .filter(|node| node["ignored"] != true)
            .find(|node| node["backendDOMNodeId"].as_u64() == Some(backend))
            .cloned()
    };
    let link = exposed(link_node).expect("the letter's first tracked link is in the tree");
    assert_eq!(link["role"]["value"], "link", "{link}");
    // No link the tree exposes leads to the honeypot's URL (the pixel's
    // `<area>` twin and the honeypot are both left out).
    let urls: Vec<&str> = nodes
        .iter()
        .filter(|node| node["ignored"] != true && node["role"]["value"] == "link")
        .filter_map(|node| {
            node["properties"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "url")?["value"]["value"]
                .as_str()
        })
        .collect();
    assert!(urls.len() >= 2, "the letter's links are exposed: {urls:?}");
    assert!(
        !urls.contains(&honeypot_url(html).as_str()),
        "a link to the honeypot is exposed: {urls:?}"
    );
    assert!(
        exposed(honeypot_node).is_none(),
        "a screen reader is told of the honeypot: {:?}",
        exposed(honeypot_node)
    );
}
