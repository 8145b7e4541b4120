//! `ThrottledClient` with nothing configured, against a generated space of
//! rate-limited servers (`reqwest_pace::testing::space`), and the checks
//! that the generated servers behave as their specs say.
//!
//! The goal run (`server_space`) draws 500 servers from seeds 0..500 and
//! runs 16 closed-loop tasks for 60 virtual seconds on each, calling the
//! server in process (no sockets) through the same engine a
//! `ThrottledClient` runs (`PaceLayer`). `SPACE_SEED` and `SPACE_COUNT`
//! move the seeds for exploration:
//!
//! ```text
//! SPACE_SEED=1000 SPACE_COUNT=200 cargo test --all-features --test server_space \
//!     server_space -- --include-ignored --nocapture
//! ```
//!
//! `server_space_over_ten_minutes` asserts the same goal over ten virtual
//! minutes a server.
#![cfg(feature = "testing")]

mod zoo_support;

use zoo_support::space::{self, env_u64, meets_goal, meets_goal_refusing_at_most};

use std::collections::HashSet;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use reqwest_pace::testing::space::{
    FrontSpec, HeaderConvention, RunFigures, ServerSpec, StatedLimit, Workload,
};
use reqwest_pace::testing::{
    Answer, Dialect, RateLimitedServer, ResetFormat, RetryAfterPrecision, ServerAlgorithm,
    ServerService,
};
use reqwest_pace::{PaceLayer, RequestRate, ThrottledClient};
use tower_layer::Layer;
use tower_service::Service;

/// The client under test: nothing configured but fixed jitter draws, so
/// that every run is the same.
fn client() -> Result<ThrottledClient, reqwest_pace::Error> {
    ThrottledClient::builder(reqwest::Client::new())
        .random(|| 0.5)
        .build()
}

/// The round trip, in milliseconds, of the servers that answer later
/// than they decide (`ServerSpec::latency`): what the tests of round trips
/// measured their figures at.
const ROUND_TRIP_MS: u64 = 20;

/// The `q`-quantile of sorted `xs` (nearest rank).
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let i = ((xs.len() - 1) as f64 * q).round() as usize;
    xs[i.min(xs.len() - 1)]
}

fn distribution(name: &str, mut xs: Vec<f64>) -> Vec<f64> {
    xs.sort_by(f64::total_cmp);
    println!(
        "{name}: min {:.3}  p10 {:.3}  median {:.3}  p90 {:.3}  max {:.3}",
        quantile(&xs, 0.0),
        quantile(&xs, 0.1),
        quantile(&xs, 0.5),
        quantile(&xs, 0.9),
        quantile(&xs, 1.0),
    );
    xs
}

/// Misses per kind of server: by algorithm, headers, `Retry-After`,
/// counted refusals and front limiter.
fn summary(runs: &[(ServerSpec, RunFigures)]) {
    let mut groups: std::collections::BTreeMap<String, Vec<&RunFigures>> = Default::default();
    for (spec, f) in runs {
        let text = spec.to_string();
        let parts: Vec<&str> = text.split(" | ").collect();
        let algorithm = parts[0].split(' ').next().unwrap_or("");
        let headers = parts[1].split(" limit").next().unwrap_or("");
        let mut keys = vec![
            format!("algorithm {algorithm}"),
            format!("headers {headers}"),
            format!("counts refusals {}", spec.counts_refusals),
            format!("front {}", spec.front.is_some()),
            match spec.retry_after {
                Some(precision) => format!("retry-after {precision:?}"),
                None => "retry-after none".to_owned(),
            },
        ];
        if let HeaderConvention::XRateLimit { reset, .. } = spec.headers {
            keys.push(format!("x-ratelimit reset {reset:?}"));
        }
        if spec.algorithm.burst() == 1 {
            keys.push("burst 1".to_owned());
        }
        for key in keys {
            groups.entry(key).or_default().push(f);
        }
    }
    println!(
        "by kind: servers, missing the goal, goodput < 0.95, refused > 1 %, failing, median goodput"
    );
    for (key, figures) in groups {
        let count = |f: &dyn Fn(&RunFigures) -> bool| figures.iter().filter(|r| f(r)).count();
        let mut goodput: Vec<f64> = figures.iter().map(|f| f.goodput).collect();
        goodput.sort_by(f64::total_cmp);
        println!(
            "  {key:<34} {:>4} {:>4} {:>4} {:>4} {:>4}  {:.3}",
            figures.len(),
            count(&|f| !meets_goal(f)),
            count(&|f| f.goodput < 0.95),
            count(&|f| f.refused > 0.01),
            count(&|f| f.failed > 0),
            quantile(&goodput, 0.5),
        );
    }
}

/// The goal: goodput ≥ 0.95 on every server and a median ≥ 0.97; at most
/// 1 % of responses refused, with rate-limit headers or without (over the
/// 60 s); no failed logical request.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: on seeds 0..500 the default client misses the goal on 101 servers, \
            besides 2 buckets of one the timer cannot pace at it that meet it scaled to what \
            the timer allows (buckets_of_one_faster_than_the_timer) (goodput min 0.62, p10 \
            0.943, median 0.976; refused p90 1.6 %, max 13.6 %; no failed logical request; \
            102, p10 0.940 and p90 1.9 % before a spacer's bracket stepped down from its top, \
            3 failed before a call refused by a lockout's probe kept its place; 111 before a bucket read \
            with nothing measured spent what was left, 109 before a second rounded up was read \
            as a bucket's next unit, 103 before a small window whose readings agree for long \
            was read as one; seeds 500..1000: 119 \
            and 5 (121 before), p10 0.942 (0.939 before the bracket stepped from its top), 1 failed call, 2 and 7 before, on a lockout longer than the calls' \
            time limit): buckets of one (28 of 62 besides \
            those 2: slow start's refusals cost more than a slow one's 1 %, and above 60 a \
            second a millisecond timer cannot space sends exactly), no headers or Retry-After alone (39 \
            of 71 and 26 of 60: each slow start and probe costs a refusal, a Retry-After's \
            second each where it is believed, and a slow server's 1 % is one or two refusals \
            a minute), and a \
            header-less front limiter (32 of 90)"]
async fn server_space() {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 500);
    assert_goal_on_space(first, count, Duration::ZERO, Workload::default());
}

