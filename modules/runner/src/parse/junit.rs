//! JUnit XML reports (nextest, pytest `--junitxml`, vitest and jest-junit), streamed with
//! quick-xml: one pass, no DOM, text only kept for failing test cases.
//!
//! A `<testcase>` with `<failure>` or `<error>` is failed, with `<skipped>` skipped, otherwise
//! passed. Retries (`<flakyFailure>`, `<rerunFailure>`) do not change the outcome. Names and
//! locations follow each runner's conventions when the framework is known (see [`parse_with`]).

use super::{
    Ctx, Tally, cap_output, first_line, js_frame_location, rust_panic_location, rust_panic_message,
    secs_to_ms,
};
use crate::detect::Framework;
use nuvira_api::TestFailure;
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

/// Why a JUnit report could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JunitError {
    /// Not well-formed XML.
    #[error(
        "parse JUnit XML at byte {position}: {message}; check that the report file was written completely"
    )]
    Xml {
        /// Byte offset of the error.
        position: u64,
        /// What quick-xml said.
        message: String,
    },
    /// Well-formed, but no `<testsuites>`/`<testsuite>`/`<testcase>` in it.
    #[error("read JUnit XML: no <testsuite> or <testcase> element found; is this a JUnit report?")]
    NotJunit,
}

/// Parses a JUnit report with generic naming (`classname::name`).
///
/// # Errors
/// [`JunitError`] when the XML is malformed or is not a JUnit report.
pub fn parse(xml: &str, ctx: &Ctx) -> Result<Tally, JunitError> {
    parse_with(xml, ctx, None)
}

/// A test case being read. Its attributes stay unparsed (borrowed from the input) until the
/// case turns out to have failed: passing cases cost no allocation.
struct Case<'a> {
    start: BytesStart<'a>,
    failed: bool,
    skipped: bool,
    message: Option<String>,
    kind: Option<String>,
    body: String,
    system_out: String,
    system_err: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sink {
    None,
    Body,
    Out,
    Err,
}

