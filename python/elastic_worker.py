"""elastic_worker: tell elasticd how far a PyTorch script's training got.

Two lines in a plain torchrun-style script give its job true incident timelines (the "first
step" of a recovery, the steps it lost) and, with the job's hang_timeout, hang detection:

    import elastic_worker
    ...
    for step in range(start, steps):
        train_one_step()
        elastic_worker.step(step + 1)        # the global step count after this step
                                             # (samples=N: the samples trained on so far, for
                                             # a job with scale "throughput")

and, if the script checkpoints:

    elastic_worker.resumed(start)            # once, after loading the checkpoint of `start`
    elastic_worker.checkpoint(step)          # after a checkpoint of `step` is published

Under elasticd the module speaks the worker progress protocol (README, "The worker progress
protocol") to $ELASTIC_CONTROL_SOCKET: a 4-byte big-endian length, then one JSON object, and a
reply framed the same way. Outside elasticd (no ELASTIC_CONTROL_SOCKET or ELASTIC_JOB_ID, as
under torchrun or python alone) every call is a cheap no-op, so the same script runs anywhere.
elasticd appends the directory of this file to the workers' PYTHONPATH (spawner.python_dir),
so `import elastic_worker` needs no set-up; `try: import elastic_worker / except ImportError:
elastic_worker = None` keeps a script runnable where it is not installed.

The rules (those of elastic-trainer's client, trainer/progress.h):
  - only global rank 0 reports by default (every rank runs the same steps); configure(
    all_ranks=True) lets every rank report (the daemon coalesces them);
  - the first step of a run goes out at once, then at most one step report per 0.1 s (the
    newest step is what counts); every checkpoint and resume report goes out;
  - each report connects, writes and reads the reply with a 0.1 s timeout; a failure is logged
    once to stderr (later ones are silent) and no report is tried for the next 10 s;
  - nothing here raises into the training loop: every error is caught and logged as above.
Standard library only; not thread-safe (call it from the training thread); read the
environment at the first call, so a script may set it up before.

The worker channel (Channel, channel()): a worker that can re-form its process group in place
says so, and elasticd then tells it the next round instead of killing it:

    link = elastic_worker.channel()          # None outside elasticd: run as a plain script
    if link is not None:
        link.hello(live=True)
        ...
        message = link.receive(timeout=0)    # poll between steps (or select on link.fileno())
        if message is not None and message["type"] == "round":
            ...re-form as message["rank"] of message["world_size"] (round_environ(message))...
            link.joined(message["round"], message["term"])

It speaks the channel of daemon/worker_channel/messages.h on the socket elasticd passes as the
descriptor named by $ELASTIC_WORKER_FD, framed like the progress protocol. Unlike the progress
calls, its errors raise ChannelError: the caller decides what a lost channel means.
"""

import json
import math
import os
import select
import socket
import struct
import sys
import time

__all__ = ["Reporter", "step", "checkpoint", "resumed", "enabled", "configure", "Channel",
           "ChannelError", "channel", "round_environ"]

TIMEOUT_S = 0.1
BACKOFF_S = 10.0
STEP_INTERVAL_S = 0.1
_MAX_REPLY_BYTES = 4096
# The worker channel (daemon/worker_channel/messages.h): its version, its frame bound and the
# variable naming the descriptor.
CHANNEL_VERSION = 1
_MAX_FRAME_BYTES = 64 * 1024
_WORKER_FD_VARIABLE = "ELASTIC_WORKER_FD"


