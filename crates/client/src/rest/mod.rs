//! The REST client: configuration (kubeconfig, in-cluster), the HTTP client (`transport`)
//! with the verbs of the Kubernetes API (`verbs`; their parameter builders in `params`, the
//! label and field selectors of lists and watches in `selection`, list decoding in
//! `object_list`, `delete_outcome`, and the typed handle `api::Api`), resource
//! descriptors, typed `Status` errors, and the streaming
//! watch decoder (`watch_decoder`: lines and events; `watch_stream`: the stream over a
//! response body, which decodes bursts on a few threads of its own, `decode_pool`), and the
//! list splitters that cut a list into its items while it arrives (`list_splitter` for JSON,
//! `protobuf_list_splitter`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), client::rest::Error> {
//! use client::rest::{Api, Client, Config, ListParams, WatchEvent, WatchParams};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! let client = Client::new(Config::infer()?)?;
//! let pods: Api<Pod> = Api::for_type(client, "default");
//! let list = pods.list_all(&ListParams::default()).await?;
//! let mut events = pods
//!     .watch(&WatchParams::default().resource_version(list.resource_version))
//!     .await?;
//! while let Some(event) = events.next().await {
//!     match event? {
//!         WatchEvent::Added(p) | WatchEvent::Modified(p) => println!("{:?}", p.metadata.name),
//!         WatchEvent::Deleted(p) => println!("gone: {:?}", p.metadata.name),
//!         WatchEvent::Bookmark { .. } => {}
//!         WatchEvent::Error(status) if status.code() == 410 => break, // relist
//!         WatchEvent::Error(status) => return Err(status.into()),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

pub mod api;
pub mod client;
pub mod config;
pub(crate) mod decode_pool;
pub mod delete_outcome;
pub mod error;
pub mod in_process;
pub mod list_splitter;
pub mod object_list;
pub mod params;
pub mod protobuf_decoder;
pub mod protobuf_list_splitter;
pub mod resource;
pub mod selection;
pub mod transport;
pub mod verbs;
pub mod watch_decoder;
pub mod watch_stream;

pub use api::Api;
pub use config::{Auth, ClientIdentity, Config, ConfigError, Kubeconfig, SharedToken};
pub use delete_outcome::{DeleteOutcome, SuccessDetails, SuccessStatus};
pub use error::{decode_status, Error};
pub use in_process::{InProcessBody, InProcessResponse, InProcessServer};
pub use object_list::ObjectList;
pub use params::{
    DeleteParams, ListParams, PatchParams, PatchType, PostParams, Preconditions, PropagationPolicy,
    WatchParams, DEFAULT_PAGE_SIZE,
};
pub use resource::ApiResource;
pub use selection::Selection;
pub use transport::Client;
pub use watch_decoder::{LineDecoder, WatchEvent};
pub use watch_stream::{WatchEvents, WatchStream};
