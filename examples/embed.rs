//! Running a plan file from your own program, as the README's "As a library" shows.
//!
//! `cargo run --example embed -- PLAN [REPO]`, e.g. on a scratch copy of the quickstart:
//!
//! ```sh
//! cp -r examples/quickstart /tmp/qs && cargo run --example embed -- /tmp/qs/plan.yaml /tmp/qs
//! ```
//!
//! Dependencies of such a program: `nuvira` (with `default-features = false, features =
//! ["defaults", "docker", "rust"]` to keep the built-in modules and leave out the CLI's own
//! dependencies) and `tokio`.

use nuvira::{EventBus, MaxParallel, RunSettings};

#[tokio::main]
async fn main() {
    // Errors as their messages (an invalid plan lists every problem), not as Debug dumps.
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let plan_path = args
        .next()
        .ok_or("usage: embed PLAN [REPO] (a plan file, and the repository it works on)")?;
    let repo = args.next().unwrap_or_else(|| ".".into());

    let engine = nuvira::defaults::engine()
        .workspace(&repo)
        .parallelism(MaxParallel::N(4))
        .build();
    let plan = nuvira::plan::load_file(plan_path.as_ref())?.plan;
    // Subscribers see every event; the bus itself keeps none (`EventBus::new` keeps them all).
    let bus = EventBus::with_history("run-1", false);
    let mut events = bus.subscribe(); // independent consumers: logs, JSONL, a UI, ...
    let printer = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            println!(
                "{:>4} {:<18} {}",
                e.seq,
                e.kind.name(),
                e.step_id.as_deref().unwrap_or("")
            );
        }
    });
    let summary = engine
        .run(plan, bus.clone(), RunSettings::default())
        .await?;
    bus.close(); // no more events: lets the printer finish
    printer.await?;
    println!("{:?}: exit code {}", summary.status, summary.exit_code());
    std::process::exit(summary.exit_code().into());
}
