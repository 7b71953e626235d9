mod base;

pub use base::*;

use crate::device::{DeviceId, DeviceService, ServerUtilitiesHandle};

#[cfg(feature = "std")]
#[allow(dead_code)]
mod channel;

#[allow(dead_code)]
mod mutex;

#[cfg(feature = "std")]
#[allow(dead_code)]
mod reentrant;

#[cfg(all(feature = "std", multi_threading))]
type Inner<S> = Chosen<S>;
// type Inner<S> = mutex::MutexDeviceHandle<S>;
#[cfg(all(feature = "std", not(multi_threading)))]
type Inner<S> = reentrant::ReentrantMutexDeviceHandle<S>;
#[cfg(all(not(feature = "std"), not(multi_threading)))]
type Inner<S> = mutex::MutexDeviceHandle<S>;

// chessbench patch: where threads are available, the process chooses once,
// from the environment variable `CUBECL_DEVICE_THREADS`, how a device's
// services run: on device-runner threads fed through lock-free queues (the
// published behaviour and the default, any value but `0`), or inline on the
// calling thread under a reentrant lock (`0`), as the published crate does
// where it has no threads. Inline, the caller does the services' work
// itself instead of handing each task to a runner thread and spinning while
// that thread's queue is full.
#[cfg(all(feature = "std", multi_threading))]
pub use chosen::device_threads;

#[cfg(all(feature = "std", multi_threading))]
mod chosen {
    use super::*;

    /// Whether device services run on their own threads in this process
    /// (`CUBECL_DEVICE_THREADS` unset or anything but `0`), read once.
    pub fn device_threads() -> bool {
        static THREADS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *THREADS.get_or_init(|| {
            std::env::var("CUBECL_DEVICE_THREADS").map_or(true, |v| v.trim() != "0")
        })
    }

    /// A device handle of the kind the process chose ([`device_threads`]).
    pub enum Chosen<S: DeviceService> {
        Threads(channel::ChannelDeviceHandle<S>),
        Inline(reentrant::ReentrantMutexDeviceHandle<S>),
    }

    impl<S: DeviceService> Clone for Chosen<S> {
        fn clone(&self) -> Self {
            match self {
                Chosen::Threads(h) => Chosen::Threads(h.clone()),
                Chosen::Inline(h) => Chosen::Inline(h.clone()),
            }
        }
    }

    impl<S: DeviceService> Chosen<S> {
        /// Whether the chosen handle blocks its caller (the inline one does).
        pub fn is_blocking() -> bool {
            if device_threads() {
                <channel::ChannelDeviceHandle<S> as DeviceHandleSpec<S>>::BLOCKING
            } else {
                <reentrant::ReentrantMutexDeviceHandle<S> as DeviceHandleSpec<S>>::BLOCKING
            }
        }
    }

    impl<S: DeviceService> DeviceHandleSpec<S> for Chosen<S> {
        /// Not read for this handle: `DeviceHandle::is_blocking` asks
        /// [`Chosen::is_blocking`], which knows the process's choice.
        const BLOCKING: bool = false;

        fn insert(device_id: DeviceId, service: S) -> Result<Self, ServiceCreationError> {
            Ok(if device_threads() {
                Chosen::Threads(DeviceHandleSpec::insert(device_id, service)?)
            } else {
                Chosen::Inline(DeviceHandleSpec::insert(device_id, service)?)
            })
        }

        fn new(device_id: DeviceId) -> Self {
            if device_threads() {
                Chosen::Threads(DeviceHandleSpec::new(device_id))
            } else {
                Chosen::Inline(DeviceHandleSpec::new(device_id))
            }
        }

        fn device_id(&self) -> DeviceId {
            match self {
                Chosen::Threads(h) => h.device_id(),
                Chosen::Inline(h) => h.device_id(),
            }
        }

        fn utilities(&self) -> ServerUtilitiesHandle {
            match self {
                Chosen::Threads(h) => h.utilities(),
                Chosen::Inline(h) => h.utilities(),
            }
        }