/// The same goal over ten virtual minutes a server (seeds 0..500 by
/// default, as the goal run): what a long run settles into, a probe's
/// cost, a window's lockouts, a slow server's refusals spread over many
/// more requests than slow start's. About 45 s on two threads.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: on seeds 0..500, 26 servers miss the goal over ten minutes, besides \
            4 buckets of one the timer cannot pace at it that meet it scaled to what the timer \
            allows (27 before a spacer's bracket stepped down from its top; seeds 500..1000: 26 and 6, 27 before a refused probe's first echo kept \
            the target, 28 before a small window whose readings agree \
            for long was read as one, 1 failed call, 2 and 7 before, on a lockout \
            longer than the calls' time limit) (goodput \
            min 0.62, p10 0.970, median 0.986; refused p90 0.4 %, max 4.4 %; no failed \
            logical request, 3 before a call refused by a lockout's probe kept its place, all \
            on a counter of 131 per 58 s that slow start spends in its first seconds): slow \
            servers (2 to 5 a second) refused a little \
            over 1 %, most of it slow start's first seconds and the refusals that bring the \
            target down to the limit 3 % at a time, buckets of one above 60 a second whose \
            interval the millisecond timer rounds up past the 1 % of reserve the pace keeps (a \
            leaky bucket of 59 a second, 0.941), header-less windows whose length the lockouts read late (a \
            fixed window of 1,259 per 56 s, 0.906), a log whose echo of slow start's burst \
            reads as its limit, and logs with millisecond resets read as refilling buckets \
            (after a block, the echo of the key's own past sends reads as a refill of twice \
            the limit, and a quarter of the sends are refused for seconds: seeds 104 and \
            111)"]
async fn server_space_over_ten_minutes() {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 500);
    assert_goal_on_space(
        first,
        count,
        Duration::ZERO,
        Workload::new(16, Duration::from_secs(600)),
    );
}

/// The same goal on the same servers over 60 s, each deciding a request
/// [`ROUND_TRIP_MS`] after the key sent it and answering at once: what it
/// says remains, and the wait it asks for, run from that decision
/// (`SPACE_LATENCY_MS` sets another round trip).
#[tokio::test(start_paused = true)]
#[ignore = "known gap: with a round trip of 20 ms, 135 of seeds 0..500 miss the goal, \
            besides 2 buckets of one the timer cannot pace at it that meet it scaled to what \
            the timer allows (137 before a spacer's bracket stepped down from its top, 178 in all before what is left and a Retry-After's wait were \
            placed at the send, 144 before a refusal sent at the headers' pace stopped ending \
            the slow start that takes over from them, 142 before a second rounded up was read \
            as a bucket's next unit, 139 before a small window whose readings agree for long \
            was read as one; 102 and 2 with no round trip), goodput \
            p10 0.92, median 0.97, 3 failed calls (4 before a retry after the server's wait went \
            first when it ended, 10 before a call refused by a lockout's \
            probe kept its place, 15 before a retry after a Retry-After kept its call's \
            place, 11 before a bucket's wait for a unit was held to the slowest pace), the \
            calls in flight when a lockout began passing their time limit at its end; 147 \
            and 6 of seeds 500..1000 (148 before the bracket stepped from its top, 149 before that; p10 0.92, 3 failed calls, 4, 10 and 20 before): what \
            the space misses without a round trip, and buckets with a burst of one or two \
            that say nothing is left after each admission, whose pace runs past the refill \
            while those answers are on their way, or waits a round trip too long for each \
            unit (a bucket of 38 a second with a burst of 2, 0.80 of its limit; a GCRA of \
            183 a minute with a burst of 2 that counts refusals, 0.51, its refusals in a row \
            taking the measured refill to nothing)"]
async fn server_space_answering_a_round_trip_later() {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 500);
    let latency = Duration::from_millis(env_u64("SPACE_LATENCY_MS", ROUND_TRIP_MS));
    assert_goal_on_space(first, count, latency, Workload::default());
}

/// The goal over the first ten seconds (the issue's runs are 10 s and
/// 60 s): at least 0.95 of the limit and a median of 0.97, at most 1 % of
/// the responses refused where the server sends rate-limit headers and
/// 2 % where it sends none (or `Retry-After` alone), no failed logical
/// request. Slow start and a first misreading are a sixth of such a run.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: over 10 s, 193 of seeds 0..500 miss the goal (goodput min 0.30, p10 \
            0.83, median 0.979; refused p90 4.4 %, max 26.8 %; no failed call; min 0.40, p10 \
            0.80 and p90 4.9 % before a spacer's bracket stepped down from its top, which a \
            leaky bucket of one of 4 a second, its bracket opened to 0.22-1.05 s by a refused \
            call's second, descends for its whole ten seconds), 204 of seeds \
            500..1000 besides 2 buckets of one the timer cannot pace at it (p10 0.83, 0.80 before; 1 failed \
            call): buckets of one (52 of 62), servers without headers (61 of 71) or with \
            Retry-After alone (47 of 60), and X-RateLimit without a reset (34 of 53). Slow \
            start and the first readings are a sixth of such a run: a header-less key refused \
            at the top of slow start's ramp is cut to what it was admitted over the last second \
            and climbs back over seconds (a leaky bucket of 46 a second stating its quota and \
            no reset, 0.80), and a small bucket stating a quota, read as a fixed window from \
            its first readings, waits for the reset before it is read as refilling (a GCRA of \
            17.6 a second with a burst of 2 stating 176 per 10 s, 0.48)"]
async fn server_space_over_ten_seconds() {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 500);
    let workload = Workload::new(16, Duration::from_secs(10));
    assert_goal_on_space_within(first, count, Duration::ZERO, workload, |spec| {
        if spec.sends_headers() {
            0.01
        } else {
            0.02
        }
    });
}

/// Runs the default client on `count` servers from seed `first`, each
/// answering `latency` after a request, with `workload`; prints the
/// distribution, the ten worst and the misses by kind, and asserts the
/// goal on every one and on the median.
fn assert_goal_on_space(first: u64, count: u64, latency: Duration, workload: Workload) {
    assert_goal_on_space_within(first, count, latency, workload, |_| 0.01);
}

/// [`assert_goal_on_space`], with at most `refused(spec)` of a server's
/// responses refused.
fn assert_goal_on_space_within(
    first: u64,
    count: u64,
    latency: Duration,
    workload: Workload,
    refused: fn(&ServerSpec) -> f64,
) {
    let real = std::time::Instant::now();
    let threads = space::threads();
    let runs = space::run_seeds(first..first + count, latency, workload, threads, |server| {
        Ok(PaceLayer::new(client()?).layer(server))
    });
    println!(
        "{count} servers from seed {first}, {:?} each, {} tasks: {:.1} s real on {threads} threads",
        workload.duration,
        workload.tasks,
        real.elapsed().as_secs_f64()
    );
    let goodput = distribution("goodput", runs.iter().map(|(_, f)| f.goodput).collect());
    distribution("refused", runs.iter().map(|(_, f)| f.refused).collect());
    let failed: u64 = runs.iter().map(|(_, f)| f.failed).sum();
    println!("failed logical requests: {failed}");

    // How far a run is from the goal: the shortfall of goodput (as a share
    // of the goal), the excess refused, and the share of logical requests
    // that failed.
    let short = |(_, f): &(ServerSpec, RunFigures)| {
        (0.95 - f.goodput).max(0.0) / 0.95
            + (f.refused - 0.01).max(0.0)
            + f.failed as f64 / f.logical.max(1) as f64
    };
    let mut worst: Vec<&(ServerSpec, RunFigures)> = runs.iter().collect();
    worst.sort_by(|a, b| short(b).total_cmp(&short(a)));
    println!("worst ten:");
    for (spec, f) in worst.iter().take(10) {
        println!(
            "  #{:<4} goodput {:.3} refused {:.4} failed {:<4} | {spec}",
            spec.seed, f.goodput, f.refused, f.failed
        );
    }
    summary(&runs);
    // A bucket of one faster than the paused clock's timer can pace at the
    // goal is held to the goal scaled to what the timer allows
    // (`meets_goal_on_the_timer`), and listed apart when it meets that.
    let (mut misses, mut timer_bound) = (Vec::new(), Vec::new());
    let missed = runs
        .iter()
        .filter(|(spec, f)| !meets_goal_refusing_at_most(f, refused(spec)));
    for (spec, f) in missed {
        let line = on_the_timer_line(spec, f);
        if meets_goal_on_the_timer(spec, f, refused(spec)) {
            timer_bound.push(line);
        } else {
            misses.push(line);
        }
    }
    println!(
        "{} of {count} servers miss the goal, and {} buckets of one faster than the timer meet \
         it scaled to what the timer allows:\n{}",
        misses.len(),
        timer_bound.len(),
        timer_bound.join("\n")
    );
    let median = quantile(&goodput, 0.5);
    assert!(
        misses.is_empty(),
        "{} servers miss the goal:\n{}",
        misses.len(),
        misses.join("\n")
    );
    assert!(median >= 0.97, "median goodput {median:.3}");
}

