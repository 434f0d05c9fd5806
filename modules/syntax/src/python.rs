//! Python's own compiler as a second check: tree-sitter's Python grammar accepts some files
//! CPython rejects (an `IndentationError`, a `return` outside a function...).
//!
//! Runs `python3 -I -S -B`, which reads the source on standard input and only calls
//! `compile()`: no `site`, no user paths, no bytecode written, no network, nothing imported
//! from the repository. No interpreter on `PATH` means the tree-sitter check alone; the first
//! report after that says so once (its `note`).

use nuvira_api::SyntaxDiagnostic;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The longest a compile check may run before it is killed and skipped.
const DEADLINE: Duration = Duration::from_secs(10);

/// Prints `kind\tline\tcolumn\tend_line\tend_column\tmessage` for a `SyntaxError` (its
/// subclasses `IndentationError` and `TabError` included), nothing for a clean file.
const SCRIPT: &str = r#"import sys
src = sys.stdin.buffer.read()
try:
    compile(src, sys.argv[1], "exec", dont_inherit=True)
except SyntaxError as e:
    f = lambda v: v if isinstance(v, int) and v > 0 else 0
    msg = " ".join(str(e.msg).split())
    print(type(e).__name__, f(e.lineno), f(e.offset), f(e.end_lineno), f(e.end_offset), msg, sep="\t")
"#;

/// The note of the first report made without an interpreter.
pub(crate) const NO_PYTHON_NOTE: &str = "python3 was not found, so Python files get the tree-sitter check only; install python3 for CPython's compile check (indentation errors)";

static NOTED: AtomicBool = AtomicBool::new(false);
static MISSING: AtomicBool = AtomicBool::new(false);

/// What the compile check found.
pub(crate) enum Compiled {
    /// CPython compiled the file, or the check could not run for a reason other than a
    /// missing interpreter (it then adds nothing).
    Clean,
    /// CPython rejected the file.
    Error(SyntaxDiagnostic),
    /// No interpreter; `Some(note)` the first time only.
    NoInterpreter(Option<&'static str>),
}

/// Compiles `source` with `python3`; `path` labels the diagnostic.
pub(crate) fn compile_check(path: &str, source: &str) -> Compiled {
    if MISSING.load(Ordering::Relaxed) {
        return Compiled::NoInterpreter(None);
    }
    let child = Command::new("python3")
        .args(["-I", "-S", "-B", "-c", SCRIPT, path])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            MISSING.store(true, Ordering::Relaxed);
            let first = !NOTED.swap(true, Ordering::Relaxed);
            return Compiled::NoInterpreter(first.then_some(NO_PYTHON_NOTE));
        }
        Err(_) => return Compiled::Clean,
    };
    let writer = child.stdin.take().map(|mut stdin| {
        let bytes = source.as_bytes().to_vec();
        std::thread::spawn(move || {
            // A child that exits early closes the pipe: nothing to report.
            let _ = stdin.write_all(&bytes);
        })
    });
    let deadline = Instant::now() + DEADLINE;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Compiled::Clean;
            }
        }
    }
    if let Some(w) = writer {
        let _ = w.join();
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
    }
    parse(path, source, &out).map_or(Compiled::Clean, Compiled::Error)
}

fn parse(path: &str, source: &str, out: &str) -> Option<SyntaxDiagnostic> {
    let line = out.lines().next()?;
    let mut f = line.splitn(6, '\t');
    let kind = f.next()?.to_owned();
    let mut num = || f.next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    let (l, c, el, ec) = (num(), num(), num(), num());
    let message = f.next().unwrap_or("invalid syntax");
    let last = u32::try_from(source.lines().count().max(1)).unwrap_or(u32::MAX);
    let l = if l == 0 { last } else { l };
    let c = c.max(1);
    let (el, ec) = if el < l { (l, c) } else { (el, ec.max(1)) };
    Some(SyntaxDiagnostic::new(
        path,
        (l, c),
        (el, ec),
        "ERROR",
        format!("{kind}: {message}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiler_output_becomes_a_diagnostic() {
        let d = parse(
            "a.py",
            "x\n",
            "IndentationError\t2\t5\t2\t6\tunexpected indent\n",
        )
        .unwrap();
        assert_eq!((d.line, d.column), (2, 5));
        assert_eq!(d.message, "IndentationError: unexpected indent");
        assert!(parse("a.py", "x\n", "").is_none());
    }

    #[test]
    fn an_indentation_error_is_found_when_python3_is_installed() {
        match compile_check("a.py", "def f():\n    x = 1\n      y = 2\n") {
            Compiled::Error(d) => {
                assert_eq!(d.line, 3, "{d:?}");
                assert!(d.message.starts_with("IndentationError"), "{d:?}");
            }
            Compiled::NoInterpreter(_) => eprintln!("skipped: no python3"),
            Compiled::Clean => panic!("an indentation error passed"),
        }
        assert!(matches!(
            compile_check("a.py", "def f():\n    return 1\n"),
            Compiled::Clean | Compiled::NoInterpreter(_)
        ));
    }
}
