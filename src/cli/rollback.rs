//! `nuvira rollback` (being built; see the issue tracker).

/// Arguments of `nuvira rollback`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn execute(_args: Args) -> u8 {
    eprintln!("error: `nuvira rollback` is not available in this build yet");
    crate::exit::INVALID
}
