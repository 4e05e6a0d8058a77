#!/usr/bin/env python3
"""A training loop that lives within a GPU-memory quota, as a sketch (Python stdlib only).

It does what a real loop should do under gpu-mem-quota:

  * on start, resume from its checkpoint (a requeued job starts the script again from the top);
  * read the restart hints (GPU_MEM_QUOTA_MICRO_BATCH, GPU_MEM_QUOTA_GRAD_ACCUM, GPU_MEM_QUOTA_BATCH_SCALE,
    GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING) and pick a micro-batch and gradient accumulation that keep
    the effective batch exactly;
  * during training, read the status file (GPU_MEM_QUOTA_STATUS_FILE) and shrink the micro-batch when
    the watchdog predicts the quota will be crossed; handle SIGUSR1, which the watchdog may send then;
  * checkpoint after every optimizer step (or every --checkpoint-every steps: a requeue redoes at most
    that many).

Instead of a GPU it "allocates" memory through the fake NVML of the dev cluster: it writes its usage in
bytes to $FAKE_NVML_DIR/procs/<gpu>/<pid> (gpu = the first entry of CUDA_VISIBLE_DEVICES), where the
watchdog sees it as this process's GPU memory. Usage per micro-step is FIXED + PER_SAMPLE x micro-batch
and stays there, as NVML sees a PyTorch process (its caching allocator keeps what it reserved);
--release-between-steps falls back to FIXED between micro-steps instead: the allocator's saw-tooth.
--device-limit makes it run out of memory as a real GPU would (full, or under a hard limit): the
allocation that does not fit fails with a CUDA-style message and exit status 1, which the watchdog's
self-healing requeues when the run peaked near its quota (--long-from-step brings that on mid-run).

    python3 train_loop.py --batch 8x8 --fixed 20G --per-sample 4G --steps 100 --step-seconds 1

Sizes use Slurm's syntax (40G = 40 GiB; a bare number is MiB). See docs/HINTS.md for every variable.
"""

import argparse
import contextlib
import json
import os
import secrets
import signal
import sys
import time

UNITS = {"": 1 << 20, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

# Activation checkpointing recomputes activations in the backward pass instead of keeping them:
# in this sketch it keeps a quarter of the per-sample memory and costs a third more time.
CHECKPOINTING_MEMORY = 0.25
CHECKPOINTING_TIME = 1.33


def log(message):
    print(f"train_loop: {message}", flush=True)


class Progress:
    """--progress: one JSON line per event (start, step, checkpoint, oom, term, done), appended, so that a
    benchmark can tell what each run did and what a restart redid. A no-op without the option."""

    def __init__(self, path):
        # O_NOFOLLOW: the file may be in a directory every job writes (a benchmark's progress/), where
        # a symlink planted at its name must not have this job append to someone else's file (K8).
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self.file = os.fdopen(os.open(path, flags, 0o666), "a") if path else None

    def __call__(self, event, **fields):
        if self.file:
            self.file.write(json.dumps({"t": round(time.time(), 3), "event": event, **fields}) + "\n")
            self.file.flush()


def parse_size(text):
    """'20G' -> bytes, as Slurm reads --mem (binary units, bare number = MiB)."""
    number = text.rstrip("KMGTkmgt")
    suffix = text[len(number):].upper()
    if not number.isdigit() or suffix not in UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 20G, 512M)")
    return int(number) * UNITS[suffix]


def parse_batch(text):
    """'8x8' -> (8, 8); '16' -> (16, 1)."""
    parts = text.split("x")
    if len(parts) > 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"not a batch geometry: {text!r} (e.g. 8x8)")
    return int(parts[0]), int(parts[1]) if len(parts) == 2 else 1


def largest_divisor_at_most(n, limit):
    """The largest d <= limit dividing n (at least 1): a micro-batch that keeps the effective batch."""
    return next(d for d in range(max(1, min(n, limit)), 0, -1) if n % d == 0)


