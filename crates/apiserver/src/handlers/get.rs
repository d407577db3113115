//! GET of one object: read from storage (always consistent).

use super::state::ApiServer;
use super::{decode_stored, json_response, storage_error, RequestInfo};
use crate::encoding::body::Body;
use api::Status;
use http::Response;

/// Handles `GET .../{name}` and `GET .../{name}/status`.
pub async fn get(srv: &ApiServer, req: &RequestInfo) -> Result<Response<Body>, Status> {
    let name = req.require_name("GET")?;
    let key = req.storage_key(name);
    let kv = srv
        .storage()
        .get(key.as_bytes())
        .await
        .map_err(|e| storage_error(req.info, name, e))?
        .ok_or_else(|| Status::not_found(req.info.resource, name).with_group(req.info.group))?;
    let obj = decode_stored(req.info, &kv)?;
    Ok(json_response(200, obj.to_vec()))
}
