//! Estimate, then reconcile: what a call really cost, known after its
//! response, charged or refunded against the estimate it was paced on.
//!
//! A call is paced on its [`Cost`], an estimate (an LLM call's prompt and
//! its `max_tokens`). The server counts what the call really used, and
//! says so after it: in the next `remaining` of its headers, or in a
//! `usage` object of the body. A [`Reconcile`] reads either; the
//! [`Charge`] a response carries settles the difference on every bucket
//! the call was charged in, so that the budget follows what the server
//! counted instead of drifting by the estimate's error on every call.
//!
//! The trade-off: a body is the caller's to read, so its usage is settled
//! only when the caller hands it back ([`Charge::settle_body`]); headers
//! are read by the client at once, but say what remains of the whole key
//! (every call in flight included), not what one call used.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::scope::KeyState;
use super::Cost;
use crate::headers::Dimension;

/// How much more than its estimate a call may be reported to have used,
/// when its server states no limit in the dimension: more is taken for a
/// reconciler's mistake, clamped and warned once per key.
const MOST_OVER_ESTIMATE: u64 = 64;

/// What a call really cost, read after its response: from the headers (the
/// next `remaining` the server states), from the body the caller read, or
/// both. Set on a client with
/// [`PaceBuilder::reconcile`](crate::PaceBuilder::reconcile).
///
/// Built-ins: [`FromHeaders`], [`UsageBody`] (OpenAI's and Anthropic's
/// `usage` object), and a pair of reconcilers, which does what either
/// does. A closure `Fn(&[u8]) -> Option<Cost>` reads a body of another
/// shape.
///
/// ```
/// use reqwest_pace::{headers::Dimension, Cost, FromHeaders, Reconcile, UsageBody};
///
/// // Follow the server's `remaining`, and read `usage` from bodies.
/// let both = (FromHeaders, UsageBody);
/// assert!(both.follows_headers());
/// let used = both.usage(br#"{"usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}}"#);
/// assert_eq!(used.map(|c| c.get(&Dimension::Tokens)), Some(42));
///
/// // A body of another shape: `{"cost": 17}`.
/// let custom = |body: &[u8]| {
///     let text = std::str::from_utf8(body).ok()?;
///     let n = text.trim_start_matches(r#"{"cost": "#).trim_end_matches('}').parse().ok()?;
///     Some(Cost::default().with(Dimension::Tokens, n))
/// };
/// assert_eq!(custom.usage(br#"{"cost": 17}"#), Some(Cost::default().with(Dimension::Tokens, 17)));
/// ```
pub trait Reconcile: Send + Sync + 'static {
    /// Whether a learning key of a dimension other than requests follows
    /// the `remaining` its server states after each call (default: no):
    /// the key then holds what the server says remains, less what the
    /// key's later calls in flight weigh, up to its capacity, whichever
    /// way that moves it. The server has then counted the call, and a
    /// body's usage is not settled again in that dimension.
    fn follows_headers(&self) -> bool {
        false
    }

    /// What the call used, read from the body the caller read, in every
    /// dimension the body says (`None`: it says nothing, and the estimate
    /// stands). A dimension the cost does not name is left as it was
    /// charged.
    fn usage(&self, body: &[u8]) -> Option<Cost> {
        let _ = body;
        None
    }
}

/// Follow the `remaining` a server states in each dimension other than
/// requests: see [`Reconcile::follows_headers`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FromHeaders;

impl Reconcile for FromHeaders {
    fn follows_headers(&self) -> bool {
        true
    }
}

/// Read an LLM API's `usage` object from a response body: OpenAI's
/// `prompt_tokens`, `completion_tokens` and `total_tokens`, or
/// Anthropic's `input_tokens` and `output_tokens` (their sum is the
/// tokens), as [`Dimension::InputTokens`], [`Dimension::OutputTokens`]
/// and [`Dimension::Tokens`]. Only the top-level object's `usage` is
/// read, and only whole numbers; a body without one says nothing.
///
/// ```
/// use reqwest_pace::{headers::Dimension, Reconcile, UsageBody};
///
/// let used = UsageBody.usage(br#"{"type": "message", "usage": {"input_tokens": 7, "output_tokens": 300}}"#);
/// let used = used.expect("a usage object");
/// assert_eq!(used.get(&Dimension::InputTokens), 7);
/// assert_eq!(used.get(&Dimension::OutputTokens), 300);
/// assert_eq!(used.get(&Dimension::Tokens), 307);
/// assert_eq!(UsageBody.usage(b"not json"), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageBody;

