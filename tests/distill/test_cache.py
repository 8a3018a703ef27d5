import numpy as np
import pytest

from conftest import through_cache
from edgekd.distill.cache import cache_key, teacher_fingerprint


def test_cache_key_changes_with_texts_length_and_augmentation():
    base = cache_key("fp", ["a", "b"], 64)
    assert base == cache_key("fp", ["a", "b"], 64)
    assert base != cache_key("fp", ["ab"], 64)  # separators keep texts apart
    assert base != cache_key("fp", ["a", "b"], 128)
    assert base != cache_key("fp2", ["a", "b"], 64)
    assert base != cache_key("fp", ["a", "b"], 64, augmentation="tang")


def test_labelling_computes_once_then_loads_from_the_cache(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return np.arange(6, dtype=np.float32).reshape(3, 2)

    first, hit1 = through_cache(tmp_path, "k", compute)
    second, hit2 = through_cache(tmp_path, "k", compute)
    assert (hit1, hit2) == (False, True) and len(calls) == 1
    np.testing.assert_array_equal(first, second)
    assert [p.suffix for p in tmp_path.iterdir()] == [".safetensors"]


def test_teacher_fingerprint_follows_weights_not_notes(tiny_teacher, tmp_path):
    import shutil

    copy = tmp_path / "t"
    shutil.copytree(tiny_teacher, copy)
    fp = teacher_fingerprint(str(copy))
    (copy / "README.md").write_text("notes")
    assert teacher_fingerprint(str(copy)) == fp
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    assert teacher_fingerprint(str(copy)) != fp


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_a_damaged_cache_entry_is_recomputed_not_fatal(tmp_path, damage):
    calls = []

    def compute():
        calls.append(1)
        return np.ones((3, 2))

    through_cache(tmp_path, "k", compute)
    path = tmp_path / "k.safetensors"
    path.write_bytes(path.read_bytes()[:40] if damage is None else damage)  # truncated
    logits, hit = through_cache(tmp_path, "k", compute)
    assert not hit and len(calls) == 2 and logits.shape == (3, 2)
    assert through_cache(tmp_path, "k", compute)[1]  # rewritten whole: a hit again


def test_store_logits_writes_one_whole_entry_that_load_logits_reads_back(tmp_path):
    # The write under `accelerate launch` is the main's alone, and atomic: a temporary
    # file of its own, renamed over the entry (a reader never sees half of one).
    from edgekd.distill.cache import load_logits, store_logits

    assert load_logits(tmp_path, "k") is None  # not there: a miss, no note, no error
    logits = np.arange(6, dtype=np.float64).reshape(3, 2)
    stored = store_logits(tmp_path, "k", logits)
    assert stored.dtype == np.float32 and [p.name for p in tmp_path.iterdir()] == ["k.safetensors"]
    np.testing.assert_array_equal(load_logits(tmp_path, "k", rows=3, width=2), logits)
    assert load_logits(tmp_path, "k", rows=4) is None  # another shape: a miss