/// Buckets that say nothing but `Retry-After`, rounded up to a second
/// (a bucket of 12 a second with a burst of 3, a leaky bucket of 26 a
/// second with a burst of 13, a bucket of 75 a second with a burst of 8
/// refusing with 503, and a leaky bucket of 12 a second with a burst of 1
/// that counts the requests it refuses): past slow start, the second of a
/// first refusal stands for a unit a few milliseconds away, and the key
/// goes on at its cut rate while the refused call sits it out. (Held for
/// the whole second at each refusal, they reached 0.917, 0.922, 0.902 and
/// 0.935 of their limits.)
#[tokio::test(start_paused = true)]
async fn a_bucket_saying_only_a_rounded_up_second_meets_the_goal() {
    let rounded_up = |algorithm, status: StatusCode, counts_refusals: bool| {
        let mut spec = written_out(0, algorithm, HeaderConvention::RetryAfterOnly);
        spec.retry_after = Some(RetryAfterPrecision::Ceil);
        spec.refusal_status = status;
        spec.counts_refusals = counts_refusals;
        (spec, Duration::from_secs(60))
    };
    let per_second = |n| RequestRate::per_second(n).unwrap();
    assert_goal_on([
        rounded_up(
            ServerAlgorithm::TokenBucket {
                rate: per_second(12),
                burst: 3,
            },
            StatusCode::TOO_MANY_REQUESTS,
            false,
        ),
        rounded_up(
            ServerAlgorithm::LeakyBucket {
                rate: per_second(26),
                burst: 13,
            },
            StatusCode::TOO_MANY_REQUESTS,
            false,
        ),
        rounded_up(
            ServerAlgorithm::TokenBucket {
                rate: per_second(75),
                burst: 8,
            },
            StatusCode::SERVICE_UNAVAILABLE,
            false,
        ),
        rounded_up(
            ServerAlgorithm::LeakyBucket {
                rate: per_second(12),
                burst: 1,
            },
            StatusCode::TOO_MANY_REQUESTS,
            true,
        ),
    ])
    .await;
}

/// Sliding counters that count the requests they refuse and name their
/// current slot's end as the reset (up to a whole window away), while they
/// reopen sooner, as the slot before fades: the key waits past the end it
/// read in waits that double, up to that reset, and meets the goal over a
/// minute. (Not waiting, a counter of 68 per 11 s was refused 20 times in
/// a row, 5.5 % of the minute's requests; waiting for the reset, 0.80 of
/// its limit.)
#[tokio::test(start_paused = true)]
async fn a_counter_refusing_past_the_end_read_meets_the_goal() {
    let counter = |limit: u64, secs: u64, headers: HeaderConvention| {
        let window = Duration::from_secs(secs);
        let mut spec = written_out(
            0,
            ServerAlgorithm::SlidingCounter { limit, window },
            headers,
        );
        spec.retry_after = Some(RetryAfterPrecision::Floor);
        spec.counts_refusals = true;
        spec
    };
    let x_ratelimit = HeaderConvention::XRateLimit {
        reset: ResetFormat::EpochMillis,
        limit: StatedLimit::Quota,
    };
    assert_goal_on([
        (counter(68, 11, x_ratelimit), Duration::from_secs(60)),
        (
            counter(57, 9, HeaderConvention::IetfDraft6),
            Duration::from_secs(60),
        ),
    ])
    .await;
}

/// Servers of the space that decide each request 20 ms after it is sent
/// and answer at once: what they say remains is a round trip old when it
/// arrives. Placed at the send, less the requests sent after it, it is
/// read as the server counted it, and the refill since is the key's: a
/// GCRA of 4,187 a minute with a burst of one (IETF draft 7), a leaky
/// bucket of 36 a second without a burst that counts refusals (IETF), a
/// bucket of 185 a second with a burst of 3 (IETF draft 6), and sliding
/// logs of 11 and 13 a second (IETF, `X-RateLimit-*`) meet the goal over
/// a minute. (Placed as the answer arrived, they read 0.573, 0.567,
/// 0.623, 0.902 and 0.918 of their limits: a key told nothing is left
/// waited a round trip longer than the server did.)
#[tokio::test(start_paused = true)]
async fn what_is_left_is_placed_at_the_send_a_round_trip_before_the_answer() {
    let minute = Duration::from_secs(60);
    assert_goal_on([279, 492, 487, 29, 229].map(|seed| {
        let mut spec = ServerSpec::generate(seed);
        spec.latency = Duration::from_millis(ROUND_TRIP_MS);
        (spec, minute)
    }))
    .await;
}

/// A GCRA of 176 per 10 s with a burst of 2, stating the quota as its
/// limit in GitHub's and in `X-RateLimit-*` headers, answering 20 ms after
/// each request: the goal over a minute.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.810 of the limit with 8.2 % refused in both conventions (GitHub's \
            answered at once: 0.936, 0.1 % refused): the bucket reads full at 1 of 2 after \
            each wait for a unit and its pace grows, and the sends after the wait outrun the \
            refill while their answers are on their way"]
async fn a_small_bucket_answering_a_round_trip_later_meets_the_goal() {
    let gcra = ServerAlgorithm::Gcra {
        rate: RequestRate::new(176, Duration::from_secs(10)).unwrap(),
        burst: 2,
    };
    let quota = StatedLimit::Quota;
    let headers = [
        HeaderConvention::GitHub { limit: quota },
        HeaderConvention::XRateLimit {
            reset: ResetFormat::EpochSeconds,
            limit: quota,
        },
    ];
    assert_goal_on(headers.map(|headers| {
        let mut spec = written_out(0, gcra, headers);
        spec.latency = Duration::from_millis(ROUND_TRIP_MS);
        (spec, Duration::from_secs(60))
    }))
    .await;
}

