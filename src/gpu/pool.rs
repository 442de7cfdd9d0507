//! The buffer pool: a tensor's buffer is kept when its last tensor goes and
//! handed to the next tensor of the same byte size, zeroed on the GPU
//! first, instead of a new allocation each time.
//!
//! A new allocation costs the host tens of microseconds to milliseconds (the
//! driver maps fresh memory; on the H200 building a BERT-base forward's 300
//! outputs at 16k tokens took 169 ms), far more than the GPU's clear.
//!
//! Ordering rules, so reuse is never visible:
//! - a reused buffer's clear runs before any work that uses it: it is
//!   recorded in the open batch before the next dispatches, or put first in
//!   the next command buffer of any thread;
//! - a buffer freed with its clear still pending drops the clear;
//! - a buffer a live dispatch or a recorded clear binds (a plan kept for
//!   replay that reads a tensor since dropped, an intermediate only its bind
//!   group holds, a batch's recorded work on a tensor freed before the batch
//!   submits) is not handed out: that work would read or write the new
//!   tensor;
//! - uploads (`queue.write_buffer`) write the whole buffer or submit the
//!   pending clears first (`Gpu::flush_for_write`).
//!
//! The pool holds at most its byte budget (`ContextOptions::buffer_pool_bytes`);
//! a buffer past it is released.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError, Weak};

/// Buffers bound by live dispatches (of every device), with how many bind
/// each. A `wgpu::Buffer` hashes and compares by its handle's identity, which
/// its interior mutability (mapping state) never changes.
#[allow(clippy::mutable_key_type)]
static BOUND: Mutex<Option<HashMap<wgpu::Buffer, u32>>> = Mutex::new(None);

fn bound() -> std::sync::MutexGuard<'static, Option<HashMap<wgpu::Buffer, u32>>> {
    BOUND.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The buffers one dispatch (or one recorded clear) binds, counted in
/// `BOUND` while it lives (shared by a dispatch's clones).
#[derive(Debug)]
pub(crate) struct Bindings(Vec<wgpu::Buffer>);

impl Bindings {
    #[allow(clippy::mutable_key_type)]
    pub(crate) fn new(buffers: Vec<wgpu::Buffer>) -> Self {
        let mut map = bound();
        let map = map.get_or_insert_with(HashMap::new);
        for b in &buffers {
            *map.entry(b.clone()).or_insert(0) += 1;
        }
        Self(buffers)
    }

    pub(crate) fn buffers(&self) -> &[wgpu::Buffer] {
        &self.0
    }
}

impl Drop for Bindings {
    #[allow(clippy::mutable_key_type)]
    fn drop(&mut self) {
        let mut map = bound();
        let Some(map) = map.as_mut() else { return };
        for b in &self.0 {
            if let Some(n) = map.get_mut(b) {
                *n -= 1;
                if *n == 0 {
                    map.remove(b);
                }
            }
        }
    }
}

/// A tensor's buffer; returns to its pool when dropped.
pub(crate) struct PooledBuffer {
    buffer: wgpu::Buffer,
    pool: Option<Weak<Pool>>,
}

impl std::fmt::Debug for PooledBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("size", &self.buffer.size())
            .field("pooled", &self.pool.is_some())
            .finish()
    }
}

impl std::ops::Deref for PooledBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

impl PooledBuffer {
    /// Whether this buffer's clear is still pending (a write into it must
    /// wait for the clear to be submitted, or the clear would undo it).
    pub(crate) fn clear_pending(&self) -> bool {
        match self.pool.as_ref().and_then(Weak::upgrade) {
            Some(pool) => pool.lock().pending.iter().any(|(_, b)| *b == self.buffer),
            None => false,
        }
    }

    /// A buffer no pool takes back (an application's own).
    pub(crate) fn unpooled(buffer: wgpu::Buffer) -> Self {
        Self { buffer, pool: None }
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.as_ref().and_then(Weak::upgrade) {
            pool.give_back(self.buffer.clone());
        }
    }
}

#[derive(Default)]
struct State {
    /// Free buffers by byte size.
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    free_bytes: u64,
    /// Handed out again, their clear not yet recorded or submitted, with
    /// the thread that took them.
    pending: Vec<(std::thread::ThreadId, wgpu::Buffer)>,
    reused: u64,
    created: u64,
}

/// Free tensor buffers of one device.
pub(crate) struct Pool {
    state: Mutex<State>,
    budget: u64,
}

/// How often the pool reused a buffer and how many it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferPoolStats {
    /// Tensor buffers handed out again (each zeroed on the GPU first).
    pub reused: u64,
    /// Tensor buffers allocated new.
    pub created: u64,
    /// Bytes of free buffers the pool holds now.
    pub free_bytes: u64,
    /// The most free bytes it holds.
    pub budget_bytes: u64,
}

impl Pool {
    pub(crate) fn new(budget: u64) -> Self {
        Self {
            state: Mutex::new(State::default()),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A free buffer of exactly `size` bytes, with its clear made pending;
    /// `None` when there is none (allocate one with [`Pool::adopt`]).
    /// Without `zeroed` the caller overwrites every byte before any use.
    pub(crate) fn take(
        self: &std::sync::Arc<Self>,
        size: u64,
        zeroed: bool,
    ) -> Option<PooledBuffer> {
        let mut s = self.lock();
        let list = s.free.get_mut(&size)?;
        // The most recently freed buffer no live dispatch binds.
        let at = {
            let map = bound();
            list.iter()
                .rposition(|b| map.as_ref().is_none_or(|m| !m.contains_key(b)))?
        };
        let buffer = list.remove(at);
        s.free_bytes -= size;
        s.reused += 1;
        if zeroed {
            s.pending
                .push((std::thread::current().id(), buffer.clone()));
        }
        Some(PooledBuffer {
            buffer,
            pool: Some(std::sync::Arc::downgrade(self)),
        })
    }

    /// A newly allocated buffer, to come back here when dropped.
    pub(crate) fn adopt(self: &std::sync::Arc<Self>, buffer: wgpu::Buffer) -> PooledBuffer {
        self.lock().created += 1;
        PooledBuffer {
            buffer,
            pool: Some(std::sync::Arc::downgrade(self)),
        }
    }

    /// A buffer whose last tensor went: its pending clear is dropped, and it
    /// is kept while the budget allows.
    fn give_back(&self, buffer: wgpu::Buffer) {
        let mut s = self.lock();
        s.pending.retain(|(_, b)| *b != buffer);
        let size = buffer.size();
        if s.free_bytes + size <= self.budget {
            s.free_bytes += size;
            s.free.entry(size).or_default().push(buffer);
        }
    }

    /// Takes the pending clears: all of them, or only those this thread's
    /// allocations made.
    pub(crate) fn take_clears(&self, this_thread_only: bool) -> Vec<wgpu::Buffer> {
        let mut s = self.lock();
        let me = std::thread::current().id();
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut s.pending)
            .into_iter()
            .partition(|(t, _)| !this_thread_only || *t == me);
        s.pending = rest;
        mine.into_iter().map(|(_, b)| b).collect()
    }

    /// Whether any clear is pending.
    pub(crate) fn has_clears(&self) -> bool {
        !self.lock().pending.is_empty()
    }

    /// Releases every free buffer.
    pub(crate) fn release(&self) {
        let mut s = self.lock();
        s.free.clear();
        s.free_bytes = 0;
    }

    pub(crate) fn stats(&self) -> BufferPoolStats {
        let s = self.lock();
        BufferPoolStats {
            reused: s.reused,
            created: s.created,
            free_bytes: s.free_bytes,
            budget_bytes: self.budget,
        }
    }
}
