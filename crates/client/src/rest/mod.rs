//! The REST client: configuration (kubeconfig, in-cluster), the HTTP client with the verbs
//! of the Kubernetes API, resource descriptors, typed `Status` errors, and the streaming
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

pub mod client;
pub mod config;
pub(crate) mod decode_pool;
pub mod error;
pub mod list_splitter;
pub mod protobuf_decoder;
pub mod protobuf_list_splitter;
pub mod resource;
pub mod watch_decoder;
pub mod watch_stream;

pub use client::{
    Api, Client, DeleteOutcome, DeleteParams, ListParams, ObjectList, PatchParams, PatchType,
    PostParams, Preconditions, PropagationPolicy, SuccessDetails, SuccessStatus, WatchParams,
    DEFAULT_PAGE_SIZE,
};
pub use config::{Auth, ClientIdentity, Config, ConfigError, Kubeconfig};
pub use error::{decode_status, Error};
pub use resource::ApiResource;
pub use watch_decoder::{LineDecoder, WatchEvent};
pub use watch_stream::WatchStream;
