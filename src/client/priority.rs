//! Priorities: a call's class, and each key's queue that lets the higher
//! classes go first without starving the lower ones.
//!
//! Every key has one queue of its calls, in front of everything a call
//! waits for on the key (its in-flight permit, its first response, its
//! bucket). Only the call holding the key's *turn* waits on those; the
//! others wait here, ordered by class. So who goes next is chosen when the
//! turn comes free, that is when the key can take another call, and not
//! when the calls arrived: a user-facing call that arrives behind a batch's
//! backlog is next (it overtakes even the head, while the head still waits
//! for the key's bucket). The trade-off is one short lock per key per wait, and a
//! limiter that never sees more than one waiter of the key at a time (its
//! own queue is then never the one that orders calls).
//!
//! Aging keeps the order static: a call of class `c` that arrives at `t`
//! is ordered as if it had arrived at `t − c × aging`, ties in arrival
//! order. One comparison decides who goes next, the order never needs to
//! be recomputed as time passes, and how far a call can be overtaken has a
//! plain bound (see [`Priority`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::lock;
use crate::Error;

/// How much of a head start one class is worth over the class below it,
/// unless the scope says otherwise ([`Scope::aging`](crate::Scope::aging)).
pub(crate) const DEFAULT_AGING: Duration = Duration::from_secs(10);

/// A call's priority class: within a key, calls of a higher class are
/// admitted first, and aging keeps the lower ones from starving.
///
/// Three classes: [`BATCH`](Self::BATCH) (0), [`NORMAL`](Self::NORMAL) (1,
/// the default) and [`INTERACTIVE`](Self::INTERACTIVE) (2). A call carries
/// one as it carries a [`Cost`](crate::Cost) or a
/// [`TimeLimit`](crate::TimeLimit): [`PacedRequestBuilder::priority`] on the
/// client's own builder, or in the request's extensions
/// (`reqwest-middleware`'s for [`PaceMiddleware`](crate::PaceMiddleware),
/// an `http::Request`'s for the tower service's
/// [`for_http_requests`](crate::PaceService::for_http_requests) and for
/// [`ThrottledClient::send`](crate::ThrottledClient::send)). A call
/// without one is `NORMAL`, so a client that never sets one behaves as if
/// priorities did not exist.
///
/// # Guarantees
///
/// Each key of each scope queues its calls, in front of everything the call
/// waits for on that key: its in-flight permit
/// ([`Scope::max_in_flight`](crate::Scope::max_in_flight)), the key's first
/// response, its bucket. Only the call at the head waits for those; the
/// next head is chosen when the key can take another call. A call ordered
/// before the head that comes to wait while the head is still waiting for
/// the key's own bucket (or its permit) takes the head's place: the head
/// gives its wait up, nothing spent, and queues again in its own place.
/// (Not at a limiter of the caller's, such as a shared one, whose
/// reservation given up may be lost to every process; nor while the head
/// waits for the key's first response, whose probe it may hold.)
///
/// - **Higher classes first.** A call of class `c` arriving at `t` is
///   ordered as if it had arrived at `t − c × aging`
///   ([`Scope::aging`](crate::Scope::aging), 10 s by default); the
///   earliest goes next, ties in arrival order.
/// - **FIFO within a class.** Two calls of one class go in the order they
///   arrived.
/// - **No starvation.** A call is never overtaken by a call that arrives
///   more than `(its class − this call's class) × aging` after it: a
///   `BATCH` call goes before every call that arrives more than
///   `2 × aging` after it, whatever its class. A call that waited so long
///   goes in arrival order with the rest.
/// - **What a high class waits for.** An `INTERACTIVE` call waits for its
///   turn at the key; only the calls of its class ahead of it, and lower
///   ones that have waited longer than their head start, go first. A call
///   at the head that has been let through (sent, or granted its bucket's
///   token) is not overtaken: at most that one request's wait, at most one
///   service time with a cap on requests in flight.
/// - **Cancel safety.** A call dropped while it waits leaves the queue; one
///   dropped just as the turn was handed to it hands it on. No wake-up is
///   lost.
/// - **Deadlines.** The call's deadline bounds its time in the queue, as
///   it bounds every wait: past it, the call fails with
///   [`Error::TimeLimitExceeded`].
///
/// The order is per key and per process: calls of other processes sharing
/// a limiter (feature `redis`) are not ordered with this process's. A
/// retry after a wait the server asked for (`Retry-After`) queues again
/// as of its call's arrival, so it goes ahead of the calls of its class
/// that arrived after the call: a call that waited out the server's wait
/// is not sent to the back of a backlog, where its time limit could run
/// out before its turn. So does a retry after a refusal the key's pacing
/// answers (a probe of a lockout), while the call has a time limit: it goes
/// back at once and takes the key's next probe, so that a lockout's probes
/// start no other call's time limit (such refusals cost the call no
/// attempt; its time limit bounds them). Any other retry queues again as
/// a new arrival of its class: refusals that cost attempts fall on the
/// calls in turn, not all on the one at the front.
///
/// A retry after the server's wait comes back to its keys when the wait
/// they hold for the server ends (they let their calls go past it with the
/// release jitter), and at a key's own bucket overtakes the call that took
/// the turn meanwhile: it is the first of them to go.
///
/// # Out of range
///
/// [`Priority::new`] rejects a class above [`Priority::MAX_CLASS`] with
/// [`Error::PriorityOutOfRange`]; [`Priority::saturating`] clamps it to the
/// highest class. No value of the type is out of range, so a call never
/// waits on a class that does not exist.
///
/// ```
/// use reqwest_pace::{Error, Priority};
///
/// assert_eq!(Priority::default(), Priority::NORMAL);
/// assert!(Priority::INTERACTIVE > Priority::BATCH);
/// assert_eq!(Priority::new(2)?, Priority::INTERACTIVE);
/// assert!(matches!(
///     Priority::new(7),
///     Err(Error::PriorityOutOfRange { class: 7, .. })
/// ));
/// assert_eq!(Priority::saturating(7), Priority::INTERACTIVE);
/// # Ok::<(), Error>(())
/// ```
///
/// [`PacedRequestBuilder::priority`]: crate::PacedRequestBuilder::priority
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u8);

