//! The outputs upstream of a step, as the engine hands them over.

use nuvira_api::{StepInputs, StepOutput};
use std::sync::Arc;

/// The outputs of the steps upstream of the step under test, in order; each is also a direct
/// dependency.
///
/// ```
/// use nuvira_api::{StepInputs, StepOutput};
/// let up = nuvira_test_support::Upstream::default().with("inspect", StepOutput::Empty);
/// assert!(up.dependency("edit", "inspect").is_some());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Upstream(pub Vec<(String, Arc<StepOutput>)>);

impl Upstream {
    /// Builder-style: adds the output of step `id`.
    #[must_use]
    pub fn with(mut self, id: impl Into<String>, output: StepOutput) -> Self {
        self.0.push((id.into(), Arc::new(output)));
        self
    }
}

impl StepInputs for Upstream {
    fn dependency(&self, _step: &str, id: &str) -> Option<Arc<StepOutput>> {
        self.0.iter().find(|(i, _)| i == id).map(|(_, o)| o.clone())
    }
    fn upstream(&self, _step: &str) -> Vec<(String, Arc<StepOutput>)> {
        self.0.clone()
    }
}
