"""The default policy's first level threshold, learned from finished jobs' GPU-seconds."""

from services.scheduler.policy import DEFAULT_CONFIG, DurationModel, learned_config


def test_too_little_history_keeps_the_prior():
    cfg = learned_config(DurationModel([1_000.0] * 49))
    assert cfg.default_thresholds == DEFAULT_CONFIG.default_thresholds


def test_heavy_tail_demotes_earlier_than_a_tight_sweep():
    # 90 % short jobs and a tail of very long ones: a job past the short ones has far more
    # than 12x the median left, so it is demoted near the lower bound
    heavy = DurationModel([1_000.0] * 900 + [500_000.0] * 100)
    # a sweep of near-identical 3,000-15,000 GPU-s jobs: a job at 10k is about to end
    tight = DurationModel([3_000.0 + 12.0 * i for i in range(1_000)])
    lo, hi = DEFAULT_CONFIG.demote_bounds
    th_heavy = learned_config(heavy).default_thresholds
    th_tight = learned_config(tight).default_thresholds
    assert th_heavy[0] == lo
    assert th_tight[0] > th_heavy[0]
    assert th_tight[0] <= hi
    # the later levels stay, above the learned first one
    assert th_heavy[1:] == DEFAULT_CONFIG.default_thresholds[1:]
    assert list(th_tight) == sorted(th_tight)


def test_ratio_zero_turns_learning_off():
    cfg = DEFAULT_CONFIG.__class__(demote_ratio=0.0)
    assert learned_config(DurationModel([1_000.0] * 100 + [1e6] * 10), cfg) is cfg