/// The most of its true limit a client can be admitted by the server of
/// `spec` on the paused clock, whose timer wakes on whole milliseconds
/// (tokio's): a bucket of one (a GCRA or token bucket without a burst,
/// nginx's leaky bucket without one) refuses any gap shorter than its
/// interval, so it admits at most one request per whole milliseconds of
/// its interval rounded up: 142.9 a second of a bucket of 156 (0.916), 111.1
/// of 124 (0.896). The server's own limiter and a limiter in front, each
/// so bounded; 1.0 where neither is a bucket of one.
fn share_the_timer_allows(spec: &ServerSpec) -> f64 {
    let on_the_timer = |algorithm: &ServerAlgorithm| match *algorithm {
        ServerAlgorithm::TokenBucket { rate, burst: 0 | 1 }
        | ServerAlgorithm::Gcra { rate, burst: 0 | 1 }
        | ServerAlgorithm::LeakyBucket { rate, burst: 0 } => {
            let millis = rate.interval_nanos().div_ceil(1_000_000).max(1);
            (1_000.0 / millis as f64).min(algorithm.sustained_per_second())
        }
        _ => algorithm.sustained_per_second(),
    };
    let most = match &spec.front {
        Some(front) => on_the_timer(&spec.algorithm).min(on_the_timer(&front.algorithm)),
        None => on_the_timer(&spec.algorithm),
    };
    (most / spec.sustained_per_second()).min(1.0)
}

/// The goal, scaled where the timer cannot pace the server at it to what
/// the timer lets any client reach ([`share_the_timer_allows`] below
/// 0.95): at least 0.95 of that, at most 1 % refused, no failed logical
/// request.
fn meets_goal_on_the_timer(spec: &ServerSpec, f: &RunFigures, refused: f64) -> bool {
    let allows = share_the_timer_allows(spec);
    let least = if allows < 0.95 { 0.95 * allows } else { 0.95 };
    space::meets_floors(f, least, refused)
}

/// A run's line: the server, its figures and what the timer allows it.
fn on_the_timer_line(spec: &ServerSpec, f: &RunFigures) -> String {
    let allows = share_the_timer_allows(spec);
    format!(
        "#{} {spec}: {f:?} (the timer allows {allows:.3})",
        spec.seed
    )
}

/// The buckets of one of the space (seeds 0..500, or `SPACE_SEED` and
/// `SPACE_COUNT`) that the timer cannot pace at 0.95 of their rate
/// ([`share_the_timer_allows`]), each held over a minute to the goal
/// scaled to what the timer allows ([`meets_goal_on_the_timer`]), and then
/// to the goal itself, which no pace can meet on this clock. The space's
/// goal runs list those that meet the scaled goal apart from their
/// misses.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: of seeds 0..500, a token bucket of 71 a second without a burst that \
            answers only Retry-After (whole seconds, rounded up) reaches 0.851 of its limit \
            where the timer allows 0.939 (slow start's refusal blocks it for a second, and it \
            climbs back for seconds), and one of 156 a second (GitHub's headers, a quota of \
            one) 0.865 of 0.916, its first seconds short of the rate; a GCRA of 99 a \
            second (0.903 of 0.918) and a token bucket of 124 a second (0.863 of 0.896) meet \
            it. Over ten minutes all four meet it (0.916, 0.929, 0.892, 0.910). The goal \
            itself (0.95 of the limit) no pace reaches on a clock that wakes on the millisecond"]
async fn buckets_of_one_faster_than_the_timer() {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 500);
    let specs: Vec<ServerSpec> = (first..first + count)
        .map(ServerSpec::generate)
        .filter(|spec| share_the_timer_allows(spec) < 0.95)
        .collect();
    assert!(!specs.is_empty(), "no bucket of one faster than the timer");
    let (mut short, mut beyond_the_timer) = (Vec::new(), Vec::new());
    for spec in specs {
        let (figures, line) = a_minute_on_the_timer(&spec).await;
        if !meets_goal_on_the_timer(&spec, &figures, 0.01) {
            short.push(line);
        } else if !meets_goal(&figures) {
            beyond_the_timer.push(line);
        }
    }
    assert!(short.is_empty(), "{}", short.join("\n"));
    assert!(
        beyond_the_timer.is_empty(),
        "the goal itself:\n{}",
        beyond_the_timer.join("\n")
    );
}

/// A token bucket of 124 a second without a burst, stating the quota in
/// `X-RateLimit-*` with millisecond resets, answering 20 ms after each
/// request: its readings say nothing is left after every admission, so the
/// header-less regime takes over from the headers' pace, and a refusal of
/// a request sent at that pace, still on its way when slow start began,
/// names no rate of slow start's. It meets the goal scaled to what the
/// timer allows over a minute (cut for that refusal, it held 0.19 of its
/// limit, its slow start ended at the cold start's 10 a second);
/// `buckets_of_one_faster_than_the_timer` holds it to the goal itself.
#[tokio::test(start_paused = true)]
async fn a_refusal_sent_at_the_headers_pace_does_not_end_slow_start() {
    let mut spec = ServerSpec::generate(282);
    assert!(
        matches!(
            spec.algorithm,
            ServerAlgorithm::TokenBucket { burst: 1, .. }
        ),
        "{spec}"
    );
    spec.latency = Duration::from_millis(ROUND_TRIP_MS);
    let (figures, line) = a_minute_on_the_timer(&spec).await;
    assert!(meets_goal_on_the_timer(&spec, &figures, 0.01), "{line}");
}

/// The default client's figures on the server of `spec` over a minute,
/// 16 tasks, and their line with what the timer allows (printed).
async fn a_minute_on_the_timer(spec: &ServerSpec) -> (RunFigures, String) {
    let figures = spec
        .run(&Workload::new(16, Duration::from_secs(60)), |server| {
            Ok(PaceLayer::new(client()?).layer(server))
        })
        .await
        .unwrap();
    let line = on_the_timer_line(spec, &figures);
    println!("{line}");
    (figures, line)
}

/// Asserts the goal on each server over its run, 16 tasks against the
/// default client.
async fn assert_goal_on(runs: impl IntoIterator<Item = (ServerSpec, Duration)>) {
    for (spec, run) in runs {
        let figures = spec
            .run(&Workload::new(16, run), |server| {
                Ok(PaceLayer::new(client()?).layer(server))
            })
            .await
            .unwrap();
        assert!(meets_goal(&figures), "{spec}: {figures:?}");
    }
}

