//! Postfix's `smtp-sink` on a free loopback port, keeping every message it
//! receives as a file (the downstream MTA of the relay's tests); killed on
//! drop. Needs Debian's postfix (scripts/prepare.d/40-postfix.sh).

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub struct SmtpSink {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl SmtpSink {
    /// `extra`: smtp-sink options, e.g. `-f RCPT` to refuse every recipient.
    pub fn start(extra: &[&str]) -> SmtpSink {
        let dir = tempfile::tempdir().unwrap();
        let template = format!("{}/%H%M%S.", dir.path().display());
        // smtp-sink cannot be handed a bound socket and does not report a
        // port 0's number: a port is picked, and another when smtp-sink
        // exits because it was taken meanwhile.
        for _ in 0..3 {
            let port = super::pick_port("127.0.0.1");
            let mut child = Command::new("smtp-sink")
                .args(["-u", "root", "-d", &template])
                .args(extra)
                .arg(format!("127.0.0.1:{port}"))
                .arg("100")
                .spawn()
                .expect("smtp-sink runs (Debian's postfix; scripts/test installs it)");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return SmtpSink { child, port, dir };
                }
                assert!(Instant::now() < deadline, "smtp-sink did not listen");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("smtp-sink exited on three picked ports");
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// The messages received so far (smtp-sink's file: its own header
    /// lines, then the message).
    pub fn messages(&self) -> Vec<String> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        // smtp-sink removes the file of a transaction the client abandons
        // (a killed run's envelope sent ahead): gone between the listing
        // and the read, it was no message.
        files
            .iter()
            .filter_map(|f| match std::fs::read(f) {
                Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => panic!("{}: {e}", f.display()),
            })
            .collect()
    }

    /// Wait (30 s at most) until at least `count` messages arrived.
    pub fn wait_for(&self, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let messages = self.messages();
            if messages.len() >= count || Instant::now() > deadline {
                return messages;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
