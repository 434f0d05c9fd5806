//! `go test`: the `-json` event stream (preferred), else the plain output. Tests are named
//! `package.TestName` (subtests `package.TestName/sub`; a parent with subtests is not counted
//! on its own). A package that failed to build (`FAIL pkg [build failed]`, compiler errors on
//! stderr) or failed outside any test (a `-timeout` panic, a crash in `TestMain`) is a failure
//! too. Without `-v`, plain output does not list passing tests, so `passed` can only be counted
//! from `-json`; with `-v` (`=== RUN TestX` ... `--- PASS: TestX`) it can, the output a test
//! printed before its `--- FAIL` line (`x_test.go:12: message`) is its own, and a test that
//! started and never ended (a run killed at its timeout) is named.
//!
//! Locations are the `file_test.go:LINE:` a test printed (made relative to the repository
//! through the package's folder), else the innermost frame of a panic's stack in a `_test.go`
//! file — an absolute path there is mapped to the package folder too. The message is the first
//! `t.Error`'s, with the further lines Go prints four spaces deeper (a diff), up to 20 lines.

use super::{Ctx, RunnerOutput, Tally, cap_output, diagnostics, re, secs_to_ms, strip_ansi};
use nuvira_api::TestFailure;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// The lines of a `t.Errorf` message kept in the failure's message.
const MESSAGE_LINES: usize = 20;
static ERRORF: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+([\w.-]+\.go):(\d+): (.*)$"));
static FRAME: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+(\S+\.go):(\d+)(?: \+0x[0-9a-f]+)?$"));
static TEST_FRAME: LazyLock<Regex> = LazyLock::new(|| re(r"^(\S+)\.(Test\w*)\("));
static PKG_RESULT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^(ok|FAIL)\s+(\S+)\s+(?:\[build failed\]|\[setup failed\]|([\d.]+)s|\(cached\)|\[no test files\])",
    )
});
static BUILD_FAILED: LazyLock<Regex> =
    LazyLock::new(|| re(r"^FAIL\s+(\S+) \[(?:build|setup) failed\]"));
static RUN: LazyLock<Regex> = LazyLock::new(|| re(r"^=== (RUN|CONT|PAUSE|NAME)\s+(\S+)"));
static STATUS: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)"));

/// Parses a `go test` run. `module` is the `go.mod` module path, used to turn package-relative
/// file names (`alpha_test.go`) into workspace-relative ones (`alpha/alpha_test.go`).
pub fn parse(output: &RunnerOutput, ctx: &Ctx, module: Option<String>) -> Tally {
    let dir_of = move |pkg: &str| -> Option<String> {
        let module = module.as_deref()?;
        if pkg == module {
            Some(String::new())
        } else {
            pkg.strip_prefix(module)?
                .strip_prefix('/')
                .map(str::to_owned)
        }
    };
    let stdout = strip_ansi(&output.stdout);
    let stderr = strip_ansi(&output.stderr);
    let json = stdout
        .lines()
        .any(|l| l.starts_with("{\"Time\"") || l.starts_with("{\"Action\""));
    let mut tally = if json {
        parse_json(&stdout, ctx, &dir_of)
    } else {
        parse_plain(&stdout, ctx, &dir_of)
    };
    // Build failures: compiler errors on stderr, `FAIL pkg [build failed]` on stdout.
    let diags = diagnostics::parse_go(&stderr, ctx, &dir_of);
    let mut failed_builds: Vec<String> = stdout
        .lines()
        .filter_map(|l| BUILD_FAILED.captures(l).map(|c| c[1].to_owned()))
        .collect();
    failed_builds.dedup();
    for pkg in failed_builds {
        if !diags
            .iter()
            .any(|d| d.message.starts_with(&format!("{pkg}: ")))
        {
            tally.fail(TestFailure::new(
                format!("{pkg} [build failed]"),
                "the package failed to build; see the log",
            ));
        }
    }
    tally.add_diagnostics(diags);
    tally
}

#[derive(Default)]
struct GoTest {
    output: String,
    outcome: Option<&'static str>,
    /// The test's own `Elapsed`, in milliseconds.
    elapsed_ms: Option<u64>,
}

