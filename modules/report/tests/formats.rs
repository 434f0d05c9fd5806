use super::live;
use nuvira_report::{Format, github, render, sample};

fn snap(name: &str, text: &str) {
    insta::with_settings!({ snapshot_path => "snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn every_format_of_the_failing_run_matches_its_snapshot() {
    let r = live(&sample::failing_run());
    for f in Format::ALL {
        let text = if f == Format::Github {
            github::render_with_token(&r, "TOKEN0123456789")
        } else {
            render(&r, f)
        };
        snap(&format!("failing_run.{}", f.as_str()), &text);
    }
}

#[test]
fn every_format_of_the_passing_run_matches_its_snapshot() {
    let r = live(&sample::passing_run());
    for f in Format::ALL {
        let text = if f == Format::Github {
            github::render_with_token(&r, "TOKEN0123456789")
        } else {
            render(&r, f)
        };
        snap(&format!("passing_run.{}", f.as_str()), &text);
    }
}

#[test]
fn format_names_parse_and_unknown_ones_are_listed() {
    for f in Format::ALL {
        assert_eq!(f.as_str().parse::<Format>().unwrap(), f);
    }
    assert_eq!("MD".parse::<Format>().unwrap(), Format::Markdown);
    let err = "pdf".parse::<Format>().unwrap_err().to_string();
    assert!(err.contains("`pdf`") && err.contains("sarif"), "{err}");
}

#[test]
fn json_round_trips_into_the_same_report() {
    let r = live(&sample::failing_run());
    let back: nuvira_report::ExecutionReport =
        serde_json::from_str(&render(&r, Format::Json)).unwrap();
    assert_eq!(back, r);
}

#[test]
fn junit_is_well_formed_xml_with_one_failure_per_failing_test() {
    let r = live(&sample::failing_run());
    let xml = render(&r, Format::Junit);
    let mut reader = quick_xml::Reader::from_str(&xml);
    let (mut failures, mut cases, mut skipped) = (0, 0, 0);
    loop {
        match reader.read_event().unwrap() {
            quick_xml::events::Event::Eof => break,
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                match e.name().as_ref() {
                    b"failure" => failures += 1,
                    b"testcase" => cases += 1,
                    b"skipped" => skipped += 1,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    // 5 step cases (the test step is not one: its 15 tests are) + 15 tests (12 passed, 1
    // skipped, 2 failed) + 1 syntax finding.
    assert_eq!(cases, 21);
    // edit-docs, 2 tests, 1 syntax error: the failed test step is no extra failure.
    assert_eq!(failures, 4);
    // verify and report (steps), and one skipped test.
    assert_eq!(skipped, 3);
}

#[test]
fn markdown_escapes_untrusted_text() {
    let mut events = sample::failing_run();
    if let nuvira_api::EventKind::RunStarted { plan, .. } = &mut events[0].kind {
        std::sync::Arc::make_mut(plan).goal =
            "<img src=x onerror=alert(1)> | [click](http://evil) `x`".into();
    }
    let md = render(&live(&events), Format::Markdown);
    assert!(!md.contains("<img"), "{md}");
    assert!(md.contains("&lt;img src=x onerror=alert(1)&gt; \\| \\[click\\](http://evil) \\`x\\`"));
}

#[test]
fn markdown_fences_outlast_backticks_in_the_output() {
    let mut events = sample::failing_run();
    for e in &mut events {
        if let nuvira_api::EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let nuvira_api::StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.failures[0].output = "```\n## not a heading\n````\n".into();
        }
    }
    let md = render(&live(&events), Format::Markdown);
    assert!(
        md.contains("`````text\n```\n## not a heading\n````\n`````"),
        "{md}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever the goal (user or model text), it cannot add markup to the Markdown or HTML.
    #[test]
    fn an_arbitrary_goal_adds_no_markup(goal in "[<>&|`*\\[\\]()#!\"'\n a-z]{0,40}") {
        let mut events = sample::passing_run();
        if let nuvira_api::EventKind::RunStarted { plan, .. } = &mut events[0].kind {
            std::sync::Arc::make_mut(plan).goal = goal.clone();
        }
        let r = live(&events);
        let md = render(&r, Format::Markdown);
        if !goal.is_empty() {
            let line = md.lines().find(|l| l.starts_with("**Goal:** ")).unwrap();
            let rest = line.replace("<br>", "");
            proptest::prop_assert!(!rest.contains('<') && !rest.contains('>'), "{}", line);
            proptest::prop_assert!(!rest.replace("\\|", "").contains('|'), "{}", line);
        }
        let html = render(&r, Format::Html);
        let start = html.find("<title>").unwrap() + 7;
        let end = html.find("</title>").unwrap();
        proptest::prop_assert!(!html[start..end].contains('<'));
        if !goal.is_empty() {
            let p = html.find("<p class=\"goal\">").unwrap();
            let close = html[p..].find("</p>").unwrap();
            let body = &html[p + 16..p + close];
            proptest::prop_assert!(!body.replace("<b>Goal:</b>", "").contains('<'), "{}", body);
        }
    }
}

#[test]
fn text_escapes_control_characters_in_untrusted_text() {
    let mut events = sample::failing_run();
    if let nuvira_api::EventKind::RunStarted { plan, .. } = &mut events[0].kind {
        std::sync::Arc::make_mut(plan).goal = "fix evil\x1b[31m\nname.rs".into();
    }
    for e in &mut events {
        if let nuvira_api::EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let nuvira_api::StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.failures[0].file = Some("evil\x1b[31m\nname.rs".into());
        }
    }
    let text = render(&live(&events), Format::Text);
    assert!(!text.contains('\x1b'), "{text}");
    assert!(
        text.contains("goal: fix evil\\x1b[31m\\nname.rs\n"),
        "{text}"
    );
    assert!(text.contains("evil\\x1b[31m\\nname.rs"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("name.rs")), "{text}");
}
