//! Postfix's `smtp-sink` on a free loopback port, keeping every message it
//! receives as a file (the downstream MTA of the relay's tests); killed on
//! drop. Needs Debian's postfix (scripts/prepare.d/40-postfix.sh).

use super::wait::{eventually_blocking, PATIENCE};
use std::path::PathBuf;
use std::process::{Child, Command};

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
            let listening = eventually_blocking(PATIENCE, "smtp-sink listens", || {
                if child.try_wait().unwrap().is_some() {
                    return Ok(false);
                }
                std::net::TcpStream::connect(("127.0.0.1", port)).map(|_| true)
            });
            if listening {
                return SmtpSink { child, port, dir };
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

    /// Wait until at least `count` messages arrived; all of them.
    pub fn wait_for(&self, count: usize) -> Vec<String> {
        let what = format!("{count} messages at smtp-sink");
        eventually_blocking(PATIENCE, &what, || {
            let messages = self.messages();
            match messages.len() >= count {
                true => Ok(messages),
                false => Err(messages.len()),
            }
        })
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
