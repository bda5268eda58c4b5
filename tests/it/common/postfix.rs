//! A private Postfix instance for a test: its own configuration, queue,
//! log and maildir in a temporary directory, `smtpd` on a free loopback
//! port, mail for the test domains delivered to one maildir. Options turn
//! on STARTTLS (a self-signed certificate made by openssl; a client trusts
//! it through `SSL_CERT_FILE` = [`Postfix::ca_file`]), AUTH (Cyrus SASL's
//! sasldb: Debian's Postfix reads `<config>/sasl/smtpd.conf`), hide EHLO
//! keywords (`smtpd_discard_ehlo_keywords`), or add `main.cf` and
//! `master.cf` lines.
//! Stopped on drop. Needs root (Postfix's master starts as root) and
//! Debian's postfix and sasl2-bin (scripts/prepare.d/40-postfix.sh).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::wait::{eventually_blocking, PATIENCE};

/// How the instance is set up.
#[derive(Debug, Default, Clone)]
pub struct PostfixConfig {
    /// STARTTLS offered (and required before AUTH).
    pub tls: bool,
    /// AUTH with this user and password; when set, only authenticated
    /// clients may send (`permit_sasl_authenticated, reject`).
    pub auth: Option<(String, String)>,
    /// EHLO keywords the server keeps to itself (`chunking`, `pipelining`).
    pub hide: Vec<&'static str>,
    /// More `main.cf` settings, `name = value`; each replaces the harness's
    /// own setting of that name.
    pub main_cf: Vec<String>,
    /// Lines added to `master.cf` (a pipe transport of the test's own).
    pub master_cf: Vec<String>,
}

/// The domains whose mail the instance keeps (in one maildir).
pub const DOMAINS: &str = "example.com example.org example.net";

pub struct Postfix {
    dir: tempfile::TempDir,
    pub port: u16,
}

impl Postfix {
    pub fn start(config: PostfixConfig) -> Postfix {
        // Postfix binds its port itself: a picked port taken meanwhile
        // makes `postfix start` fail, and another is picked.
        for _ in 0..3 {
            let dir = private_dir();
            let port = super::pick_port("127.0.0.1");
            write_instance(dir.path(), port, &config);
            let started = Command::new("postfix")
                .arg("-c")
                .arg(dir.path().join("conf"))
                .arg("start")
                .output()
                .expect("postfix runs (Debian's postfix; scripts/test installs it)");
            let postfix = Postfix { dir, port };
            if started.status.success() && postfix.listening() {
                return postfix;
            }
            eprintln!(
                "postfix on port {port} did not start: {}\n{}",
                String::from_utf8_lossy(&started.stderr),
                postfix.log()
            );
        }
        panic!("Postfix did not start on three picked ports");
    }

