//! An event sink that records, and a cancel signal the test fires.

use nuvira_api::{CancelSignal, EventKind, EventSink, async_trait};
use std::sync::Mutex;
use tokio::sync::watch;

/// Records every event it is sent, with the step it names, in order.
///
/// ```
/// use nuvira_api::{EventKind, EventSink};
/// let r = nuvira_test_support::Recorder::default();
/// r.emit(Some("s"), EventKind::StepReady);
/// assert_eq!(r.names(), ["step:ready"]);
/// assert_eq!(r.events()[0].0.as_deref(), Some("s"));
/// ```
#[derive(Debug, Default)]
pub struct Recorder(Mutex<Vec<(Option<String>, EventKind)>>);

impl EventSink for Recorder {
    fn emit(&self, step_id: Option<&str>, kind: EventKind) {
        self.0
            .lock()
            .unwrap()
            .push((step_id.map(str::to_owned), kind));
    }
}

impl Recorder {
    /// The events so far, each with the step it names.
    pub fn events(&self) -> Vec<(Option<String>, EventKind)> {
        self.0.lock().unwrap().clone()
    }

    /// The events so far, without their steps.
    pub fn kinds(&self) -> Vec<EventKind> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// The names of the events so far (`step:started`, `edit:written`, ...).
    pub fn names(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, k)| k.name())
            .collect()
    }

    /// Forgets the events so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// A cancel signal the test fires.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Default for Trigger {
    fn default() -> Self {
        Self(watch::channel(false).0)
    }
}

impl Trigger {
    /// Cancels: [`CancelSignal::cancelled`] returns, now and from then on.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

#[async_trait]
impl CancelSignal for Trigger {
    fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }
    async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }
}
