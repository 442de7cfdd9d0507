//! The result of a wgpu error scope. On native wgpu (wgpu-core) a popped
//! scope's future is ready at once, so it is read in place. In the browser
//! it resolves when the GPU process answers: read it if ready, else let it
//! finish on its own and keep the error it brings, which the next call of
//! wgtile reports ([`take_deferred`] in `Gpu::ensure_alive`). Blocking
//! there would never return.

use std::future::Future;

/// The error `scope` reports, if any, where it can be known now.
pub(crate) fn settle<F>(during: &str, scope: F) -> Option<wgpu::Error>
where
    F: Future<Output = Option<wgpu::Error>> + 'static,
{
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = during;
        pollster::block_on(scope)
    }
    #[cfg(target_arch = "wasm32")]
    {
        web::settle(during, scope)
    }
}

/// An error a scope reported after its call returned (the browser only),
/// taken once: `(what wgtile was doing, wgpu's message)`.
pub(crate) fn take_deferred() -> Option<(String, String)> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        None
    }
    #[cfg(target_arch = "wasm32")]
    {
        web::take()
    }
}

#[cfg(target_arch = "wasm32")]
mod web {
    use std::future::Future;
    use std::sync::{Mutex, PoisonError};
    use std::task::{Context, Poll};

    /// The first error reported late; later ones are logged.
    static DEFERRED: Mutex<Option<(String, String)>> = Mutex::new(None);

    pub(super) fn settle<F>(during: &str, scope: F) -> Option<wgpu::Error>
    where
        F: Future<Output = Option<wgpu::Error>> + 'static,
    {
        let mut scope = Box::pin(scope);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if let Poll::Ready(result) = scope.as_mut().poll(&mut cx) {
            return result;
        }
        let during = during.to_string();
        wasm_bindgen_futures::spawn_local(async move {
            if let Some(e) = scope.await {
                let mut slot = DEFERRED.lock().unwrap_or_else(PoisonError::into_inner);
                if slot.is_none() {
                    *slot = Some((during, e.to_string()));
                } else {
                    log::error!("{during}: {e} (after an earlier error not yet reported)");
                }
            }
        });
        None
    }

    pub(super) fn take() -> Option<(String, String)> {
        DEFERRED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}