    /// Whether smtpd came to listen; false when the master is gone first.
    fn listening(&self) -> bool {
        let pid_file = self.dir.path().join("queue/pid/master.pid");
        eventually_blocking(
            PATIENCE,
            "Postfix listens",
            || match std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                Ok(_) => Ok(true),
                Err(_) if super::pid_file_gone(&pid_file) => Ok(false),
                Err(err) => Err(err),
            },
        )
    }

    /// `smtp://HOST:PORT` with `rest` after the port (`?tls=required`),
    /// and `user:password@` when the instance asks for AUTH.
    pub fn url(&self, host: &str, credentials: Option<(&str, &str)>, rest: &str) -> String {
        let login = credentials
            .map(|(user, password)| format!("{user}:{password}@"))
            .unwrap_or_default();
        format!("smtp://{login}{host}:{}{rest}", self.port)
    }

    /// The certificate to trust for STARTTLS (self-signed).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The instance's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("maillog")).unwrap_or_default()
    }

    /// The messages delivered so far, as the maildir holds them (Postfix's
    /// own headers first, LF line ends), oldest first.
    pub fn messages(&self) -> Vec<String> {
        let new = self.dir.path().join("mail/inbox/new");
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&new)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| (e.metadata().unwrap().modified().unwrap(), e.path()))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|(_, f)| String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned())
            .collect()
    }

    /// Wait until `count` messages are in the maildir (delivery from the
    /// queue to the maildir follows the SMTP reply by a moment).
    pub fn wait_for_messages(&self, count: usize) -> Vec<String> {
        let what = format!("{count} messages in the maildir");
        eventually_blocking(PATIENCE, &what, || {
            let messages = self.messages();
            match messages.len() >= count {
                true => Ok(messages),
                false => Err(format!("{}:\n{}", messages.len(), self.log())),
            }
        })
    }

    /// The log's `disconnect from …` lines of sessions that said anything
    /// (the harness's own probe says nothing): one per SMTP session, with
    /// the commands it carried (`ehlo=1 starttls=1 auth=1 mail=5 rcpt=5 bdat=5 …`).
    ///
    /// smtpd writes the line after the client has gone, through the log
    /// service: a test that reads right after the builder exits can be
    /// ahead of it, so this waits until at least one session is logged and
    /// every connection logged has its disconnect logged too. smtpd logs a
    /// connection before it greets the client, and the log service writes
    /// lines in the order they came, so a session the client had (it has
    /// exited: its sessions are over) is never missed, and none is counted
    /// before its line is complete.
    pub fn sessions(&self) -> Vec<String> {
        eventually_blocking(PATIENCE, "every SMTP session logged", || {
            let log = self.log();
            let smtpd = log.lines().filter(|l| l.contains("postfix/smtpd"));
            let connects = smtpd
                .clone()
                .filter(|l| l.contains(": connect from "))
                .count();
            let ended: Vec<&str> = smtpd.filter(|l| l.contains(": disconnect from ")).collect();
            let said: Vec<String> = ended
                .iter()
                .filter(|l| !l.contains("commands=0/0"))
                .map(|l| l.to_string())
                .collect();
            match !said.is_empty() && ended.len() == connects {
                true => Ok(said),
                false => Err(format!(
                    "{connects} connections, {} ended:\n{log}",
                    ended.len()
                )),
            }
        })
    }
}

/// Stopped by signalling its master, which stops its children: `postfix
/// stop` runs checks that can block on the instance's log socket.
impl Drop for Postfix {
    fn drop(&mut self) {
        let pid_file = self.dir.path().join("queue/pid/master.pid");
        let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok())
        else {
            return;
        };
        let _ = Command::new("kill").arg(pid.to_string()).status();
        // Not `eventually`: a drop must not panic (a panic while a failed
        // test unwinds aborts the run); a master slow to go is killed.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
}

/// A temporary directory the `postfix` user can enter.
fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn postfix_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "postfix"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

