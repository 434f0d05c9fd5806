//! `nuvira inspect` (being built; see the issue tracker).

/// Arguments of `nuvira inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn execute(_args: Args) -> u8 {
    eprintln!("error: `nuvira inspect` is not available in this build yet");
    crate::exit::INVALID
}
