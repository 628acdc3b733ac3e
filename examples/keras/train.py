"""Multi-worker Keras training on the digits with MultiWorkerMirroredStrategy (a dlaas example).

The shape of TensorFlow's "Multi-worker training with Keras" tutorial: the cluster comes
from TF_CONFIG (the platform sets it for framework tensorflow: every learner is a worker,
learner-0 the chief), the model is built and compiled inside `strategy.scope()`, and
`model.fit` trains it with the global batch split across the workers, whose gradients the
strategy all-reduces. No BackupAndRestore: its backup is written by the chief alone and
must be read by every worker on a restart, and the learners share no file system, so the
workers would start from different epochs; a restarted job trains from the start (a few
seconds here). The chief saves the model as
RESULT_DIR/model.keras (the other workers save to a temporary directory and delete it, as
the tutorial does); every worker ends with `worker I weights_sha256=<hex>`.

Locally, two shells (with the digits in ./data, from ../digits/prepare.py --out data):
    TF_CONFIG='{"cluster":{"worker":["127.0.0.1:12345","127.0.0.1:12346"]},
                "task":{"type":"worker","index":0}}' DATA_DIR=data python train.py
    ... and the same with "index":1
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep the log to the training
# Keras 3 (TensorFlow's default Keras since 2.16) cannot fit under MultiWorkerMirroredStrategy
# (keras-team/keras#20585); tf.keras is Keras 2 (the tf_keras package) with this set.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

SEED = 0


def load(data_dir: Path):
    matches = sorted(data_dir.rglob("digits.npz")) if data_dir.is_dir() else []
    if not matches:
        return None
    with np.load(matches[0]) as f:
        x, y = f["X"].astype(np.float32) / 16.0, f["y"].astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def build_and_compile_model(lr: float) -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
        metrics=["accuracy"],
    )
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Keras MultiWorkerMirroredStrategy on digits")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)

    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task", {"type": "worker", "index": 0})
    workers = len(tf_config.get("cluster", {}).get("worker", [])) or 1
    is_chief = task["type"] == "chief" or (task["type"] == "worker" and task["index"] == 0)
    data_dir = Path(os.environ.get("DATA_DIR", "data"))
    result_dir = Path(os.environ.get("RESULT_DIR", "results"))

    keras_3_default = tuple(int(n) for n in tf.__version__.split(".")[:2]) >= (2, 16)
    if keras_3_default and importlib.util.find_spec("tf_keras") is None:
        print(
            f"error: this needs Keras 2 for TensorFlow {tf.__version__}: "
            f"pip install tf_keras=={tf.__version__}",
            file=sys.stderr,
        )
        return 2
    data = load(data_dir)
    if data is None:
        print(
            f"error: no digits.npz under DATA_DIR={data_dir}: make it with "
            "`python examples/digits/prepare.py --out data` and upload it with "
            "`dlaas data upload digits-data data/digits.npz`",
            file=sys.stderr,
        )
        return 2
    x_train, y_train, x_test, y_test = data

    tf.keras.utils.set_random_seed(SEED)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    print(
        f"tensorflow {tf.__version__}: worker {task['index']} of {workers}, "
        f"{strategy.num_replicas_in_sync} replicas, global batch {global_batch}",
        flush=True,
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=SEED)
        .repeat()
        .batch(global_batch)
        .with_options(options)
    )
    with strategy.scope():
        model = build_and_compile_model(args.lr)

    model.fit(train, epochs=args.epochs, steps_per_epoch=len(x_train) // global_batch, verbose=2)
    loss, acc = model.evaluate(x_test, y_test, verbose=0, batch_size=256)
    print(f"test loss={loss:.4f} accuracy={acc:.4f}", flush=True)

    # Every worker saves (the tutorial's rule); only the chief's copy is kept.
    target = result_dir if is_chief else Path(tempfile.mkdtemp(prefix="worker-"))
    target.mkdir(parents=True, exist_ok=True)
    model.save(target / "model.keras")
    if is_chief:
        print(f"done: model.keras in {result_dir}", flush=True)
    else:
        shutil.rmtree(target, ignore_errors=True)
    digest = hashlib.sha256()
    for w in model.get_weights():
        digest.update(np.ascontiguousarray(w).tobytes())
    print(f"worker {task['index']} weights_sha256={digest.hexdigest()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