/// The server of seed `seed` of the space (the seed gives its wall clock,
/// the phase of a reset in epoch seconds), written out: `algorithm` with
/// `headers`, refusing with 429, no `Retry-After`, refusals not counted,
/// no limiter in front. A test changes what its servers do otherwise.
fn written_out(seed: u64, algorithm: ServerAlgorithm, headers: HeaderConvention) -> ServerSpec {
    let mut spec = ServerSpec::generate(seed);
    spec.algorithm = algorithm;
    spec.headers = headers;
    spec.retry_after = None;
    spec.counts_refusals = false;
    spec.refusal_status = StatusCode::TOO_MANY_REQUESTS;
    spec.front = None;
    spec
}

/// Buckets with no burst to speak of that state their rate as a quota per
/// window in IETF headers (a leaky bucket of 50 a second, a GCRA of 4,187
/// a minute with a burst of one, one of 181 a second with a burst of 2)
/// say nothing is left after an admission or two, with a reset in whole
/// seconds: the key is paced at the stated rate, not held until that
/// reset. (Held, the first second of the minute was lost, and the three
/// reached 0.936, 0.939 and 0.936 of their limits.)
#[tokio::test(start_paused = true)]
async fn a_stated_small_bucket_is_paced_not_held_until_its_reset() {
    let small_bucket = |algorithm, headers| written_out(0, algorithm, headers);
    let minute = Duration::from_secs(60);
    assert_goal_on([
        (
            small_bucket(
                ServerAlgorithm::LeakyBucket {
                    rate: RequestRate::per_second(50).unwrap(),
                    burst: 0,
                },
                HeaderConvention::Ietf,
            ),
            minute,
        ),
        (
            small_bucket(
                ServerAlgorithm::Gcra {
                    rate: RequestRate::new(4187, Duration::from_secs(60)).unwrap(),
                    burst: 1,
                },
                HeaderConvention::IetfDraft7,
            ),
            minute,
        ),
        (
            small_bucket(
                ServerAlgorithm::Gcra {
                    rate: RequestRate::per_second(181).unwrap(),
                    burst: 2,
                },
                HeaderConvention::Ietf,
            ),
            minute,
        ),
    ])
    .await;
}

/// Sliding logs that state their quota and what remains, with no reset,
/// spent by slow start in its first seconds and blocked by `Retry-After`
/// until the oldest admissions leave: the readings after the block turn
/// from a window to a refilling bucket with nothing measured yet, and the
/// key spends what came back at once, as the log gives it back. (Paced at
/// the floor that turn read, what came back over the whole block, the key
/// sent one request in six seconds after each block: 0.908 and 0.943 of
/// the limits, the servers of seeds 96 and 191 of the space.)
#[tokio::test(start_paused = true)]
async fn a_log_stating_no_reset_is_spent_again_when_its_block_ends() {
    let no_reset = HeaderConvention::XRateLimit {
        reset: ResetFormat::Omitted,
        limit: StatedLimit::Quota,
    };
    let log = |seed, limit, secs, precision| {
        let mut spec = written_out(
            seed,
            ServerAlgorithm::SlidingLog {
                limit,
                window: Duration::from_secs(secs),
            },
            no_reset,
        );
        spec.retry_after = Some(precision);
        spec
    };
    let mut slow = log(191, 101, 8, RetryAfterPrecision::Floor);
    slow.refusal_status = StatusCode::SERVICE_UNAVAILABLE;
    let minute = Duration::from_secs(60);
    assert_goal_on([
        (log(96, 221, 40, RetryAfterPrecision::Fractional), minute),
        (slow, minute),
    ])
    .await;
}

/// A fixed window of 100 per 10 s (express-rate-limit's: it starts at a
/// key's first request) in GitHub's headers, its reset an epoch second,
/// answered 20 and 50 ms after each request: the key spends the quota over
/// the window and waits for its whole-second reset, up to a second late,
/// so one window's start to the next bounds its length at 11.05 s, while
/// the last reading of a spent quota outlived it only 9.98 s. Both 10 and
/// 11 s fit; the round one of them is the guess. (Without it, the key paced
/// 100 per 11 s: 0.913 of the limit at both round trips.)
#[tokio::test(start_paused = true)]
async fn a_ten_second_window_is_read_as_ten_seconds_a_round_trip_away() {
    let window = |latency_ms| {
        let mut spec = written_out(
            0,
            ServerAlgorithm::FixedWindow {
                limit: 100,
                window: Duration::from_secs(10),
            },
            HeaderConvention::GitHub {
                limit: StatedLimit::Quota,
            },
        );
        spec.latency = Duration::from_millis(latency_ms);
        (spec, Duration::from_secs(60))
    };
    assert_goal_on([window(20), window(50)]).await;
}

/// A header-less limiter in front of a server that speaks binds until the
/// key has sent past the rate it refused: the key is paced at the lower of
/// the two, and a header pace below the front's (a window's spread near its
/// end) says nothing of the front. (Forgotten as soon as the header-less
/// rate grew past such a pace, the front was run into again at the next
/// window's spread: a log of 84 per 12 s behind a leaky bucket of 10 a
/// second was refused 9.4 % of the time over ten minutes, at 0.837 of its
/// limit; a leaky bucket of 2 a second behind another 6.5 % over one.)
#[tokio::test(start_paused = true)]
async fn a_front_limiter_binds_until_the_key_sends_past_it() {
    // The servers of seeds 68 and 105 of the space, written out; the seed
    // gives the wall clock (the phase of a reset in epoch seconds).
    let behind = |seed: u64,
                  algorithm: ServerAlgorithm,
                  headers: HeaderConvention,
                  front: ServerAlgorithm| {
        let mut spec = written_out(seed, algorithm, headers);
        // The seed's own front (its type is non-exhaustive), set to this
        // one.
        let mut drawn = ServerSpec::generate(seed)
            .front
            .expect("the seed draws a front");
        drawn.algorithm = front;
        drawn.status = StatusCode::TOO_MANY_REQUESTS;
        spec.front = Some(drawn);
        spec
    };
    let x_ratelimit = |reset: ResetFormat| HeaderConvention::XRateLimit {
        reset,
        limit: StatedLimit::Quota,
    };
    let mut log = behind(
        68,
        ServerAlgorithm::SlidingLog {
            limit: 84,
            window: Duration::from_secs(12),
        },
        x_ratelimit(ResetFormat::EpochSeconds),
        ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(10).unwrap(),
            burst: 8,
        },
    );
    log.counts_refusals = true;
    let mut leaky = behind(
        105,
        ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(2).unwrap(),
            burst: 0,
        },
        x_ratelimit(ResetFormat::DeltaSeconds),
        ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(2).unwrap(),
            burst: 0,
        },
    );
    leaky.retry_after = Some(RetryAfterPrecision::Floor);
    leaky.refusal_status = StatusCode::SERVICE_UNAVAILABLE;
    assert_goal_on([
        (log, Duration::from_secs(600)),
        (leaky, Duration::from_secs(60)),
    ])
    .await;
}

