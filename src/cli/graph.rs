//! `nuvira graph` (being built; see the issue tracker).

/// Arguments of `nuvira graph`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn execute(_args: Args) -> u8 {
    eprintln!("error: `nuvira graph` is not available in this build yet");
    crate::exit::INVALID
}
