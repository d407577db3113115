//! `listwatch bench tcp-floor`: what the kernel alone charges a sender per loopback TCP
//! write, with no HTTP, no runtime and no watch cache in the way.
//!
//! A writer thread sends fixed-size messages round-robin over N loopback connections with
//! blocking `write_all` (one syscall per message, `TCP_NODELAY`), while a reader thread drains
//! the other ends. The writer's own CPU time (`/proc/thread-self/stat`) per million messages
//! is the floor under any server that writes each watch event to each watcher separately: on
//! loopback the sender's `write` also runs the receiving side's TCP processing.

use super::{cpu_delta, ProcUsage};
use anyhow::Context as _;
use clap::Args;
use serde_json::json;
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::time::Instant;
use tokio::io::AsyncReadExt as _;

/// Options of `bench tcp-floor`.
#[derive(Args, Debug)]
pub struct TcpFloorArgs {
    /// Loopback connections written round-robin.
    #[arg(long, default_value_t = 1000)]
    pub connections: usize,
    /// Bytes per message (one write each).
    #[arg(long, default_value_t = 2048)]
    pub size: usize,
    /// Messages to write in total.
    #[arg(long, default_value_t = 500_000)]
    pub messages: usize,
    /// Messages per write (1 = one syscall per message; more = several messages per write).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
}

/// Runs the measurement and prints the figures.
pub fn run(a: TcpFloorArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut clients = Vec::with_capacity(a.connections);
    let mut servers = Vec::with_capacity(a.connections);
    for _ in 0..a.connections {
        clients.push(TcpStream::connect(addr)?);
        let (s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        servers.push(s);
    }
    let total_bytes = (a.messages / a.batch.max(1) * a.batch.max(1) * a.size) as u64;
    let reader = std::thread::spawn(move || -> anyhow::Result<(u64, Option<f64>)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let before = ProcUsage::of_current_thread();
        let got = rt.block_on(async move {
            let mut tasks = Vec::new();
            for c in clients {
                c.set_nonblocking(true)?;
                let mut c = tokio::net::TcpStream::from_std(c)?;
                tasks.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut n = 0u64;
                    while let Ok(k) = c.read(&mut buf).await {
                        if k == 0 {
                            break;
                        }
                        n += k as u64;
                    }
                    n
                }));
            }
            let mut total = 0u64;
            for t in tasks {
                total += t.await.unwrap_or(0);
            }
            anyhow::Ok(total)
        })?;
        Ok((got, cpu_delta(before, ProcUsage::of_current_thread())))
    });
    let msg = vec![b'x'; a.size * a.batch.max(1)];
    let writes = a.messages / a.batch.max(1);
    let before = ProcUsage::of_current_thread();
    let started = Instant::now();
    let n = servers.len();
    for i in 0..writes {
        servers[i % n]
            .write_all(&msg)
            .context("write to a loopback connection")?;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_delta(before, ProcUsage::of_current_thread());
    drop(servers);
    let (received, reader_cpu) = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reader thread panicked"))??;
    let messages = (writes * a.batch.max(1)) as f64;
    let per_million = cpu.map(|c| c / messages * 1e6);
    println!(
        "tcp floor: {} connections, {} B messages, {} per write",
        a.connections, a.size, a.batch
    );
    println!(
        "  messages                 {messages} in {wall:.2} s ({:.0}/s)",
        messages / wall
    );
    println!("  bytes received           {received} of {total_bytes}");
    if let Some(c) = cpu {
        println!(
            "  writer CPU               {c:.2} s, {:.2} s per 1M messages",
            per_million.unwrap_or(0.0)
        );
    }
    if let Some(c) = reader_cpu {
        println!("  reader CPU               {c:.2} s");
    }
    println!(
        "{}",
        json!({
            "bench": "tcp-floor",
            "connections": a.connections,
            "message_size": a.size,
            "messages_per_write": a.batch,
            "messages": messages,
            "wall_secs": wall,
            "bytes_received": received,
            "writer_cpu_secs": cpu,
            "writer_cpu_secs_per_million_messages": per_million,
            "reader_cpu_secs": reader_cpu,
        })
    );
    anyhow::ensure!(received == total_bytes, "the reader lost bytes");
    Ok(())
}
