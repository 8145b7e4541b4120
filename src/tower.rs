//! The same pacing and retries as a tower layer, over any tower service of
//! reqwest requests (a `reqwest::Client` is one).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use reqwest::{Request, Response};
use tower_service::Service;

use crate::client::{Cost, SendFailure};
use crate::sync::lock;
use crate::{Error, Pacer};

/// A [`tower_layer::Layer`] that runs a [`Pacer`]'s pacing, learning and
/// retries around the service it wraps: each attempt is one call of that
/// service (on a clone of it, made ready first).
///
/// Every call costs one request, by the pacer's own
/// [`deadline`](crate::PaceBuilder::deadline) if it has one (a
/// `reqwest::Request` carries no per-call settings a layer could read).
///
/// ```
/// use reqwest_pace::{PaceLayer, Pacer, Rate};
/// use tower_layer::Layer;
///
/// let pacer = Pacer::builder().rate(Rate::per_second(20)?).build()?;
/// let service = PaceLayer::new(pacer).layer(reqwest::Client::new());
/// # drop(service);
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PaceLayer {
    pacer: Pacer,
}

impl PaceLayer {
    /// Run `pacer`'s scopes, learning and retry policy around a service (a
    /// [`ThrottledClient`](crate::ThrottledClient) converts into its own
    /// pacer, shared with it).
    pub fn new(pacer: impl Into<Pacer>) -> Self {
        PaceLayer {
            pacer: pacer.into(),
        }
    }
}

impl<S> tower_layer::Layer<S> for PaceLayer {
    type Service = PaceService<S>;

    fn layer(&self, inner: S) -> PaceService<S> {
        PaceService {
            pacer: self.pacer.clone(),
            inner,
        }
    }
}

/// The service [`PaceLayer`] makes: `S`'s calls, paced, learned from and
/// retried.
#[derive(Clone, Debug)]
pub struct PaceService<S> {
    pacer: Pacer,
    inner: S,
}

impl<S> Service<Request> for PaceService<S>
where
    S: Service<Request, Response = Response, Error = reqwest::Error> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Error>> + Send>>;

    /// Always ready: the wrapped service is made ready for each attempt,
    /// after its pacing wait (a readiness reserved before a wait of
    /// seconds would be held all that time).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let pacer = self.pacer.clone();
        // Behind a mutex only so that the call's future is `Send` without
        // asking `S` to be `Sync`: each attempt clones the service out.
        let inner = Mutex::new(self.inner.clone());
        Box::pin(async move {
            let cost = Cost::default();
            pacer
                .run(request, &cost, None, |attempt| {
                    let mut service = lock(&inner).clone();
                    async move {
                        futures::future::poll_fn(|cx| service.poll_ready(cx))
                            .await
                            .map_err(SendFailure::Reqwest)?;
                        service.call(attempt).await.map_err(SendFailure::Reqwest)
                    }
                })
                .await
        })
    }
}