        // Inline, a task's panic is caught as the runner thread catches it:
        // `submit` logs it, `submit_blocking` returns an error, and the
        // service stays usable.
        fn submit_blocking<'a, R: Send, T: FnOnce(&mut S) -> R + Send + 'a>(
            &self,
            task: T,
        ) -> Result<R, CallError> {
            match self {
                Chosen::Threads(h) => h.submit_blocking(task),
                Chosen::Inline(h) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    h.submit_blocking(task)
                }))
                .unwrap_or(Err(CallError)),
            }
        }

        fn submit<T: FnOnce(&mut S) + Send + 'static>(&self, task: T) {
            match self {
                Chosen::Threads(h) => h.submit(task),
                Chosen::Inline(h) => {
                    if let Err(err) =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.submit(task)))
                    {
                        log::warn!("Task failed: {err:?}");
                    }
                }
            }
        }

        fn flush_queue(&self) {
            match self {
                Chosen::Threads(h) => h.flush_queue(),
                Chosen::Inline(h) => h.flush_queue(),
            }
        }

        fn exclusive<R: Send, T: FnOnce() -> R + Send>(&self, task: T) -> Result<R, CallError> {
            match self {
                Chosen::Threads(h) => h.exclusive(task),
                Chosen::Inline(h) => h.exclusive(task),
            }
        }
    }
}
#[cfg(all(feature = "std", multi_threading))]
use chosen::Chosen;

/// TODO: Docs
pub struct DeviceHandle<S: DeviceService> {
    handle: Inner<S>,
}

impl<S: DeviceService> Clone for DeviceHandle<S> {
    fn clone(&self) -> Self {
        Self {
            handle: self.handle.clone(),
        }
    }
}

#[allow(missing_docs)]
impl<S: DeviceService> DeviceHandle<S> {
    // chessbench patch: not `const`, since where threads are available the
    // handle is chosen at run time (`device_threads`).
    pub fn is_blocking() -> bool {
        #[cfg(all(feature = "std", multi_threading))]
        {
            Chosen::<S>::is_blocking()
        }
        #[cfg(not(all(feature = "std", multi_threading)))]
        {
            <Inner<S> as DeviceHandleSpec<S>>::BLOCKING
        }
    }

    pub fn insert(device_id: super::DeviceId, service: S) -> Result<Self, ServiceCreationError> {
        Ok(Self {
            handle: <Inner<S> as DeviceHandleSpec<S>>::insert(device_id, service)?,
        })
    }

    pub fn new(device_id: super::DeviceId) -> Self {
        Self {
            handle: <Inner<S> as DeviceHandleSpec<S>>::new(device_id),
        }
    }

    pub fn device_id(&self) -> DeviceId {
        self.handle.device_id()
    }

    pub fn utilities(&self) -> ServerUtilitiesHandle {
        self.handle.utilities()
    }

    pub fn submit_blocking<'a, R: Send, T: FnOnce(&mut S) -> R + Send + 'a>(
        &self,
        task: T,
    ) -> Result<R, CallError> {
        self.handle.submit_blocking(task)
    }

    pub fn submit<T: FnOnce(&mut S) + Send + 'static>(&self, task: T) {
        self.handle.submit(task)
    }

    pub fn flush_queue(&self) {
        self.handle.flush_queue();
    }

    pub fn exclusive<R: Send, T: FnOnce() -> R + Send>(&self, task: T) -> Result<R, CallError> {
        self.handle.exclusive(task)
    }
}

#[cfg(test)]
mod tests_channel {
    type DeviceHandle<S> = channel::ChannelDeviceHandle<S>;

    include!("./tests.rs");
    include!("./tests_recursive.rs");
}

#[cfg(test)]
mod tests_mutex {
    type DeviceHandle<S> = mutex::MutexDeviceHandle<S>;

    include!("./tests.rs");
}

#[cfg(test)]
mod tests_reentrant {
    type DeviceHandle<S> = reentrant::ReentrantMutexDeviceHandle<S>;

    include!("./tests.rs");
    include!("./tests_recursive.rs");
}
