//! What a delete returns: the object, or a success `Status`.

use serde::Deserialize;

/// The body of a successful `Status` (e.g. from a delete).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SuccessStatus {
    /// `status`, normally `Success`.
    #[serde(default)]
    pub status: Option<String>,
    /// `message`.
    #[serde(default)]
    pub message: Option<String>,
    /// `details`.
    #[serde(default)]
    pub details: Option<SuccessDetails>,
}

/// `details` of a [`SuccessStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SuccessDetails {
    /// `details.name`.
    #[serde(default)]
    pub name: Option<String>,
    /// `details.kind` (the resource name).
    #[serde(default)]
    pub kind: Option<String>,
    /// `details.uid`.
    #[serde(default)]
    pub uid: Option<String>,
}

/// What a delete returned.
#[derive(Debug, Clone, PartialEq)]
pub enum DeleteOutcome<K> {
    /// The object: gone, or still present with `metadata.deletionTimestamp` set when
    /// finalizers or a grace period delay its removal.
    Object(K),
    /// A success Status.
    Status(SuccessStatus),
}