impl Reconcile for UsageBody {
    fn usage(&self, body: &[u8]) -> Option<Cost> {
        let fields = json::usage(body)?;
        let find = |names: &[&str]| {
            fields
                .iter()
                .find(|(name, _)| names.contains(&name.as_str()))
                .map(|&(_, n)| n)
        };
        let input = find(&["prompt_tokens", "input_tokens"]);
        let output = find(&["completion_tokens", "output_tokens"]);
        let total = find(&["total_tokens"]).or(match (input, output) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        })?;
        let mut cost = Cost::default().with(Dimension::Tokens, total);
        if let Some(input) = input {
            cost = cost.with(Dimension::InputTokens, input);
        }
        if let Some(output) = output {
            cost = cost.with(Dimension::OutputTokens, output);
        }
        Some(cost)
    }
}

/// Either reconciler's: follows headers if either does, and reads a body
/// with the first, then the second.
impl<A: Reconcile, B: Reconcile> Reconcile for (A, B) {
    fn follows_headers(&self) -> bool {
        self.0.follows_headers() || self.1.follows_headers()
    }

    fn usage(&self, body: &[u8]) -> Option<Cost> {
        self.0.usage(body).or_else(|| self.1.usage(body))
    }
}

/// A closure reads the body.
impl<F> Reconcile for F
where
    F: Fn(&[u8]) -> Option<Cost> + Send + Sync + 'static,
{
    fn usage(&self, body: &[u8]) -> Option<Cost> {
        self(body)
    }
}

/// What one call was charged, carried in its response's extensions: settle
/// it with what the call really used once that is known.
///
/// Every call whose [`Cost`] names a dimension other than requests, and
/// every call of a client with a [reconciler](Reconcile), gets one. It
/// settles each bucket the call's last attempt was charged in: the
/// difference from the estimate is charged at once (without waiting: the
/// bucket may owe it, and its next calls wait for it) or refunded (up to
/// the bucket's capacity). Only the first settlement counts; a charge never
/// settled leaves the estimate as it was charged. Cheap to clone.
///
/// **Bad input.** A usage above the server's stated limit in the
/// dimension (or, without one, 64 times the estimate) cannot be what one
/// call used: it is clamped there and warned once per key (`tracing`, at
/// `warn`). A usage of 0 refunds the whole estimate.
///
/// **What it covers.** A scope's own token buckets; a limiter of the
/// caller's (a shared one) keeps the estimate. A dimension the usage does
/// not name keeps its estimate, and so does one whose key followed the
/// server's headers after the call ([`Reconcile::follows_headers`]).
///
/// ```
/// use reqwest_pace::testing::llm::LlmServer;
/// use reqwest_pace::{headers::Dimension, Charge, Cost, Scope, ThrottledClient, UsageBody};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = LlmServer::builder().output_share(25, 25).start().await?;
/// let client = ThrottledClient::builder(reqwest::Client::new())
///     .scope(Scope::per_host().dimension(Dimension::Tokens))
///     .reconcile(UsageBody)
///     .build()?;
/// let response = client
///     .post(format!("{}/v1/chat/completions", server.url()))
///     .body(r#"{"input_tokens": 100, "max_tokens": 400}"#)
///     .cost(Cost::default().with(Dimension::Tokens, 500))
///     .send()
///     .await?;
/// let charge = Charge::of(&response).expect("a call with a cost in tokens");
/// let body = response.bytes().await?;
/// // 100 in, a quarter of 400 out: 200 of the 500 charged; 300 come back.
/// let used = charge.settle_body(&body);
/// assert_eq!(used.map(|c| c.get(&Dimension::Tokens)), Some(200));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Charge {
    inner: Arc<Charged>,
}

struct Charged {
    estimate: Cost,
    keys: Vec<ChargedKey>,
    reconcile: Option<Arc<dyn Reconcile>>,
    settled: AtomicBool,
}

