//! A request being built for a [`ThrottledClient`]: reqwest's shape, with
//! a `send` that paces, learns and retries.
//!
//! reqwest's own `RequestBuilder::send` would go around the client's
//! buckets, so [`ThrottledClient::get`] and its siblings return this builder
//! instead: there is no path through the crate's client that skips pacing.
//! Every method of reqwest's builder is forwarded, those reqwest gates
//! behind a feature (`json`, `query`, `form`, `multipart`) behind this
//! crate's feature of the same name, which turns reqwest's on; any change
//! of the reqwest builder is also reachable through
//! [`PacedRequestBuilder::with`].

use std::fmt;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Request, RequestBuilder, Response};

use super::{Cost, IntoRequest, Priority, ThrottledClient};
use crate::Error;

/// A request being built for a [`ThrottledClient`]; [`send`](Self::send)
/// paces, learns and retries it.
///
/// ```no_run
/// use reqwest_pace::ThrottledClient;
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let client = ThrottledClient::new(reqwest::Client::new())?;
/// let response = client
///     .get("https://api.example.com/items")
///     .header("accept", "application/json")
///     .send()
///     .await?;
/// println!("{}", response.status());
/// # Ok(())
/// # }
/// ```
#[must_use = "a request does nothing until it is sent"]
pub struct PacedRequestBuilder {
    client: ThrottledClient,
    inner: RequestBuilder,
    cost: Cost,
    deadline: Option<Duration>,
    priority: Priority,
}

impl PacedRequestBuilder {
    pub(crate) fn new(client: ThrottledClient, inner: RequestBuilder) -> Self {
        PacedRequestBuilder {
            client,
            inner,
            cost: Cost::default(),
            deadline: None,
            priority: Priority::default(),
        }
    }

    /// Add a header (as [`reqwest::RequestBuilder::header`]).
    pub fn header<K, V>(self, key: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.with(|b| b.header(key, value))
    }

    /// Add headers (as [`reqwest::RequestBuilder::headers`]).
    pub fn headers(self, headers: HeaderMap) -> Self {
        self.with(|b| b.headers(headers))
    }

    /// HTTP bearer authentication.
    pub fn bearer_auth<T: fmt::Display>(self, token: T) -> Self {
        self.with(|b| b.bearer_auth(token))
    }

    /// HTTP basic authentication.
    pub fn basic_auth<U: fmt::Display, P: fmt::Display>(
        self,
        username: U,
        password: Option<P>,
    ) -> Self {
        self.with(|b| b.basic_auth(username, password))
    }

    /// The request body. A body that cannot be cloned (a stream) is sent
    /// once and never retried.
    pub fn body<T: Into<reqwest::Body>>(self, body: T) -> Self {
        self.with(|b| b.body(body))
    }

