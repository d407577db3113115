//! The REST client's names under their former module path, `rest::client`, which once held
//! all of them in one file. Each now lives in a module of its own: [`super::transport`]
//! ([`Client`] and its HTTP plumbing), [`super::verbs`] (the verbs on `Client`),
//! [`super::params`] (the parameter builders), [`super::object_list`] (list decoding),
//! [`super::delete_outcome`] and [`super::api`] ([`Api<K>`]). Prefer the re-exports in
//! [`crate::rest`].

pub use super::api::Api;
pub use super::delete_outcome::{DeleteOutcome, SuccessDetails, SuccessStatus};
pub use super::object_list::ObjectList;
pub use super::params::{
    DeleteParams, ListParams, PatchParams, PatchType, PostParams, Preconditions, PropagationPolicy,
    WatchParams, DEFAULT_PAGE_SIZE,
};
pub use super::transport::Client;
