//! Choosing where tensors live: `cpu` (burn's flex backend) or `cuda[:N]` (burn's CUDA backend, compiled in by
//! the default `cuda` feature; the driver is loaded at run time). Without a usable GPU, `cuda` is a clear error.
//!
//! Every command parses `--device` into a [`DeviceKind`] here. Inference opens its backend in
//! `crate::model::Lm::load`; training runs a [`TrainJob`] through [`train_on`], the one place that names the
//! autodiff backends, so each training command accepts the same devices (`cpu`, `cuda`, `cuda:N`).

use std::path::Path;
use std::str::FromStr;

use anyhow::{bail, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    #[default]
    Cpu,
    Cuda(usize),
}

impl FromStr for DeviceKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" | "gpu" => Ok(DeviceKind::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(|n| n.parse::<usize>()) {
                Some(Ok(n)) => Ok(DeviceKind::Cuda(n)),
                _ => bail!("unknown device '{s}' (expected cpu, cuda or cuda:N)"),
            },
        }
    }
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Library folders where the CUDA driver library may live.
fn driver_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    dirs.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/cuda/lib64",
            "/usr/local/cuda/compat",
            "/usr/lib/wsl/lib",
            "/usr/local/nvidia/lib64",
            "/usr/lib/aarch64-linux-gnu",
        ]
        .map(String::from),
    );
    dirs
}

/// Checks, without touching the driver, that a CUDA device can plausibly be opened; burn's CUDA backend panics
/// when the driver is missing, so we refuse early with an explanation instead.
pub fn check_cuda(n: usize) -> Result<()> {
    if !cfg!(feature = "cuda") {
        bail!("this ragtime binary was built without the `cuda` feature; rebuild with default features or use --device cpu");
    }
    let has_driver = driver_dirs()
        .iter()
        .any(|d| present(&Path::new(d).join("libcuda.so.1")) || present(&Path::new(d).join("libcuda.so")));
    if !has_driver {
        bail!("--device cuda: no CUDA driver (libcuda.so.1) found on this machine; use --device cpu");
    }
    if !present(Path::new("/dev/nvidiactl")) && !present(Path::new("/dev/dxg")) {
        bail!("--device cuda: no NVIDIA device nodes (/dev/nvidiactl) on this machine; use --device cpu");
    }
    if !present(Path::new(&format!("/dev/nvidia{n}"))) && !present(Path::new("/dev/dxg")) {
        bail!("--device cuda:{n}: /dev/nvidia{n} does not exist; use a smaller index or --device cpu");
    }
    Ok(())
}

/// A driver file or device node that is there, or that the OS refuses to show (then opening it says why).
fn present(p: &Path) -> bool {
    crate::io::present_or_refused(p)
}

/// Runs `f`, turning a panic inside the backend (e.g. a CUDA initialisation failure) into an error.
pub fn guard<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        anyhow::anyhow!("{what}: {msg}")
    })
}

/// Peak resident memory of this process so far (Linux `VmHWM`), in MiB; `None` where the OS does not say.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Memory of burn's pool on a CUDA device: bytes held by live tensors, and bytes reserved from the driver (what
/// `nvidia-smi` sees, less the driver's own). `None` on any other device. It counts what the program has queued,
/// not what the GPU has run, so reading it costs no wait for the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolMemory {
    pub in_use: u64,
    pub reserved: u64,
}

/// [`PoolMemory`] of `device` when it is a CUDA device (any backend's device type may be passed).
pub fn pool_memory<D: 'static>(device: &D) -> Option<PoolMemory> {
    #[cfg(feature = "cuda")]
    {
        use burn_cubecl::cubecl::Runtime;
        let dev = (device as &dyn std::any::Any).downcast_ref::<burn::backend::cuda::CudaDevice>()?;
        let u = burn_cubecl::cubecl::cuda::CudaRuntime::client(dev).memory_usage().ok()?;
        Some(PoolMemory { in_use: u.bytes_in_use, reserved: u.bytes_reserved })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        None
    }
}