/// Parses the `go test -json` event stream (non-JSON lines are skipped).
pub fn parse_json(text: &str, ctx: &Ctx, dir_of: &dyn Fn(&str) -> Option<String>) -> Tally {
    let mut tally = Tally::default();
    let mut tests: BTreeMap<(String, String), GoTest> = BTreeMap::new();
    let mut package_output: BTreeMap<String, String> = BTreeMap::new();
    let mut packages_started: BTreeSet<String> = BTreeSet::new();
    let mut packages_done: BTreeMap<String, bool> = BTreeMap::new(); // pkg -> passed
    for line in text.lines() {
        if !line.starts_with('{') {
            continue;
        }
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let action = ev
            .get("Action")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let pkg = ev
            .get("Package")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let test = ev.get("Test").and_then(|v| v.as_str()).map(str::to_owned);
        packages_started.insert(pkg.clone());
        match (test, action) {
            (Some(t), "output") => {
                let out = ev
                    .get("Output")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                let entry = tests.entry((pkg, t)).or_default();
                if entry.output.len() < 64 * 1024 {
                    entry.output.push_str(out);
                }
            }
            (Some(t), "run") => {
                tests.entry((pkg, t)).or_default();
            }
            (Some(t), "pass" | "fail" | "skip") => {
                let outcome = match action {
                    "pass" => "pass",
                    "fail" => "fail",
                    _ => "skip",
                };
                let entry = tests.entry((pkg, t)).or_default();
                entry.outcome = Some(outcome);
                entry.elapsed_ms = ev
                    .get("Elapsed")
                    .and_then(serde_json::Value::as_f64)
                    .map(|e| (e * 1000.0).round() as u64);
            }
            (None, "output") => {
                let out = ev
                    .get("Output")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                package_output.entry(pkg).or_default().push_str(out);
            }
            (None, "pass" | "fail" | "skip") => {
                if let Some(e) = ev.get("Elapsed").and_then(serde_json::Value::as_f64) {
                    tally.duration_ms += (e * 1000.0).round() as u64;
                }
                packages_done.insert(pkg, action != "fail");
            }
            _ => {}
        }
    }
    let parents: BTreeSet<(String, String)> = tests
        .keys()
        .filter_map(|(p, t)| {
            t.rsplit_once('/')
                .map(|(parent, _)| (p.clone(), parent.to_owned()))
        })
        .collect();
    let mut failing_packages: BTreeSet<String> = BTreeSet::new();
    for ((pkg, name), t) in &tests {
        if parents.contains(&(pkg.clone(), name.clone())) {
            continue;
        }
        let full = format!("{pkg}.{name}");
        let case = |tally: &mut Tally, outcome| {
            tally.case(full.clone(), Some(pkg.clone()), outcome, t.elapsed_ms);
        };
        match t.outcome {
            Some("pass") => {
                tally.passed += 1;
                case(&mut tally, nuvira_api::TestOutcome::Passed);
            }
            Some("skip") => {
                tally.skipped += 1;
                case(&mut tally, nuvira_api::TestOutcome::Skipped);
            }
            Some(_) => {
                failing_packages.insert(pkg.clone());
                case(&mut tally, nuvira_api::TestOutcome::Failed);
                tally.fail(go_failure(&full, pkg, &t.output, ctx, dir_of));
            }
            None => match packages_done.get(pkg) {
                // The package ended without this test ending: it took the binary down
                // (a `-timeout` panic, os.Exit, a crash).
                Some(_) => {
                    failing_packages.insert(pkg.clone());
                    tally.fail(go_failure(&full, pkg, &t.output, ctx, dir_of));
                }
                None => tally.unfinished.push(full),
            },
        }
    }
    for (pkg, passed) in &packages_done {
        if !passed && !failing_packages.contains(pkg) {
            let out = package_output
                .get(pkg)
                .map(String::as_str)
                .unwrap_or_default();
            if !out.contains("[build failed]") && !out.contains("[setup failed]") {
                tally.fail(go_failure(pkg, pkg, out, ctx, dir_of));
            }
        }
    }
    tally.completed = !packages_started.is_empty()
        && packages_started
            .iter()
            .all(|p| packages_done.contains_key(p))
        && tally.unfinished.is_empty();
    tally
}

