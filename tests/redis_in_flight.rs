//! The cap on calls in flight shared through Redis (`RedisInFlight`), on a
//! real `redis-server` each test starts, on the real clock: what these
//! tests assert cannot depend on how busy the machine is (never more slots
//! held than the cap, none lost, what the cap learns).
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis_support::{free_port, raw, until_reads, RedisServer};
use reqwest_pace::redis::{FaultPolicy, RedisBackend, RedisInFlight, RedisInFlightPermit};
use reqwest_pace::Error;

/// Slots the fleet holds, as Redis counts them (leases not yet ended).
async fn held(conn: &mut MultiplexedConnection, in_flight: &RedisInFlight) -> u64 {
    redis::cmd("ZCARD")
        .arg(in_flight.redis_keys()[0])
        .query_async(conn)
        .await
        .unwrap()
}

/// The cap learned, as Redis holds it.
async fn learned(conn: &mut MultiplexedConnection, in_flight: &RedisInFlight) -> Option<u64> {
    redis::cmd("HGET")
        .arg(in_flight.redis_keys()[1])
        .arg("cap")
        .query_async(conn)
        .await
        .unwrap()
}

/// One "process": its own connection and its own handle on the key.
async fn process(server: &RedisServer) -> RedisInFlight {
    RedisBackend::connect(server.url())
        .await
        .unwrap()
        .in_flight("api")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_processes_never_hold_more_than_the_cap_together() {
    let server = RedisServer::start();
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let in_flight = process(&server).await.with_max_in_flight(3).unwrap();
        handles.push(in_flight.clone());
        for _ in 0..8 {
            let (in_flight, now, peak, done) =
                (in_flight.clone(), now.clone(), peak.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let permit = in_flight.acquire().await.unwrap();
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    // Counted out before the slot goes back: the count here
                    // is never below what Redis holds for these tasks.
                    now.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 320, "every call got its slot");
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "{peak} held at once");
    assert_eq!(peak, 3, "the cap is used, not just kept");
    let mut conn = raw(&server).await;
    until_reads(async || held(&mut conn, &handles[0]).await, 0).await;
    assert!(handles.iter().all(|h| h.held() == 0));
}

#[tokio::test]
async fn a_refusal_read_by_one_process_caps_the_whole_fleet() {
    let server = RedisServer::start();
    let (a, b) = (process(&server).await, process(&server).await);
    let mut conn = raw(&server).await;
    // Six in flight across the two, no cap known: the sixth is refused.
    let mut permits = Vec::new();
    for i in 0..6 {
        let p = if i % 2 == 0 { &a } else { &b };
        permits.push(p.acquire().await.unwrap());
    }
    assert_eq!(permits[5].in_flight(), 6);
    let refused = permits.pop().unwrap();
    refused.refused();
    drop(refused);
    until_reads(async || learned(&mut conn, &a).await, Some(5)).await;
    // The fleet now holds five, its cap: neither process gets a sixth.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), b.acquire())
            .await
            .is_err(),
        "a sixth slot past the cap learned"
    );
    assert_eq!(b.cap(), Some(5), "as last read");
    // One given back: the waiter gets it.
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.acquire().await.map(|p| p.in_flight()) }
    });
    drop(permits.pop());
    assert_eq!(waiter.await.unwrap().unwrap(), 5);
    assert_eq!(a.cap(), Some(5), "read as its slot was granted");
}

#[tokio::test]
async fn an_episode_of_refusals_cuts_no_lower_than_half_and_the_cap_climbs_back_to_what_was_admitted(
) {
    let server = RedisServer::start();
    let a = process(&server).await;
    let mut conn = raw(&server).await;
    // Ten taken (each told the fleet's count as it was granted, 1 to 10):
    // the tenth refused caps the fleet at 9; the others answered, the
    // first of them with 9 in flight, show 9 admitted.
    let mut permits = Vec::new();
    for n in 1..=10 {
        let p = a.acquire().await.unwrap();
        assert_eq!(p.in_flight(), n);
        permits.push(p);
    }
    let p = permits.pop().unwrap();
    p.refused();
    drop(p);
    until_reads(async || learned(&mut conn, &a).await, Some(9)).await;
    for p in permits.drain(..) {
        p.answered();
        drop(p);
    }
    until_reads(async || held(&mut conn, &a).await, 0).await;
    // An outage: nine taken after the cut, all refused. The first opens
    // an episode whose floor is 5; the others, taken before its cut, are
    // of the same episode: down one at a time, no lower than the floor.
    for n in 1..=9 {
        let p = a.acquire().await.unwrap();
        assert_eq!(p.in_flight(), n);
        permits.push(p);
    }
    refuse_the_last(&a, &mut conn, &mut permits, &[8, 7, 6, 5, 5, 5]).await;
    answer_all(&a, &mut conn, permits).await;
    // Then rounds, each answer read with the cap in flight: each round of
    // as many answers as the cap climbs it one, up to the 9 admitted and
    // no further.
    for cap in 5..=9u64 {
        round_at_the_cap(&a, &mut conn, cap).await;
        assert_eq!(learned(&mut conn, &a).await, Some((cap + 1).min(9)));
    }
}

