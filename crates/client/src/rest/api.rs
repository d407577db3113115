//! [`Api<K>`]: a typed handle that fixes the resource and namespace of [`Client`]'s verbs.

use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::delete_outcome::DeleteOutcome;
use super::error::Error;
use super::object_list::ObjectList;
use super::params::{DeleteParams, ListParams, PatchParams, PatchType, PostParams, WatchParams};
use super::resource::ApiResource;
use super::transport::Client;
use super::watch_stream::WatchStream;

/// A typed handle on one resource in one namespace (or across all namespaces / for a
/// cluster-scoped resource): [`Client`]'s verbs without repeating the resource and
/// namespace.
///
/// ```no_run
/// # async fn demo(client: client::rest::Client) -> Result<(), client::rest::Error> {
/// use client::rest::{Api, DeleteParams, PatchParams, PatchType, PostParams};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let config_maps: Api<ConfigMap> = Api::for_type(client, "default");
/// let mut settings = ConfigMap::default();
/// settings.metadata.name = Some("settings".into());
/// config_maps.create(&PostParams::default(), &settings).await?;
///
/// let patch = serde_json::json!({"data": {"mode": "fast"}});
/// let patched = config_maps
///     .patch("settings", &PatchParams::default(), PatchType::Merge, &patch)
///     .await?;
/// let mode = patched.data.as_ref().and_then(|d| d.get("mode"));
/// assert_eq!(mode.map(String::as_str), Some("fast"));
///
/// config_maps.delete("settings", &DeleteParams::default()).await?;
/// # Ok(())
/// # }
/// ```
pub struct Api<K> {
    client: Client,
    resource: ApiResource,
    namespace: Option<String>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K> Api<K> {
    /// A handle on `resource` in namespace `ns` (ignored for cluster-scoped resources).
    pub fn namespaced(client: Client, resource: ApiResource, ns: &str) -> Api<K> {
        let namespace = resource.namespaced.then(|| ns.to_string());
        Api {
            client,
            resource,
            namespace,
            _kind: PhantomData,
        }
    }

    /// A handle on `resource` in the client's default namespace.
    pub fn default_namespaced(client: Client, resource: ApiResource) -> Api<K> {
        let ns = client.default_namespace().to_string();
        Api::namespaced(client, resource, &ns)
    }

    /// A handle on `resource` across all namespaces (or on a cluster-scoped resource).
    /// Single-object verbs on a namespaced resource fail with [`Error::InvalidRequest`].
    pub fn all(client: Client, resource: ApiResource) -> Api<K> {
        Api {
            client,
            resource,
            namespace: None,
            _kind: PhantomData,
        }
    }

    /// The resource.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The namespace, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// [`Client::list_raw`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list_raw`].
    pub async fn list_raw(&self, params: &ListParams) -> Result<ObjectList<Bytes>, Error> {
        self.client
            .list_raw(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::list_all_raw`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list_all_raw`].
    pub async fn list_all_raw(&self, params: &ListParams) -> Result<ObjectList<Bytes>, Error> {
        self.client
            .list_all_raw(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::watch_raw`] on this handle.
    ///
    /// # Errors
    /// As [`Client::watch_raw`].
    pub async fn watch_raw(&self, params: &WatchParams) -> Result<WatchStream<Bytes>, Error> {
        self.client
            .watch_raw(&self.resource, self.namespace(), params)
            .await
    }
}

impl<K> Api<K>
where
    K: k8s_openapi::Resource,
    K::Scope: 'static,
{
    /// A handle on the resource of the typed object `K` in namespace `ns` (ignored for
    /// cluster-scoped kinds), e.g. `Api::<Pod>::for_type(client, "default")`.
    pub fn for_type(client: Client, ns: &str) -> Api<K> {
        Api::namespaced(client, ApiResource::of::<K>(), ns)
    }
}

impl<K: DeserializeOwned> Api<K> {
    /// [`Client::list`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list`].
    pub async fn list(&self, params: &ListParams) -> Result<ObjectList<K>, Error> {
        self.client
            .list(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::list_all`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list_all`].
    pub async fn list_all(&self, params: &ListParams) -> Result<ObjectList<K>, Error> {
        self.client
            .list_all(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::watch`] on this handle.
    ///
    /// # Errors
    /// As [`Client::watch`].
    pub async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>, Error>
    where
        K: Send + 'static,
    {
        self.client
            .watch(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::get`] on this handle.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn get(&self, name: &str) -> Result<K, Error> {
        self.client
            .get(&self.resource, self.namespace(), name)
            .await
    }

    /// [`Client::patch`] on this handle.
    ///
    /// # Errors
    /// As [`Client::patch`].
    pub async fn patch<P: Serialize + ?Sized>(
        &self,
        name: &str,
        params: &PatchParams,
        patch_type: PatchType,
        patch: &P,
    ) -> Result<K, Error> {
        self.client
            .patch(
                &self.resource,
                self.namespace(),
                name,
                params,
                patch_type,
                patch,
            )
            .await
    }

    /// [`Client::delete`] on this handle.
    ///
    /// # Errors
    /// As [`Client::delete`].
    pub async fn delete(
        &self,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, Error> {
        self.client
            .delete(&self.resource, self.namespace(), name, params)
            .await
    }
}

impl<K: Serialize + DeserializeOwned> Api<K> {
    /// [`Client::create`] on this handle.
    ///
    /// # Errors
    /// As [`Client::create`].
    pub async fn create(&self, params: &PostParams, object: &K) -> Result<K, Error> {
        self.client
            .create(&self.resource, self.namespace(), params, object)
            .await
    }

    /// [`Client::replace`] on this handle.
    ///
    /// # Errors
    /// As [`Client::replace`].
    pub async fn replace(&self, name: &str, params: &PostParams, object: &K) -> Result<K, Error> {
        self.client
            .replace(&self.resource, self.namespace(), name, params, object)
            .await
    }
}
