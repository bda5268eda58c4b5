//! A private Dovecot for a test: its own configuration, state, log and
//! maildir in a temporary directory; IMAP (STARTTLS), IMAPS, POP3 (STLS)
//! and POP3S on free loopback ports; one user with a password; TLS with
//! a self-signed certificate (rcgen) a client trusts through
//! `SSL_CERT_FILE` = [`Dovecot::ca_file`]. The mailbox belongs to the
//! `mail` user (Dovecot serves no root mailbox). Stopped on drop. Needs
//! root and Debian's dovecot-imapd and dovecot-pop3d
//! (scripts/prepare.d/90-dovecot.sh).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::wait::{eventually_blocking, PATIENCE};

pub const USER: &str = "bounce";
pub const PASSWORD: &str = "s3cret mailbox";

pub struct Dovecot {
    dir: tempfile::TempDir,
    pub imap: u16,
    pub imaps: u16,
    pub pop3: u16,
    pub pop3s: u16,
}

/// Each file of a maildir folder gets a name of its own.
static DELIVERED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Dovecot {
    pub fn start() -> Dovecot {
        // Dovecot binds its ports itself: one taken meanwhile makes it
        // fail, and others are picked.
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let ports: Vec<u16> = (0..4).map(|_| super::pick_port("127.0.0.1")).collect();
            let dovecot = Dovecot {
                dir,
                imap: ports[0],
                imaps: ports[1],
                pop3: ports[2],
                pop3s: ports[3],
            };
            dovecot.write_instance();
            // Its daemon keeps the standard output and error it was given:
            // a file, not a pipe a waiting `output()` would never see closed.
            let errors = dovecot.dir.path().join("start.err");
            let started = Command::new("/usr/sbin/dovecot")
                .arg("-c")
                .arg(dovecot.dir.path().join("dovecot.conf"))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&errors).unwrap())
                .status()
                .expect("dovecot runs (Debian's dovecot-imapd; scripts/test installs it)");
            if started.success() && dovecot.listening() {
                return dovecot;
            }
            eprintln!(
                "dovecot did not start: {}\n{}",
                std::fs::read_to_string(&errors).unwrap_or_default(),
                dovecot.log()
            );
        }
        panic!("Dovecot did not start on three sets of picked ports");
    }

    /// Whether every port came to listen; false when the master is gone
    /// first.
    fn listening(&self) -> bool {
        let pid_file = self.dir.path().join("run/master.pid");
        eventually_blocking(PATIENCE, "Dovecot listens", || {
            let closed: Vec<u16> = [self.imap, self.imaps, self.pop3, self.pop3s]
                .into_iter()
                .filter(|port| std::net::TcpStream::connect(("127.0.0.1", *port)).is_err())
                .collect();
            match closed.is_empty() {
                true => Ok(true),
                false if super::pid_file_gone(&pid_file) => Ok(false),
                false => Err(closed),
            }
        })
    }

    fn write_instance(&self) {
        let dir = self.dir.path();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("passwd"), format!("{USER}:{{PLAIN}}{PASSWORD}\n")).unwrap();
        for sub in ["run", "state", "home"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        self.folder_dir("INBOX");
        let d = dir.display();
        let conf = format!(
            "base_dir = {d}/run\n\
             state_dir = {d}/state\n\
             log_path = {d}/dovecot.log\n\
             protocols = imap pop3\n\
             listen = 127.0.0.1\n\
             ssl = required\n\
             ssl_cert = <{d}/cert.pem\n\
             ssl_key = <{d}/key.pem\n\
             disable_plaintext_auth = yes\n\
             auth_mechanisms = plain login\n\
             first_valid_uid = 1\n\
             first_valid_gid = 1\n\
             mail_location = maildir:{d}/home/%u/Maildir\n\
             mail_fsync = never\n\
             passdb {{\n  driver = passwd-file\n  args = {d}/passwd\n}}\n\
             userdb {{\n  driver = static\n  args = uid=mail gid=mail home={d}/home/%u\n}}\n\
             service imap-login {{\n\
               inet_listener imap {{\n    port = {}\n  }}\n\
               inet_listener imaps {{\n    port = {}\n    ssl = yes\n  }}\n\
             }}\n\
             service pop3-login {{\n\
               inet_listener pop3 {{\n    port = {}\n  }}\n\
               inet_listener pop3s {{\n    port = {}\n    ssl = yes\n  }}\n\
             }}\n",
            self.imap, self.imaps, self.pop3, self.pop3s
        );
        std::fs::write(dir.join("dovecot.conf"), conf).unwrap();
    }

    /// The maildir folder of `folder` (`INBOX` or a folder's name), made
    /// with its `new`, `cur` and `tmp`, owned by `mail`.
    fn folder_dir(&self, folder: &str) -> PathBuf {
        let maildir = self.dir.path().join("home").join(USER).join("Maildir");
        let path = if folder == "INBOX" {
            maildir.clone()
        } else {
            maildir.join(format!(".{folder}"))
        };
        for sub in ["new", "cur", "tmp"] {
            std::fs::create_dir_all(path.join(sub)).unwrap();
        }
        chown_mail(&self.dir.path().join("home"));
        path
    }

    /// A message delivered to `folder` as an MTA would (a new file in
    /// `new/`).
    pub fn deliver(&self, folder: &str, message: &[u8]) {
        let dir = self.folder_dir(folder);
        let n = DELIVERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}.M{n}P{}.test", 1_800_000_000 + n, std::process::id());
        let tmp = dir.join("tmp").join(&name);
        std::fs::write(&tmp, message).unwrap();
        std::fs::rename(&tmp, dir.join("new").join(&name)).unwrap();
        chown_mail(&self.dir.path().join("home"));
    }

    /// The messages in `folder` now (not counting those marked deleted:
    /// the `T` flag of a maildir name), each file's bytes.
    pub fn messages(&self, folder: &str) -> Vec<Vec<u8>> {
        let dir = self.folder_dir(folder);
        let mut files = Vec::new();
        for sub in ["new", "cur"] {
            for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let flags = name.split_once(":2,").map(|(_, f)| f).unwrap_or("");
                if !flags.contains('T') {
                    files.push(path);
                }
            }
        }
        files.sort();
        files.iter().map(|f| std::fs::read(f).unwrap()).collect()
    }

    /// The maildir flags (`S` seen, `F` flagged) of each message in `folder`.
    pub fn flags(&self, folder: &str) -> Vec<String> {
        let dir = self.folder_dir(folder);
        let mut flags: Vec<String> = std::fs::read_dir(dir.join("cur"))
            .unwrap()
            .map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.split_once(":2,")
                    .map(|(_, f)| f.to_owned())
                    .unwrap_or_default()
            })
            .collect();
        flags.sort();
        flags
    }

    /// The certificate to trust (self-signed).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The instance's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }

    /// A file holding the password.
    pub fn password_file(&self) -> PathBuf {
        let path = self.dir.path().join("password");
        std::fs::write(&path, format!("{PASSWORD}\n")).unwrap();
        path
    }
}

fn chown_mail(path: &Path) {
    let out = Command::new("chown")
        .args(["-R", "mail:mail"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stopped by signalling its master, which stops its children.
impl Drop for Dovecot {
    fn drop(&mut self) {
        let pid_file = self.dir.path().join("run/master.pid");
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
