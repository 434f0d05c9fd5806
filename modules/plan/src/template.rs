//! The default plan shape for a goal: inspect → edit → test → verify → report.

use nuvira_api::{
    Complexity, ExecutionPlan, PlanError, PlanRequest, PlanStep, Planner, async_trait,
};
use serde_json::json;

/// Produces the standard pipeline for a goal without asking a model: inspect the repository
/// for the goal's keywords, let the edit step turn the goal into edits (`instructions`), run
/// the tests, verify and report.
#[derive(Debug, Clone, Default)]
pub struct TemplatePlanner {
    test_timeout: Option<std::time::Duration>,
}

impl TemplatePlanner {
    /// The default template.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder-style: a timeout for the test step.
    #[must_use]
    pub fn test_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.test_timeout = Some(timeout);
        self
    }

    /// The plan for a goal (synchronous form of [`Planner::plan`]).
    pub fn plan_for(&self, goal: &str) -> ExecutionPlan {
        let keywords: Vec<String> = goal
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.len() > 2)
            .map(str::to_owned)
            .collect();
        let mut test = PlanStep::new("test", "test").depends_on(["edit"]);
        test.timeout = self.test_timeout;
        ExecutionPlan {
            goal: goal.to_owned(),
            outputs: None,
            steps: vec![
                PlanStep::new("inspect", "inspect").with_config(json!({ "keywords": keywords })),
                PlanStep::new("edit", "edit")
                    .depends_on(["inspect"])
                    .with_config(json!({ "instructions": goal })),
                test,
                PlanStep::new("verify", "verify").depends_on(["test"]),
                PlanStep::new("report", "report").depends_on(["verify"]),
            ],
            estimated_complexity: Some(Complexity::Moderate),
            mcp_servers: Default::default(),
            suggested_provider: None,
        }
    }
}

#[async_trait]
impl Planner for TemplatePlanner {
    fn name(&self) -> &str {
        "template"
    }

    async fn plan(&self, request: &PlanRequest) -> Result<ExecutionPlan, PlanError> {
        if request.goal.trim().is_empty() {
            return Err(PlanError::Invalid(
                "the goal is empty: say what should change".into(),
            ));
        }
        Ok(self.plan_for(&request.goal))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_is_a_chain_ending_in_report_with_goal_keywords() {
        let plan = TemplatePlanner::new().plan_for("Rename parse_config to load_config");
        let ids: Vec<_> = plan.steps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["inspect", "edit", "test", "verify", "report"]);
        for pair in plan.steps.windows(2) {
            assert_eq!(pair[1].depends_on, vec![pair[0].id.clone()]);
        }
        let kw = plan.steps[0].config_value("keywords").unwrap();
        assert!(kw.as_array().unwrap().iter().any(|k| k == "parse_config"));
    }

    #[tokio::test]
    async fn empty_goal_is_refused() {
        let err = TemplatePlanner::new()
            .plan(&PlanRequest::new("  "))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("goal is empty"));
    }
}