/// Parses a JUnit report, naming tests and finding locations the way `framework` prints them:
/// nextest `binary test`, pytest `file.py::test`, vitest/jest `file > describe > test`.
///
/// # Errors
/// [`JunitError`] when the XML is malformed or is not a JUnit report.
pub fn parse_with(xml: &str, ctx: &Ctx, framework: Option<Framework>) -> Result<Tally, JunitError> {
    let mut reader = Reader::from_str(xml);
    let mut tally = Tally::default();
    let mut seen_junit = false;
    let mut case: Option<Case<'_>> = None;
    let mut sink = Sink::None;
    let mut root_time: Option<u64> = None;
    let mut suite_time_sum: u64 = 0;
    let mut depth_in_retry = 0u32;
    loop {
        let event = reader.read_event().map_err(|e| JunitError::Xml {
            position: reader.error_position(),
            message: e.to_string(),
        })?;
        match event {
            Event::Start(e) | Event::Empty(e)
                if matches!(e.local_name().as_ref(), b"testsuites" | b"testsuite") =>
            {
                seen_junit = true;
                let time = attr(&e, b"time").and_then(|t| secs_to_ms(&t));
                if e.local_name().as_ref() == b"testsuites" {
                    root_time = root_time.or(time);
                } else {
                    suite_time_sum += time.unwrap_or(0);
                }
            }
            Event::Start(e) if e.local_name().as_ref() == b"testcase" => {
                seen_junit = true;
                case = Some(Case::new(e));
            }
            Event::Empty(e) if e.local_name().as_ref() == b"testcase" => {
                // No children: neither failed nor skipped.
                seen_junit = true;
                tally.passed += 1;
                let name = pytest_case_name(&e, framework);
                record_case(&e, &mut tally, nuvira_api::TestOutcome::Passed, name);
            }
            ref ev @ (Event::Start(ref e) | Event::Empty(ref e)) if case.is_some() => {
                let is_start = matches!(ev, Event::Start(_));
                let Some(c) = case.as_mut() else { continue };
                match e.local_name().as_ref() {
                    b"failure" | b"error" if depth_in_retry == 0 => {
                        c.failed = true;
                        if c.message.is_none() {
                            c.message = attr(e, b"message");
                        }
                        if c.kind.is_none() {
                            c.kind = attr(e, b"type");
                        }
                        if is_start {
                            sink = Sink::Body;
                        }
                    }
                    b"skipped" => {
                        c.skipped = true;
                        if c.message.is_none() {
                            c.message = attr(e, b"message");
                        }
                        if is_start {
                            sink = Sink::Body;
                        }
                    }
                    b"system-out" if is_start => sink = Sink::Out,
                    b"system-err" if is_start => sink = Sink::Err,
                    b"flakyFailure" | b"flakyError" | b"rerunFailure" | b"rerunError"
                        if is_start =>
                    {
                        depth_in_retry += 1;
                        sink = Sink::None;
                    }
                    _ => {}
                }
            }
            // Text is only decoded where it is kept (inside a failing case's elements).
            Event::Text(t) if sink != Sink::None => {
                if let Some(c) = case.as_mut()
                    && let Ok(text) = t.xml_content()
                {
                    push(c, sink, &text);
                }
            }
            Event::CData(t) if sink != Sink::None => {
                if let Some(c) = case.as_mut()
                    && let Ok(text) = t.decode()
                {
                    push(c, sink, &text);
                }
            }
            Event::GeneralRef(r) => {
                if let Some(c) = case.as_mut()
                    && sink != Sink::None
                {
                    let resolved = match r.resolve_char_ref() {
                        Ok(Some(ch)) => Some(ch),
                        _ => match r.decode().as_deref() {
                            Ok("amp") => Some('&'),
                            Ok("lt") => Some('<'),
                            Ok("gt") => Some('>'),
                            Ok("apos") => Some('\''),
                            Ok("quot") => Some('"'),
                            _ => None,
                        },
                    };
                    if let Some(ch) = resolved {
                        push(c, sink, ch.encode_utf8(&mut [0; 4]));
                    }
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                b"testcase" => {
                    if let Some(c) = case.take() {
                        finish_case(c, &mut tally, ctx, framework);
                    }
                    sink = Sink::None;
                }
                b"flakyFailure" | b"flakyError" | b"rerunFailure" | b"rerunError" => {
                    depth_in_retry = depth_in_retry.saturating_sub(1);
                }
                b"failure" | b"error" | b"skipped" | b"system-out" | b"system-err" => {
                    sink = Sink::None
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    if !seen_junit {
        return Err(JunitError::NotJunit);
    }
    tally.completed = true;
    tally.duration_ms = root_time.unwrap_or(suite_time_sum);
    Ok(tally)
}

fn push(c: &mut Case<'_>, sink: Sink, text: &str) {
    // Only failing cases keep their text; passing ones would only cost memory.
    let target = match sink {
        Sink::None => return,
        Sink::Body => &mut c.body,
        Sink::Out if c.failed => &mut c.system_out,
        Sink::Err if c.failed => &mut c.system_err,
        Sink::Out | Sink::Err => return,
    };
    if target.len() < 64 * 1024 {
        target.push_str(text);
    }
}

fn attr(e: &BytesStart<'_>, key: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == key)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}

impl<'a> Case<'a> {
    fn new(start: BytesStart<'a>) -> Self {
        Self {
            start,
            failed: false,
            skipped: false,
            message: None,
            kind: None,
            body: String::new(),
            system_out: String::new(),
            system_err: String::new(),
        }
    }
}

/// The `name`, `classname`, `file` and `line` attributes of a test case.
#[derive(Default)]
struct CaseAttrs {
    name: String,
    classname: String,
    file: Option<String>,
    line: Option<u32>,
}

fn case_attrs(e: &BytesStart<'_>) -> CaseAttrs {
    let mut c = CaseAttrs::default();
    for a in e.attributes().flatten() {
        let Ok(value) = a.unescape_value() else {
            continue;
        };
        match a.key.local_name().as_ref() {
            b"name" => c.name = value.into_owned(),
            b"classname" => c.classname = value.into_owned(),
            b"file" => c.file = Some(value.into_owned()),
            b"line" => c.line = value.parse().ok(),
            _ => {}
        }
    }
    c
}

/// Records a test case of the report (name, classname and `time` from its attributes).
fn record_case(
    e: &BytesStart<'_>,
    tally: &mut Tally,
    outcome: nuvira_api::TestOutcome,
    name: Option<String>,
) {
    let attrs = case_attrs(e);
    let classname = Some(attrs.classname.trim().to_owned()).filter(|c| !c.is_empty());
    let time = attr(e, b"time").and_then(|t| secs_to_ms(&t));
    let name = name.unwrap_or_else(|| attrs.name.trim().to_owned());
    tally.case(name, classname, outcome, time);
}

/// A pytest case's node id (`tests/test_x.py::TestClass::test_y`) from its JUnit classname
/// (`tests.test_x.TestClass`) and name; `text` (a failure's) tells a module's folders from its
/// classes when it names the file.
fn pytest_node_id(classname: &str, name: &str, text: &str) -> (String, Option<String>) {
    let (test_file, rest) = super::pytest::classname_to_file(classname, text);
    let full = match &test_file {
        Some(f) if rest.is_empty() => format!("{f}::{name}"),
        Some(f) => format!("{f}::{rest}::{name}"),
        None if classname.is_empty() => name.to_owned(),
        None => format!("{classname}::{name}"),
    };
    (full, test_file)
}

/// A pytest case's node id, for a case that did not fail (`None` for other frameworks: the
/// case keeps its JUnit name).
fn pytest_case_name(e: &BytesStart<'_>, framework: Option<Framework>) -> Option<String> {
    (framework == Some(Framework::Pytest)).then(|| {
        let attrs = case_attrs(e);
        pytest_node_id(attrs.classname.trim(), attrs.name.trim(), "").0
    })
}

fn finish_case(mut c: Case<'_>, tally: &mut Tally, ctx: &Ctx, framework: Option<Framework>) {
    if !c.failed {
        // Every pytest case by its node id, as its failure would be named: one name for a
        // test whatever its outcome.
        let name = pytest_case_name(&c.start, framework);
        if c.skipped {
            tally.skipped += 1;
            record_case(&c.start, tally, nuvira_api::TestOutcome::Skipped, name);
        } else {
            tally.passed += 1;
            record_case(&c.start, tally, nuvira_api::TestOutcome::Passed, name);
        }
        return;
    }
    let attrs = case_attrs(&c.start);
    let name = attrs.name.trim();
    let classname = attrs.classname.trim();
    let text = if c.body.trim().is_empty() {
        format!("{}{}", c.system_out, c.system_err)
    } else {
        std::mem::take(&mut c.body)
    };
    let mut file = attrs.file.as_deref().map(|f| ctx.relative(f));
    let mut line = attrs.line;
    let (full_name, message) = match framework {
        Some(Framework::Nextest | Framework::Cargo) => {
            // The panic is in the failure text; older reports only have it in system-err.
            let all = if text.contains("panicked at ") {
                std::borrow::Cow::Borrowed(text.as_str())
            } else {
                std::borrow::Cow::Owned(format!("{text}\n{}", c.system_err))
            };
            if file.is_none()
                && let Some((f, l)) = rust_panic_location(&all, ctx)
            {
                file = Some(f);
                line = Some(l);
            }
            let message = rust_panic_message(&all)
                .or_else(|| {
                    c.kind
                        .clone()
                        .filter(|k| k.contains("timeout"))
                        .map(|k| format!("{k}: the test did not finish in time"))
                })
                .or_else(|| c.message.clone())
                .unwrap_or_else(|| first_line(&text));
            let full = if classname.is_empty() {
                name.to_owned()
            } else {
                format!("{classname} {name}")
            };
            (full, message)
        }
        Some(Framework::Pytest) => {
            let (full, test_file) = pytest_node_id(classname, name, &text);
            if file.is_none()
                && let Some((f, l)) =
                    super::pytest::failure_location(&text, test_file.as_deref(), ctx)
            {
                file = Some(f);
                line = Some(l);
            }
            // A file pytest could not collect has the fixed message "collection failure"; the
            // error itself (`ModuleNotFoundError: ...`, `SyntaxError: ...`) is in the text, as
            // the terminal output's parser reads it.
            let message = match c.message.clone() {
                Some(m) if m == "collection failure" => match super::pytest::error_message(&text) {
                    Some(e) => format!("{m}: {e}"),
                    None => m,
                },
                Some(m) => m,
                None => first_line(&text),
            };
            (full, message)
        }
        _ => {
            // vitest: classname is the file; jest-junit: classname repeats the name.
            let looks_like_file = classname.contains('/')
                || classname.contains(".test.")
                || classname.contains(".spec.");
            let full = if classname.is_empty() || classname == name {
                name.to_owned()
            } else if looks_like_file {
                format!("{classname} > {name}")
            } else if name.starts_with(classname) {
                name.to_owned()
            } else {
                format!("{classname}::{name}")
            };
            if file.is_none() {
                let prefer = looks_like_file.then(|| ctx.relative(classname));
                if let Some((f, l)) = js_frame_location(&text, prefer.as_deref(), ctx) {
                    file = Some(f);
                    line = Some(l);
                } else if looks_like_file {
                    file = prefer;
                }
            }
            let message = c
                .message
                .clone()
                .filter(|m| !m.trim().is_empty())
                .map(|m| match &c.kind {
                    Some(k) if !m.starts_with(k.as_str()) => format!("{k}: {m}"),
                    _ => m,
                })
                .unwrap_or_else(|| first_line(&text));
            (full, message)
        }
    };
    // The failed case has the failure's name, so the two can be matched.
    record_case(
        &c.start,
        tally,
        nuvira_api::TestOutcome::Failed,
        Some(full_name.clone()),
    );
    let mut failure =
        TestFailure::new(full_name, message).with_output(cap_output(text.trim_matches('\n')));
    if let Some(f) = file {
        failure = failure.at(f, line);
    }
    tally.fail(failure);
}
