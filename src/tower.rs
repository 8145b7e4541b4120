//! The same pacing and retries as a tower layer, over any tower service of
//! reqwest requests (a `reqwest::Client` is one).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use reqwest::{Request, Response};
use tower_service::Service;

use crate::client::{from_extensions, CallOptions, SendFailure};
use crate::sync::lock;
use crate::{Error, Pacer};

/// A [`tower_layer::Layer`] that runs a [`Pacer`]'s pacing, learning and
/// retries around the service it wraps: each attempt is one call of that
/// service (on a clone of it, made ready first).
///
/// A `reqwest::Request` costs one request, by the pacer's own
/// [`time_limit`](crate::PaceBuilder::time_limit) if it has one, in the
/// [`NORMAL`](crate::Priority::NORMAL) class: its extensions are
/// reqwest's own, which no layer can read. For a [`Cost`](crate::Cost), a
/// [`TimeLimit`](crate::TimeLimit) or a [`Priority`](crate::Priority) per
/// call,
/// send `http::Request`s with them in their extensions through
/// [`PaceService::for_http_requests`], as a
/// [`PaceMiddleware`](crate::PaceMiddleware)'s calls carry theirs.
///
/// ```
/// use reqwest_pace::{PaceLayer, Pacer, RequestRate};
/// use tower_layer::Layer;
///
/// let pacer = Pacer::builder().rate(RequestRate::per_second(20)?).build()?;
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
        let options = CallOptions {
            cost: None,
            deadline: None,
            priority: crate::Priority::default(),
        };
        self.paced(request, options)
    }
}

impl<S> PaceService<S>
where
    S: Service<Request, Response = Response, Error = reqwest::Error> + Clone + Send + 'static,
    S::Future: Send,
{
    /// The call of `request`, spending its `options`' cost (one request
    /// without one) by their deadline (the pacer's without one), in their
    /// priority's class.
    fn paced(
        &mut self,
        request: Request,
        options: CallOptions,
    ) -> Pin<Box<dyn Future<Output = Result<Response, Error>> + Send>> {
        let pacer = self.pacer.clone();
        // Behind a mutex only so that the call's future is `Send` without
        // asking `S` to be `Sync`: each attempt clones the service out.
        let inner = Mutex::new(self.inner.clone());
        Box::pin(async move {
            let cost = options.cost.unwrap_or_default();
            pacer
                .run(
                    request,
                    &cost,
                    options.deadline,
                    options.priority,
                    |attempt| {
                        let mut service = lock(&inner).clone();
                        async move {
                            futures::future::poll_fn(|cx| service.poll_ready(cx))
                                .await
                                .map_err(SendFailure::Reqwest)?;
                            service.call(attempt).await.map_err(SendFailure::Reqwest)
                        }
                    },
                )
                .await
        })
    }
}

impl<S> PaceService<S> {
    /// The same service, taking `http::Request<B>`s instead of reqwest's:
    /// each is converted as reqwest converts one, and its extensions'
    /// [`Cost`](crate::Cost), [`TimeLimit`](crate::TimeLimit) and
    /// [`Priority`](crate::Priority) are the call's. One that does not convert (a URL reqwest does not take)
    /// fails with [`Error::Transport`] after no attempt.
    ///
    /// ```
    /// use reqwest_pace::{headers::Dimension, Cost, TimeLimit, PaceLayer, Pacer, Priority};
    /// use std::time::Duration;
    /// use tower_layer::Layer;
    ///
    /// let pacer = Pacer::builder().build()?;
    /// let service = PaceLayer::new(pacer)
    ///     .layer(reqwest::Client::new())
    ///     .for_http_requests::<String>();
    /// let mut request = http::Request::new(String::from("{}"));
    /// request.extensions_mut().insert(Cost::default().with(Dimension::Requests, 3));
    /// request.extensions_mut().insert(TimeLimit(Duration::from_secs(5)));
    /// request.extensions_mut().insert(Priority::INTERACTIVE);
    /// # drop((service, request));
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn for_http_requests<B>(self) -> PaceHttpService<S, B> {
        PaceHttpService {
            service: self,
            body: PhantomData,
        }
    }
}

/// A [`PaceService`] of `http::Request<B>`s: see
/// [`PaceService::for_http_requests`].
pub struct PaceHttpService<S, B = reqwest::Body> {
    service: PaceService<S>,
    body: PhantomData<fn(B)>,
}

impl<S: Clone, B> Clone for PaceHttpService<S, B> {
    fn clone(&self) -> Self {
        PaceHttpService {
            service: self.service.clone(),
            body: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, B> std::fmt::Debug for PaceHttpService<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaceHttpService")
            .field("service", &self.service)
            .finish()
    }
}

impl<S, B> Service<http::Request<B>> for PaceHttpService<S, B>
where
    S: Service<Request, Response = Response, Error = reqwest::Error> + Clone + Send + 'static,
    S::Future: Send,
    B: Into<reqwest::Body>,
{
    type Response = Response;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Error>> + Send>>;

    /// Always ready, as [`PaceService`] is.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let options = from_extensions(request.extensions());
        match Request::try_from(request) {
            Ok(request) => self.service.paced(request, options),
            Err(source) => Box::pin(std::future::ready(Err(Error::Transport {
                attempts: 0,
                source,
            }))),
        }
    }
}
