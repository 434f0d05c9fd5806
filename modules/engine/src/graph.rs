//! Renders a plan's dependency graph as DOT (Graphviz), Mermaid or JSON.
//!
//! Edges point from a dependency to its dependent (the order work flows), the same direction
//! cycle paths are reported in.

use crate::validate::ValidatedPlan;
use serde_json::json;

/// DOT text for Graphviz (`dot -Tsvg`).
pub fn to_dot(plan: &ValidatedPlan) -> String {
    let mut out = String::from(
        "digraph plan {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef2ff\", fontname=\"Helvetica\"];\n",
    );
    if !plan.plan.goal.is_empty() {
        out.push_str(&format!(
            "  label=\"{}\";\n  labelloc=t;\n",
            dot_escape(&plan.plan.goal)
        ));
    }
    for (i, step) in plan.plan.steps.iter().enumerate() {
        let extra = if plan.outputs.contains(&i) {
            ", peripheries=2"
        } else {
            ""
        };
        out.push_str(&format!(
            "  \"{}\" [label=\"{}\\n({})\"{extra}];\n",
            dot_escape(&step.id),
            dot_escape(&step.id),
            dot_escape(&step.module)
        ));
    }
    for (i, step) in plan.plan.steps.iter().enumerate() {
        for &p in &plan.parents()[i] {
            out.push_str(&format!(
                "  \"{}\" -> \"{}\";\n",
                dot_escape(&plan.plan.steps[p as usize].id),
                dot_escape(&step.id)
            ));
        }
    }
    out.push_str("}\n");
    out
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Mermaid flowchart text (renders in GitHub Markdown inside a ```` ```mermaid ```` block).
///
/// Node ids are generated (`s0`, `s1`, ...) because Mermaid reserves some characters our ids
/// allow; the label shows the real id.
pub fn to_mermaid(plan: &ValidatedPlan) -> String {
    let mut out = String::from("flowchart LR\n");
    for (i, step) in plan.plan.steps.iter().enumerate() {
        let (open, close) = if plan.outputs.contains(&i) {
            ("([", "])")
        } else {
            ("[", "]")
        };
        out.push_str(&format!(
            "  s{i}{open}\"{}<br/><small>{}</small>\"{close}\n",
            mermaid_escape(&step.id),
            mermaid_escape(&step.module)
        ));
    }
    for (i, parents) in plan.parents().iter().enumerate() {
        for &p in parents {
            out.push_str(&format!("  s{p} --> s{i}\n"));
        }
    }
    out
}

fn mermaid_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The graph as JSON: steps, edges (`from` dependency `to` dependent), outputs, and a
/// topological order.
pub fn to_json(plan: &ValidatedPlan) -> serde_json::Value {
    let steps = &plan.plan.steps;
    let edges: Vec<_> = plan
        .parents()
        .iter()
        .enumerate()
        .flat_map(|(i, ps)| {
            ps.iter()
                .map(move |&p| json!({ "from": steps[p as usize].id, "to": steps[i].id }))
        })
        .collect();
    json!({
        "goal": plan.plan.goal,
        "steps": steps.iter().map(|s| json!({
            "id": s.id,
            "module": s.module,
            "description": s.description,
            "depends_on": s.depends_on,
        })).collect::<Vec<_>>(),
        "edges": edges,
        "outputs": plan.outputs.iter().map(|&o| &steps[o].id).collect::<Vec<_>>(),
        "order": plan.topological_order().into_iter().map(|i| &steps[i].id).collect::<Vec<_>>(),
        "critical_path_len": plan.critical_path_len(),
    })
}
