//! The events the scheduler reports about pods (`Scheduled`, `FailedScheduling`), through
//! an [`EventSink`]: the shared event recorder in production, a recording fake in tests.

use k8s_openapi::api::core::v1::Pod;

use crate::event_recorder::{object_reference, EventRecorder, EventType};

/// Receives the scheduler's events about pods. Must not block.
pub trait EventSink: Send + Sync + 'static {
    /// Reports an event about `pod`.
    fn pod_event(&self, pod: &Pod, event_type: EventType, reason: &str, message: String);
}

impl EventSink for EventRecorder {
    fn pod_event(&self, pod: &Pod, event_type: EventType, reason: &str, message: String) {
        self.event(&object_reference(pod), event_type, reason, message);
    }
}

/// The longest event or condition message: kube-scheduler cuts longer ones, ending them
/// with ` ...`.
pub const MAX_MESSAGE_LEN: usize = 1024;

/// `message` cut to [`MAX_MESSAGE_LEN`] bytes (at a character boundary) the way
/// kube-scheduler cuts it.
pub fn truncate_message(message: &str) -> String {
    const SUFFIX: &str = " ...";
    if message.len() <= MAX_MESSAGE_LEN {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_LEN - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut() {
        assert_eq!(truncate_message("short"), "short");
        let long = "é".repeat(1000);
        let cut = truncate_message(&long);
        assert!(cut.len() <= MAX_MESSAGE_LEN);
        assert!(cut.ends_with("é ..."));
        let exact = "x".repeat(MAX_MESSAGE_LEN);
        assert_eq!(truncate_message(&exact), exact);
    }
}
