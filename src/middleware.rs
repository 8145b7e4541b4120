//! The same pacing and retries inside a `reqwest-middleware` chain.

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::client::{from_extensions, SendFailure};
use crate::Pacer;

/// A [`reqwest_middleware::Middleware`] that runs a [`Pacer`]'s pacing,
/// learning and retries around the rest of the chain.
///
/// Each attempt runs the middlewares after this one (so a tracing
/// middleware placed after it sees every attempt; one placed before sees
/// the whole call); the chain's client sends. A call costs the
/// [`Cost`](crate::Cost) in its extensions (`.with_extension(cost)`; one
/// request without one) and waits by the [`TimeLimit`](crate::TimeLimit)
/// there, as a [`ThrottledClient`](crate::ThrottledClient)'s builder's
/// [`cost`](crate::PacedRequestBuilder::cost) and
/// [`deadline`](crate::PacedRequestBuilder::time_limit) do, and queues at
/// its keys in the class of the [`Priority`](crate::Priority) there
/// ([`NORMAL`](crate::Priority::NORMAL) without one); each attempt
/// runs the rest of the chain with a fresh copy of the call's extensions,
/// so what a later middleware writes into them is not seen here. Errors of
/// this crate come out as
/// `reqwest_middleware::Error::Middleware` wrapping an
/// [`Error`](crate::Error), transport errors that were not retried as
/// `reqwest_middleware::Error::Reqwest`.
///
/// ```
/// use reqwest_middleware::ClientBuilder;
/// use reqwest_pace::{PaceMiddleware, Pacer, RequestRate};
///
/// let pace = Pacer::builder().rate(RequestRate::per_second(20)?).build()?;
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(PaceMiddleware::new(pace))
///     .build();
/// # drop(client);
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PaceMiddleware {
    pacer: Pacer,
}

impl PaceMiddleware {
    /// Run `pacer`'s scopes, learning and retry policy in a chain (a
    /// [`ThrottledClient`](crate::ThrottledClient) converts into its own
    /// pacer, shared with it).
    pub fn new(pacer: impl Into<Pacer>) -> Self {
        PaceMiddleware {
            pacer: pacer.into(),
        }
    }
}

#[async_trait::async_trait]
impl Middleware for PaceMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let template = extensions.clone();
        let options = from_extensions(extensions);
        let cost = options.cost.unwrap_or_default();
        let result = self
            .pacer
            .run(req, &cost, options.deadline, options.priority, |attempt| {
                let next = next.clone();
                let mut ext = template.clone();
                async move {
                    match next.run(attempt, &mut ext).await {
                        Ok(response) => Ok(response),
                        Err(reqwest_middleware::Error::Reqwest(e)) => Err(SendFailure::Reqwest(e)),
                        Err(reqwest_middleware::Error::Middleware(e)) => {
                            Err(SendFailure::Other(e.into()))
                        }
                    }
                }
            })
            .await;
        match result {
            Ok(response) => Ok(response),
            Err(crate::Error::Transport { source, .. }) => {
                Err(reqwest_middleware::Error::Reqwest(source))
            }
            Err(e) => Err(reqwest_middleware::Error::middleware(e)),
        }
    }
}
