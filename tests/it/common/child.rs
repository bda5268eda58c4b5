//! `linktrack serve` (or `demo`) as a child process. The public listener is
//! bound by the child on port 0, and the address it got is read from its
//! own start-up log line (`serving listen=<addr> ...`), so no port number is
//! picked here and reused later.
//!
//! The admin listener is bound on port 0 too, and its bound address is in
//! the same line (`admin=<addr>`). What cannot report the port it bound (an
//! external daemon, `demo`'s public listener) gets a picked port and starts
//! again on another when it was taken meanwhile (see `demo.rs`).

use super::wait::{eventually, PATIENCE};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A running child and everything it wrote to stderr so far.
pub struct Serving {
    pub child: Child,
    /// The public listener, as the child logged it.
    pub addr: SocketAddr,
    /// The admin listener, as the child logged it (`admin=`).
    pub admin: Option<SocketAddr>,
    log: Arc<Mutex<String>>,
    /// Set when the child's stderr is read to its end.
    drained: Arc<AtomicBool>,
}

/// What the child logged before it exited without serving.
pub struct Exited(pub String);

impl Serving {
    /// Spawn `command` (a `serve` with `--listen 127.0.0.1:0`, its stderr
    /// is taken here; its `RUST_LOG` must let `linktrack`'s info through)
    /// and wait for the `serving listen=` line.
    pub async fn spawn(command: Command) -> Serving {
        match Serving::try_spawn(command).await {
            Ok(serving) => serving,
            Err(Exited(log)) => panic!("the server exited before serving: {log}"),
        }
    }

    /// [`Serving::spawn`], or the child's log when it exited first.
    pub async fn try_spawn(mut command: Command) -> Result<Serving, Exited> {
        let child = command
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning linktrack");
        // Killed should the wait below give up (a panic) before a
        // `Serving` owns it.
        let mut child = KillOnDrop::new(child);
        let log = Arc::new(Mutex::new(String::new()));
        let drained = Arc::new(AtomicBool::new(false));
        let stderr = child.get().stderr.take().expect("piped stderr");
        let (sink, done) = (log.clone(), drained.clone());
        // Drained to the end, so a chatty child never blocks on a full pipe.
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
            done.store(true, Ordering::SeqCst);
        });
        let listening = eventually(PATIENCE, "the server logs its address", || {
            let found = logged_addr(&log.lock().unwrap(), "listen");
            let exited = found.is_none() && child.get().try_wait().unwrap().is_some();
            let seen = log.lock().unwrap().clone();
            async move {
                match (found, exited) {
                    (Some(addr), _) => Ok(Some(addr)),
                    (None, true) => Ok(None),
                    (None, false) => Err(seen),
                }
            }
        })
        .await;
        let Some(addr) = listening else {
            // What it wrote last, once the drain thread has read it.
            wait_drained(&drained).await;
            return Err(Exited(log.lock().unwrap().clone()));
        };
        let admin = logged_addr(&log.lock().unwrap(), "admin");
        Ok(Serving {
            child: child.take(),
            addr,
            admin,
            log,
            drained,
        })
    }

    /// `http://<addr>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything the child wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGTERM, then wait for the exit.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        self.wait_exit().await
    }

    /// Wait for the child to exit, and for the last lines it wrote.
    pub async fn wait_exit(&mut self) -> std::process::ExitStatus {
        let child = &mut self.child;
        let log = &self.log;
        let status = eventually(PATIENCE, "the server exits", || {
            let status = child.try_wait().unwrap();
            let seen = log.lock().unwrap().clone();
            async move { status.ok_or(seen) }
        })
        .await;
        wait_drained(&self.drained).await;
        status
    }
}

/// Wait until the drain thread has read the exited child's stderr to its
/// end (the child gone, the pipe's end comes at once).
async fn wait_drained(drained: &AtomicBool) {
    eventually(PATIENCE, "the child's stderr read to its end", || async {
        match drained.load(Ordering::SeqCst) {
            true => Ok(()),
            false => Err("still reading"),
        }
    })
    .await;
}

/// A child killed when dropped, until [`KillOnDrop::take`]n: a test that
/// panics while its child runs leaves no process behind.
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    pub fn new(child: Child) -> KillOnDrop {
        KillOnDrop(Some(child))
    }

    pub fn get(&mut self) -> &mut Child {
        self.0.as_mut().expect("not taken yet")
    }

    pub fn take(&mut self) -> Child {
        self.0.take().expect("taken once")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A test that ends without stopping its server (or panics first) leaves
/// no process behind.
impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address named `field` (`listen`, `admin`) of the `serving` log
/// line in `log`.
fn logged_addr(log: &str, field: &str) -> Option<SocketAddr> {
    let key = format!(" {field}=");
    log.lines()
        .filter(|line| line.contains("serving"))
        .find_map(|line| {
            let rest = line.split(key.as_str()).nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
}

/// `http://127.0.0.1:<port>` of a logged admin address (the loopback when
/// it listens on every address).
pub fn loopback_url(addr: SocketAddr) -> String {
    format!("http://127.0.0.1:{}", addr.port())
}

/// A port on `ip` nobody listens on now. Only for what cannot be handed a
/// bound socket and does not report the port it bound (an external daemon,
/// `demo`'s listener): the port may be taken again before it is used, so
/// use it with a retry of the caller's ([`port_was_taken`]).
pub fn pick_port(ip: &str) -> u16 {
    let probe = std::net::TcpListener::bind((ip, 0)).unwrap();
    probe.local_addr().unwrap().port()
}

/// Whether a child's log says a port it was given was taken.
pub fn port_was_taken(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("address already in use")
}

/// `linktrack serve --listen 127.0.0.1:0` on `db` with `journal`, no rollup
/// worker, any free admin port, plus environment settings; for
/// [`Serving::spawn`] (its log lets the start line through).
pub fn serve_command(
    db: &super::TestDb,
    journal: &std::path::Path,
    env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linktrack"));
    command
        .args(["serve", "--rollup-every", "0", "--listen", "127.0.0.1:0"])
        // Tests run in parallel: any free port.
        .args(["--admin-listen", "127.0.0.1:0", "--journal"])
        .arg(journal)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "error,linktrack=info")
        .envs(env.iter().copied());
    command
}

/// A TCP socket bound to a free loopback port and not listening: connects
/// to it are refused (a receiver that is down) until [`listen`]ing on the
/// same socket brings it up at the same address. The port is held all
/// along, never given up and picked again.
///
/// [`listen`]: tokio::net::TcpSocket::listen
pub fn down_socket() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

/// Whether the daemon whose master wrote `pid_file` is gone: the file
/// names a process that no longer runs. A file not written yet (or being
/// written) says nothing, so false.
pub fn pid_file_gone(pid_file: &std::path::Path) -> bool {
    std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}