impl Priority {
    /// The lowest class: bulk work that may wait (class 0).
    pub const BATCH: Priority = Priority(0);
    /// The default class (1).
    pub const NORMAL: Priority = Priority(1);
    /// The highest class: a call someone is waiting for (class 2).
    pub const INTERACTIVE: Priority = Priority(2);
    /// The highest class number.
    pub const MAX_CLASS: u8 = 2;

    /// The priority of class `class`, from 0 ([`BATCH`](Self::BATCH)) to
    /// [`MAX_CLASS`](Self::MAX_CLASS) ([`INTERACTIVE`](Self::INTERACTIVE)).
    /// A class above it is [`Error::PriorityOutOfRange`].
    pub fn new(class: u8) -> Result<Priority, Error> {
        if class > Self::MAX_CLASS {
            return Err(Error::PriorityOutOfRange {
                class,
                max: Self::MAX_CLASS,
            });
        }
        Ok(Priority(class))
    }

    /// The priority of class `class`, clamped to
    /// [`MAX_CLASS`](Self::MAX_CLASS): for classes read from elsewhere
    /// (a header, a job's configuration) that should never fail a call.
    pub fn saturating(class: u8) -> Priority {
        Priority(class.min(Self::MAX_CLASS))
    }

    /// The class's number: 0 for `BATCH` up to `MAX_CLASS`.
    pub fn class(self) -> u8 {
        self.0
    }
}

impl Default for Priority {
    /// [`Priority::NORMAL`].
    fn default() -> Self {
        Priority::NORMAL
    }
}

/// One key's queue of calls by priority (see the module's docs).
pub(crate) struct Turns {
    aging: Duration,
    /// The instant the order keys count from.
    origin: Instant,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Whether a call holds the turn, or has been handed it and has not
    /// taken it yet.
    held: bool,
    /// The call the turn was handed to, until it takes it.
    handed: Option<u64>,
    /// The calls waiting, by order key and arrival number.
    waiting: BTreeMap<(i128, u64), Waker>,
    /// How many calls have queued: the next one's arrival number.
    arrivals: u64,
    /// The order of the call holding the turn, while it may give it up to
    /// a call ordered before it (see [`Turn::overtaken`]).
    holder: Option<i128>,
    /// Whether a call ordered before the holder waits for the turn.
    overtaken: bool,
    /// The holder's watch for that, woken when it becomes so.
    watch: Option<Waker>,
}

impl Turns {
    /// An empty queue whose classes are each worth `aging` of waiting.
    pub(crate) fn new(aging: Duration) -> Turns {
        Turns {
            aging,
            origin: Instant::now(),
            queue: Mutex::new(Queue::default()),
        }
    }

