//! `nuvira completions SHELL` and `nuvira man`: shell completion scripts (clap_complete) and
//! the manual page (clap_mangen), both generated from the same command definition as `--help`,
//! so they never fall behind it.

use std::path::PathBuf;

/// Arguments of `nuvira completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("completions for the current bash session", "source <(nuvira completions bash)"),
    ("install them for zsh", "nuvira completions zsh > \"${fpath[1]}/_nuvira\""),
]))]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the completion script of a shell on stdout.
pub fn execute(args: Args) -> u8 {
    let mut command = super::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "nuvira", &mut out);
    super::print_stdout(&String::from_utf8_lossy(&out));
    crate::exit::SUCCESS
}

/// Arguments of `nuvira man`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("read the manual page", "nuvira man | man -l -"),
    ("install a page per command", "nuvira man --dir /usr/local/share/man/man1"),
]))]
pub struct ManArgs {
    /// Write `nuvira.1` and one `nuvira-COMMAND.1` per subcommand into this folder instead of
    /// printing `nuvira.1` on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the manual page (roff) on stdout, or writes every page into `--dir`.
pub fn execute_man(args: ManArgs) -> u8 {
    let command = super::command();
    match args.dir {
        None => {
            let mut out = Vec::new();
            if let Err(e) = clap_mangen::Man::new(command).render(&mut out) {
                eprintln!("error: failed to render the manual page: {e}");
                return crate::exit::FAILED;
            }
            super::print_stdout(&String::from_utf8_lossy(&out));
        }
        Some(dir) => {
            if let Err(e) =
                std::fs::create_dir_all(&dir).and_then(|()| clap_mangen::generate_to(command, &dir))
            {
                eprintln!(
                    "error: failed to write the manual pages to {}: {} (check that the folder is writable)",
                    dir.display(),
                    super::io_reason(&e)
                );
                return crate::exit::INVALID;
            }
            eprintln!("wrote the manual pages to {}", dir.display());
        }
    }
    crate::exit::SUCCESS
}
