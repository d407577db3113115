//! The process's own figures on `/metrics`, read when scraped: resident memory and open
//! file descriptors under the Prometheus process collector's names (which kube-apiserver
//! also exposes), and the tokio runtime's live tasks — the counterpart of Go's
//! `go_goroutines`. A soak run watches these stay flat.
//!
//! The figures come from `/proc/self` (Linux); elsewhere, or if `/proc` cannot be read,
//! the series are left out rather than reported as zero. Reading `/proc` touches no disk:
//! the kernel answers from memory in microseconds, so it is done on the handler's thread.

use std::fmt::Write as _;

/// Appends `process_resident_memory_bytes`, `process_open_fds` and `tokio_alive_tasks`
/// (when known) to `out`, in the Prometheus text format.
pub fn render(out: &mut String) {
    if let Some(rss) = resident_bytes() {
        gauge(
            out,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            rss,
        );
    }
    if let Some(fds) = open_fds() {
        gauge(
            out,
            "process_open_fds",
            "Number of open file descriptors.",
            fds,
        );
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let tasks = rt.metrics().num_alive_tasks() as u64;
        gauge(
            out,
            "tokio_alive_tasks",
            "Tasks alive in the server's tokio runtime.",
            tasks,
        );
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// `VmRSS` of `/proc/self/status`, in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Entries of `/proc/self/fd` (the directory's own descriptor, open while it is read, is
/// not counted).
fn open_fds() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_memory_descriptors_and_tasks_of_this_process() {
        let file = std::fs::File::open("/proc/self/status").expect("a Linux /proc");
        let mut out = String::new();
        render(&mut out);
        let value = |name: &str| -> u64 {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {out}"))
        };
        assert!(value("process_resident_memory_bytes") > 1 << 20);
        // At least stdin/stdout/stderr and the file opened above.
        assert!(value("process_open_fds") >= 4);
        let before = value("tokio_alive_tasks");
        let task = tokio::spawn(std::future::pending::<()>());
        let mut out2 = String::new();
        render(&mut out2);
        let after: u64 = out2
            .lines()
            .find_map(|l| l.strip_prefix("tokio_alive_tasks "))
            .and_then(|v| v.parse().ok())
            .expect("tokio_alive_tasks");
        assert_eq!(after, before + 1);
        task.abort();
        drop(file);
    }
}