    /// Wait for the key's turn, now a new arrival.
    #[cfg(test)]
    pub(crate) fn take(&self, priority: Priority) -> Take<'_> {
        self.take_as_of(priority, Instant::now())
    }

    /// Wait for the key's turn, in the place of a call of `priority` that
    /// arrived at `arrived` (a retry's call arrived before its retry).
    /// Taken at once when nobody holds it (and so nobody waits); the turn
    /// goes back when the returned [`Turn`] is dropped.
    pub(crate) fn take_as_of(&self, priority: Priority, arrived: Instant) -> Take<'_> {
        Take {
            turns: self,
            priority,
            arrived,
            slot: None,
        }
    }

    /// Whether no call holds the turn or waits for it.
    pub(crate) fn is_idle(&self) -> bool {
        !lock(&self.queue).held
    }

    /// How many calls wait for the turn (the holder aside).
    pub(crate) fn queued(&self) -> usize {
        lock(&self.queue).waiting.len()
    }

    /// A call of `priority` arriving at `now` is ordered as if it had
    /// arrived `class × aging` earlier: nanoseconds from the origin, which
    /// may be negative (an `i128` holds any `Duration`'s nanoseconds, twice
    /// over).
    fn order(&self, priority: Priority, now: Instant) -> i128 {
        let arrived = now.saturating_duration_since(self.origin).as_nanos() as i128;
        let head_start = self.aging.as_nanos() as i128 * i128::from(priority.0);
        arrived - head_start
    }

    /// Hand the turn to the first call waiting, or free it. Returns the
    /// waker of the call handed the turn, to be woken once the queue is
    /// unlocked: a waker may run code that takes the queue's lock again
    /// (an executor that polls on wake), and a std mutex taken twice by
    /// one thread deadlocks.
    #[must_use = "the call handed the turn is woken by the caller"]
    fn pass(&self, queue: &mut Queue) -> Option<Waker> {
        queue.holder = None;
        queue.overtaken = false;
        queue.watch = None;
        match queue.waiting.pop_first() {
            Some(((_, arrival), waker)) => {
                queue.handed = Some(arrival);
                Some(waker)
            }
            None => {
                queue.held = false;
                None
            }
        }
    }
}

impl Queue {
    /// The turn is now held by a call of `order`: a call ordered before
    /// it, waiting already, overtakes it.
    fn hold(&mut self, order: i128) {
        self.holder = Some(order);
        self.overtaken = self.first_waits_before_holder();
        self.watch = None;
    }

    /// Whether the first call waiting is ordered before the holder (and so
    /// overtakes it).
    fn first_waits_before_holder(&self) -> bool {
        let first = self.waiting.keys().next().map(|&(order, _)| order);
        matches!((first, self.holder), (Some(first), Some(holder)) if first < holder)
    }
}

/// A wait for a key's turn ([`Turns::take_as_of`]).
pub(crate) struct Take<'a> {
    turns: &'a Turns,
    priority: Priority,
    /// When the call arrived: its place among its class.
    arrived: Instant,
    /// The call's place in the queue, once it waits there.
    slot: Option<(i128, u64)>,
}