/// One bucket a call was charged in.
pub(crate) struct ChargedKey {
    pub(crate) dimension: Dimension,
    pub(crate) state: Arc<KeyState>,
    pub(crate) weight: u64,
    /// Whether the key followed its server's headers after the call.
    pub(crate) followed: bool,
}

impl Charge {
    pub(crate) fn new(
        estimate: Cost,
        keys: Vec<ChargedKey>,
        reconcile: Option<Arc<dyn Reconcile>>,
    ) -> Charge {
        Charge {
            inner: Arc::new(Charged {
                estimate,
                keys,
                reconcile,
                settled: AtomicBool::new(false),
            }),
        }
    }

    /// The charge a response carries, if its call has one.
    pub fn of(response: &reqwest::Response) -> Option<Charge> {
        response.extensions().get::<Charge>().cloned()
    }

    /// The cost the call was paced on.
    pub fn estimate(&self) -> &Cost {
        &self.inner.estimate
    }

    /// Whether the charge was settled.
    pub fn is_settled(&self) -> bool {
        self.inner.settled.load(Ordering::Acquire)
    }

    /// Settle the charge with what the call used: each bucket it was
    /// charged in is charged or refunded the difference, in every
    /// dimension `used` names but requests (see the type's docs for the
    /// clamp). A call was the requests it was estimated at, whatever a
    /// usage says: a `Cost` always names requests (one, by default), and a
    /// usage body never counts them. Returns `false`, changing nothing,
    /// when it was settled before.
    pub fn settle(&self, used: &Cost) -> bool {
        if self.inner.settled.swap(true, Ordering::AcqRel) {
            return false;
        }
        for key in &self.inner.keys {
            if key.followed || key.dimension == Dimension::Requests || !used.names(&key.dimension) {
                continue;
            }
            let Some(bucket) = &key.state.local else {
                continue;
            };
            let used = clamp(key, used.get(&key.dimension));
            if used > key.weight {
                bucket.charge(used - key.weight);
            } else {
                bucket.refund(key.weight - used);
            }
        }
        true
    }

    /// Settle the charge with the usage the client's reconciler reads in
    /// `body` (the body of this call's response, as the caller read it);
    /// returns that usage, or `None` when the reconciler reads none (the
    /// estimate then stands, and the charge is left to settle).
    pub fn settle_body(&self, body: &[u8]) -> Option<Cost> {
        let used = self.inner.reconcile.as_ref()?.usage(body)?;
        self.settle(&used);
        Some(used)
    }
}

/// `used` of one key, at most what one call can have used there: the
/// server's limit in the dimension, or a multiple of the estimate without
/// one. Warned once per key.
fn clamp(key: &ChargedKey, used: u64) -> u64 {
    let mut weights = key.state.weights();
    let most = weights
        .server_limit
        .unwrap_or_else(|| key.weight.saturating_mul(MOST_OVER_ESTIMATE))
        .max(key.weight);
    if used <= most {
        return used;
    }
    if !weights.warned_usage {
        weights.warned_usage = true;
        tracing::warn!(
            target: "reqwest_pace",
            key = &*key.state.key,
            used,
            estimate = key.weight,
            clamped_to = most,
            "a reconciler reported more usage than one call can have; clamped (warned once per key)"
        );
    }
    most
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Charge")
            .field("estimate", &self.inner.estimate)
            .field("keys", &self.inner.keys.len())
            .field("settled", &self.is_settled())
            .finish_non_exhaustive()
    }
}

/// Just enough JSON to find a `usage` object's whole numbers: bounded in
/// depth and linear in the body, never panicking.
mod json {
    /// The deepest nesting skipped over.
    const MAX_DEPTH: usize = 64;

    struct Reader<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    /// The whole-number members of the top-level object's `usage` object.
    pub(super) fn usage(body: &[u8]) -> Option<Vec<(String, u64)>> {
        let mut r = Reader { bytes: body, at: 0 };
        r.expect(b'{')?;
        if r.eat(b'}') {
            return None;
        }
        loop {
            let key = r.string()?;
            r.expect(b':')?;
            if key == b"usage" {
                return r.numbers();
            }
            r.skip(0)?;
            if !r.eat(b',') {
                return None;
            }
        }
    }