fn write_instance(dir: &Path, port: u16, config: &PostfixConfig) {
    let (uid, gid) = postfix_ids();
    for sub in ["conf/sasl", "queue", "data", "mail"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for owned in ["data", "mail"] {
        std::os::unix::fs::chown(dir.join(owned), Some(uid), Some(gid)).unwrap();
    }
    let master = std::fs::read_to_string("/etc/postfix/master.cf")
        .expect("/etc/postfix/master.cf (Debian's postfix)");
    let master: String = master
        .lines()
        .map(|line| {
            if line.starts_with("smtp ") && line.contains(" inet ") {
                format!("127.0.0.1:{port} inet n - n - - smtpd")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let extra: String = config.master_cf.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("conf/master.cf"), master + "\n" + &extra).unwrap();
    let _ = std::fs::copy(
        "/etc/postfix/dynamicmaps.cf",
        dir.join("conf/dynamicmaps.cf"),
    );
    let mut main = vec![
        "compatibility_level = 3.6".to_owned(),
        format!("queue_directory = {}/queue", dir.display()),
        format!("data_directory = {}/data", dir.display()),
        format!("maillog_file_prefixes = {}", dir.display()),
        format!("maillog_file = {}/maillog", dir.display()),
        "inet_interfaces = 127.0.0.1".into(),
        "inet_protocols = ipv4".into(),
        "myhostname = mta.test".into(),
        "mydomain = test".into(),
        "mydestination =".into(),
        "smtputf8_enable = yes".into(),
        format!("virtual_mailbox_domains = {DOMAINS}"),
        format!("virtual_mailbox_base = {}/mail", dir.display()),
        "virtual_mailbox_maps = static:inbox/".into(),
        format!("virtual_uid_maps = static:{uid}"),
        format!("virtual_gid_maps = static:{gid}"),
        "mynetworks = 127.0.0.0/8".into(),
        "smtpd_recipient_restrictions = permit_mynetworks, reject".into(),
    ];
    if config.tls {
        make_certificate(dir);
        main.extend([
            format!("smtpd_tls_cert_file = {}/cert.pem", dir.display()),
            format!("smtpd_tls_key_file = {}/key.pem", dir.display()),
            "smtpd_tls_security_level = may".into(),
        ]);
    }
    if let Some((user, password)) = &config.auth {
        make_sasl_user(dir, user, password, uid);
        main.extend([
            "smtpd_sasl_auth_enable = yes".into(),
            "smtpd_sasl_type = cyrus".into(),
            "smtpd_sasl_path = smtpd".into(),
            "smtpd_sasl_local_domain = mta.test".into(),
            format!(
                "smtpd_tls_auth_only = {}",
                if config.tls { "yes" } else { "no" }
            ),
            // Only authenticated clients may send: 127.0.0.1 is no longer
            // a trusted network.
            "mynetworks = 127.0.0.2/32".into(),
            "smtpd_recipient_restrictions = permit_sasl_authenticated, reject".into(),
        ]);
    }
    if !config.hide.is_empty() {
        main.push(format!(
            "smtpd_discard_ehlo_keywords = {}",
            config.hide.join(", ")
        ));
    }
    main.extend(config.main_cf.iter().cloned());
    std::fs::write(dir.join("conf/main.cf"), last_of_each(&main)).unwrap();
}

/// `name = value` lines, each name once, with its last value, in the
/// order names first appear (Postfix warns of a name set twice).
fn last_of_each(lines: &[String]) -> String {
    let name = |line: &str| line.split('=').next().unwrap_or_default().trim().to_owned();
    let mut names: Vec<String> = Vec::new();
    let mut last = std::collections::HashMap::new();
    for line in lines {
        let key = name(line);
        if !last.contains_key(&key) {
            names.push(key.clone());
        }
        last.insert(key, line.clone());
    }
    names.iter().map(|key| format!("{}\n", last[key])).collect()
}

/// A self-signed certificate for `localhost` and 127.0.0.1.
fn make_certificate(dir: &Path) {
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        // A server certificate, not a CA (webpki refuses a CA as the peer).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("openssl runs (Debian's openssl)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `user` with `password` in a sasldb of the instance's own, PLAIN and
/// LOGIN offered.
fn make_sasl_user(dir: &Path, user: &str, password: &str, uid: u32) {
    let sasldb = dir.join("conf/sasl/sasldb2");
    let mut child = Command::new("saslpasswd2")
        .args(["-p", "-c", "-u", "mta.test", "-f"])
        .arg(&sasldb)
        .arg(user)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("saslpasswd2 runs (Debian's sasl2-bin)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(password.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    std::os::unix::fs::chown(&sasldb, Some(uid), None).unwrap();
    std::fs::write(
        dir.join("conf/sasl/smtpd.conf"),
        format!(
            "pwcheck_method: auxprop\nauxprop_plugin: sasldb\nmech_list: PLAIN LOGIN\nsasldb_path: {}\n",
            sasldb.display()
        ),
    )
    .unwrap();
}