impl<'a> Future for Take<'a> {
    type Output = Turn<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn<'a>> {
        let this = &mut *self;
        let turns = this.turns;
        let mut queue = lock(&turns.queue);
        let order = turns.order(this.priority, this.arrived);
        match this.slot {
            None if !queue.held => {
                queue.held = true;
                queue.hold(order);
                Poll::Ready(Turn { turns })
            }
            None => {
                let arrival = queue.arrivals;
                queue.arrivals += 1;
                let slot = (order, arrival);
                queue.waiting.insert(slot, cx.waker().clone());
                this.slot = Some(slot);
                // A call ordered before the holder (a retry in its call's
                // place, a higher class) asks it to give the turn up.
                let was = queue.overtaken;
                queue.overtaken = queue.first_waits_before_holder();
                let watch = if queue.overtaken && !was {
                    queue.watch.take()
                } else {
                    None
                };
                drop(queue);
                if let Some(watch) = watch {
                    watch.wake();
                }
                Poll::Pending
            }
            Some((_, arrival)) if queue.handed == Some(arrival) => {
                queue.handed = None;
                this.slot = None;
                queue.hold(order);
                Poll::Ready(Turn { turns })
            }
            Some(slot) => {
                if let Some(waker) = queue.waiting.get_mut(&slot) {
                    if !waker.will_wake(cx.waker()) {
                        *waker = cx.waker().clone();
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Take<'_> {
    /// A call dropped while it waits leaves the queue; one the turn was
    /// handed to hands it on, so that nobody waits for a call that is gone.
    fn drop(&mut self) {
        let Some((order, arrival)) = self.slot.take() else {
            return;
        };
        let mut queue = lock(&self.turns.queue);
        let next = if queue.handed == Some(arrival) {
            queue.handed = None;
            self.turns.pass(&mut queue)
        } else {
            queue.waiting.remove(&(order, arrival));
            // The holder is overtaken only while a call ordered before it
            // still waits.
            queue.overtaken = queue.first_waits_before_holder();
            None
        };
        drop(queue);
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

/// A key's turn, held until dropped; then the next call in the queue's
/// order has it.
pub(crate) struct Turn<'a> {
    turns: &'a Turns,
}

impl Turn<'_> {
    /// Resolves once a call ordered before this one waits for the turn: a
    /// retry back in its call's place (after the server's wait, which the
    /// holder has been waiting out at the key), or a call of a higher
    /// class. The holder that has not been let through yet gives the turn
    /// up then, and queues again in its own place, behind it.
    pub(crate) fn overtaken(&self) -> Overtaken<'_> {
        Overtaken { turns: self.turns }
    }
}

/// The wait of [`Turn::overtaken`].
pub(crate) struct Overtaken<'a> {
    turns: &'a Turns,
}

impl Future for Overtaken<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut queue = lock(&self.turns.queue);
        if queue.overtaken {
            return Poll::Ready(());
        }
        match &mut queue.watch {
            Some(watch) if watch.will_wake(cx.waker()) => {}
            watch => *watch = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let next = self.turns.pass(&mut lock(&self.turns.queue));
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MS: Duration = Duration::from_millis(1);

    /// Calls that queue on `turns` in the order given (one millisecond
    /// apart), each holding the turn for `hold`; returns the order in which
    /// they got it.
    async fn served(
        turns: Arc<Turns>,
        calls: &[(&'static str, Priority)],
        hold: Duration,
    ) -> Vec<&'static str> {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for &(name, priority) in calls {
            let (turns, order) = (Arc::clone(&turns), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let _turn = turns.take(priority).await;
                lock(&order).push(name);
                tokio::time::sleep(hold).await;
            }));
            tokio::time::sleep(MS).await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        let order = lock(&order).clone();
        order
    }

    #[tokio::test(start_paused = true)]
    async fn higher_classes_go_first_and_each_class_in_arrival_order() {
        let turns = Arc::new(Turns::new(Duration::from_secs(10)));
        let calls = [
            ("first", Priority::BATCH),
            ("b1", Priority::BATCH),
            ("n1", Priority::NORMAL),
            ("b2", Priority::BATCH),
            ("i1", Priority::INTERACTIVE),
            ("n2", Priority::NORMAL),
            ("i2", Priority::INTERACTIVE),
        ];
        // "first" takes the free turn at once and holds it while the rest
        // queue behind it.
        let order = served(turns, &calls, 100 * MS).await;
        assert_eq!(order, ["first", "i1", "i2", "n1", "n2", "b1", "b2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_queues_in_its_calls_place() {
        // A call that arrived at 0 comes back at 30 ms (a retry): it goes
        // ahead of the call of its class that arrived at 10 ms, not
        // behind it.
        let turns = Arc::new(Turns::new(Duration::from_secs(10)));
        let start = Instant::now();
        let holder = turns.take(Priority::NORMAL).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let queue = |name: &'static str, arrived: Instant| {
            let (turns, order) = (Arc::clone(&turns), Arc::clone(&order));
            tokio::spawn(async move {
                let _turn = turns.take_as_of(Priority::NORMAL, arrived).await;
                lock(&order).push(name);
            })
        };
        tokio::time::sleep(10 * MS).await;
        let newer = queue("newer", Instant::now());
        tokio::time::sleep(20 * MS).await;
        let retry = queue("retry", start);
        tokio::time::sleep(MS).await;
        drop(holder);
        newer.await.unwrap();
        retry.await.unwrap();
        assert_eq!(*lock(&order), ["retry", "newer"]);
    }

    /// The holder is overtaken while a call ordered before it waits, and
    /// only then: not by a call ordered after it, no longer once that call
    /// has left, and the turn it gives up goes to that call.
    #[tokio::test(start_paused = true)]
    async fn a_holder_is_overtaken_by_a_call_ordered_before_it() {
        use futures::FutureExt;

        let turns = Arc::new(Turns::new(Duration::from_secs(10)));
        let start = Instant::now();
        tokio::time::sleep(10 * MS).await;
        let holder = turns.take(Priority::NORMAL).await;
        assert!(holder.overtaken().now_or_never().is_none());
        // Later in its class: no.
        tokio::time::sleep(MS).await;
        let mut later = Box::pin(turns.take(Priority::NORMAL));
        assert!(later.as_mut().now_or_never().is_none());
        assert!(holder.overtaken().now_or_never().is_none());
        // A retry in the place of a call that arrived before it: yes, until
        // it leaves.
        let mut retry = Box::pin(turns.take_as_of(Priority::NORMAL, start));
        assert!(retry.as_mut().now_or_never().is_none());
        assert!(holder.overtaken().now_or_never().is_some());
        drop(retry);
        assert!(holder.overtaken().now_or_never().is_none());
        // A higher class: yes, and the turn given up is its.
        let interactive = tokio::spawn({
            let turns = Arc::clone(&turns);
            async move {
                let _turn = turns.take(Priority::INTERACTIVE).await;
            }
        });
        holder.overtaken().await;
        drop(holder);
        interactive.await.unwrap();
        assert!(later.await.overtaken().now_or_never().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_low_class_that_waited_its_head_start_is_not_overtaken() {
        // Aging of 10 ms a class: the batch call queued at 1 ms is ordered
        // as of 1 ms; an interactive call arriving at 12 ms as of -8 ms
        // (first), one arriving at 22 ms as of 2 ms (after it).
        let turns = Arc::new(Turns::new(10 * MS));
        let holder = turns.take(Priority::NORMAL).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, priority, at) in [
            ("batch", Priority::BATCH, 1),
            ("early", Priority::INTERACTIVE, 12),
            ("late", Priority::INTERACTIVE, 22),
        ] {
            let (turns, order) = (Arc::clone(&turns), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(at * MS).await;
                let _turn = turns.take(priority).await;
                lock(&order).push(name);
            }));
        }
        tokio::time::sleep(30 * MS).await;
        assert_eq!(turns.queued(), 3);
        drop(holder);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*lock(&order), ["early", "batch", "late"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_call_is_served_within_its_bound_under_a_stream_of_interactive_calls() {
        // One interactive call every 10 ms, each holding the turn for 10 ms:
        // by class alone they would keep it for as long as they come. A
        // batch call queued at 0 goes before every call arriving 2 × aging
        // = 100 ms after it or later.
        let aging = 50 * MS;
        let turns = Arc::new(Turns::new(aging));
        let start = Instant::now();
        let first = turns.take(Priority::INTERACTIVE).await;
        let batch = {
            let turns = Arc::clone(&turns);
            tokio::spawn(async move {
                let _turn = turns.take(Priority::BATCH).await;
                start.elapsed()
            })
        };
        let stream = {
            let turns = Arc::clone(&turns);
            tokio::spawn(async move {
                let mut tasks = Vec::new();
                for _ in 0..40 {
                    tokio::time::sleep(10 * MS).await;
                    let turns = Arc::clone(&turns);
                    tasks.push(tokio::spawn(async move {
                        let _turn = turns.take(Priority::INTERACTIVE).await;
                        tokio::time::sleep(10 * MS).await;
                    }));
                }
                for task in tasks {
                    task.await.unwrap();
                }
            })
        };
        tokio::time::sleep(15 * MS).await;
        drop(first);
        let served_at = batch.await.unwrap();
        stream.await.unwrap();
        // The calls arriving at 10 to 90 ms (less than 2 × aging after it,
        // nine of them) go first, one every 10 ms from 15 ms; the one at
        // 100 ms ties with it and arrived later. The batch call is served
        // at 105 ms, not after the stream's 400 ms.
        assert_eq!(served_at, 105 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_dropped_while_it_waits_leaves_the_queue_and_one_handed_the_turn_passes_it_on() {
        let turns = Turns::new(Duration::from_secs(10));
        let holder = turns.take(Priority::NORMAL).await;
        let mut dropped = Box::pin(turns.take(Priority::INTERACTIVE));
        let mut handed = Box::pin(turns.take(Priority::INTERACTIVE));
        let mut last = Box::pin(turns.take(Priority::BATCH));
        assert!(futures::poll!(dropped.as_mut()).is_pending());
        assert!(futures::poll!(handed.as_mut()).is_pending());
        assert!(futures::poll!(last.as_mut()).is_pending());
        assert_eq!(turns.queued(), 3);
        // Cancelled while it waits: it leaves the queue.
        drop(dropped);
        assert_eq!(turns.queued(), 2);
        // The turn goes to the next interactive call; dropped before it
        // takes it, it hands the turn on to the batch call.
        drop(holder);
        drop(handed);
        let turn = futures::poll!(last.as_mut());
        assert!(turn.is_ready(), "the turn was handed on");
        drop(turn);
        // The batch call's turn dropped: the key is free again.
        assert!(turns.is_idle());
        let again = turns.take(Priority::BATCH).await;
        drop(again);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_bounds_the_time_in_the_queue_and_the_queue_goes_on() {
        let turns = Arc::new(Turns::new(Duration::from_secs(10)));
        let start = Instant::now();
        let holder = turns.take(Priority::NORMAL).await;
        let waiting = tokio::time::timeout(50 * MS, turns.take(Priority::INTERACTIVE)).await;
        assert!(waiting.is_err(), "nobody gave the turn back");
        assert_eq!(start.elapsed(), 50 * MS);
        assert_eq!(turns.queued(), 0, "the timed-out call left the queue");
        let next = {
            let turns = Arc::clone(&turns);
            tokio::spawn(async move {
                let _turn = turns.take(Priority::BATCH).await;
                start.elapsed()
            })
        };
        tokio::time::sleep(50 * MS).await;
        drop(holder);
        assert_eq!(next.await.unwrap(), 100 * MS);
    }

    /// A waker that looks whether the queue is locked as it is woken.
    struct Probe {
        turns: Arc<Turns>,
        woken_locked: Mutex<Vec<bool>>,
    }

    impl std::task::Wake for Probe {
        fn wake(self: Arc<Self>) {
            let locked = matches!(
                self.turns.queue.try_lock(),
                Err(std::sync::TryLockError::WouldBlock)
            );
            lock(&self.woken_locked).push(locked);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_call_is_woken_after_the_queue_is_unlocked() {
        // A waker may run the woken task's code at once (another executor's
        // inline wake-up, a select's own waker): woken under the queue's
        // lock, such code taking it again would deadlock.
        let turns = Arc::new(Turns::new(Duration::from_secs(10)));
        let probe = Arc::new(Probe {
            turns: Arc::clone(&turns),
            woken_locked: Mutex::new(Vec::new()),
        });
        let waker = Waker::from(Arc::clone(&probe));
        let mut cx = Context::from_waker(&waker);
        let holder = turns.take(Priority::NORMAL).await;
        let mut handed = Box::pin(turns.take(Priority::NORMAL));
        let mut next = Box::pin(turns.take(Priority::NORMAL));
        assert!(handed.as_mut().poll(&mut cx).is_pending());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        // Handed on by a turn dropped, then by a call dropped as it was
        // handed the turn.
        drop(holder);
        drop(handed);
        assert_eq!(*lock(&probe.woken_locked), [false, false]);
        assert!(next.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_class_out_of_range_is_an_error_or_clamped() {
        assert_eq!(Priority::new(0).ok(), Some(Priority::BATCH));
        assert_eq!(Priority::new(1).ok(), Some(Priority::NORMAL));
        assert_eq!(Priority::new(2).ok(), Some(Priority::INTERACTIVE));
        for class in [3, 200, u8::MAX] {
            assert!(matches!(
                Priority::new(class),
                Err(Error::PriorityOutOfRange { class: c, max: 2 }) if c == class
            ));
            assert_eq!(Priority::saturating(class), Priority::INTERACTIVE);
        }
        assert_eq!(Priority::default(), Priority::NORMAL);
    }

    #[test]
    fn the_order_holds_any_aging() {
        let turns = Turns::new(Duration::MAX);
        let now = turns.origin;
        assert!(turns.order(Priority::INTERACTIVE, now) < turns.order(Priority::NORMAL, now));
        assert!(turns.order(Priority::NORMAL, now) < turns.order(Priority::BATCH, now));
        // No aging: every class in arrival order.
        let fifo = Turns::new(Duration::ZERO);
        assert_eq!(
            fifo.order(Priority::INTERACTIVE, now),
            fifo.order(Priority::BATCH, now)
        );
    }
}