/// Exclusive use of burn's process-wide training state, held while a graph that will be differentiated is built
/// and run backward, and while the backend's seeded generator (`B::seed`) draws.
///
/// burn 0.21 keeps both per process, not per thread. A `backward()` ends by sweeping the process-wide registry of
/// autodiff graphs, and can free a node of a graph that another thread is building at that moment (a node whose
/// parents are all parameters, while the op that consumes it runs), so that thread's parameter silently loses the
/// pass's gradient term (burn#5573, fixed after 0.21). And a seeded run's initialisation and dropout draw from the
/// one generator that every `Tensor::random` in the process draws from. Two trainings on two threads of one
/// process would each be wrong now and then, with no error. So the trainers ([`crate::sft::train::train`],
/// [`crate::detector::train::train`] and its streaming twin) hold this for their whole run, and so must any other
/// code (tests) that calls `backward()` or draws random tensors.
/// Re-entrant: a thread that holds it may take it again.
pub fn autodiff_exclusive() -> AutodiffGuard {
    let depth = AUTODIFF_HELD.with(std::cell::Cell::get);
    let lock = (depth == 0).then(|| AUTODIFF.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    AUTODIFF_HELD.with(|h| h.set(depth + 1));
    AutodiffGuard { _lock: lock }
}

static AUTODIFF: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    /// How many [`AutodiffGuard`]s this thread holds.
    static AUTODIFF_HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Held by [`autodiff_exclusive`]; releases on drop (the thread's outermost guard releases the lock).
#[must_use = "the lock is released when the guard is dropped"]
pub struct AutodiffGuard {
    _lock: Option<std::sync::MutexGuard<'static, ()>>,
}

impl Drop for AutodiffGuard {
    fn drop(&mut self) {
        AUTODIFF_HELD.with(|h| h.set(h.get() - 1));
    }
}

/// Training generic over burn's autodiff backend: [`train_on`] picks the backend and device from a [`DeviceKind`].
pub trait TrainJob {
    type Output;
    fn run<B: burn::tensor::backend::AutodiffBackend>(self, device: &B::Device) -> Result<Self::Output>;
}

/// Runs `job` on `kind`: burn's flex backend on the CPU, burn's CUDA backend on `cuda:N` after [`check_cuda`]; a
/// panic inside the CUDA backend (a broken driver setup) becomes an error naming the device.
pub fn train_on<J: TrainJob>(kind: DeviceKind, job: J) -> Result<J::Output> {
    match kind {
        DeviceKind::Cpu => job.run::<burn::backend::Autodiff<burn::backend::Flex>>(&Default::default()),
        DeviceKind::Cuda(n) => {
            check_cuda(n)?;
            #[cfg(feature = "cuda")]
            {
                use burn::backend::{cuda::CudaDevice, Autodiff, Cuda};
                let dev = CudaDevice::new(n);
                guard(&format!("--device cuda:{n}: training failed"), || job.run::<Autodiff<Cuda>>(&dev))?
            }
            #[cfg(not(feature = "cuda"))]
            {
                drop(job);
                unreachable!("check_cuda refuses CUDA in a build without the cuda feature")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::ElementConversion;

    #[test]
    fn parses_devices() {
        assert_eq!("cpu".parse::<DeviceKind>().unwrap(), DeviceKind::Cpu);
        assert_eq!("cuda".parse::<DeviceKind>().unwrap(), DeviceKind::Cuda(0));
        assert_eq!("cuda:2".parse::<DeviceKind>().unwrap(), DeviceKind::Cuda(2));
        assert!("tpu".parse::<DeviceKind>().is_err());
        assert!("cuda:x".parse::<DeviceKind>().is_err());
    }

    struct Sum(Vec<f32>);
    impl TrainJob for Sum {
        type Output = f32;
        fn run<B: burn::tensor::backend::AutodiffBackend>(self, device: &B::Device) -> Result<f32> {
            let t = burn::tensor::Tensor::<B, 1>::from_floats(self.0.as_slice(), device);
            Ok(t.sum().into_scalar().elem())
        }
    }

    #[test]
    fn pool_memory_is_none_off_cuda() {
        let cpu: burn::tensor::Device<burn::backend::Flex> = Default::default();
        assert_eq!(pool_memory(&cpu), None);
    }

    #[test]
    fn autodiff_exclusive_is_reentrant_and_excludes_other_threads() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let entered = std::sync::Arc::new(AtomicBool::new(false));
        let outer = autodiff_exclusive();
        let inner = autodiff_exclusive(); // the same thread again: no deadlock
        let other = {
            let entered = entered.clone();
            std::thread::spawn(move || {
                let _g = autodiff_exclusive();
                entered.store(true, Ordering::SeqCst);
            })
        };
        drop(inner);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!entered.load(Ordering::SeqCst), "another thread entered while this one held the lock");
        drop(outer);
        other.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        // released: this thread takes it again
        drop(autodiff_exclusive());
    }

    /// burn#5573 under load: half the threads reuse a leaf after a backward (as a trainer reuses its parameters)
    /// and `cat` a product of it, the window in which another thread's backward can free the product's node,
    /// while the other half run backward passes; each thread holds the lock for a round. Every gradient must
    /// arrive whole. `RAGTIME_TEST_UNGUARDED=1` runs the same rounds without the lock: on 2 cores about a third
    /// of the reusing rounds then lose the product's share of the gradient, with no error.
    #[test]
    fn concurrent_training_threads_keep_every_gradient() {
        use burn::backend::{Autodiff, Flex};
        use burn::tensor::Tensor;
        type AB = Autodiff<Flex>;
        let guarded = std::env::var("RAGTIME_TEST_UNGUARDED").is_err();
        let n = 512;
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..12)
            .map(|k| {
                let lost = lost.clone();
                std::thread::spawn(move || {
                    let dev = Default::default();
                    for round in 0..100 {
                        let _g = guarded.then(autodiff_exclusive);
                        let leaf = Tensor::<AB, 2>::ones([n, n], &dev).require_grad();
                        if k % 2 == 0 {
                            // a throwaway backward drops the leaf's graph; the next op starts a one-node graph
                            let _ = leaf.clone().sum().backward();
                            // `cat` drops its inputs' handles before it registers its own step: while it
                            // copies, `x`'s node looks unused to another thread's sweep
                            let x = leaf.clone().mul_scalar(2.0);
                            let y = Tensor::cat(vec![x, leaf.clone()], 0).sum();
                            // d y / d leaf = 2 + 1 in every element
                            let g = leaf.grad(&y.backward()).map(|g| g.sum().into_scalar());
                            if g != Some(3.0 * (n * n) as f32) {
                                lost.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                        } else {
                            let _ = (leaf * (round as f32)).sum().backward();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(lost.load(std::sync::atomic::Ordering::SeqCst), 0, "gradients lost");
    }

    #[test]
    fn train_on_runs_the_job_on_the_cpu() {
        assert_eq!(train_on(DeviceKind::Cpu, Sum(vec![1.0, 2.0, 3.5])).unwrap(), 6.5);
    }
}
