//! `listwatch-bench`: the benchmarks of `listwatch bench …` (which runs this binary), with
//! the system allocator, so that the client library is measured as its users get it. The
//! servers it spawns are the `listwatch` binary beside it (see the crate docs).

use clap::Parser;

/// Benchmarks against a spawned (or `--server`) listwatch.
#[derive(Parser)]
#[command(name = "listwatch bench")]
struct Cli {
    /// Which benchmark.
    #[command(subcommand)]
    which: bench::BenchCommand,
}

fn main() -> anyhow::Result<()> {
    bench::run(Cli::parse().which)
}
