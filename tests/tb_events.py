"""Real TensorBoard event files for the tests, written with TensorBoard's own writer."""

from __future__ import annotations

from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter


def write_events(directory: Path, records: list[tuple[int, summary_pb2.Summary.Value]]) -> Path:
    """One event file in `directory` holding `records` (step, value); its path."""
    writer = EventFileWriter(str(directory))
    for step, value in records:
        writer.add_event(
            event_pb2.Event(wall_time=1.0, step=step, summary=summary_pb2.Summary(value=[value]))
        )
    writer.close()
    (path,) = directory.glob("events.out.tfevents.*")
    return path


def scalars(tag: str, values: dict[int, float]) -> list[tuple[int, summary_pb2.Summary.Value]]:
    """TF1-style scalar records: tag at each step."""
    return [(s, summary_pb2.Summary.Value(tag=tag, simple_value=v)) for s, v in values.items()]