    impl<'a> Reader<'a> {
        fn ws(&mut self) {
            while self
                .bytes
                .get(self.at)
                .is_some_and(|b| b.is_ascii_whitespace())
            {
                self.at += 1;
            }
        }

        fn peek(&mut self) -> Option<u8> {
            self.ws();
            self.bytes.get(self.at).copied()
        }

        fn eat(&mut self, byte: u8) -> bool {
            let here = self.peek() == Some(byte);
            if here {
                self.at += 1;
            }
            here
        }

        fn expect(&mut self, byte: u8) -> Option<()> {
            self.eat(byte).then_some(())
        }

        /// A string's raw bytes (escapes kept as written).
        fn string(&mut self) -> Option<&'a [u8]> {
            self.expect(b'"')?;
            let start = self.at;
            loop {
                match *self.bytes.get(self.at)? {
                    b'"' => break,
                    b'\\' => self.at += 2,
                    _ => self.at += 1,
                }
            }
            let text = self.bytes.get(start..self.at)?;
            self.at += 1;
            Some(text)
        }

        /// A number's text.
        fn number(&mut self) -> &'a [u8] {
            self.ws();
            let start = self.at;
            while self
                .bytes
                .get(self.at)
                .is_some_and(|b| b.is_ascii_digit() || b"+-.eE".contains(b))
            {
                self.at += 1;
            }
            &self.bytes[start..self.at]
        }

        /// An object's members that are whole numbers.
        fn numbers(&mut self) -> Option<Vec<(String, u64)>> {
            self.expect(b'{')?;
            let mut found = Vec::new();
            if self.eat(b'}') {
                return Some(found);
            }
            loop {
                let key = String::from_utf8_lossy(self.string()?).into_owned();
                self.expect(b':')?;
                if self.peek().is_some_and(|b| b.is_ascii_digit()) {
                    let text = self.number();
                    if let Some(n) = std::str::from_utf8(text)
                        .ok()
                        .and_then(|t| t.parse::<u64>().ok())
                    {
                        found.push((key, n));
                    }
                } else {
                    self.skip(1)?;
                }
                if self.eat(b'}') {
                    return Some(found);
                }
                self.expect(b',')?;
            }
        }

        /// Skip one value.
        fn skip(&mut self, depth: usize) -> Option<()> {
            if depth > MAX_DEPTH {
                return None;
            }
            match self.peek()? {
                b'"' => self.string().map(|_| ()),
                open @ (b'{' | b'[') => {
                    self.at += 1;
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.eat(close) {
                        return Some(());
                    }
                    loop {
                        if open == b'{' {
                            self.string()?;
                            self.expect(b':')?;
                        }
                        self.skip(depth + 1)?;
                        if self.eat(close) {
                            return Some(());
                        }
                        self.expect(b',')?;
                    }
                }
                b't' | b'f' | b'n' => {
                    while self.bytes.get(self.at).is_some_and(u8::is_ascii_alphabetic) {
                        self.at += 1;
                    }
                    Some(())
                }
                _ => (!self.number().is_empty()).then_some(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_in_both_dialects_and_nothing_else_is() {
        let openai =
            br#"{"id": "x", "choices": [{"message": {"content": "usage: {\"total_tokens\": 9}"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                      "completion_tokens_details": {"reasoning_tokens": 0}}}"#;
        let used = UsageBody.usage(openai).unwrap();
        assert_eq!(used.get(&Dimension::Tokens), 15);
        assert_eq!(used.get(&Dimension::InputTokens), 10);
        assert_eq!(used.get(&Dimension::OutputTokens), 5);
        let anthropic = br#"{"type":"message","usage":{"input_tokens":7,"output_tokens":300}}"#;
        assert_eq!(
            UsageBody.usage(anthropic).unwrap().get(&Dimension::Tokens),
            307
        );
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"usage\": 3}",
            b"{\"usage\": {\"total_tokens\": -1}}",
            b"{\"usage\": {\"total_tokens\": 1.5}}",
            b"{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], \"usage\": {\"total_tokens\": 1}}",
            b"{\"usage\": {\"total_tokens\": 99999999999999999999999}}",
            b"{\"s\": \"\\",
        ] {
            assert_eq!(UsageBody.usage(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