class Reporter:
    """One worker's end of the progress protocol (module-level functions use a shared one).

    environ: the environment to read (default os.environ) - ELASTIC_CONTROL_SOCKET,
    ELASTIC_JOB_ID, ELASTIC_ROUND and RANK. all_ranks: report from every rank, not only rank 0.
    step_interval: the least time between two step reports, in seconds.
    """

    def __init__(self, environ=None, all_ranks=False, step_interval=STEP_INTERVAL_S):
        env = os.environ if environ is None else environ
        self._socket = env.get("ELASTIC_CONTROL_SOCKET", "")
        self._job = env.get("ELASTIC_JOB_ID", "")
        self._round = _number(env.get("ELASTIC_ROUND"))
        self._rank = _number(env.get("RANK"))
        self._enabled = bool(self._socket and self._job) and (all_ranks or self._rank == 0)
        self._step_interval = step_interval
        self._resumed_from = -1
        self._samples = None
        self._loss = None
        self._first_sent = False
        self._next_step = 0.0
        self._paused_until = 0.0
        self._logged = False

    @property
    def enabled(self):
        """Whether this process reports at all (under elasticd, and rank 0 unless all_ranks)."""
        return self._enabled

    def step(self, step, resumed_from=None, samples=None, loss=None):
        """A training step finished; `step` is the global step count after it. `samples`: the
        samples the whole job trained on since this process started (a job with scale
        "throughput" measures its samples/s from it)."""
        if not self._enabled:
            return
        try:
            if resumed_from is not None:
                self._resumed_from = int(resumed_from)
            self._samples = None if samples is None else int(samples)
            self._loss = None if loss is None else float(loss)
            now = time.monotonic()
            first = not self._first_sent
            if not first and now < self._next_step:
                return
            self._first_sent = True
            self._next_step = now + self._step_interval
            self._send(self._frame("step", step, first))
        except Exception as error:  # never into the training loop
            self._failed(time.monotonic(), "%s: %s" % (type(error).__name__, error))

    def checkpoint(self, step):
        """A checkpoint of `step` was published (complete and visible to a restart)."""
        if not self._enabled:
            return
        try:
            self._send(self._frame("checkpoint", step, False))
        except Exception as error:
            self._failed(time.monotonic(), "%s: %s" % (type(error).__name__, error))

    def resumed(self, step):
        """This run resumed from a checkpoint of `step`; later step reports carry it."""
        if not self._enabled:
            return
        try:
            self._resumed_from = int(step)
            self._send(self._frame("resume", step, False))
        except Exception as error:
            self._failed(time.monotonic(), "%s: %s" % (type(error).__name__, error))

    def _frame(self, event, step, first):
        report = {"verb": "progress", "job": self._job, "round": self._round,
                  "rank": self._rank, "event": event, "step": int(step)}
        if event == "step":
            report["resumed_from"] = self._resumed_from
            report["first"] = first
            if self._samples is not None:
                report["samples"] = self._samples
            if self._loss is not None and math.isfinite(self._loss):
                report["loss"] = self._loss
        return json.dumps(report, separators=(",", ":")).encode()

    def _send(self, body):
        now = time.monotonic()
        if now < self._paused_until:
            return False
        failure = None
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # One timeout bounds the connect (a full backlog), the write and the reply.
            connection.settimeout(TIMEOUT_S)
            connection.connect(self._socket)
            connection.sendall(struct.pack(">I", len(body)) + body)
            size = struct.unpack(">I", _read_exactly(connection, 4))[0]
            reply = json.loads(_read_exactly(connection, min(size, _MAX_REPLY_BYTES)))
            if not isinstance(reply, dict) or reply.get("ok") is not True:
                error = reply.get("error") if isinstance(reply, dict) else reply
                failure = "refused: %s" % (error,)
        except socket.timeout:
            failure = "no reply within %d ms" % (TIMEOUT_S * 1000)
        except (OSError, ValueError) as error:
            failure = "%s: %s" % (type(error).__name__, error)
        finally:
            connection.close()
        if failure is None:
            return True
        self._failed(now, failure)
        return False

    def _failed(self, now, why):
        self._paused_until = now + BACKOFF_S
        if self._logged:
            return
        self._logged = True
        try:
            sys.stderr.write(
                "elastic_worker: progress report to %s failed (%s); training goes on, and "
                "further failures are not logged\n" % (self._socket, why))
            sys.stderr.flush()
        except Exception:
            pass