/// Sliding logs whose readings show their window are paced at their whole
/// rate: the window's length is an upper bound, and with nothing left the
/// key waits for the oldest admission inside it to leave, so the default
/// headroom takes nothing off (482 per 5 s and 1,355 per 15 s with
/// `X-RateLimit-*` and no reset, 11 per second with epoch resets, the last
/// two counting refusals). (With 3 % taken off as from every other shape,
/// they reached 0.944, 0.949 and 0.948 of their limits over a minute.)
#[tokio::test(start_paused = true)]
async fn a_moving_window_is_paced_at_its_whole_rate() {
    // The servers of seeds 777, 834 and 397 of the space, written out; the
    // seed gives the wall clock (the phase of a reset in epoch seconds).
    let log = |seed: u64, (limit, secs): (u64, u64), reset: ResetFormat, counts_refusals: bool| {
        let window = Duration::from_secs(secs);
        let headers = HeaderConvention::XRateLimit {
            reset,
            limit: StatedLimit::Quota,
        };
        let mut spec = written_out(seed, ServerAlgorithm::SlidingLog { limit, window }, headers);
        spec.counts_refusals = counts_refusals;
        spec
    };
    let unreset = log(777, (482, 5), ResetFormat::Omitted, false);
    let mut long = log(834, (1_355, 15), ResetFormat::Omitted, true);
    long.retry_after = Some(RetryAfterPrecision::Ceil);
    let mut epoch = log(397, (11, 1), ResetFormat::EpochSeconds, true);
    epoch.retry_after = Some(RetryAfterPrecision::Floor);
    let minute = Duration::from_secs(60);
    assert_goal_on([(unreset, minute), (long, minute), (epoch, minute)]).await;
}

/// Buckets of one that charge the requests they refuse (a token bucket of
/// 15 a second and leaky buckets of 24 and 23 a second, the first two
/// without headers, the last stating its burst in `X-RateLimit-*` and
/// refusing with 503): once the gaps pace the key, a refused probe puts the
/// server a whole interval behind, and the key backs off instead of sending
/// at the interval into refusal after refusal. (It did not: 0.873, 0.875 and
/// 0.787 of their limits over a minute, the gaps' pacing let go.)
#[tokio::test(start_paused = true)]
async fn a_bucket_of_one_that_counts_refusals_is_backed_off_from() {
    // The servers of seeds 689, 752 and 480 of the space, written out.
    let counting = |seed: u64, algorithm: ServerAlgorithm, headers: HeaderConvention| {
        let mut spec = written_out(seed, algorithm, headers);
        spec.counts_refusals = true;
        spec
    };
    let token = counting(
        689,
        ServerAlgorithm::TokenBucket {
            rate: RequestRate::per_second(15).unwrap(),
            burst: 1,
        },
        HeaderConvention::None,
    );
    let leaky = counting(
        752,
        ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(24).unwrap(),
            burst: 0,
        },
        HeaderConvention::None,
    );
    let mut stating = counting(
        480,
        ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(23).unwrap(),
            burst: 0,
        },
        HeaderConvention::XRateLimit {
            reset: ResetFormat::EpochFractional,
            limit: StatedLimit::Burst,
        },
    );
    stating.retry_after = Some(RetryAfterPrecision::Ceil);
    stating.refusal_status = StatusCode::SERVICE_UNAVAILABLE;
    let minute = Duration::from_secs(60);
    assert_goal_on([(token, minute), (leaky, minute), (stating, minute)]).await;
}

/// The first `SPACE_COUNT` (default 20) servers over real HTTP on
/// loopback, to compare the time it takes with the in-process run (the
/// figures agree: see `in_process_and_http_agree_on_the_zoo`).
#[tokio::test(start_paused = true)]
#[ignore = "a measurement: how long HTTP over loopback takes"]
async fn server_space_over_http() {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 20);
    let workload = Workload::default();
    let real = std::time::Instant::now();
    let mut goodput = Vec::new();
    for seed in first..first + count {
        let spec = ServerSpec::generate(seed);
        let server = spec.builder().start().await.expect("server starts");
        let paced = PaceLayer::new(client().expect("client")).layer(reqwest::Client::new());
        let figures = workload
            .run(&server, spec.sustained_per_second(), paced)
            .await
            .expect("run");
        server.shutdown().await;
        goodput.push(figures.goodput);
    }
    println!(
        "{count} servers over HTTP: {:.1} s real",
        real.elapsed().as_secs_f64()
    );
    distribution("goodput", goodput);
}

// ---- The generated servers behave as their specs say ----------------------

/// A request as the server sees it from a plain client: no pacing.
async fn call(service: &mut ServerService, url: &reqwest::Url) -> reqwest::Response {
    service
        .call(reqwest::Request::new(Method::GET, url.clone()))
        .await
        .expect("in-process calls never fail")
}

fn url_of(server: &RateLimitedServer) -> reqwest::Url {
    server.url().parse().expect("the server's URL parses")
}

/// A window long enough to see an algorithm's long run: three of its
/// windows, and at least 10 s.
fn long_run(algorithm: &ServerAlgorithm) -> Duration {
    let window = match *algorithm {
        ServerAlgorithm::FixedWindow { window, .. }
        | ServerAlgorithm::SlidingLog { window, .. }
        | ServerAlgorithm::SlidingCounter { window, .. } => window,
        ServerAlgorithm::Gcra { rate, .. } => rate.per(),
        _ => Duration::from_secs(1),
    };
    (window * 3).max(Duration::from_secs(10))
}

/// What an evenly spaced sender got: requests sent, admitted by the main
/// limiter, and admitted in the last third of the run.
#[derive(Debug)]
struct Even {
    sent: u64,
    admitted: u64,
    admitted_late: u64,
}

/// Sends one request every `interval` for `run` to the server of `spec`,
/// without a client (nothing paces, nothing retries).
async fn even(spec: &ServerSpec, interval: Duration, run: Duration) -> Even {
    let server = spec.builder().start().await.expect("server starts");
    let (mut service, url) = (server.service(), url_of(&server));
    let start = tokio::time::Instant::now();
    let mut at = start;
    while at < start + run {
        // Advanced to the nanosecond: a sleep would wake on the timer's
        // millisecond, and spacing rounded so is not even.
        let now = tokio::time::Instant::now();
        if at > now {
            tokio::time::advance(at - now).await;
        }
        call(&mut service, &url).await;
        at += interval;
    }
    let late = run * 2 / 3;
    let records = server.requests();
    let admitted = |r: &&reqwest_pace::testing::RequestRecord| r.outcome == Answer::Admitted;
    let figures = Even {
        sent: records.len() as u64,
        admitted: records.iter().filter(admitted).count() as u64,
        admitted_late: records
            .iter()
            .filter(admitted)
            .filter(|r| r.at >= late)
            .count() as u64,
    };
    server.shutdown().await;
    figures
}

/// The interval of `per_second`, rounded up to the nanosecond and one
/// more: a hair slower than the rate, never faster.
fn interval_of(per_second: f64) -> Duration {
    Duration::from_nanos((1e9 / per_second).ceil() as u64 + 1)
}

/// The specs of the first `n` seeds with no front limiter.
fn plain(n: u64) -> Vec<ServerSpec> {
    (0..n)
        .map(ServerSpec::generate)
        .filter(|spec| spec.front.is_none())
        .collect()
}

