"""Data-parallel training of the digits MLP over N learners that really exchange gradients.

Each learner trains on its shard of the data (every NUM_LEARNERS-th image, from
LEARNER_ID on). After every mini-batch the learners all-reduce their gradient vectors
over plain TCP on the job network: learner 0 listens on MASTER_ADDR:MASTER_PORT, the
others connect to it (retrying while it starts), send their vector, and get back the
sum, which each divides by NUM_LEARNERS. Learner 0 broadcasts its initial weights, so
the learners start, and stay, bit-identical. Every learner prints per-epoch loss and
accuracy, the number of all-reduce rounds and the bytes it exchanged, and a checksum of
its final weights; learner 0 writes model.npz and metrics.json to RESULT_DIR.

Checkpoints: learner 0 saves one every epoch (dlaas.learner.checkpoint, CHECKPOINT_DIR)
and, on a restart, loads the newest and broadcasts it with its position, so every
learner resumes from it, whatever the new NUM_LEARNERS. SIGTERM (halt, preemption) is
cooperative: each all-reduce round also carries a stop flag, so all learners stop after
the same mini-batch; learner 0 saves a checkpoint of that point and all exit 143.

Locally, two shells (or see tests/integration/test_examples_local.py):
  LEARNER_ID=0 NUM_LEARNERS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 DATA_DIR=data python train.py
  LEARNER_ID=1 NUM_LEARNERS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 DATA_DIR=data python train.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

try:
    from dlaas.learner import checkpoint
except ImportError:  # run outside the platform without dlaas installed: no checkpoints
    checkpoint = None

SEED = 0
HIDDEN = 32
EXIT_TERMINATED = 128 + signal.SIGTERM
_HEADER = struct.Struct("!Q")  # payload length in bytes
_STOP = {"requested": False}


def _on_sigterm(_signum, _frame) -> None:
    _STOP["requested"] = True


class PeerLost(Exception):
    pass


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise PeerLost("a peer closed the connection")
        buf += chunk
    return bytes(buf)


class AllReduce:
    """Star all-reduce over TCP: learner 0 sums the vectors and sends the sum back."""

    def __init__(self, rank: int, world: int, addr: str, port: int, timeout: float = 120.0):
        self.rank, self.world = rank, world
        self.rounds = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.peers: list[socket.socket] = []
        if world == 1:
            return
        if rank == 0:
            self._listen(port, timeout)
        else:
            self._connect(addr, port, timeout)

    def _listen(self, port: int, timeout: float) -> None:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("", port))
        server.listen(self.world)
        server.settimeout(timeout)
        print(f"learner 0: waiting for {self.world - 1} peer(s) on port {port}")
        by_rank: dict[int, socket.socket] = {}
        try:
            while len(by_rank) < self.world - 1:
                conn, _ = server.accept()
                conn.settimeout(timeout)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                (peer_rank,) = struct.unpack("!I", _recv_exact(conn, 4))
                by_rank[peer_rank] = conn
        except TimeoutError:
            raise PeerLost(f"only {len(by_rank)} of {self.world - 1} peers connected") from None
        finally:
            server.close()
        self.peers = [by_rank[r] for r in sorted(by_rank)]  # a fixed order: deterministic sums

    def _connect(self, addr: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        attempts = 0
        while True:
            attempts += 1
            try:
                sock = socket.create_connection((addr, port), timeout=5)
                break
            except OSError as exc:  # refused, or the master's name is not resolvable yet
                if time.monotonic() > deadline:
                    raise PeerLost(f"cannot reach the master {addr}:{port}: {exc}") from None
                time.sleep(min(0.1 * attempts, 1.0))
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(struct.pack("!I", self.rank))
        self.peers = [sock]
        print(f"learner {self.rank}: connected to {addr}:{port} after {attempts} attempt(s)")

    def _send(self, sock: socket.socket, data: bytes) -> None:
        sock.sendall(_HEADER.pack(len(data)) + data)
        self.bytes_sent += _HEADER.size + len(data)

    def _recv(self, sock: socket.socket) -> bytes:
        (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
        data = _recv_exact(sock, n)
        self.bytes_received += _HEADER.size + n
        return data

    def sum(self, vec: np.ndarray) -> np.ndarray:
        """The element-wise sum of every learner's `vec` (float64), the same on all learners."""
        vec = np.ascontiguousarray(vec, dtype=np.float64)
        self.rounds += 1
        if self.world == 1:
            return vec.copy()
        if self.rank == 0:
            total = vec.copy()
            for sock in self.peers:
                total += np.frombuffer(self._recv(sock), dtype=np.float64)
            payload = total.tobytes()
            for sock in self.peers:
                self._send(sock, payload)
            return total
        self._send(self.peers[0], vec.tobytes())
        return np.frombuffer(self._recv(self.peers[0]), dtype=np.float64).copy()

    def broadcast(self, vec: np.ndarray) -> np.ndarray:
        """Learner 0's `vec` on every learner."""
        vec = np.ascontiguousarray(vec, dtype=np.float64)
        if self.world == 1:
            return vec.copy()
        if self.rank == 0:
            for sock in self.peers:
                self._send(sock, vec.tobytes())
            return vec.copy()
        return np.frombuffer(self._recv(self.peers[0]), dtype=np.float64).copy()

    def close(self) -> None:
        for sock in self.peers:
            sock.close()


