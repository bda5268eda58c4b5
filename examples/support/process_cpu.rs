//! CPU seconds of processes on this machine, from `/proc/{pid}/stat`
//! (shared by the benchmarks that report CPU per hit or per letter).
#![allow(dead_code)] // each benchmark uses part of it

use std::path::{Path, PathBuf};

/// CPU seconds (user and system) of a process from its `/proc/{pid}/stat`:
/// its own, and that of its children it has waited for (wrk and sysbench,
/// for this process). Linux counts both in USER_HZ ticks, 100 a second.
#[derive(Debug, Clone, Copy)]
pub struct ProcessCpu {
    pub own: f64,
    pub children: f64,
}

impl ProcessCpu {
    /// This process.
    pub fn this() -> anyhow::Result<ProcessCpu> {
        ProcessCpu::read(Path::new("/proc/self/stat"))
    }

    pub fn read(stat: &Path) -> anyhow::Result<ProcessCpu> {
        let text = std::fs::read_to_string(stat)?;
        // Fields after the command name (which is in parentheses and may
        // hold spaces): state is field 3; utime, stime, cutime and cstime
        // are 14 to 17.
        let after_name = text
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .ok_or_else(|| anyhow::anyhow!("unreadable {}", stat.display()))?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |n: usize| -> anyhow::Result<f64> {
            Ok(fields
                .get(n - 3)
                .ok_or_else(|| anyhow::anyhow!("short {}", stat.display()))?
                .parse::<f64>()?
                / 100.0)
        };
        Ok(ProcessCpu {
            own: ticks(14)? + ticks(15)?,
            children: ticks(16)? + ticks(17)?,
        })
    }
}

/// `/proc/{pid}/stat` of the MariaDB server, found by its pid file; none
/// when that file is not on this machine (a remote database).
pub async fn mariadbd_stat(admin: &sqlx::MySqlPool) -> Option<PathBuf> {
    let pid_file: String = sqlx::query_scalar("SELECT @@pid_file")
        .fetch_one(admin)
        .await
        .ok()?;
    let pid: u32 = std::fs::read_to_string(pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let stat = PathBuf::from(format!("/proc/{pid}/stat"));
    stat.exists().then_some(stat)
}