fn is_counter(spec: &ServerSpec) -> bool {
    matches!(spec.algorithm, ServerAlgorithm::SlidingCounter { .. })
}

/// At its true rate, evenly spaced, a client is admitted every time, by
/// every algorithm, counting refusals or not.
#[tokio::test(start_paused = true)]
async fn an_even_client_at_the_true_rate_is_admitted() {
    for spec in plain(120) {
        let run = long_run(&spec.algorithm);
        let rate = spec.sustained_per_second();
        let got = even(&spec, interval_of(rate), run).await;
        assert_eq!(
            got.admitted, got.sent,
            "#{} {spec}: {got:?} at {rate:.3}/s for {run:?}",
            spec.seed
        );
    }
}

/// At the rate a sliding counter states (`limit / window`), above its true
/// one, an even client is refused at the window boundaries: once or twice
/// a window when refusals are not counted, and for good from the first
/// boundary when they are (each one counted keeps the estimate over).
#[tokio::test(start_paused = true)]
async fn a_sliding_counter_refuses_its_stated_rate() {
    let specs: Vec<ServerSpec> = plain(300).into_iter().filter(is_counter).collect();
    assert!(specs.len() >= 20, "{} specs", specs.len());
    for spec in specs {
        let ServerAlgorithm::SlidingCounter { limit, window } = spec.algorithm else {
            continue;
        };
        let run = long_run(&spec.algorithm);
        let stated = limit as f64 / window.as_secs_f64();
        let got = even(&spec, interval_of(stated), run).await;
        let at = format!("#{} {spec}: {got:?} at {stated:.3}/s", spec.seed);
        let windows = (run.as_secs_f64() / window.as_secs_f64()).ceil() as u64;
        if spec.counts_refusals {
            assert_eq!(got.admitted_late, 0, "{at}");
        } else {
            let refused = got.sent - got.admitted;
            assert!(refused >= windows - 1 && refused <= 2 * windows, "{at}");
        }
    }
}

/// At twice its true rate, a client is refused about half the time by a
/// limiter that counts only what it admits: it gets the true rate, plus
/// the burst, and no more.
#[tokio::test(start_paused = true)]
async fn an_even_client_at_twice_the_rate_is_refused_about_half() {
    for spec in plain(120).into_iter().filter(|s| !s.counts_refusals) {
        let run = long_run(&spec.algorithm);
        let rate = spec.sustained_per_second();
        let got = even(&spec, interval_of(2.0 * rate), run).await;
        let expected = rate * run.as_secs_f64();
        let burst = spec.algorithm.burst() as f64;
        let share = got.admitted as f64 / got.sent as f64;
        let at = format!("#{} {spec}: {got:?} at {rate:.3}/s for {run:?}", spec.seed);
        assert!(got.admitted as f64 >= 0.95 * expected, "{at}");
        assert!(got.admitted as f64 <= 1.02 * expected + burst + 1.0, "{at}");
        assert!(
            (0.45..=0.5 + burst / got.sent as f64 + 0.02).contains(&share),
            "{at}"
        );
    }
}

/// A limiter that counts refusals keeps a client hammering at twice the
/// rate locked out: after the first window or burst, nothing more passes.
#[tokio::test(start_paused = true)]
async fn a_limiter_that_counts_refusals_locks_out_a_hammering_client() {
    let specs: Vec<ServerSpec> = plain(200)
        .into_iter()
        .filter(|s| s.counts_refusals)
        .collect();
    assert!(specs.len() >= 20, "{} specs count refusals", specs.len());
    for spec in specs {
        let run = long_run(&spec.algorithm);
        let rate = spec.sustained_per_second();
        let got = even(&spec, interval_of(2.0 * rate), run).await;
        let at = format!("#{} {spec}: {got:?} at {rate:.3}/s for {run:?}", spec.seed);
        assert_eq!(got.admitted_late, 0, "{at}");
        assert!(
            got.admitted as f64 <= 2.0 * spec.algorithm.burst() as f64 + 1.0,
            "{at}"
        );
        // The same client a little under the rate is not locked out.
        let fair = even(&spec, interval_of(0.95 * rate), run).await;
        assert!(fair.admitted_late > 0, "#{} {spec}: {fair:?}", spec.seed);
    }
}

/// A `Retry-After` rounded down says `0` for a wait under a second (a
/// client that obeys it is early); rounded up it says at least 1; and a
/// fractional one says the wait to the millisecond.
#[tokio::test(start_paused = true)]
async fn retry_after_precision_is_as_specified() {
    let mut seen = Vec::new();
    for precision in [
        RetryAfterPrecision::Floor,
        RetryAfterPrecision::Ceil,
        RetryAfterPrecision::Fractional,
    ] {
        let server = RateLimitedServer::builder()
            .limit(RequestRate::per_second(20).expect("rate"))
            .burst(1)
            .retry_after_precision(precision)
            .start()
            .await
            .expect("server starts");
        let (mut service, url) = (server.service(), url_of(&server));
        assert_eq!(call(&mut service, &url).await.status(), StatusCode::OK);
        let refused = call(&mut service, &url).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        seen.push(
            refused.headers()["retry-after"]
                .to_str()
                .expect("ascii")
                .to_owned(),
        );
    }
    assert_eq!(seen, ["0", "1", "0.050"]);
}

/// A front limiter refuses with its own status and no rate-limit headers,
/// and what it refuses never reaches the main limiter.
#[tokio::test(start_paused = true)]
async fn the_front_limiter_refuses_bare() {
    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(50).expect("rate"))
        .burst(10)
        .dialect(Dialect::Ietf)
        .front_limiter(
            ServerAlgorithm::FixedWindow {
                limit: 3,
                window: Duration::from_secs(1),
            },
            StatusCode::SERVICE_UNAVAILABLE,
        )
        .start()
        .await
        .expect("server starts");
    let (mut service, url) = (server.service(), url_of(&server));
    for _ in 0..3 {
        let response = call(&mut service, &url).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().contains_key("ratelimit"));
    }
    let refused = call(&mut service, &url).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let names: Vec<&str> = refused.headers().keys().map(|k| k.as_str()).collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("ratelimit") && *n != "retry-after"),
        "{names:?}"
    );
    let stats = server.stats();
    assert_eq!((stats.total.ok, stats.total.throttled), (3, 0));
    assert_eq!(stats.total.front_refused, 1);
    assert_eq!(server.requests()[3].outcome, Answer::FrontRefused);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(call(&mut service, &url).await.status(), StatusCode::OK);
}