# --- the model (the same MLP as examples/digits) ------------------------------------

SHAPES = {"w1": (64, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN, 10), "b2": (10,)}


def flatten(p: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([p[k].ravel() for k in SHAPES])


def unflatten(vec: np.ndarray) -> dict[str, np.ndarray]:
    out, i = {}, 0
    for k, shape in SHAPES.items():
        n = int(np.prod(shape))
        out[k] = vec[i : i + n].reshape(shape).copy()
        i += n
    return out


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w1": rng.normal(0, np.sqrt(2.0 / 64), SHAPES["w1"]),
        "b1": np.zeros(HIDDEN),
        "w2": rng.normal(0, np.sqrt(1.0 / HIDDEN), SHAPES["w2"]),
        "b2": np.zeros(10),
    }


def forward(p, x):
    h = np.maximum(0.0, x @ p["w1"] + p["b1"])
    z = h @ p["w2"] + p["b2"]
    z = z - z.max(axis=1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=1, keepdims=True)
    return h, probs


def loss_sum_and_grads(p, x, y):
    """Summed (not averaged) loss and gradients, so shards of any size combine exactly."""
    h, probs = forward(p, x)
    n = len(x)
    loss_sum = float(-np.log(probs[np.arange(n), y] + 1e-12).sum())
    correct = float((probs.argmax(axis=1) == y).sum())
    dz = probs
    dz[np.arange(n), y] -= 1.0
    dh = (dz @ p["w2"].T) * (h > 0)
    grads = {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ dz, "b2": dz.sum(0)}
    return loss_sum, correct, grads