def _number(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return 0


def _read_exactly(connection, size):
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ValueError("a truncated reply")
        data += chunk
    return data


_reporter = None


def _shared():
    global _reporter
    if _reporter is None:
        _reporter = Reporter()
    return _reporter


def configure(all_ranks=False, environ=None):
    """Replaces the shared reporter (module-level functions), e.g. to report from every rank."""
    global _reporter
    _reporter = Reporter(environ=environ, all_ranks=all_ranks)
    return _reporter


def enabled():
    """Whether step(), checkpoint() and resumed() report anything in this process."""
    return _shared().enabled


def step(step, resumed_from=None, samples=None, loss=None):
    """A training step finished; `step` is the global step count after it; `samples`, if
    given, the samples the whole job trained on so far (throughput scaling); `loss`, if given,
    the newest training loss (the job's curve). Rate-limited."""
    _shared().step(step, resumed_from, samples, loss)


def checkpoint(step):
    """A checkpoint of `step` was published."""
    _shared().checkpoint(step)


def resumed(step):
    """This run resumed from the checkpoint of `step` (call once, before the first step)."""
    _shared().resumed(step)


class ChannelError(Exception):
    """The worker channel failed: elasticd closed it, or sent bytes not of the protocol."""


class Channel:
    """The worker's end of elasticd's worker channel (see the module's docstring).

    Use Channel.from_environ() (or the module's channel()); the constructor takes a connected
    socket. The descriptor is made non-inheritable, so processes the worker starts do not hold
    the channel open: its end of file tells elasticd that this worker is gone.
    """

    def __init__(self, sock):
        self._socket = sock
        self._buffer = b""

    @classmethod
    def from_environ(cls, environ=None):
        """The channel named by $ELASTIC_WORKER_FD, or None without it (outside elasticd)."""
        env = os.environ if environ is None else environ
        text = env.get(_WORKER_FD_VARIABLE)
        if text is None:
            return None
        try:
            fd = int(text)
            os.set_inheritable(fd, False)
            sock = socket.socket(fileno=fd)
        except (ValueError, OSError) as error:
            raise ChannelError("%s=%r names no usable socket: %s" % (_WORKER_FD_VARIABLE, text, error))
        return cls(sock)

    def fileno(self):
        return self._socket.fileno()

    def hello(self, live):
        """Says which protocol version it speaks and whether it can re-form in place."""
        self._send({"type": "hello", "version": CHANNEL_VERSION, "live": bool(live)})

    def joined(self, round, term):
        """Says it has re-formed into `round` of `term` (both from the round message)."""
        self._send({"type": "joined", "round": int(round), "term": int(term)})

    def receive(self, timeout=None):
        """The daemon's next message as a dict ({"type": "round", ...} or {"type": "stop",
        "reason": ...}), waiting up to `timeout` seconds (None: for ever; 0: only what has
        arrived); None when none came. Messages of types this module does not know are
        skipped (a newer elasticd)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._next_frame()
            if message is not None:
                if message.get("type") in ("round", "stop"):
                    return message
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._socket], [], [], left)
            if not readable:
                return None
            try:
                chunk = self._socket.recv(65536)
            except OSError as error:
                raise ChannelError("reading the worker channel failed: %s" % error)
            if not chunk:
                raise ChannelError("the worker channel was closed by elasticd")
            self._buffer += chunk

    def close(self):
        self._socket.close()

    def _next_frame(self):
        if len(self._buffer) < 4:
            return None
        size = struct.unpack(">I", self._buffer[:4])[0]
        if size == 0 or size > _MAX_FRAME_BYTES:
            raise ChannelError("the daemon's frame announces %d bytes; a frame holds 1 to %d"
                               % (size, _MAX_FRAME_BYTES))
        if len(self._buffer) < 4 + size:
            return None
        body, self._buffer = self._buffer[4:4 + size], self._buffer[4 + size:]
        try:
            message = json.loads(body)
        except ValueError as error:
            raise ChannelError("the daemon's message is not JSON: %s" % error)
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise ChannelError("the daemon's message is not an object with a \"type\"")
        return message

    def _send(self, message):
        body = json.dumps(message, separators=(",", ":")).encode()
        try:
            self._socket.sendall(struct.pack(">I", len(body)) + body)
        except OSError as error:
            raise ChannelError("writing to the worker channel failed: %s" % error)


def round_environ(message):
    """The torchrun-compatible variables of a round message (what elasticd would set at exec)."""
    return {
        "RANK": str(message["rank"]),
        "LOCAL_RANK": str(message["local_rank"]),
        "WORLD_SIZE": str(message["world_size"]),
        "LOCAL_WORLD_SIZE": str(message["local_world_size"]),
        "GROUP_RANK": str(message["group_rank"]),
        "MASTER_ADDR": str(message["master_addr"]),
        "MASTER_PORT": str(message["master_port"]),
        "TORCHELASTIC_RESTART_COUNT": str(message["restart_count"]),
        "ELASTIC_JOB_ID": str(message["job"]),
        "ELASTIC_ROUND": str(message["round"]),
    }


_channel = None
_channel_read = False


def channel():
    """This process's worker channel (shared), or None outside elasticd."""
    global _channel, _channel_read
    if not _channel_read:
        _channel_read = True
        _channel = Channel.from_environ()
    return _channel