/// Refuse the last of `permits` one at a time, each giving the shared cap
/// the next of `caps`.
async fn refuse_the_last(
    in_flight: &RedisInFlight,
    conn: &mut MultiplexedConnection,
    permits: &mut Vec<RedisInFlightPermit>,
    caps: &[u64],
) {
    for &want in caps {
        let p = permits.pop().unwrap();
        p.refused();
        drop(p);
        until_reads(async || learned(conn, in_flight).await, Some(want)).await;
    }
}

/// Every one of `permits` answered and given back.
async fn answer_all(
    in_flight: &RedisInFlight,
    conn: &mut MultiplexedConnection,
    permits: Vec<RedisInFlightPermit>,
) {
    for p in permits {
        p.answered();
        drop(p);
    }
    until_reads(async || held(conn, in_flight).await, 0).await;
}

/// A round at `cap`: as many answers as the cap, each read with the cap
/// in flight (the slot given back is taken again before the next
/// answer), then every slot given back.
async fn round_at_the_cap(in_flight: &RedisInFlight, conn: &mut MultiplexedConnection, cap: u64) {
    let mut round = Vec::new();
    for _ in 0..cap {
        round.push(in_flight.acquire().await.unwrap());
    }
    for _ in 0..cap {
        let p = round.pop().unwrap();
        p.answered();
        drop(p);
        until_reads(async || held(conn, in_flight).await, cap - 1).await;
        round.push(in_flight.acquire().await.unwrap());
    }
    drop(round);
    until_reads(async || held(conn, in_flight).await, 0).await;
}

/// The first refusal bounds what the fleet was seen to admit: an answer
/// read while calls granted past the server's cap were still out (11 in
/// flight here, the server's cap 10) does not let the cap climb back
/// past what the refusal showed.
#[tokio::test]
async fn calls_granted_past_the_cap_before_its_first_refusal_are_not_read_as_admitted() {
    let server = RedisServer::start();
    let a = process(&server).await;
    let mut conn = raw(&server).await;
    let mut permits = Vec::new();
    for _ in 0..12 {
        permits.push(a.acquire().await.unwrap());
    }
    // Answered with 12 out (two of them past the server's cap, their
    // refusals not read yet).
    let p = permits.remove(0);
    p.answered();
    drop(p);
    until_reads(async || held(&mut conn, &a).await, 11).await;
    // The two past the cap refused (taken 12th and 11th).
    refuse_the_last(&a, &mut conn, &mut permits, &[11, 10]).await;
    // Rounds at the cap: it stays at 10 (with 12 read as admitted, one
    // round would take it to 11).
    answer_all(&a, &mut conn, permits).await;
    for _ in 0..2 {
        round_at_the_cap(&a, &mut conn, 10).await;
        assert_eq!(learned(&mut conn, &a).await, Some(10));
    }
}

/// A process that dies holding slots (its runtime gone, no renewal, no
/// give-back) frees them when their leases end.
#[tokio::test]
async fn a_dead_process_frees_its_slots_when_their_leases_end() {
    let server = RedisServer::start();
    let url = server.url();
    let lease = Duration::from_millis(900);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let dying = RedisBackend::connect(url)
                .await
                .unwrap()
                .in_flight("api")
                .unwrap()
                .with_max_in_flight(2)
                .unwrap()
                .with_lease(lease)
                .unwrap();
            for _ in 0..2 {
                std::mem::forget(dying.acquire().await.unwrap());
            }
        });
        drop(runtime);
    })
    .join()
    .unwrap();
    let alive = process(&server).await.with_max_in_flight(2).unwrap();
    let mut conn = raw(&server).await;
    assert_eq!(held(&mut conn, &alive).await, 2);
    // Both leases end (one may end a little before the other: the dying
    // process took its slots one after the other).
    let both = [
        alive.acquire().await.unwrap(),
        alive.acquire().await.unwrap(),
    ];
    assert!(both.iter().all(|p| p.in_flight() <= 2));
    assert_eq!(held(&mut conn, &alive).await, 2, "only the live process's");
}

