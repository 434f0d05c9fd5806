use std::process::ExitCode;

fn main() -> ExitCode {
    nuvira::cli::main()
}
