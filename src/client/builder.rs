//! The builder shared by [`Pacer`] and [`ThrottledClient`]: one set of
//! settings, and a `build` for each.

use std::sync::Arc;
use std::time::Duration;

use super::engine::{Inner, Pacer, Random};
use super::events::Hook;
use super::{Event, Scope, ThrottledClient};
use crate::retry::{ReleaseJitter, RetryBudget, RetryRules};
use crate::Error;

/// Builds a [`Pacer`] (`PaceBuilder<()>`, from [`Pacer::builder`]) or a
/// [`ThrottledClient`] (`PaceBuilder<reqwest::Client>`, from
/// [`ThrottledClient::builder`]): the same settings, and the
/// `reqwest::Client` that sends when there is one.
#[must_use]
pub struct PaceBuilder<S> {
    sender: S,
    host_scope: Option<Scope>,
    scopes: Vec<Scope>,
    policy: RetryRules,
    budget: Option<RetryBudget>,
    hook: Option<Hook>,
    deadline: Option<Duration>,
    jitter: ReleaseJitter,
    random: Option<Random>,
    reconcile: Option<Arc<dyn super::Reconcile>>,
    #[cfg(feature = "robots")]
    robots: Option<super::Robots>,
    /// A setting that applies to nothing, kept to fail `build` with.
    ignored: Option<&'static str>,
}

/// The builder of a [`ThrottledClient`].
pub type ThrottledClientBuilder = PaceBuilder<reqwest::Client>;

impl<S> PaceBuilder<S> {
    pub(crate) fn new(sender: S) -> Self {
        PaceBuilder {
            sender,
            host_scope: Some(Scope::per_host()),
            scopes: Vec::new(),
            policy: RetryRules::default(),
            budget: Some(RetryBudget::default()),
            hook: None,
            deadline: None,
            jitter: ReleaseJitter::default(),
            random: None,
            reconcile: None,
            #[cfg(feature = "robots")]
            robots: None,
            ignored: None,
        }
    }

    /// A ceiling for each host's bucket. Without it, each host starts
    /// permissively and paces itself from what its responses say. Set
    /// after [`without_host_scope`](Self::without_host_scope), it applies
    /// to nothing, and `build` fails.
    pub fn rate(mut self, rate: crate::RequestRate) -> Self {
        match self.host_scope.take() {
            Some(scope) => self.host_scope = Some(scope.rate(rate)),
            None => self.ignored = Some("rate"),
        }
        self
    }

    /// The burst allowed per host (default: one second of the rate). Set
    /// after [`without_host_scope`](Self::without_host_scope), it applies
    /// to nothing, and `build` fails.
    pub fn burst(mut self, burst: u64) -> Self {
        match self.host_scope.take() {
            Some(scope) => self.host_scope = Some(scope.burst(burst)),
            None => self.ignored = Some("burst"),
        }
        self
    }

