//! `nuvira test` (being built; see the issue tracker).

/// Arguments of `nuvira test`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn execute(_args: Args) -> u8 {
    eprintln!("error: `nuvira test` is not available in this build yet");
    crate::exit::INVALID
}
