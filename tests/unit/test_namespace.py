"""Team namespaces (dlaas.domain.namespace): what a member is shown of the team's buckets."""

from __future__ import annotations

import pytest

from dlaas.domain.namespace import (
    NamespaceError,
    check_bucket,
    team_bucket,
    user_bucket,
    user_text,
)


def test_a_message_names_the_teams_buckets_as_its_members_know_them():
    real = team_bucket("vision", "digits-data")
    assert user_bucket("vision", real) == "digits-data"
    assert (
        user_text("vision", f"training data not found: bucket {real!r} does not exist")
        == "training data not found: bucket 'digits-data' does not exist"
    )
    assert user_text("vision", f"s3://{real}/x and s3://vision--results/y") == (
        "s3://digits-data/x and s3://results/y"
    )


def test_only_a_prefix_that_starts_a_name_goes():
    # "supervision--x" is no bucket of team "vision"; "--" inside a key is the user's own.
    text = "s3://supervision--x/model--vision--v1.pt"
    assert user_text("vision", text) == text
    assert user_text("", "default--x") == "default--x"  # jobs from before teams


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("default--x", "'default--x' names a bucket of team 'default': '--' is reserved"),
        ("vision--x", "'vision--x' names your own team's bucket by its full name"),
    ],
)
def test_a_name_with_a_team_prefix_is_refused_saying_whose_it_is(name, words):
    with pytest.raises(NamespaceError) as refused:
        check_bucket("vision", name)
    assert str(refused.value).startswith(words)


def test_ffdls_underscore_names_map_to_s3_names_in_the_teams_namespace():
    from dlaas.domain.namespace import check_bucket, s3_name, team_bucket

    assert check_bucket("vision", "mnist_training_data") == "mnist_training_data"
    assert s3_name("mnist_training_data") == "mnist-training-data"
    assert team_bucket("vision", "mnist_training_data") == "vision--mnist-training-data"
    assert team_bucket("vision", "mnist-training-data") == team_bucket(
        "vision", "mnist_training_data"
    )


def test_two_names_of_one_job_that_meet_in_s3_are_refused_naming_both():
    from dlaas.domain.errors import InvalidManifest
    from dlaas.domain.locations import check_buckets
    from dlaas.domain.manifest import parse_manifest

    manifest = parse_manifest(
        "name: j\nframework: {name: python, command: python t.py}\n"
        "data_stores:\n  - id: s\n    type: s3\n"
        "    training_data: {container: my_data}\n    training_results: {container: my-data}\n"
    )
    with pytest.raises(InvalidManifest) as info:
        check_buckets(manifest, "vision")
    (problem,) = info.value.problems
    assert problem.startswith("data_stores[0].training_results.container: 'my-data' and ")
    assert "'my_data'" in problem and "'my-data'" in problem