/// A failure from a test's (or package's) output: `file_test.go:12: message` lines from
/// `t.Error`, or a panic with its stack.
fn go_failure(
    name: &str,
    pkg: &str,
    output: &str,
    ctx: &Ctx,
    dir_of: &dyn Fn(&str) -> Option<String>,
) -> TestFailure {
    let output = output.trim_matches('\n');
    let mut name = name.to_owned();
    let mut file_line: Option<(String, u32)> = None;
    let mut message: Option<String> = None;
    // The first `t.Errorf`'s indentation while its message goes on: Go prints each further
    // line of it four spaces deeper (`    x_test.go:6: mismatch:` then `          -apple`).
    let mut continued: Option<usize> = None;
    for line in output.lines() {
        if line.starts_with("=== ") || line.starts_with("--- ") {
            continued = None;
            continue;
        }
        if let Some(indent) = continued {
            let deeper = indent + 4;
            let lines_so_far = message.as_deref().map_or(0, |m| m.lines().count());
            if line.len() > deeper
                && line.as_bytes()[..deeper].iter().all(|&b| b == b' ')
                && !ERRORF.is_match(line)
                && lines_so_far < MESSAGE_LINES
                && let Some(m) = message.as_mut()
            {
                m.push('\n');
                m.push_str(line[deeper..].trim_end());
                continue;
            }
            continued = None;
        }
        if message.is_none()
            && let Some(c) = ERRORF.captures(line)
        {
            continued = Some(line.len() - line.trim_start_matches(' ').len());
            let file = match dir_of(pkg) {
                Some(dir) if !dir.is_empty() => format!("{dir}/{}", &c[1]),
                _ => c[1].to_owned(),
            };
            file_line = Some((file, c[2].parse().unwrap_or(0)));
            message = Some(c[3].trim().to_owned());
        }
        if message.is_none() && line.starts_with("panic: ") {
            message = Some(line.trim_end_matches(" [recovered]").to_owned());
        }
    }
    if file_line.is_none() {
        // A panic: the innermost frame in a _test.go file, else in the workspace.
        let lines: Vec<&str> = output.lines().collect();
        let frames: Vec<(String, u32)> = lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| FRAME.captures(l).map(|c| (i, c)))
            .map(|(i, c)| {
                let line = c[2].parse().unwrap_or(0);
                let rel = ctx.relative(&c[1]);
                // A frame of this package's own function (`pkg.TestX(...)` on the line
                // before) is in the package's folder, wherever the run was built.
                let own = !pkg.is_empty()
                    && i > 0
                    && lines[i - 1].starts_with(&format!("{pkg}."))
                    && !lines[i - 1][pkg.len() + 1..].contains('/');
                if rel.starts_with('/')
                    && own
                    && let Some(dir) = dir_of(pkg)
                    && let Some(base) = rel.rsplit('/').next()
                {
                    let file = if dir.is_empty() {
                        base.to_owned()
                    } else {
                        format!("{dir}/{base}")
                    };
                    return (file, line);
                }
                (rel, line)
            })
            .collect();
        file_line = frames
            .iter()
            .find(|(f, _)| f.ends_with("_test.go") && !f.starts_with('/'))
            .or_else(|| {
                frames
                    .iter()
                    .find(|(f, _)| !f.starts_with('/') && !f.starts_with('_'))
            })
            .or_else(|| frames.iter().find(|(f, _)| f.ends_with("_test.go")))
            .cloned();
    }
    if name == pkg
        && let Some(c) = output.lines().find_map(|l| TEST_FRAME.captures(l))
        && c[1] == *pkg
    {
        name = format!("{pkg}.{}", &c[2]);
    }
    let message = message.unwrap_or_else(|| {
        output
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("=== ") && !l.starts_with("--- "))
            .unwrap_or("failed")
            .to_owned()
    });
    let mut f = TestFailure::new(name, message).with_output(cap_output(output));
    if let Some((file, line)) = file_line {
        f = f.at(file, Some(line));
    }
    f
}

