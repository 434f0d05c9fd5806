//! One self-contained HTML page: the plan's DAG coloured by step status (inline SVG, laid out
//! here by topological layers), a timeline of the steps, findings, test failures with their
//! output, and file changes with their diffs.
//!
//! No scripts, no fonts, no images, no links to load: a Content-Security-Policy of
//! `default-src 'none'` makes sure of it, so the page opens offline, in a CI artifact viewer or
//! a sandboxed browser alike. All text is HTML-escaped.

use crate::builder::location;
use crate::{ExecutionReport, StepRecord, human_ms, run_label, severity_label, step_label};
use nuvira_api::StepStatus;
use nuvira_api::report::FindingKind;
use std::collections::HashMap;
use std::fmt::Write as _;

const NODE_W: usize = 168;
const NODE_H: usize = 46;
const GAP_X: usize = 64;
const GAP_Y: usize = 20;
const PAD: usize = 16;

/// Renders the report as one HTML page.
pub fn render(r: &ExecutionReport) -> String {
    let mut o = String::with_capacity(16 * 1024);
    let title = format!("Nuvira run {} — {}", r.run_id, run_label(r.status));
    let _ = write!(
        o,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="nuvira-report {version}">
<title>{title}</title>
<style>{CSS}</style>
</head>
<body>
<header class="run {status}">
<h1>{title}</h1>
"#,
        version = env!("CARGO_PKG_VERSION"),
        title = esc(&title),
        status = run_label(r.status),
    );
    if !r.goal.is_empty() {
        let _ = writeln!(o, "<p class=\"goal\"><b>Goal:</b> {}</p>", esc(&r.goal));
    }
    let _ = writeln!(o, "<p class=\"summary\">{}</p>", esc(&r.summary));
    if r.dry_run {
        o.push_str(
            "<p class=\"note\">Dry run: file changes are previews; nothing was written.</p>\n",
        );
    }
    if let Some(reason) = &r.cancel_reason {
        let _ = writeln!(o, "<p class=\"note\">Cancelled: {}</p>", esc(reason));
    }
    if let Some(reason) = &r.budget_exceeded {
        let _ = writeln!(o, "<p class=\"note\">Stopped: {}</p>", esc(reason));
    }
    if let Some(u) = &r.usage {
        let _ = writeln!(o, "<p class=\"usage\">Model: {}</p>", esc(&u.describe()));
        let per_step: Vec<String> = r
            .steps
            .iter()
            .filter_map(|s| {
                let u = s.usage.as_ref()?;
                Some(format!(
                    "<li><code>{}</code>: {}</li>",
                    esc(&s.id),
                    esc(&u.describe())
                ))
            })
            .collect();
        if !per_step.is_empty() {
            let _ = writeln!(o, "<ul class=\"usage\">{}</ul>", per_step.concat());
        }
    }
    let c = &r.counts;
    let _ = writeln!(
        o,
        "<ul class=\"counts\"><li><b>{}</b> steps</li><li class=\"succeeded\"><b>{}</b> succeeded</li><li class=\"failed\"><b>{}</b> failed</li><li class=\"skipped\"><b>{}</b> skipped</li><li><b>{}</b> tests passed</li><li class=\"failed\"><b>{}</b> tests failed</li><li><b>{}</b> files changed (+{} −{})</li><li><b>{}</b></li></ul>\n</header>",
        c.steps,
        c.succeeded,
        c.failed,
        c.skipped,
        c.tests_passed,
        c.tests_failed,
        c.files_changed,
        c.lines_added,
        c.lines_removed,
        esc(&human_ms(r.duration_ms)),
    );

    o.push_str("<main>\n<section id=\"graph\"><h2>Plan graph</h2>\n");
    dag(&mut o, &r.steps);
    o.push_str(LEGEND);
    o.push_str("</section>\n");

    o.push_str("<section id=\"timeline\"><h2>Timeline</h2>\n");
    timeline(&mut o, r);
    o.push_str("</section>\n");

    o.push_str("<section id=\"steps\"><h2>Steps</h2>\n<table><thead><tr><th>step</th><th>module</th><th>status</th><th>attempts</th><th>time</th><th>result</th></tr></thead><tbody>\n");
    for s in &r.steps {
        let _ = writeln!(
            o,
            "<tr class=\"{status}\"><td><code>{id}</code></td><td>{module}</td><td><span class=\"swatch {status}\"></span>{status}</td><td>{attempts}</td><td>{time}</td><td>{result}</td></tr>",
            status = step_label(s),
            id = esc(&s.id),
            module = esc(&s.module),
            attempts = s.attempts,
            time = s.duration_ms.map(human_ms).unwrap_or_default(),
            result = esc(&crate::step_result(s)),
        );
    }
    o.push_str("</tbody></table></section>\n");

    let findings: Vec<_> = r.findings().collect();
    if !findings.is_empty() {
        let _ = writeln!(
            o,
            "<section id=\"findings\"><h2>Findings <small>{} error(s), {} warning(s)</small></h2>\n<table><thead><tr><th>severity</th><th>where</th><th>step</th><th>what</th></tr></thead><tbody>",
            c.errors, c.warnings
        );
        for (s, f) in &findings {
            let _ = writeln!(
                o,
                "<tr class=\"{sev}\"><td>{sev}</td><td><code>{loc}</code></td><td><code>{step}</code></td><td><b>{title}</b>: {msg}</td></tr>",
                sev = severity_label(f.severity),
                loc = esc(&location(f)),
                step = esc(&s.id),
                title = esc(&f.title),
                msg = esc(&f.message),
            );
        }
        o.push_str("</tbody></table></section>\n");
    }

    let tests: Vec<_> = findings
        .iter()
        .filter(|(_, f)| f.kind == FindingKind::TestFailure)
        .collect();
    if !tests.is_empty() {
        o.push_str("<section id=\"tests\"><h2>Test failures</h2>\n");
        for (s, f) in tests {
            let _ = writeln!(
                o,
                "<article class=\"failure\"><h3>{}</h3><p><code>{}</code> · step <code>{}</code></p><pre class=\"message\">{}</pre>",
                esc(f.title.trim_start_matches("test failed: ")),
                esc(&location(f)),
                esc(&s.id),
                esc(&f.message)
            );
            if !f.detail.trim().is_empty() {
                let _ = writeln!(
                    o,
                    "<details><summary>captured output</summary><pre>{}</pre></details>",
                    esc(&f.detail)
                );
            }
            o.push_str("</article>\n");
        }
        o.push_str("</section>\n");
    }

    let changes: Vec<_> = r.file_changes().collect();
    if !changes.is_empty() {
        let _ = writeln!(
            o,
            "<section id=\"changes\"><h2>File changes <small>{} file(s), +{} −{}{}</small></h2>",
            c.files_changed,
            c.lines_added,
            c.lines_removed,
            esc(&crate::rolled_back_note(r))
        );
        for (s, ch) in changes {
            let _ = write!(
                o,
                "<details open><summary><code>{}</code> <span class=\"add\">+{}</span> <span class=\"del\">−{}</span> · step <code>{}</code>{}</summary><pre class=\"diff\">",
                esc(&ch.path),
                ch.additions,
                ch.deletions,
                esc(&s.id),
                if crate::is_rolled_back(s, ch) {
                    " · <b>rolled back</b>"
                } else {
                    ""
                }
            );
            for line in ch.diff.lines() {
                let class = if line.starts_with("+++") || line.starts_with("---") {
                    "file"
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else if line.starts_with("@@") {
                    "hunk"
                } else {
                    "ctx"
                };
                // Block spans, no newline characters: a newline inside `pre` would add a blank
                // line after every block.
                let _ = write!(o, "<span class=\"{class}\">{}</span>", esc(line));
            }
            o.push_str("</pre></details>\n");
        }
        o.push_str("</section>\n");
    }

    if !r.follow_up.is_empty() {
        o.push_str("<section id=\"next\"><h2>Next steps</h2><ul>\n");
        for f in &r.follow_up {
            let _ = writeln!(o, "<li>{}</li>", esc(f));
        }
        o.push_str("</ul></section>\n");
    }
    let _ = writeln!(
        o,
        "</main>\n<footer>report <code>{}</code> · {} event(s)</footer>\n</body>\n</html>",
        esc(&r.report_id),
        r.events
    );
    o
}

/// Layers: a step's layer is one more than its deepest dependency's (longest path from a
/// root). Unknown dependencies are ignored; steps caught in a cycle go after the rest.
pub fn layers(steps: &[StepRecord]) -> Vec<Vec<usize>> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let deps: Vec<Vec<usize>> = steps
        .iter()
        .map(|s| {
            s.depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect();
    let mut layer: Vec<Option<usize>> = vec![None; steps.len()];
    let mut remaining = steps.len();
    while remaining > 0 {
        let mut progressed = false;
        for i in 0..steps.len() {
            if layer[i].is_some() {
                continue;
            }
            if deps[i].iter().all(|&d| layer[d].is_some()) {
                layer[i] = Some(
                    deps[i]
                        .iter()
                        .filter_map(|&d| layer[d])
                        .map(|l| l + 1)
                        .max()
                        .unwrap_or(0),
                );
                remaining -= 1;
                progressed = true;
            }
        }
        if !progressed {
            let next = layer.iter().flatten().max().map_or(0, |m| m + 1);
            for l in layer.iter_mut().filter(|l| l.is_none()) {
                *l = Some(next);
            }
            break;
        }
    }
    let depth = layer.iter().flatten().max().map_or(0, |m| m + 1);
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (i, l) in layer.iter().enumerate() {
        out[l.unwrap_or(0)].push(i);
    }
    // One barycentre pass: order each layer by the mean position of its dependencies, which
    // removes most edge crossings in plan-shaped graphs.
    let mut pos: Vec<f64> = vec![0.0; steps.len()];
    for layer in &mut out {
        let key = |i: &usize| {
            let d = &deps[*i];
            if d.is_empty() {
                *i as f64
            } else {
                d.iter().map(|&x| pos[x]).sum::<f64>() / d.len() as f64
            }
        };
        let mut keyed: Vec<(f64, usize)> = layer.iter().map(|i| (key(i), *i)).collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        *layer = keyed.into_iter().map(|(_, i)| i).collect();
        for (p, &i) in layer.iter().enumerate() {
            pos[i] = p as f64;
        }
    }
    out
}

fn dag(o: &mut String, steps: &[StepRecord]) {
    let layers = layers(steps);
    let rows = layers.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let width = PAD * 2 + layers.len().max(1) * NODE_W + layers.len().saturating_sub(1) * GAP_X;
    let mut height = PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y;
    let mut xy: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut layer_of: HashMap<usize, usize> = HashMap::new();
    let mut layer_bottom: Vec<usize> = Vec::with_capacity(layers.len());
    for (l, layer) in layers.iter().enumerate() {
        let offset = (rows - layer.len()) * (NODE_H + GAP_Y) / 2;
        let mut bottom = 0;
        for (k, &i) in layer.iter().enumerate() {
            let y = PAD + offset + k * (NODE_H + GAP_Y);
            xy.insert(i, (PAD + l * (NODE_W + GAP_X), y));
            layer_of.insert(i, l);
            bottom = y + NODE_H;
        }
        layer_bottom.push(bottom);
    }
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // Edges: a bezier between adjacent layers; an edge that skips layers runs along a lane
    // below the nodes of the layers it crosses, so it never passes under a node.
    let mut edges = String::new();
    let mut lanes = 0;
    for (i, s) in steps.iter().enumerate() {
        for d in &s.depends_on {
            let (Some(&j), Some(&(x2, y2))) = (index.get(d.as_str()), xy.get(&i)) else {
                continue;
            };
            let Some(&(x1, y1)) = xy.get(&j) else {
                continue;
            };
            let (sx, sy) = (x1 + NODE_W, y1 + NODE_H / 2);
            let (ex, ey) = (x2, y2 + NODE_H / 2);
            let (lj, li) = (layer_of[&j], layer_of[&i]);
            let path = if li > lj + 1 {
                lanes += 1;
                let below = layer_bottom[lj + 1..li].iter().max().copied().unwrap_or(0);
                let lane = below + GAP_Y / 2 + lanes * 6;
                height = height.max(lane + PAD);
                let (ax, bx) = (sx + GAP_X / 2, ex - GAP_X / 2);
                format!(
                    "M {sx} {sy} C {ax} {sy}, {sx} {lane}, {ax} {lane} L {bx} {lane} C {ex} {lane}, {bx} {ey}, {ex} {ey}"
                )
            } else {
                let mid = (sx + ex) / 2;
                format!("M {sx} {sy} C {mid} {sy}, {mid} {ey}, {ex} {ey}")
            };
            let _ = writeln!(
                edges,
                r#"<path class="edge" data-from="{}" data-to="{}" d="{path}" marker-end="url(#arrow)"/>"#,
                esc(d),
                esc(&s.id)
            );
        }
    }
    let _ = writeln!(
        o,
        r#"<svg id="dag" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="plan graph, {} steps">"#,
        steps.len()
    );
    o.push_str(r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#57606a"/></marker></defs>
"##);
    o.push_str(&edges);
    for (i, s) in steps.iter().enumerate() {
        let Some(&(x, y)) = xy.get(&i) else { continue };
        let status = step_label(s);
        let sub = match (s.status, s.duration_ms) {
            (StepStatus::Succeeded | StepStatus::Failed, Some(d)) => {
                format!("{} · {status} · {}", s.module, human_ms(d))
            }
            _ => format!("{} · {status}", s.module),
        };
        let _ = writeln!(
            o,
            r#"<g class="node {status}" data-step="{id}"><title>{id}: {status}{msg}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8"/><text x="{tx}" y="{ty1}" class="id">{short}</text><text x="{tx}" y="{ty2}" class="sub">{sub}</text></g>"#,
            id = esc(&s.id),
            msg = s
                .message
                .as_deref()
                .map(|m| format!(" — {}", esc(m)))
                .unwrap_or_default(),
            tx = x + 10,
            ty1 = y + 19,
            ty2 = y + 36,
            short = esc(&truncate(&s.id, 20)),
            sub = esc(&truncate(&sub, 28)),
        );
    }
    o.push_str("</svg>\n");
}

fn timeline(o: &mut String, r: &ExecutionReport) {
    let end = r
        .steps
        .iter()
        .filter_map(|s| Some(s.started_ms? + s.duration_ms.unwrap_or(0)))
        .max()
        .unwrap_or(0)
        .max(r.duration_ms)
        .max(1);
    o.push_str("<div class=\"timeline\">\n");
    for s in &r.steps {
        let status = step_label(s);
        let (left, width, label) = match s.started_ms {
            Some(start) => {
                let d = s.duration_ms.unwrap_or(end.saturating_sub(start));
                (
                    start as f64 * 100.0 / end as f64,
                    (d as f64 * 100.0 / end as f64).max(0.4),
                    format!("{} → {}", human_ms(start), human_ms(start + d)),
                )
            }
            None => (0.0, 0.0, format!("{status}: never started")),
        };
        let _ = writeln!(
            o,
            r#"<div class="row"><span class="label"><code>{id}</code></span><span class="track"><span class="bar {status}" style="left:{left:.2}%;width:{width:.2}%" title="{label}"></span></span><span class="when">{label}</span></div>"#,
            id = esc(&s.id),
            label = esc(&label),
        );
    }
    o.push_str("</div>\n");
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// Escapes text for HTML element content and attribute values.
fn esc(s: &str) -> String {
    crate::clean::html(s)
}

const LEGEND: &str = r#"<p class="legend"><span class="swatch succeeded"></span>succeeded <span class="swatch failed"></span>failed <span class="swatch skipped"></span>skipped <span class="swatch running"></span>running <span class="swatch pending"></span>pending</p>
"#;

const CSS: &str = r#"
:root{--ok:#1a7f37;--bad:#cf222e;--skip:#8c959f;--run:#bf8700;--pend:#d0d7de;--fg:#1f2328;--mut:#57606a;--bg:#fff;--line:#d0d7de}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:18px 28px;border-bottom:4px solid var(--pend);background:#f6f8fa}header.succeeded{border-color:var(--ok)}header.failed{border-color:var(--bad)}header.cancelled,header.incomplete{border-color:var(--run)}
h1{margin:0 0 6px;font-size:22px}h2{font-size:17px;margin:26px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}h2 small{color:var(--mut);font-weight:normal}h3{margin:0 0 4px;font-size:15px}
main{padding:0 28px 28px}.goal,.summary{margin:4px 0}.note{color:var(--run)}
.counts{list-style:none;display:flex;flex-wrap:wrap;gap:8px;padding:0;margin:10px 0 0}.counts li{background:#fff;border:1px solid var(--line);border-radius:6px;padding:3px 10px}.counts li.failed b{color:var(--bad)}.counts li.succeeded b{color:var(--ok)}
#dag{max-width:100%;height:auto;display:block}#dag .edge{fill:none;stroke:#57606a;stroke-width:1.6}
#dag .node rect{stroke-width:1.5}#dag .node text{font:13px system-ui,sans-serif}#dag .node .id{font-weight:600}#dag .node .sub{font-size:11px}
#dag .succeeded rect{fill:#dafbe1;stroke:var(--ok)}#dag .failed rect{fill:#ffebe9;stroke:var(--bad)}#dag .skipped rect{fill:#f6f8fa;stroke:var(--skip);stroke-dasharray:5 3}#dag .running rect,#dag .cancelled rect{fill:#fff8c5;stroke:var(--run)}#dag .pending rect{fill:#fff;stroke:var(--pend)}
#dag .failed .id{fill:var(--bad)}#dag .skipped text{fill:var(--mut)}
.legend{color:var(--mut);font-size:12px}.swatch{display:inline-block;width:12px;height:12px;border-radius:3px;margin:0 4px 0 10px;vertical-align:-2px}
.swatch.succeeded,.bar.succeeded{background:var(--ok)}.swatch.failed,.bar.failed{background:var(--bad)}.swatch.skipped,.bar.skipped{background:var(--skip)}.swatch.running,.bar.running,.swatch.cancelled,.bar.cancelled{background:var(--run)}.swatch.pending,.bar.pending{background:var(--pend)}
.timeline .row{display:grid;grid-template-columns:160px 1fr 150px;gap:10px;align-items:center;margin:3px 0}.track{position:relative;height:14px;background:#f6f8fa;border-radius:3px}.bar{position:absolute;top:0;height:14px;border-radius:3px}.when{color:var(--mut);font-size:12px}
table{border-collapse:collapse;width:100%}th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}tr.error td:first-child{color:var(--bad);font-weight:600}tr.warning td:first-child{color:var(--run);font-weight:600}
pre{background:#f6f8fa;border:1px solid var(--line);border-radius:6px;padding:8px 10px;overflow:auto;white-space:pre-wrap;word-break:break-word;margin:6px 0}
.failure{border-left:4px solid var(--bad);padding:4px 12px;margin:10px 0}
.diff span{display:block}.diff .add{background:#dafbe1}.diff .del{background:#ffebe9}.diff .hunk{color:#0550ae}.diff .file{color:var(--mut);font-weight:600}
summary .add{color:var(--ok)}summary .del{color:var(--bad)}details{margin:6px 0}
footer{color:var(--mut);font-size:12px;padding:12px 28px;border-top:1px solid var(--line)}
"#;
