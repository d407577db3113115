//! The Kubernetes wire model for listwatch. No I/O.
//!
//! Data flow: the server's handlers parse the query string into [`list_options::ListOptions`]
//! (selectors from [`labels`] and [`fields`], continue tokens from [`continue_token`]), decode
//! request bodies into [`object::Object`] (JSON plus its parsed metadata), apply
//! [`patch`]es, record field ownership and server-side apply ([`managed_fields`]), and answer failures with [`status::Status`]. The client crate uses the same
//! types to build requests and decode answers, so both ends agree on the wire; both read
//! and write Kubernetes' protobuf encoding with the one codec in [`protobuf_wire`].
#![warn(missing_docs)]
// `Status` is deliberately rich (details, causes); it is the error of every fallible call.
#![allow(clippy::result_large_err)]

pub mod continue_token;
pub mod fields;
pub mod labels;
pub mod list_options;
pub mod managed_fields;
pub mod object;
pub mod patch;
pub mod protobuf_wire;
pub mod quantity;
pub mod quota;
pub mod status;
pub mod time;

pub use object::Object;
pub use status::{Reason, Status};