    /// reqwest's timeout for each attempt (from when it is sent, after any
    /// pacing wait).
    pub fn timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.timeout(timeout))
    }

    /// The HTTP version (as [`reqwest::RequestBuilder::version`]).
    pub fn version(self, version: reqwest::Version) -> Self {
        self.with(|b| b.version(version))
    }

    /// Append `query` to the URL's query string (as
    /// [`reqwest::RequestBuilder::query`]; feature `query`).
    #[cfg(feature = "query")]
    pub fn query<T: serde::Serialize + ?Sized>(self, query: &T) -> Self {
        self.with(|b| b.query(query))
    }

    /// A URL-encoded form body (as [`reqwest::RequestBuilder::form`];
    /// feature `form`).
    #[cfg(feature = "form")]
    pub fn form<T: serde::Serialize + ?Sized>(self, form: &T) -> Self {
        self.with(|b| b.form(form))
    }

    /// A JSON body (as [`reqwest::RequestBuilder::json`]; feature `json`).
    #[cfg(feature = "json")]
    pub fn json<T: serde::Serialize + ?Sized>(self, json: &T) -> Self {
        self.with(|b| b.json(json))
    }

    /// A multipart form body (as [`reqwest::RequestBuilder::multipart`];
    /// feature `multipart`). Its body is a stream: the request is sent
    /// once and never retried.
    #[cfg(feature = "multipart")]
    pub fn multipart(self, form: reqwest::multipart::Form) -> Self {
        self.with(|b| b.multipart(form))
    }

    /// A copy of the builder, with its cost, deadline and priority, when
    /// its body
    /// can be copied (as [`reqwest::RequestBuilder::try_clone`]).
    pub fn try_clone(&self) -> Option<Self> {
        Some(PacedRequestBuilder {
            client: self.client.clone(),
            inner: self.inner.try_clone()?,
            cost: self.cost.clone(),
            deadline: self.deadline,
            priority: self.priority,
        })
    }

    /// What the request spends from the buckets it passes (one request by
    /// default); see [`Cost`].
    pub fn cost(mut self, cost: Cost) -> Self {
        self.cost = cost;
        self
    }

    /// A time limit for this call, from when it is sent: every wait (the
    /// buckets, the key's first response, `Retry-After`, retries) ends by
    /// it, and one that would end past it fails at once with
    /// [`Error::TimeLimitExceeded`]. Overrides the client's
    /// [`time_limit`](crate::ThrottledClientBuilder::time_limit).
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.deadline = Some(limit);
        self
    }

    /// The call's priority class at its keys ([`Priority::NORMAL`] by
    /// default): within a key, a higher class is admitted first, and a
    /// lower one is not overtaken for ever (see [`Priority`] for the
    /// guarantees).
    ///
    /// ```no_run
    /// use reqwest_pace::{Priority, ThrottledClient};
    ///
    /// # async fn run() -> Result<(), reqwest_pace::Error> {
    /// let client = ThrottledClient::new(reqwest::Client::new())?;
    /// // A user is waiting for this one: ahead of the key's batch calls.
    /// let response = client
    ///     .get("https://api.example.com/me")
    ///     .priority(Priority::INTERACTIVE)
    ///     .send()
    ///     .await?;
    /// # drop(response);
    /// # Ok(())
    /// # }
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Any other change to the reqwest builder (a query, a JSON body with
    /// reqwest's `json` feature), keeping the request on this client.
    pub fn with(mut self, change: impl FnOnce(RequestBuilder) -> RequestBuilder) -> Self {
        self.inner = change(self.inner);
        self
    }

    /// Build the request without sending it.
    pub fn build(self) -> Result<Request, reqwest::Error> {
        self.inner.build()
    }

    /// Build the request without sending it, and give back the client it
    /// was made on (as [`reqwest::RequestBuilder::build_split`]).
    pub fn build_split(self) -> (ThrottledClient, Result<Request, reqwest::Error>) {
        (self.client, self.inner.build())
    }

    /// Send the request: paced, adapted and retried as
    /// [`ThrottledClient::send`] does, spending its [`cost`](Self::cost).
    pub async fn send(self) -> Result<Response, Error> {
        let PacedRequestBuilder {
            client,
            inner,
            cost,
            deadline,
            priority,
        } = self;
        let request = inner.build().map_err(|source| Error::Transport {
            attempts: 0,
            source,
        })?;
        client.send_with(request, &cost, deadline, priority).await
    }
}

impl IntoRequest for PacedRequestBuilder {
    fn into_request(self) -> Result<Request, reqwest::Error> {
        self.build()
    }

    fn call_priority(&self) -> Option<Priority> {
        Some(self.priority)
    }

    /// Keeps the builder's cost and deadline: `client.send(builder)` is
    /// `builder.send()`.
    fn into_call(self) -> Result<(Request, Option<Cost>, Option<Duration>), reqwest::Error> {
        let PacedRequestBuilder {
            inner,
            cost,
            deadline,
            ..
        } = self;
        Ok((inner.build()?, Some(cost), deadline))
    }
}

impl fmt::Debug for PacedRequestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacedRequestBuilder")
            .field("request", &self.inner)
            .field("cost", &self.cost)
            .field("deadline", &self.deadline)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}
