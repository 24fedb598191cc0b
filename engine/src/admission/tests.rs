use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How long a test waits to see that something does *not* happen.
const QUIET: Duration = Duration::from_millis(100);

#[test]
fn one_holder_at_a_time() {
    let a = Arc::new(Admission::new());
    let held = a.enter();
    assert!(a.try_enter().is_none(), "a second holder while the first holds it");
    let entered = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let t = {
        let (a, entered) = (a.clone(), entered.clone());
        std::thread::spawn(move || {
            let _g = a.enter();
            entered.store(true, Ordering::SeqCst);
            tx.send(()).unwrap();
        })
    };
    assert!(rx.recv_timeout(QUIET).is_err(), "enter() returned while the barrier was held");
    assert!(!entered.load(Ordering::SeqCst));
    drop(held);
    t.join().unwrap();
    assert!(entered.load(Ordering::SeqCst));
    assert!(a.try_enter().is_some());
}

#[test]
fn a_panicked_holder_does_not_poison_it() {
    let a = Arc::new(Admission::new());
    let b = a.clone();
    let _ = std::thread::spawn(move || {
        let _g = b.enter();
        panic!("holder panics");
    })
    .join();
    assert!(a.try_enter().is_some());
    drop(a.enter());
}

#[test]
fn guards_are_send_and_owned_ones_static() {
    fn send_sync_static<T: Send + Sync + 'static>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let a = Arc::new(Admission::new());
    let owned = a.enter_owned();
    send_sync_static(&owned);
    // Released on another thread than the one that took it.
    std::thread::spawn(move || drop(owned)).join().unwrap();
    let borrowed = a.enter();
    send(&borrowed);
    drop(borrowed);
    send_sync_static(&a.enter_async());
}

#[test]
fn an_owned_guard_holds_the_barrier_until_dropped() {
    let a = Arc::new(Admission::new());
    let g = a.enter_owned();
    assert!(a.try_enter().is_none());
    drop(g);
    assert!(a.try_enter().is_some());
}

/// A multi-thread runtime with one worker: a task that blocked it would
/// keep every other task from running.
fn one_worker() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

#[test]
fn enter_async_waits_without_blocking_the_worker() {
    let a = Arc::new(Admission::new());
    let held = a.enter_owned();
    let rt = one_worker();
    rt.block_on(async {
        let waiting = tokio::spawn({
            let a = a.clone();
            async move {
                let g = a.enter_async().await;
                // Held across an await.
                tokio::task::yield_now().await;
                drop(g);
            }
        });
        // Runs on the same, only worker while the first task waits.
        let other = tokio::spawn(async { 42 });
        assert_eq!(other.await.unwrap(), 42, "the worker was blocked by a waiting enter_async");
        assert!(!waiting.is_finished());
        // The holder releases from another thread: the waiting task wakes.
        std::thread::spawn(move || drop(held)).join().unwrap();
        waiting.await.unwrap();
    });
    assert!(a.try_enter().is_some());
}

#[test]
fn a_guard_held_across_await_blocks_a_synchronous_enter() {
    let a = Arc::new(Admission::new());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel();
    let task = rt.spawn({
        let a = a.clone();
        async move {
            let g = a.enter_async().await;
            held_tx.send(()).unwrap();
            go_rx.await.unwrap();
            drop(g);
        }
    });
    held_rx.recv().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let t = {
        let a = a.clone();
        std::thread::spawn(move || {
            let _g = a.enter();
            done_tx.send(()).unwrap();
        })
    };
    assert!(done_rx.recv_timeout(QUIET).is_err(), "enter() returned while an async holder held the barrier");
    go_tx.send(()).unwrap();
    done_rx.recv().unwrap();
    t.join().unwrap();
    rt.block_on(task).unwrap();
}

#[test]
fn a_cancelled_enter_async_takes_nothing() {
    let a = Arc::new(Admission::new());
    let held = a.enter();
    let rt = one_worker();
    rt.block_on(async {
        let cancelled = tokio::time::timeout(Duration::from_millis(10), a.enter_async()).await;
        assert!(cancelled.is_err());
    });
    drop(held);
    assert!(a.try_enter().is_some(), "a dropped enter_async left the barrier taken");
    // And a waiter that is woken but finds it taken waits again.
    let g = a.enter();
    rt.block_on(async {
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { drop(a.enter_async().await) }
        });
        tokio::task::yield_now().await;
        drop(g);
        waiter.await.unwrap();
    });
    assert!(a.try_enter().is_some());
}
