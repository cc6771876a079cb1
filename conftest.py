"""Options every test folder shares (tests/python and patterns/*/tests).

`--shard I/N` keeps the I-th of N round-robin slices of the selected tests (after `-m` and `-k`
have chosen them; I counts from 0), so that `pytest -m gpu` can run as N processes side by side
(scripts/pytest_gpu.sh). Every selected test lands in exactly one slice."""
import pytest


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="I/N",
                     help="run only the I-th of N round-robin slices of the selected tests "
                          "(0 <= I < N)")


def parse_shard(text: str) -> tuple[int, int]:
    """(index, count) of `--shard I/N`; raises pytest.UsageError for anything else."""
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise pytest.UsageError(f"--shard expects I/N (e.g. 0/4), not '{text}'") from None
    if count < 1 or not 0 <= index < count:
        raise pytest.UsageError(f"--shard {text}: expected 0 <= I < N and N >= 1")
    return index, count


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected: slices of what would run
def pytest_collection_modifyitems(config, items):
    text = config.getoption("--shard")
    if not text:
        return
    index, count = parse_shard(text)
    kept = [item for position, item in enumerate(items) if position % count == index]
    left = [item for position, item in enumerate(items) if position % count != index]
    if left:
        config.hook.pytest_deselected(items=left)
    items[:] = kept