def env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def env_float(name):
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return None


# --- writing a file ------------------------------------------------------------------------------------

@contextlib.contextmanager
def replacing(path):
    """A new text file that replaces `path` when the block ends without an error, removed when it does
    not. It is created beside `path` under a random name with O_EXCL|O_NOFOLLOW: in a directory others
    can write (a project's, or the fake GPU's world-writable procs/) a symlink or file planted at a name
    we would write is never opened (security review K8; gpu_mem_quota._files.replacing, which this
    stdlib-only script cannot import). Mode 0666 less the umask, as open() would give."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# --- checkpoint ---------------------------------------------------------------------------------------

def load_checkpoint(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def save_checkpoint(path, state):
    # Write-then-rename: a kill in the middle never leaves a torn checkpoint behind.
    with replacing(path) as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())


# --- the hints and the status file ---------------------------------------------------------------------

def choose_geometry(declared, checkpoint):
    """Micro-batch and accumulation for this run: never larger than the declared one, than the one the
    previous run ended with (it may have shrunk in flight), or than what the restart hints allow."""
    micro, accum = declared
    effective = micro * accum
    source = "declared"
    if checkpoint and checkpoint.get("micro", 0) * checkpoint.get("accum", 0) == effective:
        if checkpoint["micro"] < micro:
            micro, source = checkpoint["micro"], "checkpoint"
    hint_micro, hint_accum = env_int("GPU_MEM_QUOTA_MICRO_BATCH"), env_int("GPU_MEM_QUOTA_GRAD_ACCUM")
    scale = env_float("GPU_MEM_QUOTA_BATCH_SCALE")
    if hint_micro and hint_accum and hint_micro * hint_accum == effective:
        if hint_micro < micro:
            micro, source = hint_micro, "restart hints"
    elif scale is not None and scale < 1:
        scaled = largest_divisor_at_most(effective, int(micro * scale))
        if scaled < micro:
            micro, source = scaled, f"batch scale {scale}"
    return micro, effective // micro, source


def read_status(path):
    """The watchdog's status file, or None: it may not exist (yet), and a loop must not care."""
    if not path:
        return None
    try:
        with open(path) as f:
            status = json.load(f)
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def early_warning(status):
    """The status file's prediction, when it suggests shrinking per-step memory."""
    prediction = (status or {}).get("prediction") or {}
    scale = prediction.get("suggested_batch_scale")
    if not isinstance(scale, (int, float)) or not 0 < scale < 1:
        return None
    return {"scale": scale, "seconds": prediction.get("seconds_to_quota"),
            "updated_at": status.get("updated_at")}


# --- the fake GPU ----------------------------------------------------------------------------------------

