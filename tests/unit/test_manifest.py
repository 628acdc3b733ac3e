"""Manifest v1: manifests in FfDL's format parse unchanged; every error names its field path.

The ffdl-format-*.yml manifests under tests/fixtures/manifests/ are our own jobs written
in FfDL's manifest format (the fields and shapes of IBM/FfDL's etc/examples).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import (
    RESERVED_ENV,
    elastic_range_problem,
    parse_manifest,
    parse_memory_mb,
    scale_problem,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "manifests"
FFDL_OK = [
    "ffdl-format-tensorflow-fashion.yml",
    "ffdl-format-pytorch-cifar.yml",
    "ffdl-format-horovod-speech.yml",
    "ffdl-format-caffe-cifar.yml",
    "ffdl-format-pytorch-ddp.yml",
]

BASE = """
name: job
framework:
  name: python
  command: python3 train.py
"""


def problems(text: str) -> list[str]:
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(text)
    return info.value.problems


def with_lines(*lines: str) -> str:
    return BASE + "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- FfDL's format


@pytest.mark.parametrize("name", FFDL_OK)
def test_ffdl_format_parses_unchanged(name):
    m = parse_manifest((FIXTURES / name).read_text())
    store = m.data_store()
    assert store is not None and store.type == "s3"  # FfDL's mount_cos/s3_datastore: our S3
    assert store.training_data.container and store.training_results.container
    assert store.connection.endpoint.startswith("http")  # auth_url
    assert store.connection.access_key == "lab-trainer"  # user_name
    assert store.connection.secret_key.get_secret_value() == "lab-trainer-pw"  # password
    assert m.framework.command.strip()
    assert m.version == "1.0"


def test_ffdl_format_details():
    tf = parse_manifest((FIXTURES / "ffdl-format-tensorflow-fashion.yml").read_text())
    assert (tf.name, tf.cpus, tf.learners, tf.framework.version) == (
        "fashion items cnn", 0.5, 1, "2.15.0",
    )  # fmt: skip
    assert tf.evaluation_metrics["type"] == "tensorboard"
    # A folded (`>`) command is one command line, its continuation lines kept.
    assert tf.framework.command.startswith("python3 fashion_cnn.py --pictures ${DATA_DIR}/")
    ddp = parse_manifest((FIXTURES / "ffdl-format-pytorch-ddp.yml").read_text())
    assert (ddp.name, ddp.gpus, ddp.learners) == ("Segmentation DDP on street scenes", 1, 2)
    assert ddp.memory_mb == round(16 * 1000**3 / 2**20)  # 16Gb, decimal like FfDL


def test_ffdl_format_secret_is_masked_when_normalized():
    m = parse_manifest((FIXTURES / "ffdl-format-pytorch-cifar.yml").read_text())
    shown = m.normalized()["data_stores"][0]["connection"]
    assert shown["secret_key"] == "**********"
    assert shown["endpoint"] == "https://s3.storage.lab.example"
    assert "lab-trainer-pw" not in str(m.normalized())


def test_ffdl_format_host_mount_store_is_refused_with_a_reason():
    found = problems((FIXTURES / "ffdl-format-hostmount.yml").read_text())
    assert len(found) == 1
    assert found[0].startswith("data_stores[0].type:")
    assert "'mount_volume' is not supported" in found[0] and "s3" in found[0]


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("1000MiB", 1000),
        ("1GiB", 1024),
        ("16GiB", 16384),
        ("1Gb", round(1000**3 / 2**20)),  # FfDL's Gb: decimal gigabytes
        ("16Gb", round(16 * 1000**3 / 2**20)),
        ("16GB", round(16 * 1000**3 / 2**20)),
        ("512M", round(512 * 1000**2 / 2**20)),
        ("300MiB", 300),
        (2048, 2048),  # a bare number is MiB
        ("2048", 2048),
        ("1.5GiB", 1536),
    ],
)
def test_memory_units(text, mib):
    assert parse_memory_mb(text) == mib
    assert parse_manifest(with_lines(f"memory: {text}")).memory_mb == mib


@pytest.mark.parametrize("bad", ["0Gb", "-1Gb", "lots", "1 parsec", "true", "[1]"])
def test_bad_memory_names_the_field(bad):
    found = problems(with_lines(f"memory: {bad}"))
    assert len(found) == 1 and found[0].startswith("memory:"), found


# --------------------------------------------------------------------------- field paths


@pytest.mark.parametrize(
    ("lines", "path"),
    [
        (["learners: 0"], "learners"),
        (["learners: -3"], "learners"),
        (["learners: two"], "learners"),
        (["cpus: 0"], "cpus"),
        (["cpus: -0.5"], "cpus"),
        (["gpus: -1"], "gpus"),
        (["gpus: 0.5"], "gpus"),
        (["max_restarts: -1"], "max_restarts"),
        (["priority: urgent"], "priority"),
        (["checkpoint:", "  interval_s: -5"], "checkpoint.interval_s"),
        (["colour: blue"], "colour"),
        (["data_stores:", "  - id: a", "    type: s3", "    training_data: {}"],
         "data_stores[0].training_data.container"),
        (["data_stores:", "  - id: a", "    type: hdfs"], "data_stores[0].type"),
        (["data_stores:", "  - type: s3"], "data_stores[0].id"),
        (["env:", "  1BAD: x"], "env"),
    ],
)  # fmt: skip
def test_every_error_names_its_field_path(lines, path):
    found = problems(with_lines(*lines))
    assert any(p.startswith(f"{path}:") for p in found), found


def test_missing_required_fields_are_each_named():
    found = problems("description: nothing else\n")
    assert any(p.startswith("name:") for p in found)
    assert any(p.startswith("framework:") for p in found)


def test_framework_fields_are_named():
    found = problems("name: j\nframework:\n  name: ''\n  command: ''\n")
    assert {p.split(":")[0] for p in found} >= {"framework.name", "framework.command"}


def test_all_problems_are_reported_at_once():
    found = problems(with_lines("learners: 0", "cpus: -1", "memory: nope"))
    assert {p.split(":")[0] for p in found} == {"learners", "cpus", "memory"}


def test_malformed_yaml_gives_the_position():
    found = problems("name: x\nframework: {command: [\n")
    assert len(found) == 1 and "malformed YAML at line" in found[0]


def test_not_a_mapping():
    assert problems("- just\n- a list\n") == ["(manifest): must be a YAML mapping of fields"]


def test_problems_never_echo_secret_values():
    text = with_lines(
        "data_stores:",
        "  - id: a",
        "    type: nfs",
        "    connection: {password: hunter2-secret}",
    )
    assert "hunter2-secret" not in " ".join(problems(text))


# --------------------------------------------------------------------------- env, elastic


@pytest.mark.parametrize("name", sorted(RESERVED_ENV))
def test_reserved_env_is_refused(name):
    found = problems(with_lines("env:", f"  {name}: mine"))
    assert len(found) == 1 and found[0].startswith("env:")
    assert name in found[0] and "set by the platform" in found[0]


def test_env_values_become_strings():
    m = parse_manifest(with_lines("env:", "  EPOCHS: 5", "  LR: 0.1"))
    assert m.env == {"EPOCHS": "5", "LR": "0.1"}


def test_elastic_range_defaults_to_the_fixed_size():
    m = parse_manifest(with_lines("learners: 3"))
    assert (m.min_learners, m.max_learners, m.is_elastic) == (3, 3, False)


def test_elastic_range():
    m = parse_manifest(with_lines("learners: 2", "min_learners: 1", "max_learners: 4"))
    assert (m.min_learners, m.learners, m.max_learners, m.is_elastic) == (1, 2, 4, True)


@pytest.mark.parametrize(
    ("lines", "word"),
    [
        (["learners: 2", "min_learners: 3"], "min_learners"),
        (["learners: 4", "max_learners: 2"], "max_learners"),
        (["min_learners: 0"], "min_learners"),
    ],
)
def test_bad_elastic_range_is_refused(lines, word):
    found = problems(with_lines(*lines))
    assert any(word in p for p in found), found


def test_auto_grow_is_off_unless_the_manifest_asks_for_it():
    m = parse_manifest(with_lines("learners: 2", "min_learners: 1", "max_learners: 4"))
    assert m.elastic.auto_grow is False
    text = with_lines("learners: 2", "max_learners: 4", "elastic:", "  auto_grow: true")
    assert parse_manifest(text).elastic.auto_grow is True
    assert parse_manifest(text).normalized()["elastic"] == {"auto_grow": True}


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["max_learners: 4", "elastic: {auto_grow: 'yes'}"], "elastic.auto_grow: "),
        (["max_learners: 4", "elastic: {autogrow: true}"], "elastic.autogrow: unknown field"),
        (["max_learners: 4", "elastic: true"], "elastic: "),
        (["learners: 2", "elastic: {auto_grow: true}"], "elastic.auto_grow: needs max_learners"),
    ],
    ids=["not-a-boolean", "typo", "not-a-mapping", "no-room-to-grow"],
)
def test_bad_elastic_section_is_refused_naming_the_field(lines, words):
    found = problems(with_lines(*lines))
    assert any(words in p for p in found), found


def test_priority_classes_and_numbers():
    assert parse_manifest(with_lines("priority: high")).priority == 100
    assert parse_manifest(with_lines("priority: -5")).priority == -5


def test_duplicate_store_ids_are_refused():
    text = with_lines("data_stores:", "  - {id: a, type: s3}", "  - {id: a, type: s3}")
    assert any("unique" in p for p in problems(text))


# --------------------------------------------------------------------------- limits

LAUGHS = """evaluation_metrics:
  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: [*c, *c, *c, *c, *c, *c, *c, *c, *c]
