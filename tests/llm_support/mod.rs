//! What the tests against the LLM API's model share: a call of varied
//! token cost, and closed loops of such calls with their usage settled.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use reqwest_pace::headers::Dimension;
use reqwest_pace::testing::llm::LlmServer;
use reqwest_pace::{Charge, Cost};
use tower_service::Service;

/// Random draws in [0, 1) from `seed` (xorshift64*): the same sequence on
/// every run, for a pacer's retry and release jitter.
pub fn seeded_draws(seed: u64) -> impl Fn() -> f64 + Send + Sync + 'static {
    let state = AtomicU64::new(seed.max(1));
    move || {
        let mut x = state.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A call of `input` prompt tokens and `max_tokens`, estimated at their sum.
pub fn call(server: &LlmServer, input: u64, max_tokens: u64) -> http::Request<String> {
    let mut request = http::Request::post(format!("{}/v1/chat/completions", server.url()))
        .body(format!(
            r#"{{"input_tokens": {input}, "max_tokens": {max_tokens}}}"#
        ))
        .unwrap();
    request.extensions_mut().insert(
        Cost::default()
            .with(Dimension::Tokens, input + max_tokens)
            .with(Dimension::InputTokens, input)
            .with(Dimension::OutputTokens, max_tokens),
    );
    request
}

/// `calls` calls by `workers` tasks through `service`, each a prompt of
/// 100 to 1 500 tokens and a `max_tokens` of 100 to 1 000 (varied, and the
/// same on every run), each answer's usage settled from its body. Returns
/// the calls that failed (an error, or an answer other than 200).
pub async fn closed_loops<S>(service: S, server: &LlmServer, calls: usize, workers: usize) -> usize
where
    S: Service<http::Request<String>, Response = reqwest::Response> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (mut service, next, server) = (service.clone(), next.clone(), server.clone());
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return failed;
                }
                let input = 100 + (i as u64 * 7_919) % 1_401;
                let max_tokens = 100 + (i as u64 * 104_729) % 901;
                match service.call(call(&server, input, max_tokens)).await {
                    Ok(response) if response.status() == 200 => {
                        let charge = Charge::of(&response);
                        let body = response.bytes().await.unwrap_or_default();
                        if let Some(charge) = charge {
                            charge.settle_body(&body);
                        }
                    }
                    _ => failed += 1,
                }
            }
        }));
    }
    let mut failed = 0;
    for task in tasks {
        failed += task.await.unwrap();
    }
    failed
}
