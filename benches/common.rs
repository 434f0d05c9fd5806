//! Graph generators shared by the benches.
#![allow(dead_code)]

use nuvira_api::{ExecutionPlan, PlanStep};

/// A tiny deterministic PRNG (xorshift), so every run benches the same graphs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `layers` layers of `width` steps; each step depends on 1–3 random steps of the previous
/// layer; the last layer feeds one `report` step so the plan is orphan-free.
pub fn layered(layers: usize, width: usize, module: &str, seed: u64) -> ExecutionPlan {
    let mut rng = Rng::new(seed);
    let mut steps = Vec::with_capacity(layers * width + 1);
    for l in 0..layers {
        for w in 0..width {
            let mut s = PlanStep::new(format!("l{l}_{w}"), module);
            if l > 0 {
                let k = 1 + rng.below(3);
                for _ in 0..k {
                    let d = format!("l{}_{}", l - 1, rng.below(width));
                    if !s.depends_on.contains(&d) {
                        s.depends_on.push(d);
                    }
                }
            }
            steps.push(s);
        }
    }
    // Every step of layer l must feed layer l+1 or the sink, else it is an orphan: let the
    // sink depend on the whole last layer and on every step nobody depends on.
    let mut has_dependent = vec![false; steps.len()];
    let index = |id: &str| -> usize {
        let (l, w) = id[1..].split_once('_').unwrap_or(("0", "0"));
        l.parse::<usize>().unwrap_or(0) * width + w.parse::<usize>().unwrap_or(0)
    };
    for s in &steps {
        for d in &s.depends_on {
            has_dependent[index(d)] = true;
        }
    }
    let mut sink = PlanStep::new("sink", module);
    for (i, s) in steps.iter().enumerate() {
        if !has_dependent[i] {
            sink.depends_on.push(s.id.clone());
        }
    }
    steps.push(sink);
    ExecutionPlan {
        goal: "bench".into(),
        outputs: Some(vec!["sink".into()]),
        steps,
        ..Default::default()
    }
}

/// A chain of `n` steps.
pub fn chain(n: usize, module: &str) -> ExecutionPlan {
    let steps = (0..n)
        .map(|i| {
            let s = PlanStep::new(format!("c{i}"), module);
            if i == 0 {
                s
            } else {
                s.depends_on([format!("c{}", i - 1)])
            }
        })
        .collect();
    ExecutionPlan {
        goal: "bench".into(),
        outputs: Some(vec![format!("c{}", n - 1)]),
        steps,
        ..Default::default()
    }
}

/// `n` independent steps, all outputs.
pub fn independent(n: usize, module: &str) -> ExecutionPlan {
    let steps: Vec<PlanStep> = (0..n)
        .map(|i| PlanStep::new(format!("i{i}"), module))
        .collect();
    ExecutionPlan {
        goal: "bench".into(),
        outputs: Some(steps.iter().map(|s| s.id.clone()).collect()),
        steps,
        ..Default::default()
    }
}