/// Parses plain `go test` output (`--- FAIL: Test (0.00s)` blocks, then `FAIL pkg 0.004s`;
/// with `-v`, `=== RUN Test` lines too).
pub fn parse_plain(text: &str, ctx: &Ctx, dir_of: &dyn Fn(&str) -> Option<String>) -> Tally {
    #[derive(Clone, Copy)]
    enum Into {
        Loose,
        Pending(usize),
        Running(usize),
    }
    let mut tally = Tally::default();
    let mut pending: Vec<(String, String, bool)> = Vec::new(); // (test, output, failed?)
    let mut loose = String::new(); // output outside any test block (panics before a FAIL line)
    let mut running: Vec<(String, String)> = Vec::new(); // `-v`: started, not ended (name, output)
    let mut into = Into::Loose;
    let mut packages = 0;
    let mut last_meaningful = "";
    for line in text.lines() {
        if !line.trim().is_empty() {
            last_meaningful = line;
        }
        if let Some(c) = RUN.captures(line) {
            let name = c[2].to_owned();
            let idx = match running.iter().position(|(n, _)| *n == name) {
                Some(i) => i,
                None if &c[1] == "RUN" || &c[1] == "CONT" || &c[1] == "NAME" => {
                    running.push((name, String::new()));
                    running.len() - 1
                }
                None => continue,
            };
            into = Into::Running(idx);
            continue;
        }
        if let Some(c) = STATUS.captures(line) {
            let name = c[2].to_owned();
            // Output the test printed while it ran (`-v`) comes first.
            let before = running
                .iter()
                .position(|(n, _)| *n == name)
                .map(|i| running.remove(i).1)
                .unwrap_or_default();
            match &c[1] {
                "PASS" => {
                    tally.passed += 1;
                    into = Into::Loose;
                }
                "SKIP" => {
                    tally.skipped += 1;
                    into = Into::Loose;
                }
                _ => {
                    pending.push((name, before, true));
                    into = Into::Pending(pending.len() - 1);
                }
            }
            continue;
        }
        if let Some(c) = PKG_RESULT.captures(line) {
            packages += 1;
            let pkg = c[2].to_owned();
            if let Some(t) = c.get(3).and_then(|m| secs_to_ms(m.as_str())) {
                tally.duration_ms += t;
            }
            let failed_pkg = &c[1] == "FAIL";
            let build_failed = line.contains("[build failed]") || line.contains("[setup failed]");
            let failures: Vec<_> = pending.drain(..).filter(|(_, _, f)| *f).collect();
            // Tests still running when their package ended took the binary down (a
            // `-timeout` panic, os.Exit): their output belongs to the package's failure.
            for (_, out) in running.drain(..) {
                loose.push_str(&out);
            }
            if failed_pkg && !build_failed && failures.is_empty() {
                tally.fail(go_failure(&pkg, &pkg, &loose, ctx, dir_of));
            }
            for (test, out, _) in failures {
                tally.fail(go_failure(
                    &format!("{pkg}.{test}"),
                    &pkg,
                    &out,
                    ctx,
                    dir_of,
                ));
            }
            loose.clear();
            into = Into::Loose;
            continue;
        }
        if line == "FAIL" || line == "PASS" {
            into = Into::Loose;
            continue;
        }
        let target = match into {
            Into::Pending(i) => pending.get_mut(i).map(|p| &mut p.1),
            Into::Running(i) => running.get_mut(i).map(|r| &mut r.1),
            Into::Loose => None,
        };
        let target = target.unwrap_or(&mut loose);
        target.push_str(line);
        target.push('\n');
    }
    tally.completed = packages > 0
        && running.is_empty()
        && (last_meaningful == "FAIL"
            || last_meaningful == "PASS"
            || PKG_RESULT.is_match(last_meaningful));
    if !running.is_empty() {
        // Killed: plain output names the package only at its end, so the test goes by its name.
        let parents: BTreeSet<String> = running
            .iter()
            .filter_map(|(n, _)| n.rsplit_once('/').map(|(p, _)| p.to_owned()))
            .collect();
        for (name, _) in running {
            if !parents.contains(&name) {
                tally.unfinished.push(name);
            }
        }
    }
    // Failures whose package line never came (killed after a `--- FAIL`).
    for (test, out, failed) in pending {
        if failed {
            tally.fail(go_failure(&test, "", &out, ctx, dir_of));
        }
    }
    tally
}
