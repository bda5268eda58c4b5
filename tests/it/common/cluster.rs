//! A throwaway MariaDB Spider cluster for the cluster tests: a head and two
//! data nodes, each a `mariadbd` of its own on a free loopback port, in a
//! temporary directory (`mariadb-install-db`, each with its own `--tmpdir`:
//! parallel installs collide otherwise), with small buffers. Killed and
//! removed when dropped, so tests running in parallel never share one.
//! `scripts/prepare.d/15-spider.sh` installs what it needs.

use super::wait::{eventually, PATIENCE};
use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The database linktrack uses on the head and on every node.
pub const DATABASE: &str = "linktrack";

/// One `mariadbd` of the cluster.
pub struct Instance {
    pub name: String,
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Instance {
    /// `mysql://root@127.0.0.1:PORT/linktrack`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// Install a data directory (blocking: run on a thread).
    fn install(name: String, root: &Path) -> Instance {
        let dir = root.join(&name);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--innodb-log-file-size=8M",
                "--innodb-buffer-pool-size=16M",
            ])
            .args(run_as_root())
            .output()
            .unwrap_or_else(|e| {
                panic!("running mariadb-install-db: {e} (scripts/prepare.d/15-spider.sh)")
            });
        assert!(
            out.status.success(),
            "mariadb-install-db for {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Instance {
            name,
            port: 0,
            dir,
            child: None,
        }
    }

    /// Start `mariadbd` on a free port (a new one when the port was taken
    /// meanwhile) and wait until it answers.
    pub async fn start(&mut self) {
        for _attempt in 0..3 {
            if self.port == 0 {
                self.port = free_port();
            }
            let log = self.dir.join("error.log");
            let _ = std::fs::remove_file(&log);
            let child = Command::new(mariadbd())
                .arg("--no-defaults")
                .args(run_as_root())
                .arg(format!("--datadir={}", self.dir.join("data").display()))
                .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
                .arg(format!("--socket={}", self.dir.join("sock").display()))
                .arg(format!("--pid-file={}", self.dir.join("pid").display()))
                .arg(format!("--log-error={}", log.display()))
                .arg(format!("--port={}", self.port))
                .args([
                    "--bind-address=127.0.0.1",
                    "--innodb-buffer-pool-size=32M",
                    "--innodb-log-file-size=8M",
                    "--innodb-flush-log-at-trx-commit=2",
                    // Throwaway servers: no fsync, no doublewrite (partition
                    // DDL creates hundreds of files).
                    "--innodb-flush-method=nosync",
                    "--innodb-doublewrite=0",
                    "--skip-log-bin",
                    "--max-connections=200",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting mariadbd: {e}"));
            self.child = Some(child);
            if self.wait_ready(&log).await {
                return;
            }
            self.kill();
            self.port = 0;
        }
        panic!("{} did not start (see {})", self.name, self.dir.display());
    }

    /// Whether the server took connections before `PATIENCE` passed;
    /// false when it exited first (its port taken: the caller tries another).
    async fn wait_ready(&mut self, log: &Path) -> bool {
        let url = format!("mysql://root@127.0.0.1:{}", self.port);
        let what = format!("{} accepting connections", self.name);
        let exited = eventually(PATIENCE, &what, || {
            let status = self.child.as_mut().map(Child::try_wait);
            let url = url.clone();
            async move {
                if let Some(Ok(Some(status))) = status {
                    return Ok(Some(status));
                }
                match sqlx::MySqlConnection::connect(&url).await {
                    Ok(conn) => {
                        let _ = conn.close().await;
                        Ok(None)
                    }
                    Err(err) => Err(err.to_string()),
                }
            }
        })
        .await;
        match exited {
            None => true,
            Some(status) => {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                eprintln!("{} exited ({status}): {text}", self.name);
                false
            }
        }
    }

    /// SIGKILL, as a crashed machine would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `--user=root` when we are root: mariadbd refuses to run as root otherwise.
fn run_as_root() -> Vec<&'static str> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    if uid == "0" {
        vec!["--user=root"]
    } else {
        Vec::new()
    }
}

fn mariadbd() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/mariadbd");
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from("mariadbd")
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// A head and its data nodes.
pub struct Cluster {
    pub head: Instance,
    pub nodes: Vec<Instance>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Install and start a head and two data nodes (a few seconds).
    pub async fn start() -> Cluster {
        Cluster::with_nodes(2).await
    }

    /// Install and start a head and `nodes` data nodes, in parallel.
    pub async fn with_nodes(nodes: usize) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("lt-spider-")
            .tempdir()
            .unwrap();
        let root = dir.path().to_owned();
        let names =
            std::iter::once("head".to_owned()).chain((0..nodes).map(|n| format!("node{n}")));
        let installs: Vec<_> = names
            .map(|name| {
                let root = root.clone();
                std::thread::spawn(move || Instance::install(name, &root))
            })
            .collect();
        let starts: Vec<_> = installs
            .into_iter()
            .map(|t| {
                let mut instance = t.join().expect("install thread");
                tokio::spawn(async move {
                    instance.start().await;
                    instance
                })
            })
            .collect();
        let mut instances = Vec::new();
        for start in starts {
            instances.push(start.await.expect("start task"));
        }
        let head = instances.remove(0);
        Cluster {
            head,
            nodes: instances,
            _dir: dir,
        }
    }

    /// `LINKTRACK_SHARDS` for the data nodes.
    pub fn shards(&self) -> String {
        self.shards_of(self.nodes.len())
    }

    /// `LINKTRACK_SHARDS` naming the first `n` data nodes only.
    pub fn shards_of(&self, n: usize) -> String {
        self.nodes[..n]
            .iter()
            .map(Instance::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Run the `linktrack` binary against the head with LINKTRACK_SHARDS set.
    pub fn linktrack(&self, args: &[&str]) -> std::process::Output {
        self.linktrack_with_shards(&self.shards(), args)
    }

    /// The same with another LINKTRACK_SHARDS.
    pub fn linktrack_with_shards(&self, shards: &str, args: &[&str]) -> std::process::Output {
        self.command(shards, args)
            .output()
            .expect("running linktrack")
    }

    /// The `linktrack` command against the head, to run later (or elsewhere).
    pub fn command(&self, shards: &str, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_linktrack"));
        command
            .args(args)
            .env("DATABASE_URL", self.head.url())
            .env("LINKTRACK_SHARDS", shards)
            .env("RUST_LOG", "warn");
        command
    }

    /// A connection pool on data node `n`'s database.
    pub async fn node_pool(&self, n: usize) -> sqlx::MySqlPool {
        sqlx::MySqlPool::connect(&self.nodes[n].url())
            .await
            .unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.head.kill();
        for node in &mut self.nodes {
            node.kill();
        }
    }
}