    /// At most `max` requests in flight per host (default: no cap); see
    /// [`Scope::max_in_flight`] for what a permit covers. Set after
    /// [`without_host_scope`](Self::without_host_scope), it applies to
    /// nothing, and `build` fails.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        match self.host_scope.take() {
            Some(scope) => self.host_scope = Some(scope.max_in_flight(max)),
            None => self.ignored = Some("max_in_flight"),
        }
        self
    }

    /// A circuit breaker per host (default: none); see
    /// [`Scope::circuit_breaker`] for what opens and closes it. Set after
    /// [`without_host_scope`](Self::without_host_scope), it applies to
    /// nothing, and `build` fails.
    pub fn circuit_breaker(mut self, breaker: super::CircuitBreaker) -> Self {
        match self.host_scope.take() {
            Some(scope) => self.host_scope = Some(scope.circuit_breaker(breaker)),
            None => self.ignored = Some("circuit_breaker"),
        }
        self
    }

    /// Latency-aware politeness per host (default: none); see
    /// [`Scope::auto_throttle`]. Set after
    /// [`without_host_scope`](Self::without_host_scope), it applies to
    /// nothing, and `build` fails.
    pub fn auto_throttle(mut self, politeness: super::AutoThrottle) -> Self {
        match self.host_scope.take() {
            Some(scope) => self.host_scope = Some(scope.auto_throttle(politeness)),
            None => self.ignored = Some("auto_throttle"),
        }
        self
    }

    /// Replace the default per-host scope.
    pub fn host_scope(mut self, scope: Scope) -> Self {
        self.host_scope = Some(scope);
        self
    }

    /// Drop the default per-host scope (only the added scopes pace).
    pub fn without_host_scope(mut self) -> Self {
        self.host_scope = None;
        self
    }

    /// Add a scope; a request must pass every scope it belongs to, the
    /// per-host scope first, then these in the order added.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scopes.push(scope);
        self
    }

    /// How failures are retried.
    pub fn retry(mut self, rules: RetryRules) -> Self {
        self.policy = rules;
        self
    }

    /// Cap retries to a share of regular traffic. On by default with
    /// [`RetryBudget::default`] (10 tokens, a tenth back per success).
    ///
    /// The budget counts failures retried on the backoff schedule (a bare
    /// 503, a connect error); a retry the server invited with a
    /// `Retry-After` spends nothing, since the key's pacing already spaces
    /// it. Measured: 50 calls at once against a host answering nothing but
    /// bare 503s send 54 requests and end in 154 ms with the default
    /// budget, and 200 requests over 48 s without one.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Retry without a budget: each call up to the policy's attempts,
    /// however many other calls fail.
    pub fn without_retry_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Receive every [`Event`] (waits, sends, throttles, retries, give-ups).
    /// The hook runs inline: keep it short.
    pub fn on_event(mut self, hook: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// A time limit for every call, from when it starts: pacing waits, the
    /// wait for a key's first response, `Retry-After` blocks and retries
    /// all end by it, and a wait that would end past it fails at once with
    /// [`Error::TimeLimitExceeded`]. Off by default (the retry policy's
    /// `max_elapsed` still bounds every wait after the first send); a
    /// request can set its own with
    /// [`PacedRequestBuilder::time_limit`](crate::PacedRequestBuilder::time_limit).
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.deadline = Some(limit);
        self
    }

    /// Positive-only jitter after every instant a server names
    /// (`Retry-After`, the end of a spent window), so that tasks and
    /// processes told the same instant do not arrive together (default: up
    /// to 10 % of the wait, at most 1 s; [`ReleaseJitter::none`] for exact
    /// releases).
    pub fn release_jitter(mut self, jitter: ReleaseJitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The source of uniform draws in `[0, 1)` for the backoff's and the
    /// release's jitter (default: `fastrand`); a test injects its own.
    pub fn random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.random = Some(Arc::new(random));
        self
    }

    /// Obey each host's robots.txt for a user-agent (feature `robots`;
    /// default: robots.txt is not read): disallowed paths fail at once
    /// with [`Error::RobotsDisallowed`], and a host's `Crawl-delay` or
    /// `Request-rate` spaces its sends. See [`Robots`](super::Robots).
    #[cfg(feature = "robots")]
    pub fn robots(mut self, robots: super::Robots) -> Self {
        self.robots = Some(robots);
        self
    }

    /// Reconcile each call's estimated [`Cost`](super::Cost) with what it
    /// really cost (default: none, the estimate stands): follow the
    /// server's `remaining` ([`FromHeaders`](super::FromHeaders)), read a
    /// body's `usage` ([`UsageBody`](super::UsageBody), settled through
    /// the response's [`Charge`](super::Charge)), both (a pair), or a
    /// closure of your own. See [`Reconcile`](super::Reconcile).
    ///
    /// ```
    /// use reqwest_pace::{headers::Dimension, FromHeaders, Pacer, Scope, UsageBody};
    ///
    /// let pacer = Pacer::builder()
    ///     .scope(Scope::per_host().named("tokens").dimension(Dimension::Tokens))
    ///     .reconcile((FromHeaders, UsageBody))
    ///     .build()?;
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn reconcile(mut self, reconcile: impl super::Reconcile) -> Self {
        self.reconcile = Some(Arc::new(reconcile));
        self
    }

    /// Validate the configuration and build the engine.
    fn build_pacer(self) -> Result<(Pacer, S), Error> {
        if let Some(setting) = self.ignored {
            return Err(Error::config(format!(
                "`{setting}` was set without a host scope (after `without_host_scope`), \
                 where it applies to nothing: set it on a scope instead"
            )));
        }
        let scopes = self
            .host_scope
            .into_iter()
            .chain(self.scopes)
            .map(Scope::build)
            .collect::<Result<Vec<_>, _>>()?;
        #[cfg(feature = "robots")]
        if let Some(robots) = &self.robots {
            robots.validate()?;
        }
        let inner = Inner {
            scopes,
            policy: self.policy,
            budget: self.budget.map(Arc::new),
            hook: self.hook,
            deadline: self.deadline,
            jitter: self.jitter,
            random: self.random.unwrap_or_else(|| Arc::new(fastrand::f64)),
            reconcile: self.reconcile,
            clocks: Default::default(),
            #[cfg(feature = "robots")]
            robots: self.robots.map(super::robots::RobotsCache::new),
        };
        let pacer = Pacer {
            inner: Arc::new(inner),
        };
        Ok((pacer, self.sender))
    }
}

impl PaceBuilder<()> {
    /// Validate the configuration and build the engine.
    pub fn build(self) -> Result<Pacer, Error> {
        self.build_pacer().map(|(pacer, ())| pacer)
    }
}

impl PaceBuilder<reqwest::Client> {
    /// Validate the configuration and build the client.
    pub fn build(self) -> Result<ThrottledClient, Error> {
        let (pacer, client) = self.build_pacer()?;
        Ok(ThrottledClient { pacer, client })
    }
}

impl Pacer {
    /// Start building an engine with one adaptive bucket per host, the
    /// default [`RetryRules`] and the default [`RetryBudget`].
    pub fn builder() -> PaceBuilder<()> {
        PaceBuilder::new(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RequestRate;

    #[test]
    fn a_rate_or_burst_without_a_host_layer_fails_the_build() {
        let rate = RequestRate::per_second(5).unwrap();
        let built = Pacer::builder().without_host_scope().rate(rate).build();
        match built {
            Err(Error::InvalidConfig(message)) => assert!(message.contains("`rate`"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        let built = ThrottledClient::builder(reqwest::Client::new())
            .without_host_scope()
            .burst(3)
            .build();
        assert!(matches!(built, Err(Error::InvalidConfig(m)) if m.contains("`burst`")));
        // Set before the host scope is dropped, the rate is dropped with it
        // on purpose: that is the host scope's own setting going away.
        let built = Pacer::builder().rate(rate).without_host_scope().build();
        assert!(built.is_ok());
        // With a host scope, both apply.
        assert!(Pacer::builder().rate(rate).burst(2).build().is_ok());
    }
}