/// A live process renews its calls' leases: a call held for several
/// leases keeps its slot.
#[tokio::test]
async fn a_call_held_longer_than_its_lease_keeps_its_slot() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1_500);
    let holder = process(&server)
        .await
        .with_max_in_flight(1)
        .unwrap()
        .with_lease(lease)
        .unwrap();
    let other = process(&server).await.with_max_in_flight(1).unwrap();
    let permit = holder.acquire().await.unwrap();
    assert!(
        tokio::time::timeout(lease * 2 + lease / 3, other.acquire())
            .await
            .is_err(),
        "the slot went to another process while its call was held"
    );
    drop(permit);
    let next = tokio::time::timeout(Duration::from_secs(10), other.acquire()).await;
    assert!(next.is_ok(), "the slot given back is taken");
}

/// Acquires dropped at every point of their wait, mid-script among them
/// (a slot granted as its future is dropped), leave no slot held: the
/// ones granted as they were dropped are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_at_any_point_leave_nothing_held() {
    let server = RedisServer::start();
    let (a, b) = (process(&server).await, process(&server).await);
    let (a, b) = (
        a.with_max_in_flight(1).unwrap(),
        b.with_max_in_flight(1).unwrap(),
    );
    let mut conn = raw(&server).await;
    let busy = tokio::spawn({
        let a = a.clone();
        async move {
            for _ in 0..200 {
                let p = a.acquire().await.unwrap();
                tokio::task::yield_now().await;
                drop(p);
            }
        }
    });
    let mut granted = 0;
    for i in 0..400u64 {
        let limit = Duration::from_micros(i * 37 % 3_000);
        granted += usize::from(tokio::time::timeout(limit, b.acquire()).await.is_ok());
    }
    busy.await.unwrap();
    until_reads(async || held(&mut conn, &a).await, 0).await;
    assert!(
        granted > 0,
        "no acquire got through: the test shows nothing"
    );
    let again = b.acquire().await.unwrap();
    assert_eq!(again.in_flight(), 1);
}

#[tokio::test]
async fn unreachable_redis_follows_the_fault_policy() {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let backend = RedisBackend::open(url.as_str()).unwrap();
    let closed = backend.in_flight("api").unwrap();
    assert!(matches!(closed.acquire().await, Err(Error::Backend { .. })));

    let open = backend
        .clone()
        .with_fault_policy(FaultPolicy::FailOpen)
        .in_flight("api")
        .unwrap()
        .with_max_in_flight(1)
        .unwrap();
    let (p1, p2) = (open.acquire().await.unwrap(), open.acquire().await.unwrap());
    assert_eq!((p1.in_flight(), p2.in_flight()), (0, 0));

    // Four processes sharing a cap of 8: two each while Redis is away.
    let fallback = backend
        .with_fault_policy(FaultPolicy::LocalFallback { processes: 4 })
        .in_flight("api")
        .unwrap()
        .with_max_in_flight(8)
        .unwrap();
    let held = [
        fallback.acquire().await.unwrap(),
        fallback.acquire().await.unwrap(),
    ];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), fallback.acquire())
            .await
            .is_err(),
        "a third slot past the process's share"
    );
    drop(held);
    assert!(fallback.acquire().await.is_ok());
}

#[tokio::test]
async fn bad_settings_are_refused() {
    let backend = RedisBackend::open("redis://127.0.0.1:1/").unwrap();
    assert!(backend.in_flight("").is_err());
    let in_flight = backend.in_flight("api").unwrap();
    assert!(matches!(
        in_flight.clone().with_max_in_flight(0),
        Err(Error::InvalidConfig(_))
    ));
    // The default timeout is 200 ms: a lease must outlast three of them.
    assert!(in_flight
        .clone()
        .with_lease(Duration::from_millis(500))
        .is_err());
    assert!(in_flight.with_lease(Duration::from_millis(600)).is_ok());
}