/// Every seed draws a server that starts and answers as its spec says: a
/// fresh client is admitted, with rate-limit headers exactly when the spec
/// sends them; hammering it is refused by the main limiter with the spec's
/// status and `Retry-After` exactly when the spec writes one.
#[tokio::test(start_paused = true)]
async fn every_seed_builds_a_server_that_answers_as_specified() {
    let limit_headers = |response: &reqwest::Response| {
        response
            .headers()
            .keys()
            .any(|k| k.as_str().contains("ratelimit"))
    };
    for seed in 0..500 {
        let spec = ServerSpec::generate(seed);
        let at = format!("#{seed} {spec}");
        let server = spec.builder().start().await.expect(&at);
        let (mut service, url) = (server.service(), url_of(&server));
        let first = call(&mut service, &url).await;
        assert_eq!(first.status(), StatusCode::OK, "{at}");
        assert_eq!(limit_headers(&first), spec.sends_headers(), "{at}");
        assert!(!first.headers().contains_key("retry-after"), "{at}");
        if spec.front.is_none() {
            let mut refused = None;
            for _ in 0..=spec.algorithm.burst() + 1 {
                let response = call(&mut service, &url).await;
                if response.status() != StatusCode::OK {
                    refused = Some(response);
                    break;
                }
            }
            let refused = refused.unwrap_or_else(|| panic!("{at}: never refused"));
            assert_eq!(refused.status(), spec.refusal_status, "{at}");
            assert_eq!(limit_headers(&refused), spec.sends_headers(), "{at}");
            let retry_after = refused.headers().get("retry-after");
            assert_eq!(retry_after.is_some(), spec.retry_after.is_some(), "{at}");
            if let (Some(value), Some(precision)) = (retry_after, spec.retry_after) {
                let value = value.to_str().expect("ascii");
                let whole = value.parse::<u64>().is_ok();
                let fractional = value.contains('.') && value.parse::<f64>().is_ok();
                match precision {
                    RetryAfterPrecision::Fractional => assert!(fractional, "{at}: {value}"),
                    _ => assert!(whole, "{at}: {value}"),
                }
            }
        }
        server.shutdown().await;
    }
}

/// A spec's `Display` tells servers apart: out of 500 seeds, at most a
/// handful read the same, and each names its algorithm, headers and
/// status.
#[test]
fn display_tells_servers_apart() {
    let shown: Vec<String> = (0..500)
        .map(|seed| ServerSpec::generate(seed).to_string())
        .collect();
    let distinct: HashSet<&String> = shown.iter().collect();
    assert!(distinct.len() >= 495, "{} distinct of 500", distinct.len());
    for text in &shown {
        assert!(text.contains(" | 429") || text.contains(" | 503"), "{text}");
        assert!(text.len() < 120, "{text}");
    }
    let spec = ServerSpec::generate(3);
    assert_eq!(
        ServerSpec::generate(3).to_string(),
        spec.to_string(),
        "deterministic"
    );
}

/// The space covers the grammar: every algorithm, header convention,
/// precision, both statuses, refusals counted or not, front limiters
/// below and above the main rate.
#[test]
fn the_first_500_seeds_cover_the_grammar() {
    let specs: Vec<ServerSpec> = (0..500).map(ServerSpec::generate).collect();
    let kinds: HashSet<String> = specs
        .iter()
        .map(|s| s.to_string().split(' ').next().unwrap_or("").to_owned())
        .collect();
    for kind in ["fixed", "log", "counter", "gcra", "bucket", "leaky"] {
        assert!(kinds.contains(kind), "{kind} in {kinds:?}");
    }
    let count = |f: &dyn Fn(&ServerSpec) -> bool| specs.iter().filter(|s| f(s)).count();
    assert!(count(&|s| s.headers == HeaderConvention::None) >= 20);
    assert!(count(&|s| s.headers == HeaderConvention::RetryAfterOnly) >= 20);
    assert!(
        count(&|s| matches!(
            s.headers,
            HeaderConvention::XRateLimit {
                limit: StatedLimit::Burst,
                ..
            }
        )) >= 10
    );
    assert!(count(&|s| s.retry_after == Some(RetryAfterPrecision::Floor)) >= 40);
    assert!(count(&|s| s.counts_refusals) >= 50);
    assert!(count(&|s| s.refusal_status == StatusCode::SERVICE_UNAVAILABLE) >= 60);
    let fronts: Vec<(FrontSpec, f64)> = specs
        .iter()
        .filter_map(|s| s.front.map(|f| (f, s.algorithm.sustained_per_second())))
        .collect();
    assert!(fronts.len() >= 50, "{} fronts", fronts.len());
    let below = fronts
        .iter()
        .filter(|(f, main)| f.algorithm.sustained_per_second() < *main)
        .count();
    assert!(
        below >= 20 && fronts.len() - below >= 20,
        "{below} of {}",
        fronts.len()
    );
}

/// A zoo server's log of `(instant, status)` after 16 tasks ran the
/// default client on it for 10 s: over HTTP as `tests/zoo.rs` runs it (a
/// `ThrottledClient` sending on loopback), and in process by the workload
/// (a `PaceLayer` of the same client around the server's service).
async fn zoo_log(name: &str, in_process: bool) -> (Vec<(Duration, u16)>, RunFigures) {
    let wall = std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_000_250);
    let server = zoo_support::preset(name)
        .wall_clock(wall)
        .start()
        .await
        .expect("server starts");
    let sustained = server.algorithm().sustained_per_second();
    let run = Duration::from_secs(10);
    let figures = if in_process {
        let paced = PaceLayer::new(client().expect("client")).layer(server.service());
        Workload::new(16, run)
            .run(&server, sustained, paced)
            .await
            .expect("run")
    } else {
        let client = client().expect("client");
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (client, url) = (client.clone(), server.url());
            tasks.push(tokio::spawn(async move {
                let (mut logical, mut failed) = (0, 0);
                while start.elapsed() < run {
                    logical += 1;
                    match client.send(client.get(&url)).await {
                        Ok(response) if response.status().is_success() => {}
                        _ => failed += 1,
                    }
                }
                (logical, failed)
            }));
        }
        let (mut logical, mut failed) = (0, 0);
        for task in tasks {
            let (l, f) = task.await.expect("task ends");
            logical += l;
            failed += f;
        }
        RunFigures::of(&server, sustained, run, logical, failed)
    };
    let log = server
        .requests()
        .iter()
        .map(|r| (r.at, r.status.as_u16()))
        .collect();
    server.shutdown().await;
    (log, figures)
}

/// The in-process service answers as the HTTP server does: on zoo servers
/// of four kinds the same client meets the same decisions at the same
/// instants, request for request, whether it sends over loopback or in
/// process.
#[tokio::test(start_paused = true)]
async fn in_process_and_http_agree_on_the_zoo() {
    for name in [
        "fixed-window-legacy",
        "leaky-bucket-503",
        "moving-window",
        "token-bucket-github",
    ] {
        let (http_log, http) = zoo_log(name, false).await;
        let (local_log, local) = zoo_log(name, true).await;
        println!("{name}: over HTTP {http:?}\n{name}: in process {local:?}");
        assert!(local.requests > 100, "{name}: {local:?}");
        assert_eq!(http_log, local_log, "{name}");
        assert_eq!(http, local, "{name}");
    }
}