class FakeGpu:
    """This process's GPU memory, as the fake NVML reads it. With the fake library (--fake-nvml-lib) an
    allocation goes through its fakeNvmlClaim, which the driver's hard limit can refuse, as cudaMalloc."""

    def __init__(self, library=None):
        self.claim = None
        if library:
            import ctypes
            self.claim = ctypes.CDLL(library).fakeNvmlClaim
            self.claim.argtypes = [ctypes.c_uint, ctypes.c_uint64]
            self.claim.restype = ctypes.c_int
        root = os.environ.get("FAKE_NVML_DIR", "/var/lib/fake-nvml")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "") or "0"
        self.gpu = visible.split(",")[0]
        directory = os.path.join(root, "procs", self.gpu)
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, str(os.getpid()))

    def use(self, nbytes):
        """Holds `nbytes` in all; False when the device refused (NVML_ERROR_MEMORY: out of memory)."""
        if self.claim is not None:
            code = self.claim(int(self.gpu), int(nbytes))
            if code == 20:
                return False
            if code != 0:
                raise OSError(f"fakeNvmlClaim answered NVML error {code}")
            return True
        with replacing(self.path) as f:
            f.write(f"{int(nbytes)}\n")
        return True

    def release(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def out_of_memory(gpu, args, sample_bytes, step, micro, progress, need):
    """The device has no room for this micro-batch's activations (it is full, or the driver refuses past
    a hard limit): a forward pass allocates as it goes, so hold what the device grants in eighths of a
    sample until the next eighth does not fit, keep it --oom-after seconds, then fail as PyTorch does,
    with exit status 1 (or --oom-exit). What the process held is what NVML saw at the end: near the limit."""
    chunk = max(1, sample_bytes // 8)
    held = args.fixed
    if not gpu.use(held):
        held = 0
    while held and held + chunk <= (args.device_limit or held + chunk) and gpu.use(held + chunk):
        held += chunk
    progress("oom", step=step, asked=need, held=held)
    time.sleep(args.oom_after)
    gib = 1 << 30
    free = f"GPU 0 has {(args.device_limit - held) / gib:.2f} GiB free; " if args.device_limit else ""
    print(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {chunk / gib:.2f} GiB. "
          f"{free}this process has {held / gib:.2f} GiB in use (step {step}, micro-batch {micro})",
          file=sys.stderr, flush=True)
    sys.exit(args.oom_exit)


# --- the loop --------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=parse_batch, default=(8, 8), help="declared MICROxACCUM (8x8)")
    parser.add_argument("--fixed", type=parse_size, default=parse_size("20G"),
                        help="memory that does not scale with the batch: weights, optimizer state (20G)")
    parser.add_argument("--per-sample", type=parse_size, default=parse_size("4G"),
                        help="activation memory per sample of a micro-batch (4G)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps to train (100)")
    parser.add_argument("--long-from-step", type=int, default=None,
                        help="from this optimizer step on the data has its long sequences: per-sample "
                             "memory is --long-per-sample (a length curriculum; default: never)")
    parser.add_argument("--long-per-sample", type=parse_size, default=None,
                        help="per-sample activation memory from --long-from-step on")
    parser.add_argument("--device-limit", type=parse_size, default=None,
                        help="GPU memory the device grants this process (a full GPU, or a hard limit); an "
                             "allocation past it fails with a CUDA out-of-memory error and the loop exits 1, "
                             "as PyTorch does. The fake GPU itself refuses nothing (default: no limit)")
    parser.add_argument("--fake-nvml-lib", default=None,
                        help="allocate through this fake libnvidia-ml's fakeNvmlClaim, which a hard limit of "
                             "the job's cgroup can refuse (default: write the claim file directly)")
    parser.add_argument("--oom-after", type=float, default=0.0,
                        help="seconds the failing forward pass holds what it got before the allocation that "
                             "fails (0.0)")
    parser.add_argument("--oom-exit", type=int, default=1,
                        help="exit status after an out-of-memory error (1, as PyTorch's); a site's retry "
                             "may requeue another with slurm.conf's RequeueExit")
    parser.add_argument("--release-between-steps", action="store_true",
                        help="give activation memory back to the device between micro-steps; by default it "
                             "is kept, as PyTorch's caching allocator does (NVML sees the reserved peak)")
    parser.add_argument("--step-seconds", type=float, default=1.0,
                        help="seconds per optimizer step, whatever the geometry (1.0)")
    parser.add_argument("--checkpoint-every", type=int, default=1,
                        help="optimizer steps between checkpoints (1): what a restart may have to redo")
    parser.add_argument("--progress", default=None,
                        help="append one JSON line per event to this file (for benchmarks; default: none)")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("TRAIN_CHECKPOINT_DIR"),
                        help="where progress is kept across requeues ($TRAIN_CHECKPOINT_DIR, "
                             "else ./train-checkpoint-$SLURM_JOB_ID)")
    args = parser.parse_args()
    if args.checkpoint_every < 1:
        parser.error("--checkpoint-every wants a positive number of steps")
    progress = Progress(args.progress)

    checkpoint_dir = args.checkpoint_dir or f"train-checkpoint-{os.environ.get('SLURM_JOB_ID', 'local')}"
    os.makedirs(checkpoint_dir, exist_ok=True)
    checkpoint_path = os.path.join(checkpoint_dir, "state.json")
    checkpoint = load_checkpoint(checkpoint_path)
    step = checkpoint["step"] if checkpoint else 0
    if checkpoint:
        log(f"resumed at step {step}/{args.steps}")

    micro, accum, source = choose_geometry(args.batch, checkpoint)
    restarts = os.environ.get("GPU_MEM_QUOTA_RESTARTS")
    if restarts:
        log(f"restart {restarts} after {os.environ.get('GPU_MEM_QUOTA_LAST_EVENT', '?')}, "
            f"last peak {env_int('GPU_MEM_QUOTA_LAST_PEAK_BYTES') or 0} bytes")
    checkpointing = os.environ.get("GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING") == "1"
    per_sample = args.per_sample * (CHECKPOINTING_MEMORY if checkpointing else 1)
    log(f"geometry {micro}x{accum} (effective {micro * accum}, from {source})"
        + (", activation checkpointing on" if checkpointing else ""))
    progress("start", step=step, micro=micro, restart=env_int("SLURM_RESTART_COUNT") or 0)

    status_path = os.environ.get("GPU_MEM_QUOTA_STATUS_FILE")
    # The watchdog may send SIGUSR1 with a warning. Its default action ends the process, so a loop
    # under gpu-mem-quota must handle it; this one reads the status file after every step anyway.
    signal.signal(signal.SIGUSR1, lambda *_: log("SIGUSR1: the watchdog has a warning"))
    # A requeue or scancel sends SIGTERM: leave through `finally`, so the fake GPU memory is freed.
    def terminated(*_):
        progress("term", step=step)
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminated)

    gpu = FakeGpu(args.fake_nvml_lib)
    applied_warning = None
    try:
        while step < args.steps:
            micro_seconds = args.step_seconds / accum * (CHECKPOINTING_TIME if checkpointing else 1)
            long = args.long_from_step is not None and step >= args.long_from_step
            sample_bytes = per_sample
            if long and args.long_per_sample is not None:
                sample_bytes = args.long_per_sample * (CHECKPOINTING_MEMORY if checkpointing else 1)
            need = args.fixed + sample_bytes * micro
            for _ in range(accum):
                if args.device_limit is not None and need > args.device_limit:
                    out_of_memory(gpu, args, sample_bytes, step, micro, progress, need)
                if not gpu.use(need):  # forward and backward: activations held
                    out_of_memory(gpu, args, sample_bytes, step, micro, progress, need)
                time.sleep(micro_seconds * 0.7)
                if args.release_between_steps:
                    gpu.use(args.fixed)  # activations freed back to the device
                time.sleep(micro_seconds * 0.3)
            step += 1
            progress("step", step=step, bytes=need)
            if step % args.checkpoint_every == 0 or step == args.steps:
                save_checkpoint(checkpoint_path, {"step": step, "micro": micro, "accum": accum})
                progress("checkpoint", step=step)

            # Between optimizer steps, the one place where the geometry may change.
            warning = early_warning(read_status(status_path))
            if warning and warning["updated_at"] != applied_warning and micro > 1:
                applied_warning = warning["updated_at"]
                new_micro = largest_divisor_at_most(micro * accum, int(micro * warning["scale"]))
                if new_micro < micro:
                    log(f"status file predicts the quota in {warning['seconds']} s: "
                        f"micro-batch {micro} -> {new_micro}")
                    micro, accum = new_micro, micro * accum // new_micro
        log(f"done: {step} steps at {micro}x{accum}")
        progress("done", step=step)
    finally:
        gpu.release()


if __name__ == "__main__":
    main()