"""


@pytest.mark.parametrize(
    "extra",
    [
        LAUGHS,
        "evaluation_metrics: {a: &x 1, b: 2}\n",  # an anchor alone
        "evaluation_metrics:\n  base: &b {x: 1}\n  other:\n    <<: *b\n",  # a merge key
    ],
)
def test_yaml_anchors_and_aliases_are_refused(extra):
    found = problems(BASE + extra)
    assert len(found) == 1 and "aliases" in found[0] and "line" in found[0], found


@pytest.mark.parametrize("levels", [40, 10_000])
def test_deep_nesting_is_refused_not_a_recursion_error(levels):
    text = BASE + "evaluation_metrics: {x: " + "[" * levels + "]" * levels + "}\n"
    found = problems(text)
    assert len(found) == 1 and "nested deeper than 32 levels" in found[0], found


def test_nesting_up_to_the_bound_is_accepted():
    # The top mapping, evaluation_metrics and 30 lists: 32 levels.
    text = BASE + "evaluation_metrics: {x: " + "[" * 30 + "1" + "]" * 30 + "}\n"
    assert parse_manifest(text).evaluation_metrics is not None


def test_deep_nesting_in_a_parsed_dict_is_refused_naming_the_path():
    from dlaas.domain.manifest import manifest_from_dict

    deep: list = [1]
    for _ in range(2000):  # deeper than the recursion limit: the check must not recurse
        deep = [deep]
    data = {"name": "j", "framework": {"name": "python", "command": "x"}}
    with pytest.raises(InvalidManifest) as info:
        manifest_from_dict({**data, "evaluation_metrics": {"a": deep}})
    assert info.value.problems[0].startswith("evaluation_metrics.a[0]")


def test_a_large_free_form_section_is_refused():
    big = "evaluation_metrics:\n" + "".join(f"  k{i}: {'x' * 100}\n" for i in range(1000))
    found = problems(BASE + big)
    assert found == ["evaluation_metrics: must be at most 64 KiB (as JSON)"]


def test_an_oversized_manifest_is_refused():
    found = problems(BASE + "description: x\n" + "#" * 2**20 + "\n")
    assert found == ["(manifest): larger than 1 MiB"]


@pytest.mark.parametrize(
    ("lines", "path", "words"),
    [
        (["priority: 100000000000000000000000000"], "priority", "less than or equal"),
        (["priority: -2147483649"], "priority", "greater than or equal"),
        (["max_learners: 99999999999"], "max_learners", "less than or equal"),
        (["min_learners: 99999999999"], "min_learners", "less than or equal"),
        (["checkpoint: {interval_s: 99999999999999}"], "checkpoint.interval_s", "less than"),
        (["memory: 1"], "memory", "at least 6 MiB"),
        (["memory: 5MiB"], "memory", "at least 6 MiB"),
        (["memory: 1.0e+400"], "memory", "at most"),
        (["memory: 99999999999999999999999999999"], "memory", "at most"),
        (["memory: " + "9" * 400 + "TiB"], "memory", "at most"),
        (["memory: .nan"], "memory", "NaN"),
        (["cpus: .nan"], "cpus", "finite"),
        (["cpus: .inf"], "cpus", "finite"),
        (["cpus: 0.000001"], "cpus", "greater than or equal to 0.01"),
    ],
)  # fmt: skip
def test_numbers_out_of_range_are_refused_naming_the_field(lines, path, words):
    found = problems(with_lines(*lines))
    assert len(found) == 1 and found[0].startswith(f"{path}:") and words in found[0], found


def test_bounds_themselves_are_accepted():
    m = parse_manifest(with_lines("priority: 2147483647", "memory: 6MiB", "cpus: 0.01"))
    assert (m.priority, m.memory_mb, m.cpus) == (2**31 - 1, 6, 0.01)
    assert parse_manifest(with_lines("priority: -2147483648")).priority == -(2**31)


@pytest.mark.parametrize(
    ("lines", "path"),
    [
        (['env: {A: "x\\0y"}'], "env.A"),
        (['env: {"A\\0": y}'], "env"),
        (['framework: {name: python, command: "run\\0"}'], "framework.command"),
        (['description: "a\\0b"'], "description"),
        (['description: "\\ud800"'], "description"),  # a lone surrogate: not UTF-8
        (['evaluation_metrics: {x: ["\\0"]}'], "evaluation_metrics.x[0]"),
    ],
)
def test_nul_and_unencodable_text_is_refused_naming_the_field(lines, path):
    text = "name: job\n" + "\n".join(lines) + "\n"
    if "framework" not in text:
        text += "framework: {name: python, command: x}\n"
    found = problems(text)
    assert any(p.startswith(f"{path}:") for p in found), found


@pytest.mark.parametrize(
    ("lines", "path"),
    [
        (["description: " + "x" * 5000], "description"),
        (["version: " + "1" * 300], "version"),
        (["gpu_type: " + "g" * 300], "gpu_type"),
        (["env:"] + [f"  V{i}: x" for i in range(300)], "env"),
        (["env: {A: " + "x" * (33 * 1024) + "}"], "env"),
        (["data_stores:"] + [f"  - {{id: s{i}, type: s3}}" for i in range(17)], "data_stores"),
        (["data_stores: [{id: " + "i" * 300 + ", type: s3}]"], "data_stores[0].id"),
    ],
)
def test_long_strings_and_long_lists_are_refused_naming_the_field(lines, path):
    found = problems(with_lines(*lines))
    assert any(p.startswith(f"{path}:") for p in found), found


def test_a_long_command_is_refused():
    text = "name: j\nframework: {name: python, command: " + "x" * (33 * 1024) + "}\n"
    assert any(p.startswith("framework.command:") for p in problems(text))


def test_many_problems_are_capped():
    text = with_lines("evaluation_metrics:", *[f'  k{i}: "\\0"' for i in range(100)])
    found = problems(text)
    assert len(found) <= 21 and "more" in found[-1], found


@pytest.mark.parametrize(
    ("lines", "path"),
    [
        (["    connection: {endpoint: 'not a url'}"], "data_stores[0].connection.endpoint"),
        (["    connection: {auth_url: 'ftp://host'}"], "data_stores[0].connection.endpoint"),
        (["    connection: {endpoint: 'http://'}"], "data_stores[0].connection.endpoint"),
        (["    training_data: {container: 'a/b'}"], "data_stores[0].training_data.container"),
        (["    training_results: {container: 'x y'}"],
         "data_stores[0].training_results.container"),
    ],
)  # fmt: skip
def test_store_endpoints_and_buckets_are_checked(lines, path):
    found = problems(with_lines("data_stores:", "  - id: a", "    type: s3", *lines))
    assert any(p.startswith(f"{path}:") for p in found), found


def test_a_control_character_is_a_clear_refusal_not_a_crash():
    # Found by the API fuzzer: PyYAML's reader raised while the loader was being made.
    with pytest.raises(InvalidManifest, match=r"malformed YAML.*special characters"):
        parse_manifest("\x1f")


def test_the_one_elastic_range_rule_and_its_message():
    assert elastic_range_problem(2, 1, 4) == ""
    assert elastic_range_problem(1, 1, 1) == ""
    for learners, lo, hi in ((5, 1, 4), (0, 1, 4), (2, 3, 2)):
        problem = elastic_range_problem(learners, lo, hi)
        assert problem == (
            f"learners: {learners} is outside the job's elastic range; allowed {lo} to {hi} "
            "(min_learners to max_learners)"
        )


def test_a_range_whose_ends_are_swapped_is_named_as_such():
    found = problems(with_lines("learners: 2", "min_learners: 3", "max_learners: 1"))
    assert found == ["(manifest): min_learners (3) is above max_learners (1)"]


def test_scaling_asks_the_same_rule_and_refuses_a_fixed_size_job():
    elastic = parse_manifest(with_lines("learners: 2", "min_learners: 1", "max_learners: 4"))
    assert elastic.elastic_range == (1, 4)
    assert scale_problem(elastic, 3, "j") == ""
    assert scale_problem(elastic, 5, "j") == elastic_range_problem(5, 1, 4)
    fixed = parse_manifest(with_lines("learners: 2"))
    assert "learners: job j is not elastic" in scale_problem(fixed, 2, "j")
    # The manifest's own target obeys it too, with the same message.
    assert elastic_range_problem(2, 3, 2) in "; ".join(
        problems(with_lines("learners: 2", "min_learners: 3"))
    )