def find_data(data_dir: Path) -> Path | None:
    direct = data_dir / "digits.npz"
    if direct.is_file():
        return direct
    return next(iter(sorted(data_dir.rglob("digits.npz"))), None) if data_dir.is_dir() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="data-parallel numpy MLP on digits")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="per learner")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)

    rank = int(os.environ.get("LEARNER_ID", "0"))
    world = int(os.environ.get("NUM_LEARNERS", "1"))
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    timeout = float(os.environ.get("DDP_TIMEOUT_S", "120"))
    data_dir = Path(os.environ.get("DATA_DIR", "data"))
    result_dir = Path(os.environ.get("RESULT_DIR", "results"))
    ckpt_dir = os.environ.get("CHECKPOINT_DIR", "checkpoints")
    signal.signal(signal.SIGTERM, _on_sigterm)

    path = find_data(data_dir)
    if path is None:
        print(
            f"error: no digits.npz in DATA_DIR={data_dir}: upload it with "
            "`python examples/digits/prepare.py --endpoint URL --bucket digits-data`",
            file=sys.stderr,
        )
        return 2
    with np.load(path) as f:
        x, y = f["X"].astype(np.float64) / 16.0, f["y"].astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    x_test, y_test = x[cut:], y[cut:]
    shard = np.arange(rank, cut, world)
    # Every learner must run the same number of steps, or the all-reduce deadlocks.
    steps = (cut // world) // args.batch_size
    print(f"learner {rank}/{world}: shard of {len(shard)} images, {steps} steps per epoch")

    try:
        comm = AllReduce(rank, world, addr, port, timeout)
    except PeerLost as exc:
        print(f"error: learner {rank}: {exc}", file=sys.stderr)
        return 1
    history: list[dict] = []
    epoch, next_step = 1, 0  # where training stands, for a checkpoint on SIGTERM

    def save(epoch_done: int, step_in_next: int = 0) -> None:
        if rank == 0 and checkpoint:
            state = {"params": params, "history": history, "world": world}
            if step_in_next:
                state["next_step"] = step_in_next
            checkpoint.save(state, step=epoch_done, directory=ckpt_dir)

    try:
        # Learner 0 decides where training starts and tells everyone (with the weights).
        params = init_params(np.random.default_rng(SEED))
        start = [1.0, 0.0]
        found = checkpoint.load_latest(ckpt_dir) if rank == 0 and checkpoint else None
        if found is not None:
            done_epochs, state = found
            params, history = state["params"], list(state.get("history", []))
            # A position inside an epoch means nothing with another number of learners.
            inside = state.get("next_step", 0) if state.get("world") == world else 0
            start = [done_epochs + 1.0, float(inside)]
        synced = comm.broadcast(np.concatenate([flatten(params), start]))
        params, first, next_step = unflatten(synced[:-2]), int(synced[-2]), int(synced[-1])
        if first > 1 or next_step:
            where = f" and {next_step} steps of epoch {first}" if next_step else ""
            print(f"learner {rank}: resuming from the checkpoint of epoch {first - 1}{where}")
        started = time.monotonic()
        for epoch in range(first, args.epochs + 1):
            perm = np.random.default_rng([SEED, epoch, rank]).permutation(shard)
            loss_total = correct_total = seen = 0.0
            for s in range(next_step, steps):
                next_step = s
                idx = perm[s * args.batch_size : (s + 1) * args.batch_size]
                loss_sum, correct, grads = loss_sum_and_grads(params, x[idx], y[idx])
                # One round carries the gradients plus [loss, correct, count] for the log,
                # and whether any learner was asked to stop (so all stop after this step).
                extra = [loss_sum, correct, len(idx), float(_STOP["requested"])]
                reduced = comm.sum(np.concatenate([flatten(grads), extra]))
                n = reduced[-2]
                step = unflatten(reduced[:-4] / n)
                for k in params:
                    params[k] -= args.lr * step[k]
                loss_total += reduced[-4]
                correct_total += reduced[-3]
                seen += n
                if reduced[-1] > 0:
                    save(epoch - 1, s + 1)
                    print(f"learner {rank}: SIGTERM: stopped after step {s + 1} of epoch {epoch}")
                    return EXIT_TERMINATED
            next_step = 0
            acc = float((forward(params, x_test)[1].argmax(axis=1) == y_test).mean())
            history.append({"epoch": epoch, "loss": loss_total / seen, "accuracy": acc})
            print(
                f"epoch {epoch}/{args.epochs} loss={loss_total / seen:.4f} "
                f"train_accuracy={correct_total / seen:.4f} accuracy={acc:.4f} "
                f"allreduce_rounds={comm.rounds} bytes_exchanged={comm.bytes_sent + comm.bytes_received}"
            )
            save(epoch)
    except (PeerLost, OSError) as exc:
        if _STOP["requested"]:  # a peer stopped first: keep what the last full step made
            save(epoch - 1, next_step)
            print(f"learner {rank}: SIGTERM: stopped at step {next_step} of epoch {epoch}")
            return EXIT_TERMINATED
        print(f"error: learner {rank}: the all-reduce failed: {exc}", file=sys.stderr)
        return 1
    finally:
        comm.close()

    # Computed from the weights, not read from the history: a gang restarted after its last
    # epoch's checkpoint trains no epoch, and only learner 0 loaded the history.
    final = float((forward(params, x_test)[1].argmax(axis=1) == y_test).mean())
    weights = flatten(params)
    checksum = hashlib.sha256(weights.tobytes()).hexdigest()
    print(
        f"learner {rank}: done: accuracy={final:.4f} rounds={comm.rounds} "
        f"bytes_sent={comm.bytes_sent} bytes_received={comm.bytes_received} weights_sha256={checksum}"
    )
    if rank == 0:
        result_dir.mkdir(parents=True, exist_ok=True)
        np.savez(result_dir / "model.npz", **params)
        metrics = {
            "learners": world,
            "epochs": args.epochs,
            "test_accuracy": final,
            "allreduce_rounds": comm.rounds,
            "bytes_sent": comm.bytes_sent,
            "bytes_received": comm.bytes_received,
            "weights_sha256": checksum,
            "train_seconds": round(time.monotonic() - started, 3),
            "history": history,
        }
        (result_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        print(f"learner 0: model.npz and metrics.json in {result_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
